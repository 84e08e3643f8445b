"""Apply quarantined DMS files again once they are fixed (docs/CONTRACTS.md, "What each recovery command
guarantees"):

    python -m tools.reapply_quarantined --schema_file ... --warehouse ... --file s3://raw/dms/sales/orders/2026...csv
    python -m tools.reapply_quarantined --schema_file ... --warehouse ... --run_id 20261124T101500000000Z-1a2b3c4d
    (--dry_run true: list what would be applied, and what is refused, without applying it)

A file the CDC job quarantined (as a whole, or some of its records) is in the ledger as applied: its good
records are in the table, and a re-sent batch skips it. Fix the file and upload it again under the same key
(or leave it: a record that was quarantined because of a bug since fixed), then run this command. It applies
the file's current content with the CDC job's rules, in one commit per table whose summary and ledger name
the file as `<name>#reapplied:<sha256 of its content>`: the same content is applied once however often the
command runs (a retry after a crash included); a new fix (new content) is applied once more. What is still
bad in it is quarantined again under the command's run id (`reapply-<hash>`).

Exactly once for the table's rows: a table with a primary key gets upserts and deletes ordered by their
change sequence, so records of the file the first attempt applied change nothing, a record older than what
the table holds is ignored, and a deleted key stays deleted (tombstones). A table without a primary key only
appends, so a file whose good records were appended already is refused (apply its quarantined records by
hand); a whole file quarantined (nothing of it applied) is applied.

Refused: a file the quarantine does not name, one it names under no table (a key outside DMS's layout), one
no longer in the raw zone, one whose batch has not been applied yet (the ledger lacks it: the pending batch
applies it), and the no-primary-key case above. The command exits 1 when anything is refused or a table fails.
"""

import sys

from lakehouse.jobs.reapply import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

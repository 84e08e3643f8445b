"""Apply quarantined DMS files again once they are fixed (docs/CONTRACTS.md, "What each recovery command
guarantees"; the rules: lakehouse.apply.reapply):

    python -m tools.reapply_quarantined --schema_file ... --warehouse ... --file s3://raw/dms/sales/orders/2026...csv
    python -m tools.reapply_quarantined --schema_file ... --warehouse ... --run_id 20261124T101500000000Z-1a2b3c4d
    (--dry_run true: list what would be applied, and what is refused, without applying it)
"""

import sys

from lakehouse.jobs.reapply import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Quarantined DMS files applied again once they are fixed (docs/CONTRACTS.md, "What each recovery command
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

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from lake_contracts.dms_files import NotADmsFileError, parse_dms_key
from lake_contracts.documents import Manifest, ManifestFile
from lake_contracts.run_report import RunReport
from pyspark.sql import SparkSession

from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.history import with_existing_histories
from lakehouse.apply.ledger import RecordedFile, StateTables, applied_files
from lakehouse.apply.quarantine import QuarantinedFile, quarantined_files
from lakehouse.apply.run import ApplyOptions
from lakehouse.base.config import LakeConfig
from lakehouse.base.schema import SchemaFile
from lakehouse.io.iceberg import table_exists
from lakehouse.io.storage import is_missing, read_bytes

log = logging.getLogger("lakehouse")


@dataclass
class ReapplyReport:
    run_id: str | None = None
    files: list[str] = field(default_factory=list)  # applied (or, dry run, to apply)
    refused: dict[str, str] = field(default_factory=dict)  # file URI → why
    run: RunReport | None = None

    @property
    def ok(self) -> bool:
        return not self.refused and (self.run is None or self.run.ok)

    def to_dict(self) -> dict[str, Any]:
        document = asdict(self)
        document["run"] = self.run.to_dict() if self.run else None
        return document


def content_tag(uri: str, endpoint_url: str | None = None) -> str:
    """The SHA-256 of the file's bytes (hex): what tells one fix from another under the same key."""
    return hashlib.sha256(read_bytes(uri, endpoint_url)).hexdigest()


def reapply_run_id(tags: dict[str, str]) -> str:
    """One run id per set of (file, content): a retry of the same re-application is the same run."""
    text = json.dumps(sorted(tags.items()))
    return "reapply-" + hashlib.sha256(text.encode()).hexdigest()[:20]


def reapply_quarantined(
    spark: SparkSession,
    config: LakeConfig,
    schema: SchemaFile,
    files: Sequence[str] = (),
    run_id: str | None = None,
    options: ApplyOptions | None = None,
    dry_run: bool = False,
) -> ReapplyReport:
    """Apply the quarantined `files` (or every file the run `run_id` quarantined anything of) again."""
    if bool(files) == (run_id is not None):
        raise ValueError("name the files (--file) or a run (--run_id), not both, not neither")
    report = ReapplyReport()
    found = {q.source_uri: q for q in quarantined_files(spark, config.quarantine, files, run_id)}
    for uri in files:
        if uri not in found:
            report.refused[uri] = "the quarantine has nothing of this file"
    state = StateTables(spark, config)
    state.ensure()
    candidates = [q for q in found.values() if _acceptable(q, schema, report)]
    recorded = state.recorded([_name(q.source_uri) for q in candidates])
    tags: dict[str, str] = {}
    for q in candidates:
        if not _applied(spark, config, schema, q, recorded.get(q.source_table, [])):
            report.refused[q.source_uri] = (
                "its batch is not applied yet (the ledger does not name it): the pending batch applies the "
                "file as it is now; nothing to re-apply"
            )
            continue
        try:
            tags[q.source_uri] = content_tag(q.source_uri, config.s3_endpoint_url)
        except Exception as error:
            if not is_missing(error) and not isinstance(error, FileNotFoundError):
                raise
            report.refused[q.source_uri] = "the file is not in the raw zone: upload the fixed file first"
    report.files = sorted(tags)
    if not tags:
        return report
    report.run_id = reapply_run_id(tags)
    if dry_run:
        return report
    manifest = Manifest(report.run_id, [ManifestFile(uri) for uri in report.files])
    # a table with a history gets the re-applied changes there too, --history_tables given or not
    schema = with_existing_histories(spark, config, schema, sorted({q.source_table for q in candidates}))
    report.run = apply_cdc(spark, config, schema, manifest, options or ApplyOptions(), reapply=tags)
    return report


def _applied(
    spark: SparkSession,
    config: LakeConfig,
    schema: SchemaFile,
    q: QuarantinedFile,
    recorded: list[RecordedFile],
) -> bool:
    """Whether the file's table applied it (its first content), by the CDC job's own rule: a commit of the
    table's lineage names it, or the ledger does (a ledger copy lost to a crash is no reason to refuse)."""
    spec = next((s for s in schema.tables.values() if s.qualified_name == q.source_table), None)
    table = config.clean_table(spec.iceberg_name) if spec else None
    if table is None or not table_exists(spark, table):
        return False
    name = _name(q.source_uri)
    return name in applied_files(spark, table, q.source_table, [(name, q.source_uri, None)], recorded).applied


def _name(uri: str) -> str:
    """The file's name, as the ledger knows a file applied the first time."""
    return uri.rsplit("/", 1)[-1]


def _acceptable(q: QuarantinedFile, schema: SchemaFile, report: ReapplyReport) -> bool:
    try:
        file = parse_dms_key(q.source_uri, 0, lambda name, table: schema.find(name, table) is not None)
    except NotADmsFileError as error:
        report.refused[q.source_uri] = f"not a DMS file ({error}): there is nothing to apply it to"
        return False
    spec = schema.find(file.source_schema, file.table)
    if not q.source_table or spec is None:
        report.refused[q.source_uri] = f"the schema file has no table {file.qualified_table}"
        return False
    if file.is_full_load:
        report.refused[q.source_uri] = (
            f"a LOAD file: reload the table instead (full_load_job.py --tables {spec.qualified_name} --reload true)"
        )
        return False
    if not spec.has_primary_key and not q.whole_file:
        report.refused[q.source_uri] = (
            f"{spec.qualified_name} has no primary key and this file's other records were appended already: "
            "applying it again would append them twice. Insert its quarantined records by hand."
        )
        return False
    return True

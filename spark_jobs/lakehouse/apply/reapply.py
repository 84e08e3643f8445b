"""Quarantined DMS files applied again once they are fixed (docs/CONTRACTS.md, "What each recovery command
guarantees"):

    python -m tools.reapply_quarantined --schema_file ... --warehouse ... --file s3://raw/dms/sales/orders/2026...csv
    python -m tools.reapply_quarantined --schema_file ... --warehouse ... --run_id 20261124T101500000000Z-1a2b3c4d
    (--dry_run true: list what would be applied, and what is refused, without applying it)

A file the CDC job quarantined (as a whole, or some of its records) is in the ledger as applied: its good
records are in the table, and a re-sent batch skips it. Fix the file and upload it again under the same key
(or leave it: a record that was quarantined because of a bug since fixed), then run this command.

What was applied of a file is known per attempt, never by the file's bytes (a fix or a re-compression
changes them). Attempt 0 is the run whose commit named the file; each re-application is an attempt whose
commit and ledger name the file `<name>#reapplied:<run id of the attempt before it>`, so each attempt's
leftovers are applied once, whatever the command's retries. What is left after an attempt is what it
quarantined: its records, or, when it could not read the file at all, what it was to apply. Nothing left:
the file is reported applied already, and nothing runs.

A table with a primary key gets the whole fixed file by the CDC job's rules (upserts and deletes ordered by
their change sequence): records applied before change nothing, a record older than the row is ignored, a
deleted key stays deleted (tombstones). A table without a primary key only appends, so it gets the records
left, no other, by their record numbers; it refuses, naming the check, when it can't be sure those numbers
name the same records (the file's record count changed since the attempt that numbered them, or is unknown)
or when the file was re-applied before by the content-tagged scheme this one replaced.

Refused too: a file the quarantine does not name, one it names under no table (a key outside DMS's layout),
one no longer in the raw zone, one whose batch has not been applied yet (the ledger lacks it: the pending
batch applies it). The command exits 1 when anything is refused or a table fails.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from lake_contracts.dms_files import DmsFile, NotADmsFileError, parse_dms_key
from lake_contracts.documents import Manifest, ManifestFile
from lake_contracts.run_report import RunReport
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.history import with_existing_histories
from lakehouse.apply.ledger import StateTables, applied_files
from lakehouse.apply.quarantine import REAPPLIED_MARK, QuarantinedFile, ReappliedFile, quarantined_files
from lakehouse.apply.run import ApplyOptions
from lakehouse.base.config import LakeConfig
from lakehouse.base.names import sql_string
from lakehouse.base.schema import SchemaFile, TableSpec
from lakehouse.dms.reader import ReaderOptions, read_dms_files
from lakehouse.io.iceberg import APPLIED_FILES, RUN_ID, table_exists
from lakehouse.io.storage import is_missing, read_bytes, stage_for_spark

log = logging.getLogger("lakehouse")

REAPPLY_PREFIX = "reapply-"  # the run ids of re-applications
MAX_ATTEMPTS = 10_000  # a bound on the walk of a file's attempts (a loop in them is no reason to hang)


class Refused(Exception):
    """A file this command must not apply, and why (the check named)."""


@dataclass
class ReapplyReport:
    run_id: str | None = None
    files: list[str] = field(default_factory=list)  # applied (or, dry run, to apply)
    refused: dict[str, str] = field(default_factory=dict)  # file URI → why
    already_applied: list[str] = field(default_factory=list)  # nothing of them is left to apply
    run: RunReport | None = None

    @property
    def ok(self) -> bool:
        return not self.refused and (self.run is None or self.run.ok)

    def to_dict(self) -> dict[str, Any]:
        document = asdict(self)
        document["run"] = self.run.to_dict() if self.run else None
        return document


@dataclass(frozen=True)
class Leftover:
    """What is left to apply of a file after its last committed attempt (run `after`)."""

    after: str
    records: frozenset[int] | None  # None: every record (nothing of it was ever applied)
    file_records: int | None  # how many records the file had when they were numbered (None: unknown)


def reapply_run_id(tags: dict[str, str]) -> str:
    """One run id per set of (file, attempt it continues): a retry of the same re-application is the same run."""
    text = json.dumps(sorted(tags.items()))
    return REAPPLY_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:20]


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
    options = options or ApplyOptions()
    report = ReapplyReport()
    found = {q.source_uri: q for q in quarantined_files(spark, config.quarantine, files, run_id)}
    for uri in files:
        if uri not in found:
            report.refused[uri] = "the quarantine has nothing of this file"
    state = StateTables(spark, config)
    state.ensure()
    plans: dict[str, ReappliedFile] = {}
    for q in found.values():
        try:
            file, spec = _dms_file(q, schema)
            left = leftover(spark, config, spec, q)
            if left is None:
                report.already_applied.append(q.source_uri)
                continue
            _require_in_raw_zone(q.source_uri, config)
            plans[q.source_uri] = _plan(spark, config, spec, file, left, options.reader)
        except Refused as why:
            report.refused[q.source_uri] = str(why)
    report.files = sorted(plans)
    if not plans:
        return report
    report.run_id = reapply_run_id({uri: plan.tag for uri, plan in plans.items()})
    if dry_run:
        return report
    manifest = Manifest(report.run_id, [ManifestFile(uri) for uri in report.files])
    tables = sorted({q.source_table for uri, q in found.items() if uri in plans})
    # a table with a history gets the re-applied changes there too, --history_tables given or not
    schema = with_existing_histories(spark, config, schema, tables)
    report.run = apply_cdc(spark, config, schema, manifest, options, reapply=plans)
    return report


def leftover(spark: SparkSession, config: LakeConfig, spec: TableSpec, q: QuarantinedFile) -> Leftover | None:
    """What is left to apply of the file `q` after the attempts its table committed (None: nothing).

    Attempt 0 is the run whose commit named the file; attempt k+1 is the commit naming it
    `<name>#reapplied:<run id of attempt k>`. After an attempt, what is left is what it quarantined: its
    records, or, when it quarantined the whole file (unreadable), what was left before it."""
    table = config.clean_table(spec.iceberg_name)
    name = _name(q.source_uri)
    runs = (
        _runs_naming(spark, table, config.ledger, spec.qualified_name, name)
        if table_exists(spark, table)
        else {}
    )
    applied = _applied_names(spark, config, table, spec.qualified_name, q.source_uri, sorted({name, *runs}))
    if name not in applied:
        raise Refused(
            "its batch is not applied yet (the ledger does not name it): the pending batch applies the file "
            "as it is now; nothing to re-apply"
        )
    current = runs.get(name) or _first_run(q)
    if current is None:
        raise Refused(
            "[check: attempts] the run that applied it first is unknown (its commit expired and the ledger "
            "did not keep the run id): which of its records were applied can't be told; apply them by hand"
        )
    attempt = q.attempts.get(current)
    if attempt is None:
        return None  # the first run quarantined nothing of it (another run's rows name it)
    left = Leftover(current, attempt.records, attempt.file_records)
    chain = {name}
    for _ in range(MAX_ATTEMPTS):
        following_name = f"{name}{REAPPLIED_MARK}{current}"
        if following_name not in applied:
            break
        chain.add(following_name)
        following = runs.get(following_name)
        if following is None:
            raise Refused(
                f"[check: attempts] the run that applied {following_name!r} is unknown (its commit expired and "
                "the ledger did not keep the run id): what is left of the file can't be told; apply it by hand"
            )
        current, attempt = following, q.attempts.get(following)
        if attempt is None:
            return None  # that attempt quarantined nothing: every record is applied
        if attempt.records is None:
            left = Leftover(current, left.records, left.file_records)  # it read nothing: the same is left
        else:
            left = Leftover(current, attempt.records, attempt.file_records)
    earlier = sorted(n for n in applied if n not in chain)
    if earlier and not spec.has_primary_key:
        raise Refused(
            f"[check: earlier re-applications] {spec.qualified_name} has no primary key and the file was "
            f"re-applied before as {earlier[0]!r}, by the content-tagged scheme this command replaced: which of "
            "its records that appended can't be told, so nothing more is appended. Insert what is missing by hand."
        )
    return left


def _plan(
    spark: SparkSession,
    config: LakeConfig,
    spec: TableSpec,
    file: DmsFile,
    left: Leftover,
    reader: ReaderOptions,
) -> ReappliedFile:
    """A keyed table takes the whole file (its rules make records applied before change nothing); a table
    without a key appends only the records left, by number, when their numbers still name them."""
    if spec.has_primary_key or left.records is None:
        return ReappliedFile(left.after, None)
    if left.file_records is None:
        raise Refused(
            f"[check: record count] {spec.qualified_name} has no primary key and the quarantine does not say how "
            f"many records the file had when run {left.after} quarantined records {sorted(left.records)} "
            "(quarantined before the count was kept): its record numbers can't be trusted to name the same "
            "records now. Insert those records by hand."
        )
    now = _record_count(spark, config, file, reader)
    if now is not None and now != left.file_records:
        raise Refused(
            f"[check: record count] {spec.qualified_name} has no primary key and the file now has {now} records, "
            f"{left.file_records} when run {left.after} quarantined records {sorted(left.records)}: those numbers "
            "no longer name the same records, and appending by them could append a record twice. Keep every "
            "record in place when fixing (fix the bad ones, delete none), or insert them by hand."
        )
    return ReappliedFile(left.after, left.records)


def _record_count(
    spark: SparkSession, config: LakeConfig, file: DmsFile, reader: ReaderOptions
) -> int | None:
    """How many records the file holds now (None: it can't be read; applying it quarantines it whole)."""
    paths = stage_for_spark([file.uri], config.s3_endpoint_url, config.staging_dir)
    rows = read_dms_files(spark, [file], paths, reader).rows
    return None if rows is None else rows.count()


def _runs_naming(
    spark: SparkSession, table: str, ledger: str, source_table: str, name: str
) -> dict[str, str | None]:
    """Every name the table's commits and ledger give the file (`name`, `name#reapplied:…`) → the run that
    committed it (None: unknown, a ledger copy made without it)."""
    prefix = name + REAPPLIED_MARK
    runs: dict[str, str | None] = {}
    named = json.dumps(name)[:-1]  # as the summary's JSON spells it, open at its end: `"<name>` of both forms
    snapshots = spark.sql(
        f"SELECT summary[{sql_string(RUN_ID)}] AS run, summary[{sql_string(APPLIED_FILES)}] AS applied "
        f"FROM {table}.snapshots WHERE instr(summary[{sql_string(APPLIED_FILES)}], {sql_string(named)}) > 0"
    ).collect()
    for row in snapshots:
        for named in json.loads(row["applied"]) if row["applied"] else []:
            if named == name or named.startswith(prefix):
                runs[named] = row["run"] or runs.get(named)
    if spark.catalog.tableExists(ledger):
        rows = (
            spark.table(ledger)
            .where(F.col("source_table") == F.lit(source_table))
            .where((F.col("file_name") == F.lit(name)) | F.col("file_name").startswith(prefix))
            .select("file_name", "run_id")
            .collect()
        )
        for row in rows:
            known = row["run_id"] if row["run_id"] and row["run_id"] != "reconciled" else None
            runs[row["file_name"]] = runs.get(row["file_name"]) or known
    return runs


def _applied_names(
    spark: SparkSession, config: LakeConfig, table: str, source_table: str, uri: str, names: list[str]
) -> set[str]:
    """Which of the file's `names` the table applied, by the CDC job's own rule: a commit of its lineage
    names it, or the ledger does (a ledger copy lost to a crash is no reason to refuse)."""
    if not table_exists(spark, table):
        return set()
    recorded = StateTables(spark, config).recorded(names).get(source_table, [])
    return applied_files(spark, table, source_table, [(n, uri, None) for n in names], recorded).applied


def _first_run(q: QuarantinedFile) -> str | None:
    """The run that quarantined the file before any re-application, when its rows name one run only."""
    firsts = [run for run in q.attempts if not run.startswith(REAPPLY_PREFIX)]
    return firsts[0] if len(firsts) == 1 else None


def _require_in_raw_zone(uri: str, config: LakeConfig) -> None:
    try:
        read_bytes(uri, config.s3_endpoint_url)
    except Exception as error:
        if not is_missing(error) and not isinstance(error, FileNotFoundError):
            raise
        raise Refused("the file is not in the raw zone: upload the fixed file first") from None


def _name(uri: str) -> str:
    """The file's name, as the ledger knows a file applied the first time."""
    return uri.rsplit("/", 1)[-1]


def _dms_file(q: QuarantinedFile, schema: SchemaFile) -> tuple[DmsFile, TableSpec]:
    try:
        file = parse_dms_key(q.source_uri, 0, lambda name, table: schema.find(name, table) is not None)
    except NotADmsFileError as error:
        raise Refused(f"not a DMS file ({error}): there is nothing to apply it to") from None
    spec = schema.find(file.source_schema, file.table)
    if not q.source_table or spec is None:
        raise Refused(f"the schema file has no table {file.qualified_table}")
    if file.is_full_load:
        raise Refused(
            f"a LOAD file: reload the table instead (full_load_job.py --tables {spec.qualified_name} --reload true)"
        )
    return file, spec

"""Full load and CDC apply: files → typed changes → one Iceberg commit per table.

Exactly once and in any order (docs/CONTRACTS.md): a CDC file a table applied before is skipped (its
commit named it, and the ledger keeps the name); every row keeps the change sequence of the change it
holds and only a newer change replaces or deletes it; a deleted key keeps a tombstone, so an older change
arriving late can't bring it back; a (re)load sets the table's floor, below which no change applies.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse import changes as C
from lakehouse.config import LakeConfig
from lakehouse.dms_files import DmsFile, NotADmsFileError, parse_dms_key
from lakehouse.dms_reader import RawRead, ReaderOptions, read_dms_files, with_record_numbers
from lakehouse.fence import LeaseLostError, check_before_commit
from lakehouse.iceberg import (
    APPLIED_FILES,
    FULL_LOAD_DONE,
    REPLACED_SNAPSHOT,
    RUN_ID,
    SOURCE_TABLE,
    align_layout,
    append_rows,
    commit_of_run,
    create_table,
    current_snapshot_id,
    ensure_namespace,
    evolve_schema,
    file_size_properties,
    key_upper_bound,
    merge_changes,
    replace_table,
    snapshot_properties,
    table_exists,
    table_properties,
)
from lakehouse.manifest import Manifest
from lakehouse.names import (
    CHANGE_SEQ_COLUMN,
    COMMIT_TS_COLUMN,
    INTERNAL_PREFIX,
    RESERVED_COLUMNS,
    properties_sql,
    quote,
    table_folder,
)
from lakehouse.quarantine import (
    REAPPLIED_MARK,
    FileProblem,
    file_rejections,
    quarantined_in_run,
    record_rejections,
    write_quarantine,
)
from lakehouse.schema import SchemaFile, TableSpec
from lakehouse.state import LedgerEntry, RecordedFile, StateTables, applied_files
from lakehouse.storage import list_folders, list_objects, stage_for_spark
from lakehouse.types import can_widen

log = logging.getLogger(__name__)

METADATA_FIELDS = [
    T.StructField(COMMIT_TS_COLUMN, T.TimestampType()),
    T.StructField(CHANGE_SEQ_COLUMN, C.SEQ_TYPE),
]
# Table properties a (re)load sets in the same commit as its rows.
LOAD_DONE = "dms.full-load.done"  # the table has been loaded from its LOAD files
LOAD_FLOOR = "dms.load.floor-seq"  # changes at or below this sequence are older than the (re)load
LOAD_STARTED = "dms.load.started-at"  # when DMS started that load (UTC)
# When DMS had written that load (UTC): its newest LOAD file or row. DMS empties a reloaded table's folder
# before it writes the LOAD files and writes the table's CDC files after them, so a CDC file missing from
# the raw zone that was written before this moment was removed by the reload: superseded, not lost.
LOAD_ENDED = "dms.load.ended-at"
KEY = "_dms_key"
TOMB_SEQ = "_dms_tomb_seq"
TYPE_MISMATCH_POLICIES = ("fail", "quarantine")


class SchemaOutOfDateError(RuntimeError):
    """The files hold a column the schema file does not know: it must be regenerated."""


class SchemaChangeError(RuntimeError):
    """The source changed a column's type in a way Iceberg can't follow by promotion."""


class TypeMismatchError(RuntimeError):
    """Values that don't fit their column's type: the schema file is out of date, or the data is wrong."""


class MissingFileError(RuntimeError):
    """A file the batch names does not exist (and no reload made it unnecessary)."""


@dataclass(frozen=True)
class ApplyOptions:
    reader: ReaderOptions = ReaderOptions()
    names: C.ChangeColumns = C.ChangeColumns()
    parallel_tables: int = 4
    no_primary_key: str = "append"  # "append": inserts are appended, updates/deletes quarantined; "skip"
    type_mismatch: str = "fail"  # "fail": the table stops with the values named; "quarantine"
    reload_margin_seconds: int = 300  # a reload placed by time: DMS's start, give or take this long


@dataclass
class TableReport:
    table: str
    files: int = 0
    skipped_already_applied: int = 0  # files this table applied before (a retry, a replay, a duplicate)
    superseded_files: int = 0  # CDC files a later reload of the table made unnecessary (and DMS removed)
    records: int = 0
    inserted_or_updated: int = 0
    deleted: int = 0
    ignored_older: int = 0  # changes older than the table's (re)load or than the key's delete
    quarantined_records: int = 0
    quarantined_files: int = 0
    schema_changes: list[str] = field(default_factory=list)
    newest_commit_ts: str | None = None
    snapshot_id: int | None = None
    seconds: float = 0.0
    error: str | None = None


@dataclass
class RunReport:
    run_id: str
    job: str
    tables: list[TableReport] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)
    quarantine_rows_added: int = 0
    # What the quarantine holds for this run id over all its attempts (a retry skips what the first applied).
    run_quarantined_records: int = 0
    run_quarantined_files: int = 0
    seconds: float = 0.0
    error: str | None = None  # a failure of the run itself (not of one table)

    @property
    def failed(self) -> list[TableReport]:
        return [t for t in self.tables if t.error]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.error

    @property
    def newest_commit_ts(self) -> str | None:
        return max((t.newest_commit_ts for t in self.tables if t.newest_commit_ts), default=None)

    def totals(self) -> dict[str, int]:
        keys = (
            "files",
            "skipped_already_applied",
            "superseded_files",
            "records",
            "inserted_or_updated",
            "deleted",
            "ignored_older",
            "quarantined_records",
            "quarantined_files",
        )
        return {k: sum(getattr(t, k) for t in self.tables) for k in keys}

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "totals": self.totals(), "newest_commit_ts": self.newest_commit_ts}


def clean_schema(spec: TableSpec) -> T.StructType:
    fields = [T.StructField(f.name.lower(), f.dataType) for f in spec.spark_schema().fields]
    return T.StructType(fields + METADATA_FIELDS)


def _with_metadata(changes: DataFrame) -> DataFrame:
    return changes.withColumn(COMMIT_TS_COLUMN, F.col(C.COMMIT_TS)).withColumn(
        CHANGE_SEQ_COLUMN, F.col(C.SEQ)
    )


def resolve_types(
    spec: TableSpec, columns: Sequence[str], table_types: dict[str, T.DataType], replacing: bool = False
) -> dict[str, T.DataType]:
    """The type each of the batch's columns is read as: the schema file's, or the table's where the table
    is wider (a widening the data proved earlier) or the schema file doesn't name the column (it did
    once). A column neither knows is a SchemaOutOfDateError; a type change Iceberg can't promote is a
    SchemaChangeError, unless the table is being replaced by a (re)load (`replacing`)."""
    types: dict[str, T.DataType] = {}
    unknown = []
    for column in columns:
        if column in RESERVED_COLUMNS:
            raise SchemaOutOfDateError(
                f"{spec.qualified_name}: the DMS files have a column {column}, the name of the clean table's own "
                "metadata column. If it is the endpoint's TimestampColumnName, pass --timestamp_column "
                f"{column}; otherwise rename the source column with a DMS table-mapping rule."
            )
        wanted, have = spec.spark_type_of(column), table_types.get(column)
        if wanted is None and have is None:
            unknown.append(column)
        elif wanted is None or have is None or wanted == have or replacing:
            types[column] = wanted or have
        elif can_widen(have, wanted):
            types[column] = wanted
        elif can_widen(wanted, have):
            types[column] = have  # the table is wider already
        else:
            raise SchemaChangeError(
                f"{spec.qualified_name}.{column} is {have.simpleString()} in the clean table but "
                f"{wanted.simpleString()} in the schema file, and Iceberg can't change one into the other. "
                f"Reload the table to take the new type (full_load_job.py --tables {spec.qualified_name} "
                "--reload true); the batch stays pending until then."
            )
    if unknown:
        raise SchemaOutOfDateError(
            f"{spec.qualified_name}: column(s) {', '.join(unknown)} are in the DMS files but not in the schema "
            "file (the source added them). Regenerate the schema file from the source catalog "
            "(python -m tools.schema_gen ...) and upload it where --schema_file points; the batch stays "
            "pending and is applied by the next run."
        )
    return types


class _Pipeline:
    def __init__(
        self,
        spark: SparkSession,
        config: LakeConfig,
        schema: SchemaFile,
        options: ApplyOptions,
        run_id: str,
        job: str,
    ) -> None:
        self.spark = spark
        self.config = config
        self.schema = schema
        self.options = options
        self.report = RunReport(run_id, job)
        self.state = StateTables(spark, config)
        self.rejections: dict[str, list[DataFrame]] = defaultdict(list)  # by source table
        self.file_problems: list[FileProblem] = []
        # A re-application (tools.reapply_quarantined): file URI → a tag of its fixed content. The file is
        # known to the ledger as `<name>#reapplied:<tag>`, so each fixed content is applied once.
        self.reapplied: dict[str, str] = {}
        self._quarantine_lock = threading.Lock()
        self.ledger_entries: list[LedgerEntry] = []
        self.ledger_forget: list[tuple[str, RecordedFile]] = []
        self.unknown_tables: dict[str, list[str]] = defaultdict(list)
        self._lock = threading.Lock()

    def classify(self, uris: Sequence[tuple[str, int]]) -> dict[TableSpec, list[DmsFile]]:
        by_table: dict[TableSpec, list[DmsFile]] = defaultdict(list)
        seen: set[str] = set()
        for uri, size in uris:
            if uri in seen:
                continue  # listed twice in one manifest: applied once
            seen.add(uri)
            try:
                file = parse_dms_key(uri, size, self._known)
            except NotADmsFileError as error:
                self.file_problems.append(FileProblem("", uri, str(error)))
                continue
            spec = self.schema.find(file.source_schema, file.table)
            if spec is None:
                self.unknown_tables[file.qualified_table].append(uri)
                continue
            by_table[spec].append(file)
        return by_table

    def _known(self, source_schema: str, table: str) -> bool:
        """The schema file has the table (or refused it): a folder named like a date may be a table."""
        qualified = f"{source_schema}.{table}"
        return (
            self.schema.find(source_schema, table) is not None or self.schema.refusal(qualified) is not None
        )

    def unknown_table_reports(self) -> list[TableReport]:
        """A table the schema file does not know (added on the source since it was generated) is not bad
        data: its table fails with what to do, and the batch stays pending until the file is regenerated."""
        return [
            TableReport(
                table,
                files=len(uris),
                error=(
                    f"RefusedName: {self.schema.refusal(table)}; the batch stays pending"
                    if self.schema.refusal(table)
                    else f"SchemaOutOfDateError: {table} is not in the schema file, but the batch has {len(uris)} "
                    f"file(s) of it (e.g. {uris[0]}): the source has a table the schema file was generated "
                    "without. Regenerate the schema file (python -m tools.schema_gen ...) and upload it where "
                    "--schema_file points, or exclude the table in the DMS task's table mappings; the batch "
                    "stays pending and the next run applies it."
                ),
            )
            for table, uris in sorted(self.unknown_tables.items())
        ]

    def read_raw(self, spec: TableSpec, files: list[DmsFile], report: TableReport) -> RawRead:
        """The files' records. Unreadable files go to quarantine; a file that does not exist is an error
        unless a later (re)load of the table superseded it (DMS removes a reloaded table's old files)."""
        paths = stage_for_spark([f.uri for f in files], self.config.s3_endpoint_url, self.config.staging_dir)
        raw = read_dms_files(self.spark, files, paths, self.options.reader)
        _require_key_columns(spec, raw)
        missing = [r.file for r in raw.rejected if r.missing]
        if missing:
            loaded_at = _loaded_at(self.spark, self.config.clean_table(spec.iceberg_name))
            lost = [
                f for f in missing if loaded_at is None or f.written_at is None or f.written_at > loaded_at
            ]
            if lost:
                raise MissingFileError(
                    f"{spec.qualified_name}: {len(lost)} file(s) of the batch do not exist, e.g. {lost[0].uri}. "
                    "A file DMS wrote was removed from the raw zone (a lifecycle rule? by hand?) and its changes "
                    "can't be applied: restore it, or re-create the manifest without it after checking what it "
                    "held. The batch stays pending."
                )
            report.superseded_files = len(missing)
            log.info(
                "%s: %d file(s) superseded by the reload of %s", spec.qualified_name, len(missing), loaded_at
            )
        for rejection in raw.rejected:
            if not rejection.missing:
                self.file_problems.append(
                    FileProblem(spec.qualified_name, rejection.file.uri, rejection.reason)
                )
                report.quarantined_files += 1
        return raw

    def read_typed(
        self, spec: TableSpec, files: list[DmsFile], report: TableReport
    ) -> tuple[DataFrame | None, DataFrame | None]:
        """The files' raw records and their typed changes, as a first pass sees them (bench/profile_*)."""
        raw = self.read_raw(spec, files, report)
        if raw.rows is None:
            return None, None
        table = self.config.clean_table(spec.iceberg_name)
        layout, types = _layout_and_types(self, spec, table, raw, replacing=True)
        names, marker = self.options.names, self.options.reader.csv_null_value
        return raw.rows, C.typed_changes(raw, spec, layout, types, names, marker)

    def quarantine_records(self, spec: TableSpec, rejected: DataFrame, raw: DataFrame) -> None:
        """Rejected records (`_dms_reason` set), with their record numbers (one more pass over their files)."""
        numbered = with_record_numbers(rejected, raw)
        rows = record_rejections(numbered, spec.qualified_name).localCheckpoint()
        with self._lock:
            self.rejections[spec.qualified_name].append(rows)

    def ledger_name(self, file: DmsFile) -> str:
        """The name the ledger and the commit summaries know `file` by (its own, unless re-applied)."""
        tag = self.reapplied.get(file.uri)
        return file.name if tag is None else f"{file.name}{REAPPLIED_MARK}{tag}"

    def flush_quarantine(self, source_table: str | None = None) -> None:
        """Write what was rejected so far (of one table, or everything left) to the quarantine table. A
        table's rows are written BEFORE its data commit: a crash between the two loses none, and the retry
        (same run id) adds none twice (the quarantine's MERGE is keyed by file and record number)."""
        with self._lock:
            tables = [source_table] if source_table is not None else list(self.rejections)
            parts = [part for table in tables for part in self.rejections.pop(table, [])]
            problems = [
                p for p in self.file_problems if source_table is None or p.source_table == source_table
            ]
            self.file_problems = [p for p in self.file_problems if p not in problems]
        if problems:
            parts.append(file_rejections(self.spark, problems))
        if not parts:
            return
        with self._quarantine_lock:  # one writer at a time: parallel tables would race on its MERGE
            added = write_quarantine(
                self.spark, self.config.quarantine, self.report.run_id, self.report.job, parts
            )
            self.report.quarantine_rows_added += added

    def remember(
        self, entries: Sequence[LedgerEntry], forget: Sequence[tuple[str, RecordedFile]] = ()
    ) -> None:
        with self._lock:
            self.ledger_entries.extend(entries)
            self.ledger_forget.extend(forget)

    def finish(self) -> RunReport:
        try:
            self.state.record(self.ledger_entries, self.ledger_forget)
        except LeaseLostError:
            raise  # the lease moved on: nothing more is written, no report (lakehouse.fence)
        except Exception as error:  # the commits stand; the next run copies their names again
            log.exception("recording the applied files in the ledger failed")
            self.report.error = f"ledger: {type(error).__name__}: {error}"[:2000]
        self.flush_quarantine()  # what no table's commit wrote: unclassifiable keys, failed tables
        self.report.run_quarantined_records, self.report.run_quarantined_files = quarantined_in_run(
            self.spark, self.config.quarantine, self.report.run_id
        )
        return self.report

    def run_tables(
        self, items: list[tuple[TableSpec, Any]], apply: Callable[[TableSpec, Any, TableReport], None]
    ):
        def one(item: tuple[TableSpec, Any]) -> TableReport:
            spec, payload = item
            report = TableReport(spec.qualified_name)
            begun = time.monotonic()
            try:
                apply(spec, payload, report)
            except LeaseLostError:
                raise  # the lease moved on: the run fails as a whole, its other tables commit nothing either
            except Exception as error:  # one table's failure is reported; the others go on
                log.exception("%s: %s failed", spec.qualified_name, self.report.job)
                report.error = f"{type(error).__name__}: {error}"[:2000]
            report.seconds = round(time.monotonic() - begun, 3)
            return report

        workers = max(1, min(self.options.parallel_tables, len(items) or 1))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="table") as pool:
            self.report.tables = list(pool.map(one, sorted(items, key=lambda kv: kv[0].qualified_name)))


# ==================================================================================================== CDC


def apply_cdc(
    spark: SparkSession,
    config: LakeConfig,
    schema: SchemaFile,
    manifest: Manifest,
    options: ApplyOptions = ApplyOptions(),
    reapply: Mapping[str, str] | None = None,
) -> RunReport:
    """Apply every file of the manifest: per table one change set and ONE commit, tables in parallel.
    A table that fails does not stop the others; its error is in the report (and the run fails).
    `reapply` (file URI → a tag of its content; tools.reapply_quarantined) applies those files again
    although the ledger names them: once per tag (docs/CONTRACTS.md, "What each recovery command
    guarantees")."""
    _check_options(options)
    started = time.monotonic()
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    run = _Pipeline(spark, config, schema, options, manifest.run_id, "cdc")
    run.reapplied = dict(reapply or {})
    run.state.ensure()
    by_table = run.classify([(f.uri, f.size) for f in manifest.files])
    recorded = run.state.recorded(
        [run.ledger_name(f) for files in by_table.values() for f in files if not f.is_full_load]
    )

    def apply(spec: TableSpec, files: list[DmsFile], report: TableReport) -> None:
        report.files = len(files)
        loads = [f for f in files if f.is_full_load]
        if loads:
            raise ValueError(
                f"{spec.qualified_name}: the manifest lists LOAD file(s) ({loads[0].uri}): a table's (re)load is "
                f"applied by the full-load job (full_load_job.py --tables {spec.qualified_name} --reload true), "
                "never as CDC"
            )
        _apply_table_changes(run, spec, sorted(files, key=lambda f: f.order_key), report, recorded)

    run.run_tables(list(by_table.items()), apply)
    run.report.tables += run.unknown_table_reports()
    report = run.finish()
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _check_options(options: ApplyOptions) -> None:
    if options.type_mismatch not in TYPE_MISMATCH_POLICIES:
        raise ValueError(
            f"type_mismatch must be one of {TYPE_MISMATCH_POLICIES}, not {options.type_mismatch!r}"
        )
    if options.no_primary_key not in ("append", "skip"):
        raise ValueError(f"no_primary_key must be 'append' or 'skip', not {options.no_primary_key!r}")


def _apply_table_changes(
    run: _Pipeline,
    spec: TableSpec,
    files: list[DmsFile],
    report: TableReport,
    recorded: dict[str, list[RecordedFile]],
) -> None:
    spark, config = run.spark, run.config
    table = _ensure_table(spark, config, spec, report)
    known = applied_files(
        spark,
        table,
        spec.qualified_name,
        [(run.ledger_name(f), f.uri, f.written_at) for f in files],
        recorded.get(spec.qualified_name, []),
    )
    run.remember(known.to_record, [(spec.qualified_name, f) for f in known.to_forget])
    fresh_files = [f for f in files if run.ledger_name(f) not in known.applied]
    report.skipped_already_applied = len(files) - len(fresh_files)
    if not fresh_files:
        log.info("%s: every file of the batch was applied before", spec.qualified_name)
        return
    raw = run.read_raw(spec, fresh_files, report)
    applied_names = [run.ledger_name(f) for f in fresh_files]
    properties = {APPLIED_FILES: json.dumps(applied_names), RUN_ID: run.report.run_id}
    floor = _floor(spark, table)
    if raw.rows is None:
        run.flush_quarantine(spec.qualified_name)
        _commit_nothing(spark, table, properties)  # every file unreadable (quarantined) or superseded
    elif spec.has_primary_key:
        _apply_keyed(run, spec, table, raw, floor, properties, report)
    else:
        _apply_without_key(run, spec, table, raw, floor, properties, report)
    snapshot = commit_of_run(spark, table, run.report.run_id)
    report.snapshot_id = snapshot
    run.remember(
        [
            LedgerEntry(spec.qualified_name, run.ledger_name(f), f.uri, run.report.run_id, snapshot)
            for f in fresh_files
        ]
        if snapshot is not None
        else []
    )


def _require_key_columns(spec: TableSpec, raw: RawRead) -> None:
    """A file whose header lacks a primary-key column is a schema change (the key was renamed or changed
    on the source, or the schema file names the wrong key), not bad data: the table stops before anything
    is quarantined or committed, like a column the schema file lacks, and the batch stays pending."""
    keys = [k.lower() for k in spec.primary_key]
    for uri, names in sorted(raw.headers.items()):
        missing = [k for k in keys if k not in {n.lower() for n in names}]
        if missing:
            raise SchemaOutOfDateError(
                f"{spec.qualified_name}: {uri} has no primary key column(s) {', '.join(missing)} (its header: "
                f"{', '.join(names[:20])}). The schema file says the key is {', '.join(spec.primary_key)}: if "
                "the source's key changed, regenerate the schema file (python -m tools.schema_gen ...) and "
                f"reload the table (full_load_job.py --tables {spec.qualified_name} --reload true). The batch "
                "stays pending and nothing of it is quarantined."
            )


def _ensure_table(spark: SparkSession, config: LakeConfig, spec: TableSpec, report: TableReport) -> str:
    """The table, created with the schema file's layout, or given it (`iceberg.align_layout`)."""
    table = config.clean_table(spec.iceberg_name)
    if not table_exists(spark, table):
        create_table(
            spark,
            table,
            clean_schema(spec),
            f"DMS replica of {spec.qualified_name}",
            {SOURCE_TABLE: spec.qualified_name} | file_size_properties(spec.target_file_size_mb),
            spec.partition_by or (),
        )
    else:
        report.schema_changes += align_layout(spark, table, spec.partition_by, spec.target_file_size_mb)
    return table


def _floor(spark: SparkSession, table: str) -> Decimal | None:
    value = table_properties(spark, table).get(LOAD_FLOOR) if table_exists(spark, table) else None
    return Decimal(value) if value else None


def _loaded_at(spark: SparkSession, table: str) -> datetime | None:
    """When the table's last (re)load was written by DMS (tables loaded before LOAD_ENDED: when it started)."""
    properties = table_properties(spark, table) if table_exists(spark, table) else {}
    value = properties.get(LOAD_ENDED) or properties.get(LOAD_STARTED)
    return datetime.fromisoformat(value) if value else None


def _table_types(spark: SparkSession, table: str) -> dict[str, T.DataType]:
    if not table_exists(spark, table):
        return {}
    return {f.name.lower(): f.dataType for f in spark.table(table).schema.fields}


@dataclass
class _Batch:
    """A batch's typed records after its first pass: the product the pass checkpointed, and its figures."""

    typed: DataFrame
    product: DataFrame
    figures: dict[str, Any]
    types: dict[str, T.DataType]


def _typed_batch(
    run: _Pipeline,
    spec: TableSpec,
    table: str,
    raw: RawRead,
    floor: Decimal | None,
    report: TableReport,
    build: Callable[[DataFrame, Column], DataFrame],
    replacing: bool = False,
    keep: Callable[[DataFrame], DataFrame] | None = None,
) -> _Batch:
    """Type the batch and run its first pass: `build(typed, usable)` makes the product to checkpoint from
    the records that are `usable` (valid, newer than the floor) while the batch's figures are observed.
    A value that a wider type holds (int → bigint, decimal precision, float → double) widens the column
    and the batch is typed again; a value that fits no type stops the table (or is quarantined)."""
    layout, types = _layout_and_types(run, spec, table, raw, replacing)
    for _ in range(4):
        typed = C.typed_changes(
            raw, spec, layout, types, run.options.names, run.options.reader.csv_null_value
        )
        usable = F.col(C.REASON).isNull() & F.col(C.MISMATCH).isNull() & F.col(C.WIDEN).isNull()
        newer = F.lit(True)
        if floor is not None:  # a record without a sequence (a LOAD row) is not older than anything
            newer = F.col(C.SEQ).isNull() | (F.col(C.SEQ) > F.lit(str(floor)).cast(C.SEQ_TYPE))
        observation = Observation(f"batch_{spec.iceberg_name}_{id(typed)}")
        observed = typed.observe(observation, *_batch_figures(usable, newer))
        product = (keep or _checkpointed)(build(observed, usable & newer))
        figures = observation.get
        if "records" not in figures:  # metrics not delivered: count instead (one more pass)
            figures = typed.agg(*_batch_figures(usable, newer)).first().asDict()
        figures = _read_figures(figures)
        wider = _widened(types, figures["widen"])
        if not wider:
            break
        product.unpersist()
        log.warning("%s: values need wider types: %s; typing the batch again", spec.qualified_name, wider)
        types = types | wider
    else:
        raise SchemaChangeError(f"{spec.qualified_name}: column types kept widening: {figures['widen']}")
    report.records += figures["records"]
    if figures["mismatched"] and run.options.type_mismatch == "fail":
        raise TypeMismatchError(
            f"{spec.qualified_name}: {figures['mismatched']} value(s) don't fit their column's type, e.g. "
            f"{figures['example']}. The source changed the column's type and the schema file is out of date "
            "(regenerate it: python -m tools.schema_gen; if Iceberg can't promote the old type to the new "
            f"one, reload the table: full_load_job.py --tables {spec.qualified_name} --reload true), or the "
            "files are wrong. The batch stays pending. To go on and quarantine such records instead, run the "
            "CDC job with --type_mismatch quarantine."
        )
    rejected = F.col(C.REASON).isNotNull() | (
        F.col(C.MISMATCH).isNotNull() if run.options.type_mismatch == "quarantine" else F.lit(False)
    )
    bad = figures["bad"] + (figures["mismatched"] if run.options.type_mismatch == "quarantine" else 0)
    if bad:
        reasons = typed.where(rejected).withColumn(C.REASON, F.coalesce(C.REASON, C.MISMATCH))
        run.quarantine_records(spec, reasons, raw.rows)
        report.quarantined_records += bad
    report.ignored_older += figures["older"]
    if figures["newest"] is not None:
        report.newest_commit_ts = figures["newest"].isoformat()
    return _Batch(typed, product, figures, types)


def _checkpointed(frame: DataFrame) -> DataFrame:
    """The batch's first pass, run now and kept: its figures decide what is committed, and the commit
    reads the kept rows instead of reading and typing the files again. A CDC batch (one row per key) is
    kept as a local checkpoint: its MERGE then plans on a plain scan (runtime Bloom filter included)."""
    return frame.localCheckpoint(eager=True)


def _cached(frame: DataFrame) -> DataFrame:
    """A full load's first pass kept in Spark's columnar cache: every row of the table passes through it,
    and a local checkpoint keeps rows as objects (10M rows: 20 s and 4 s of GC, against 11 s and 1 s
    here; bench/RESULTS.md §7). The caller unpersists it after its commit."""
    kept = frame.persist(StorageLevel.MEMORY_AND_DISK)
    kept.count()
    return kept


def _layout_and_types(
    run: _Pipeline, spec: TableSpec, table: str, raw: RawRead, replacing: bool
) -> tuple[C.HeaderLayout, dict[str, T.DataType]]:
    layout = C.header_layout(raw.groups, spec, run.options.names)
    return layout, resolve_types(spec, layout.data_columns, _table_types(run.spark, table), replacing)


def _batch_figures(usable: Column, newer: Column) -> list[Column]:
    """The batch's figures, observed on its first pass. Strings and numbers only: observed metrics come
    back through py4j. (A stage Spark runs again could only inflate the counts; extremes are extremes.)"""
    return [
        F.count(F.lit(1)).alias("records"),
        F.count(C.REASON).alias("bad"),
        F.count(F.when(F.col(C.REASON).isNull(), F.col(C.MISMATCH))).alias("mismatched"),
        F.first(
            F.when(
                F.col(C.REASON).isNull() & F.col(C.MISMATCH).isNotNull(),
                F.concat_ws(" in ", C.MISMATCH, C.FILE_URI),
            ),
            ignorenulls=True,
        ).alias("example"),
        F.concat_ws(C.WIDEN_SEPARATOR, F.collect_set(C.WIDEN)).alias("widen"),
        F.count(F.when(usable & ~newer, 1)).alias("older"),
        F.unix_micros(F.max(F.when(usable & newer, F.col(C.COMMIT_TS)))).alias("newest"),
        F.unix_micros(F.min(F.when(usable, F.col(C.COMMIT_TS)))).alias("oldest"),
        F.min(F.when(usable, F.col(C.SEQ))).cast("string").alias("min_seq"),
        F.count(F.when(usable & F.col(C.SEQ).isNull(), 1)).alias("without_seq"),
    ]


def _read_figures(values: dict[str, Any]) -> dict[str, Any]:
    def moment(micros: int | None) -> datetime | None:
        return datetime(1970, 1, 1) + timedelta(microseconds=micros) if micros is not None else None

    return values | {
        "newest": moment(values["newest"]),
        "oldest": moment(values["oldest"]),
        "min_seq": Decimal(values["min_seq"]) if values["min_seq"] is not None else None,
    }


def _widened(types: dict[str, T.DataType], needs: str | None) -> dict[str, T.DataType]:
    """The widest type each column's values asked for (`column<sep>type` entries)."""
    wider: dict[str, T.DataType] = {}
    for entry in filter(None, (needs or "").split(C.WIDEN_SEPARATOR)):
        column, _, type_text = entry.partition(C.WIDEN_TYPE_SEPARATOR)
        wanted = C.type_named(type_text)
        current = wider.get(column, types[column])
        if can_widen(current, wanted):
            wider[column] = wanted
    return wider


def _with_tomb_seq(
    rows: DataFrame,
    tombstones: DataFrame,
    key: Sequence[str],
    types: dict[str, T.DataType],
    values: dict[str, Column] | None = None,
) -> DataFrame:
    """`rows` (with their key_json in KEY) and TOMB_SEQ, the sequence of their key's newest tombstone.
    A key with a timestamp also matches tombstones written in the millisecond form of older releases."""
    rows = rows.join(
        tombstones.withColumnRenamed("key", KEY).withColumnRenamed("tomb_seq", TOMB_SEQ), KEY, "left"
    )
    legacy = C.legacy_key_json(key, types, values)
    if legacy is None:
        return rows
    old_key, old_seq = "_dms_legacy_key", "_dms_legacy_tomb_seq"
    return (
        rows.withColumn(old_key, legacy)
        .join(
            tombstones.select(F.col("key").alias(old_key), F.col("tomb_seq").alias(old_seq)), old_key, "left"
        )
        .withColumn(TOMB_SEQ, F.greatest(F.col(TOMB_SEQ), F.col(old_seq)))
        .drop(old_key, old_seq)
    )


def _apply_keyed(
    run: _Pipeline,
    spec: TableSpec,
    table: str,
    raw: RawRead,
    floor: Decimal | None,
    properties: dict[str, str],
    report: TableReport,
) -> None:
    spark = run.spark
    key = [k.lower() for k in spec.primary_key]
    tombstones = run.state.tombstones_of(spec.qualified_name)
    outcomes: list[Observation] = []  # one per typing of the batch (a widening types it again)
    append_key = _integral_key(spark, table, key)

    def latest_changes(typed: DataFrame, usable: Column) -> DataFrame:
        outcome = Observation(f"outcome_{spec.iceberg_name}_{len(outcomes)}")
        outcomes.append(outcome)
        fresh = typed.where(usable).drop(C.REASON, C.MISMATCH, C.WIDEN, C.RAW)
        latest = _with_metadata(C.last_change_per_key(C.expand_key_changes(fresh, key), key))
        # An upsert older than the key's last delete would bring a deleted row back: it is ignored.
        types = {f.name: f.dataType for f in latest.schema.fields}
        latest = _with_tomb_seq(latest.withColumn(KEY, C.key_json(key)), tombstones, key, types)
        buried = (F.col(C.OP) != "D") & F.col(TOMB_SEQ).isNotNull() & (F.col(C.SEQ) < F.col(TOMB_SEQ))
        figures = [
            F.count(F.when(~buried & (F.col(C.OP) == "D"), 1)).alias("deletes"),
            F.count(F.when(~buried & (F.col(C.OP) != "D"), 1)).alias("upserts"),
            F.count(F.when(buried, 1)).alias("buried"),
        ]
        if append_key is not None:
            figures.append(F.min(quote(append_key)).cast("string").alias("lowest_key"))
            figures.append(F.max(quote(append_key)).cast("string").alias("highest_key"))
        return latest.observe(outcome, *figures).where(~buried)

    batch = _typed_batch(run, spec, table, raw, floor, report, latest_changes)
    counts = outcomes[-1].get
    if "deletes" not in counts:
        counts = {
            "deletes": batch.product.where(F.col(C.OP) == "D").count(),
            "upserts": batch.product.where(F.col(C.OP) != "D").count(),
            "buried": 0,
        }
    report.deleted, report.inserted_or_updated = counts["deletes"], counts["upserts"]
    report.ignored_older += counts["buried"]
    run.flush_quarantine(spec.qualified_name)  # before the commit (and the tombstones)
    if counts["deletes"]:
        # Before the MERGE: a crash between the two leaves a tombstone for a row the retry deletes.
        deletes = batch.product.where(F.col(C.OP) == "D").select(
            F.col(KEY).alias("key"), F.col(C.SEQ).alias("change_seq"), F.col(C.COMMIT_TS).alias("commit_ts")
        )
        run.state.bury(spec.qualified_name, deletes, run.report.run_id)
    report.schema_changes += evolve_schema(spark, table, batch.types)
    if append_key is not None and _keys_all_new(spark, table, append_key, counts.get("lowest_key")):
        # No key of the batch can be in the table: the MERGE would insert every upsert and match nothing.
        log.info("%s: every key of the batch is above the table's highest; appending", table)
        append_rows(spark, table, batch.product.where(F.col(C.OP) != "D"), properties)
        return
    key_range = None
    if append_key is not None and counts.get("lowest_key") is not None:
        key_range = (append_key, int(counts["lowest_key"]), int(counts["highest_key"]))
    merge_changes(
        spark, table, batch.product, key, properties, order_column=CHANGE_SEQ_COLUMN, key_range=key_range
    )


def _integral_key(spark: SparkSession, table: str, key: Sequence[str]) -> str | None:
    """The table's key column if the key is one integer column (its file metrics bound it exactly)."""
    if len(key) != 1:
        return None
    fields = {f.name: f.dataType for f in spark.table(table).schema.fields}
    is_integral = isinstance(fields.get(key[0]), T.ByteType | T.ShortType | T.IntegerType | T.LongType)
    return key[0] if is_integral else None


def _keys_all_new(spark: SparkSession, table: str, column: str, lowest: str | None) -> bool:
    """Whether the batch's lowest key is above every key the table's data files may hold: then the
    batch (inserts of new keys, typically a serial key's table) is an append, no scan of the table.
    A table whose files lack the key's metrics is never assumed so."""
    if lowest is None:
        return False
    known, highest = key_upper_bound(spark, table, column)
    return known and (highest is None or int(lowest) > int(highest))


def _apply_without_key(
    run: _Pipeline,
    spec: TableSpec,
    table: str,
    raw: RawRead,
    floor: Decimal | None,
    properties: dict[str, str],
    report: TableReport,
) -> None:
    """A table without a primary key can't be merged. "append": inserts are appended (exactly once per
    file: the ledger) and updates and deletes go to quarantine, nothing lost; "skip": all its changes go
    to quarantine."""
    mode = run.options.no_primary_key
    log.warning("%s has no primary key: CDC mode %r", spec.qualified_name, mode)
    batch = _typed_batch(run, spec, table, raw, floor, report, lambda typed, usable: typed.where(usable))
    fresh = batch.product.drop(C.REASON, C.MISMATCH, C.WIDEN, C.RAW)
    appendable = fresh.where(F.col(C.OP) == "I") if mode == "append" else fresh.limit(0)
    rest = fresh.where(F.col(C.OP) != "I") if mode == "append" else fresh
    reason = (
        f"table has no primary key: {'updates and deletes' if mode == 'append' else 'changes'} "
        f"can't be applied (mode {mode})"
    )
    rejected = rest.withColumn(C.REASON, F.lit(reason)).withColumn(
        C.RAW,
        F.to_json(F.struct(*[F.col(quote(c)) for c in rest.columns if not c.startswith(INTERNAL_PREFIX)])),
    )
    n_rest = rejected.count()
    if n_rest:
        run.quarantine_records(spec, rejected, raw.rows)
        report.quarantined_records += n_rest
    run.flush_quarantine(spec.qualified_name)  # before the commit
    report.schema_changes += evolve_schema(run.spark, table, batch.types)
    append_rows(run.spark, table, _with_metadata(appendable), properties)
    report.inserted_or_updated = batch.figures["records"] - batch.figures["bad"] - batch.figures["mismatched"]
    report.inserted_or_updated -= n_rest + batch.figures["older"]


def _commit_nothing(spark: SparkSession, table: str, properties: dict[str, str]) -> None:
    """A commit without rows that still names the files it processed (all unreadable or superseded)."""
    schema = spark.table(table).schema
    append_rows(spark, table, spark.createDataFrame([], schema), properties)


# ============================================================================================= full load


def full_load(
    spark: SparkSession,
    config: LakeConfig,
    schema: SchemaFile,
    raw_path: str,
    tables: Sequence[str] = (),
    reload: bool = False,
    run_id: str = "full-load",
    options: ApplyOptions = ApplyOptions(),
) -> RunReport:
    """Load every table's LOAD files into its Iceberg table, rows and properties in one commit. A table
    loaded before is left alone (its CDC changes stay), unless `reload`: then its rows are replaced by the
    LOAD files' in an order-independent way (changes newer than the reload survive it, see `_reloaded`)."""
    _check_options(options)
    started = time.monotonic()
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    run = _Pipeline(spark, config, schema, options, run_id, "full-load")
    run.state.ensure()
    wanted = {t.lower() for t in tables}
    refused = [
        TableReport(name, error=f"RefusedName: {why}")
        for name, why in sorted(schema.refused.items())
        if not wanted or name.lower() in wanted
    ]
    unknown = sorted(wanted - {s.qualified_name.lower() for s in schema.tables.values()})
    unknown = [t for t in unknown if schema.refusal(t) is None]
    if unknown:
        raise ValueError(f"--tables names tables the schema file does not have: {unknown}")
    specs = [s for s in schema.tables.values() if not wanted or s.qualified_name.lower() in wanted]
    base = raw_path.rstrip("/")
    files = {spec: _load_files(table_folder(base, spec.source_schema, spec.name), config) for spec in specs}
    misplaced = {spec: _misplaced(base, spec, config) for spec in specs if not files[spec]}
    if specs and not any(files.values()) and not any(misplaced.values()):
        raise FileNotFoundError(
            f"no DMS LOAD files under {raw_path} for any of the {len(specs)} table(s) of the schema file "
            f"(expected {base}/<schema>/<table>/LOAD00000001.csv): check --raw_path and that DMS's full load "
            "has written its files"
        )
    run.run_tables(
        [(spec, files[spec]) for spec in specs],
        lambda spec, found, report: (
            _refuse_misplaced(misplaced.get(spec)) or _load_table(run, spec, found, reload, report)
        ),
    )
    run.report.tables += refused
    report = run.finish()
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _misplaced(base: str, spec: TableSpec, config: LakeConfig) -> str | None:
    """Why a table without LOAD files has none when DMS wrote them to a folder whose name differs from the
    schema file's only in case (`sales/orders/` for `Sales.Orders`): the folder that exists, named. None
    when there is no such folder (DMS writes none for an empty table)."""
    schemas = [
        s for s in list_folders(base, config.s3_endpoint_url) if s.lower() == spec.source_schema.lower()
    ]
    folders = [
        f"{base}/{s}/{t}/"
        for s in schemas
        for t in list_folders(f"{base}/{s}/", config.s3_endpoint_url)
        if t.lower() == spec.name.lower() and (s, t) != (spec.source_schema, spec.name)
    ]
    if not folders:
        return None
    return (
        f"{spec.qualified_name}: no LOAD files under {table_folder(base, spec.source_schema, spec.name)}, but "
        f"{', '.join(folders)} exists: the schema file and the DMS folders spell the name in different case "
        "(S3 keys are case-sensitive). Regenerate the schema file from the source catalog (python -m "
        "tools.schema_gen) so that it names the table as DMS does; the table is not loaded until then."
    )


def _refuse_misplaced(problem: str | None) -> None:
    if problem:
        raise FileNotFoundError(problem)


def _load_files(prefix: str, config: LakeConfig) -> list[tuple[DmsFile, datetime | None]]:
    found = []
    for info in list_objects(prefix, config.s3_endpoint_url):
        try:
            file = parse_dms_key(info.uri, info.size)
        except NotADmsFileError:
            continue
        if file.is_full_load:
            found.append((file, info.last_modified))
    return sorted(found, key=lambda item: item[0].order_key)


def _load_table(
    run: _Pipeline,
    spec: TableSpec,
    found: list[tuple[DmsFile, datetime | None]],
    reload: bool,
    report: TableReport,
) -> None:
    spark, config = run.spark, run.config
    table = config.clean_table(spec.iceberg_name)
    exists = table_exists(spark, table)
    done = exists and (
        LOAD_DONE in table_properties(spark, table)
        or any(FULL_LOAD_DONE in s for s in snapshot_properties(spark, table))
    )
    files = [f for f, _ in found]
    report.files = len(files)
    if done and not reload:
        log.info("%s: full load committed already; not reloading", table)
        with run._lock:
            run.report.skipped_files.extend(f.uri for f in files)
        return
    if not files:
        if reload:
            raise FileNotFoundError(f"{spec.qualified_name}: no LOAD files to reload the table from")
        # DMS writes no folder for an empty source table: an empty, loaded table (or, if CDC created it
        # already, the table as it is, marked loaded: its rows are changes made since).
        log.warning("%s: no LOAD files (an empty source table?)", spec.qualified_name)
        if exists:
            marks = {LOAD_DONE: "0", SOURCE_TABLE: spec.qualified_name}
            check_before_commit()
            spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({properties_sql(marks)})")
            report.schema_changes += align_layout(spark, table, spec.partition_by, spec.target_file_size_mb)
            return
        empty = spark.createDataFrame([], clean_schema(spec))
        replace_table(
            spark,
            table,
            empty,
            {LOAD_DONE: "0", SOURCE_TABLE: spec.qualified_name}
            | file_size_properties(spec.target_file_size_mb),
            {FULL_LOAD_DONE: "0", RUN_ID: run.report.run_id},
            f"DMS replica of {spec.qualified_name}",
            spec.partition_by,
        )
        return
    raw = run.read_raw(spec, files, report)
    if raw.rows is None:
        raise ValueError(f"{spec.qualified_name}: none of its {len(files)} LOAD file(s) could be read")
    has_rows = exists and spark.table(table).limit(1).count() > 0
    batch = _typed_batch(
        run,
        spec,
        table,
        raw,
        None,
        report,
        lambda typed, usable: typed.where(usable),
        replacing=True,
        keep=_cached,
    )
    run.flush_quarantine(spec.qualified_name)  # before the commit
    try:
        _replace_with_load(run, spec, table, found, files, has_rows, batch, report)
    finally:
        batch.product.unpersist()


def _replace_with_load(
    run: _Pipeline,
    spec: TableSpec,
    table: str,
    found: list[tuple[DmsFile, datetime | None]],
    files: list[DmsFile],
    has_rows: bool,
    batch: _Batch,
    report: TableReport,
) -> None:
    """Commit a (re)load's rows and its facts (table properties, snapshot summary) in one replace."""
    spark = run.spark
    rows = batch.product.drop(C.REASON, C.MISMATCH, C.WIDEN, C.RAW)
    figures = batch.figures
    started_at = min([t for t in (figures["oldest"], *(m for _, m in found)) if t is not None], default=None)
    # The rows' timestamps say when DMS transferred them (the same clock as CDC file names); the files' own
    # times only when the rows carry none.
    written = [t for t in (figures["oldest"], figures["newest"]) if t is not None] or [
        m for _, m in found if m
    ]
    properties = {LOAD_DONE: str(len(files)), SOURCE_TABLE: spec.qualified_name}
    properties |= file_size_properties(spec.target_file_size_mb)
    if started_at is not None:
        properties[LOAD_STARTED] = started_at.isoformat()
    if written:
        properties[LOAD_ENDED] = max(written).isoformat()
    target = _target_schema(spark, table, spec, batch.types)
    if has_rows:
        floor = figures["min_seq"]
        by_time: tuple[Decimal, Decimal] | None = None
        if figures["without_seq"]:
            # LOAD rows without AR_H_CHANGE_SEQ: the reload is placed by the time DMS started it.
            if started_at is None:
                raise ValueError(f"{spec.qualified_name}: can't place the reload in time (no timestamps)")
            # DMS read each row after `started_at` (the earliest row's transfer time), so the LOAD rows hold
            # every change committed before it, but the CDC sequences' clock (the source's commit times)
            # may run up to the margin apart from DMS's. Two placements close the gap both ways: changes
            # arriving after the reload are older than it only up to `placed` (the margin before: a change
            # above it applies again; a full row image, its newer changes follow it); a row the table holds
            # now is newer than the LOAD rows only above `settled` (the margin after: a change committed
            # before the read whose successor's file the reload removed would otherwise stay).
            margin = timedelta(seconds=run.options.reload_margin_seconds)
            placed, settled = sequence_at(started_at - margin), sequence_at(started_at + margin)
            _check_sequences_comparable(spark, table, spec, placed)
            rows = rows.withColumn(C.SEQ, F.coalesce(F.col(C.SEQ), F.lit(str(placed)).cast(C.SEQ_TYPE)))
            floor = placed if floor is None else min(floor, placed)
            by_time = (placed, settled)
        result = _reloaded(run, spec, table, rows, floor, target, by_time)
        summary_extra = {REPLACED_SNAPSHOT: str(current_snapshot_id(spark, table))}
    else:
        floor = figures["min_seq"]
        result = _aligned(_with_metadata(rows), target)
        summary_extra = {}
    if floor is not None:
        properties[LOAD_FLOOR] = str(floor)
    replace_table(
        spark,
        table,
        result,
        properties,
        {FULL_LOAD_DONE: str(len(files)), RUN_ID: run.report.run_id} | summary_extra,
        f"DMS replica of {spec.qualified_name}",
        spec.partition_by,
    )
    report.inserted_or_updated = figures["records"] - figures["bad"] - figures["mismatched"]
    report.snapshot_id = current_snapshot_id(spark, table)


def sequence_at(moment: datetime) -> Decimal:
    """A change sequence shaped as DMS's AR_H_CHANGE_SEQ (YYYYMMDDHHmmSShh + 19 digits) for a time."""
    return Decimal(moment.strftime("%Y%m%d%H%M%S") + f"{moment.microsecond // 10000:02d}" + "0" * 19)


def _check_sequences_comparable(spark: SparkSession, table: str, spec: TableSpec, placed: Decimal) -> None:
    """A reload placed by time compares DMS-shaped sequences: the table's must be such too."""
    highest = spark.table(table).agg(F.max(CHANGE_SEQ_COLUMN)).first()[0]
    if highest is None:
        return
    text = str(highest)
    try:
        shaped = len(text) == 35 and datetime.strptime(text[:14], "%Y%m%d%H%M%S").year >= 1990
    except ValueError:
        shaped = False
    if not shaped:
        raise ValueError(
            f"{spec.qualified_name}: its rows' change sequences (e.g. {text}) are not AWS DMS's timestamp-"
            "prefixed AR_H_CHANGE_SEQ and its LOAD files carry none, so the reload can't be ordered against "
            f"the changes applied so far (a reload placed at {placed})"
        )


def _target_schema(
    spark: SparkSession, table: str, spec: TableSpec, types: dict[str, T.DataType]
) -> T.StructType:
    """The table's columns after the load: the table's (dropped source columns stay), the schema file's,
    with the batch's resolved types, then the metadata columns."""
    fields: dict[str, T.DataType] = {}
    if table_exists(spark, table):
        fields |= {
            f.name: f.dataType
            for f in spark.table(table).schema.fields
            if f.name not in (COMMIT_TS_COLUMN, CHANGE_SEQ_COLUMN)
        }
    for f in clean_schema(spec).fields:
        if f.name not in (COMMIT_TS_COLUMN, CHANGE_SEQ_COLUMN):
            fields[f.name] = types.get(f.name, fields.get(f.name, f.dataType))
    fields |= {name: data_type for name, data_type in types.items()}
    return T.StructType([T.StructField(n, t) for n, t in fields.items()] + METADATA_FIELDS)


def _aligned(rows: DataFrame, target: T.StructType, prefix: str = "") -> DataFrame:
    return rows.select(
        *[
            (F.col(quote(prefix + f.name)) if prefix + f.name in rows.columns else F.lit(None))
            .cast(f.dataType)
            .alias(f.name)
            for f in target.fields
        ]
    )


def _reloaded(
    run: _Pipeline,
    spec: TableSpec,
    table: str,
    load: DataFrame,
    floor: Decimal | None,
    target: T.StructType,
    by_time: tuple[Decimal, Decimal] | None = None,
) -> DataFrame:
    """A reload's rows, whatever CDC the table applied before it and whatever arrives after:

    - a key in both the table and the LOAD files keeps the table's row only if it holds a newer change
      than the LOAD row; otherwise the LOAD row;
    - a key only in the table stays only if its row holds a change newer than the reload's floor (it was
      changed after DMS read the table; a newer change of it follows); otherwise it goes (deleted before);
    - a key only in the LOAD files is added, unless a newer delete of it is known (a tombstone).
    A table without a primary key keeps its rows newer than the floor and adds every LOAD row.
    A reload placed by time (`by_time`: its LOAD rows' sequence `placed`, and `settled`) counts as at
    `settled` against the rows the table holds, and at `placed` against changes arriving later."""
    spark = run.spark
    existing = _aligned(spark.table(table), target)
    against = max(floor, by_time[1]) if by_time is not None and floor is not None else floor

    def newer_than_floor(seq: str) -> Column:
        if against is None:
            return F.lit(False)
        return F.col(quote(seq)).isNotNull() & (F.col(quote(seq)) > F.lit(str(against)).cast(C.SEQ_TYPE))

    if not spec.has_primary_key:
        return existing.where(newer_than_floor(CHANGE_SEQ_COLUMN)).unionByName(
            _aligned(_with_metadata(load), target)
        )
    key = [k.lower() for k in spec.primary_key]
    latest = _aligned(_with_metadata(C.last_change_per_key(load, key)), target)
    kept, loaded, seq = "_dms_t_", "_dms_l_", CHANGE_SEQ_COLUMN
    ours = existing.select(
        *[F.col(quote(c)).alias(kept + c) for c in existing.columns], F.lit(True).alias(kept)
    )
    theirs = latest.select(
        *[F.col(quote(c)).alias(loaded + c) for c in latest.columns], F.lit(True).alias(loaded)
    )
    joined = ours.join(
        theirs, [F.col(quote(kept + k)) == F.col(quote(loaded + k)) for k in key], "full_outer"
    )
    values = {k: F.coalesce(F.col(quote(kept + k)), F.col(quote(loaded + k))) for k in key}
    joined = _with_tomb_seq(
        joined.withColumn(KEY, C.key_json(key, values)),
        run.state.tombstones_of(spec.qualified_name),
        key,
        {f.name: f.dataType for f in latest.schema.fields},
        values,
    )
    in_table, in_load = F.col(kept).isNotNull(), F.col(loaded).isNotNull()
    load_seq = F.col(quote(loaded + seq))
    if by_time is not None:  # LOAD rows placed by time count as at `settled`
        placed, settled = (F.lit(str(s)).cast(C.SEQ_TYPE) for s in by_time)
        load_seq = F.when(load_seq == placed, settled).otherwise(load_seq)
    table_newer = F.col(kept + seq).isNotNull() & load_seq.isNotNull() & (F.col(kept + seq) > load_seq)
    deleted_later = F.col(TOMB_SEQ).isNotNull() & load_seq.isNotNull() & (F.col(TOMB_SEQ) > load_seq)
    take_load = in_load & ((in_table & ~table_newer) | (~in_table & ~deleted_later))
    keep_table = in_table & ((in_load & table_newer) | (~in_load & newer_than_floor(kept + seq)))
    return joined.where(take_load | keep_table).select(
        *[
            F.when(take_load, F.col(quote(loaded + f.name)))
            .otherwise(F.col(quote(kept + f.name)))
            .alias(f.name)
            for f in target.fields
        ]
    )

"""Full load and CDC apply: files → typed changes → one Iceberg commit per table, watermark included."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
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
from lakehouse.dms_reader import ReaderOptions, read_dms_csv, with_record_numbers
from lakehouse.iceberg import (
    FULL_LOAD_DONE,
    RUN_ID,
    append_rows,
    create_table,
    ensure_namespace,
    evolve_schema,
    merge_changes,
    overwrite_rows,
    read_watermark,
    snapshot_properties,
    table_exists,
    watermark_properties,
)
from lakehouse.manifest import Manifest
from lakehouse.quarantine import FileProblem, file_rejections, record_rejections, write_quarantine
from lakehouse.schema import SchemaFile, TableSpec
from lakehouse.storage import list_objects, stage_for_spark

log = logging.getLogger(__name__)

COMMIT_TS_COLUMN = "dms_commit_ts"
CHANGE_SEQ_COLUMN = "dms_change_seq"
METADATA_FIELDS = [
    T.StructField(COMMIT_TS_COLUMN, T.TimestampType()),
    T.StructField(CHANGE_SEQ_COLUMN, C.SEQ_TYPE),
]


@dataclass(frozen=True)
class ApplyOptions:
    reader: ReaderOptions = ReaderOptions()
    names: C.ChangeColumns = C.ChangeColumns()
    parallel_tables: int = 4
    no_primary_key: str = "append"  # "append": inserts are appended, updates/deletes quarantined; "skip"


@dataclass
class TableReport:
    table: str
    files: int = 0
    records: int = 0
    inserted_or_updated: int = 0
    deleted: int = 0
    skipped_already_applied: int = 0
    quarantined_records: int = 0
    quarantined_files: int = 0
    schema_changes: list[str] = field(default_factory=list)
    watermark_seq: str | None = None
    watermark_file: str | None = None
    max_commit_ts: str | None = None
    seconds: float = 0.0
    error: str | None = None


@dataclass
class RunReport:
    run_id: str
    job: str
    tables: list[TableReport] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)
    quarantine_rows_added: int = 0
    seconds: float = 0.0

    @property
    def failed(self) -> list[TableReport]:
        return [t for t in self.tables if t.error]

    def totals(self) -> dict[str, int]:
        keys = (
            "files",
            "records",
            "inserted_or_updated",
            "deleted",
            "skipped_already_applied",
            "quarantined_records",
            "quarantined_files",
        )
        return {k: sum(getattr(t, k) for t in self.tables) for k in keys}

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "totals": self.totals()}


def clean_schema(spec: TableSpec) -> T.StructType:
    fields = [T.StructField(f.name.lower(), f.dataType) for f in spec.spark_schema().fields]
    return T.StructType(fields + METADATA_FIELDS)


def _with_metadata(changes: DataFrame) -> DataFrame:
    return changes.withColumn(COMMIT_TS_COLUMN, F.col(C.COMMIT_TS)).withColumn(
        CHANGE_SEQ_COLUMN, F.col(C.SEQ)
    )


def _ensure_table(spark: SparkSession, config: LakeConfig, spec: TableSpec) -> str:
    table = config.clean_table(spec.iceberg_name)
    if not table_exists(spark, table):
        create_table(spark, table, clean_schema(spec), f"DMS replica of {spec.qualified_name}")
    return table


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
        self.rejections: list[DataFrame] = []
        self.file_problems: list[FileProblem] = []

    def classify(self, uris: Sequence[tuple[str, int]]) -> dict[TableSpec, list[DmsFile]]:
        by_table: dict[TableSpec, list[DmsFile]] = defaultdict(list)
        for uri, size in uris:
            try:
                file = parse_dms_key(uri, size)
            except NotADmsFileError as error:
                self.file_problems.append(FileProblem("", uri, str(error)))
                continue
            spec = self.schema.find(file.source_schema, file.table)
            if spec is None:
                self.file_problems.append(
                    FileProblem(file.qualified_table, uri, "unknown table: not in the schema file")
                )
                continue
            by_table[spec].append(file)
        return by_table

    def read_typed(self, spec: TableSpec, files: list[DmsFile], report: TableReport):
        paths = stage_for_spark([f.uri for f in files], self.config.s3_endpoint_url, self.config.staging_dir)
        raw = read_dms_csv(self.spark, files, paths, self.options.reader, spec.primary_key)
        for rejection in raw.rejected:
            self.file_problems.append(FileProblem(spec.qualified_name, rejection.file.uri, rejection.reason))
        report.quarantined_files = len(raw.rejected)
        if raw.rows is None:
            return None, None, None
        layout = C.union_layout(list(raw.headers.values()), spec, self.options.names)
        types = C.column_types(layout, spec)
        typed = C.typed_changes(
            raw.rows, spec, layout, types, self.options.names, self.options.reader.csv_null_value
        )
        return raw.rows, typed, types

    def quarantine_records(self, spec: TableSpec, typed: DataFrame, raw: DataFrame) -> None:
        bad = typed.where(F.col(C.REASON).isNotNull())
        numbered = with_record_numbers(bad, raw)
        self.rejections.append(record_rejections(numbered, spec.qualified_name).localCheckpoint())

    def finish(self) -> RunReport:
        parts = list(self.rejections)
        if self.file_problems:
            parts.append(file_rejections(self.spark, self.file_problems))
        self.report.quarantine_rows_added = write_quarantine(
            self.spark, self.config.quarantine, self.report.run_id, self.report.job, parts
        )
        return self.report


def apply_cdc(
    spark: SparkSession,
    config: LakeConfig,
    schema: SchemaFile,
    manifest: Manifest,
    options: ApplyOptions = ApplyOptions(),
) -> RunReport:
    """Apply every file of the manifest: per table one ordered change set and ONE MERGE, tables in
    parallel. A table that fails does not stop the others; its error is in the report."""
    started = time.monotonic()
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    run = _Pipeline(spark, config, schema, options, manifest.run_id, "cdc")
    cdc_files = []
    for f in manifest.files:
        try:
            if parse_dms_key(f.uri).is_full_load:
                run.report.skipped_files.append(f.uri)  # LOAD files belong to the full-load job
                continue
        except NotADmsFileError:
            pass
        cdc_files.append((f.uri, f.size))
    by_table = run.classify(cdc_files)

    def apply_table(item: tuple[TableSpec, list[DmsFile]]) -> TableReport:
        spec, files = item
        report = TableReport(spec.qualified_name, files=len(files))
        begun = time.monotonic()
        try:
            _apply_table_changes(run, spec, sorted(files, key=lambda f: f.order_key), report)
        except Exception as error:  # one table's failure is reported; the others go on
            log.exception("%s: CDC apply failed", spec.qualified_name)
            report.error = f"{type(error).__name__}: {error}"[:2000]
        report.seconds = round(time.monotonic() - begun, 3)
        return report

    workers = max(1, min(options.parallel_tables, len(by_table)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="table") as pool:
        run.report.tables = list(
            pool.map(apply_table, sorted(by_table.items(), key=lambda kv: kv[0].qualified_name))
        )
    report = run.finish()
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _apply_table_changes(run: _Pipeline, spec: TableSpec, files: list[DmsFile], report: TableReport) -> None:
    spark, config = run.spark, run.config
    table = _ensure_table(spark, config, spec)
    raw, typed, types = run.read_typed(spec, files, report)
    if typed is None:
        return
    if not spec.has_primary_key:
        _apply_table_without_key(run, spec, table, files, raw, typed, report)
        return
    watermark = read_watermark(spark, table)
    fresh_valid = F.col(C.REASON).isNull() & C.is_above_watermark(watermark)
    # One pass over the files: the batch's figures are observed while its last change per key is
    # checkpointed, instead of caching every typed record to count it first (bench/profile_cdc.py).
    batch = Observation(f"batch_{spec.iceberg_name}")
    observed = typed.observe(batch, *_batch_figures(fresh_valid))
    key = [k.lower() for k in spec.primary_key]
    fresh = observed.where(fresh_valid).drop(C.REASON, C.RAW)
    latest = C.last_change_per_key(C.expand_key_changes(fresh, key), key)
    outcome = Observation(f"latest_{spec.iceberg_name}")
    # Checkpointed: the MERGE reads it without recomputing the batch, and its plan holds no
    # non-deterministic expression (the record position), which a copy-on-write MERGE (an EXISTS
    # subquery on its source) would refuse.
    latest = _with_metadata(latest).observe(outcome, *_outcome_figures()).localCheckpoint(eager=True)
    # `get` waits for the checkpoint's metrics (its first action); should they come back empty, the
    # batch is counted instead (one more pass).
    stats = batch.get
    if "records" not in stats:
        stats = typed.agg(*_batch_figures(fresh_valid)).first().asDict()
    stats = _read_figures(stats)
    report.records = stats["records"]
    report.quarantined_records = stats["bad"]
    if stats["bad"]:
        run.quarantine_records(spec, typed, raw)
    report.skipped_already_applied = stats["records"] - stats["bad"] - stats["fresh"]
    new_mark = watermark.advanced_to(C.Watermark(stats["seq"], max(f.name for f in files)))
    report.watermark_seq = str(new_mark.change_seq) if new_mark.change_seq is not None else None
    report.watermark_file = new_mark.cdc_file
    if stats["fresh"] == 0:
        log.info("%s: nothing above the watermark %s; nothing to apply", table, watermark)
        return
    report.max_commit_ts = stats["ts"].isoformat() if stats["ts"] else None
    report.schema_changes = evolve_schema(spark, table, types)
    counts = outcome.get
    if "deletes" not in counts:
        counts = latest.agg(*_outcome_figures()).first().asDict()
    report.deleted = counts["deletes"]
    report.inserted_or_updated = counts["upserts"]
    properties = watermark_properties(new_mark) | {RUN_ID: run.report.run_id}
    merge_changes(spark, table, latest, key, properties, order_column=CHANGE_SEQ_COLUMN)


def _outcome_figures() -> list[Column]:
    return [
        F.count(F.when(F.col(C.OP) == "D", 1)).alias("deletes"),
        F.count(F.when(F.col(C.OP) != "D", 1)).alias("upserts"),
    ]


def _batch_figures(fresh_valid: Column) -> list[Column]:
    """Counts, and the highest fresh sequence and commit time as a string and epoch microseconds:
    observed metrics come back through py4j, which converts numbers and strings only. (A stage Spark
    runs again could only inflate the counts, which are reported; the watermark is a maximum.)"""
    return [
        F.count(F.lit(1)).alias("records"),
        F.count(C.REASON).alias("bad"),
        F.count(F.when(fresh_valid, 1)).alias("fresh"),
        F.max(F.when(fresh_valid, F.col(C.SEQ))).cast("string").alias("seq"),
        F.unix_micros(F.max(F.when(fresh_valid, F.col(C.COMMIT_TS)))).alias("ts"),
    ]


def _read_figures(values: dict[str, Any]) -> dict[str, Any]:
    seq, micros = values["seq"], values["ts"]
    return values | {
        "seq": Decimal(seq) if seq is not None else None,
        "ts": datetime(1970, 1, 1) + timedelta(microseconds=micros) if micros is not None else None,
    }


def _apply_table_without_key(
    run: _Pipeline,
    spec: TableSpec,
    table: str,
    files: list[DmsFile],
    raw: DataFrame,
    typed: DataFrame,
    report: TableReport,
) -> None:
    typed = typed.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        watermark = read_watermark(run.spark, table)
        fresh_valid = F.col(C.REASON).isNull() & C.is_above_watermark(watermark)
        stats = _read_figures(typed.agg(*_batch_figures(fresh_valid)).first().asDict())
        report.records = stats["records"]
        report.quarantined_records = stats["bad"]
        if stats["bad"]:
            run.quarantine_records(spec, typed, raw)
        fresh = typed.where(fresh_valid).drop(C.REASON, C.RAW)
        _apply_without_key(run, spec, table, fresh, raw, files, report)
    finally:
        typed.unpersist()


def _apply_without_key(
    run: _Pipeline,
    spec: TableSpec,
    table: str,
    fresh: DataFrame,
    raw: DataFrame,
    files: list[DmsFile],
    report: TableReport,
) -> None:
    """A table without a primary key can't be merged. "append": inserts are appended and updates and
    deletes go to quarantine (nothing is lost); "skip": the table's changes all go to quarantine."""
    mode = run.options.no_primary_key
    log.warning("%s has no primary key: CDC mode %r", spec.qualified_name, mode)
    appendable = fresh.where(F.col(C.OP) == "I") if mode == "append" else fresh.limit(0)
    rest = fresh.where(F.col(C.OP) != "I") if mode == "append" else fresh
    reason = (
        f"table has no primary key: {'updates and deletes' if mode == 'append' else 'changes'} "
        f"can't be applied (mode {mode})"
    )
    rejected = rest.withColumn(C.REASON, F.lit(reason)).withColumn(
        C.RAW, F.to_json(F.struct(*[F.col(c) for c in rest.columns if not c.startswith("_")]))
    )
    stats = fresh.agg(F.count(F.lit(1)).alias("n"), F.max(C.SEQ).alias("seq")).first()
    n_rest = rejected.count()
    if n_rest:
        run.rejections.append(
            record_rejections(with_record_numbers(rejected, raw), spec.qualified_name).localCheckpoint()
        )
        report.quarantined_records += n_rest
    n_append = stats["n"] - n_rest
    if n_append:
        batch = C.Watermark(stats["seq"], max(f.name for f in files))
        mark = read_watermark(run.spark, table).advanced_to(batch)
        append_rows(
            run.spark,
            table,
            _with_metadata(appendable),
            watermark_properties(mark) | {RUN_ID: run.report.run_id},
        )
        report.inserted_or_updated = n_append


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
    """Load every table's LOAD files into its Iceberg table. Safe to re-run: a table whose full load
    committed already is left alone (its CDC changes stay), unless `reload`."""
    started = time.monotonic()
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    run = _Pipeline(spark, config, schema, options, run_id, "full-load")
    wanted = {t.lower() for t in tables}
    specs = [s for s in schema.tables.values() if not wanted or s.qualified_name.lower() in wanted]
    base = raw_path.rstrip("/")

    def load(spec: TableSpec) -> TableReport:
        report = TableReport(spec.qualified_name)
        begun = time.monotonic()
        try:
            _load_table(run, spec, f"{base}/{spec.source_schema}/{spec.name}", reload, report)
        except Exception as error:
            log.exception("%s: full load failed", spec.qualified_name)
            report.error = f"{type(error).__name__}: {error}"[:2000]
        report.seconds = round(time.monotonic() - begun, 3)
        return report

    with ThreadPoolExecutor(max_workers=max(1, min(options.parallel_tables, len(specs) or 1))) as pool:
        run.report.tables = list(pool.map(load, specs))
    report = run.finish()
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _load_table(run: _Pipeline, spec: TableSpec, prefix: str, reload: bool, report: TableReport) -> None:
    spark, config = run.spark, run.config
    files = []
    for info in list_objects(prefix, config.s3_endpoint_url):
        try:
            file = parse_dms_key(info.uri, info.size)
        except NotADmsFileError:
            continue
        if file.is_full_load:
            files.append(file)
    files.sort(key=lambda f: f.order_key)
    report.files = len(files)
    table = _ensure_table(spark, config, spec)
    if not reload and any(FULL_LOAD_DONE in s for s in snapshot_properties(spark, table)):
        log.info("%s: full load committed already; not reloading", table)
        run.report.skipped_files.extend(f.uri for f in files)
        return
    if not files:
        log.warning("%s: no LOAD files under %s", spec.qualified_name, prefix)
        return
    raw, typed, types = run.read_typed(spec, files, report)
    if typed is None:
        return
    report.schema_changes = evolve_schema(spark, table, types)
    observed = Observation(f"load_{spec.iceberg_name}")
    typed = typed.observe(observed, F.count(F.lit(1)).alias("records"), F.count(C.REASON).alias("bad"))
    good = _with_metadata(typed.where(F.col(C.REASON).isNull()))
    target = spark.table(table).schema
    rows = good.select(
        *[
            good[f.name].cast(f.dataType)
            if f.name in good.columns
            else F.lit(None).cast(f.dataType).alias(f.name)
            for f in target.fields
        ]
    )
    overwrite_rows(spark, table, rows, {FULL_LOAD_DONE: str(len(files)), RUN_ID: run.report.run_id})
    stats = observed.get
    if "records" not in stats:  # metrics not delivered: count the rows instead (one more pass)
        stats = typed.agg(F.count(F.lit(1)).alias("records"), F.count(C.REASON).alias("bad")).first()
    report.records = stats["records"]
    report.quarantined_records = stats["bad"]
    report.inserted_or_updated = stats["records"] - stats["bad"]
    if stats["bad"]:
        run.quarantine_records(spec, typed, raw)

"""Iceberg tables of the clean zone: create, evolve, MERGE and replace, with our facts in the commit itself
(snapshot summary properties) or in the table's properties (replace sets them in the same commit)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from lake_contracts.dms_files import VALID_OPS
from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException
from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import Column, DataFrame, DataFrameWriterV2, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.base.names import OP, properties_sql, quote, sql_string
from lakehouse.base.schema import parse_transform
from lakehouse.base.types import can_widen
from lakehouse.io.commit_conflicts import replanned_on_conflict
from lakehouse.io.fence import check_before_commit
from lakehouse.io.file_bounds import DRIVER_BOUND_TYPES, bound_from_manifests
from lakehouse.io.jvm import java_class, java_dict, java_list
from lakehouse.io.write_split import ADVISORY_PARTITION_SIZE, TARGET_FILE_SIZE, sql_with_settings

log = logging.getLogger(__name__)

APPLIED_FILES = "dms.applied-files"  # snapshot summary: JSON list of the CDC file names this commit applied
FULL_LOAD_DONE = "dms.full-load.files"  # snapshot summary (and, from now on, table property) of a full load
FULL_LOAD_PENDING = "dms.full-load.pending"  # snapshot summary of a load's rows whose facts commit follows
RUN_ID = "dms.run-id"
REPLACED_SNAPSHOT = "dms.replaced-snapshot"  # snapshot summary of a (re)load: the snapshot it replaced
SOURCE_TABLE = "dms.source-table"  # table property of a clean replica: the `schema.table` it holds
# Table properties a (re)load sets in the same commit as its rows.
LOAD_DONE = "dms.full-load.done"  # the table has been loaded from its LOAD files
LOAD_FLOOR = "dms.load.floor-seq"  # changes at or below this sequence are older than the (re)load
LOAD_STARTED = "dms.load.started-at"  # when DMS started that load (UTC)
# When DMS had written that load (UTC): its newest LOAD file or row. DMS empties a reloaded table's folder
# before it writes the LOAD files and writes the table's CDC files after them, so a CDC file missing from
# the raw zone that was written before this moment was removed by the reload: superseded, not lost.
LOAD_ENDED = "dms.load.ended-at"

# Every commit writes a new metadata.json, and a table commits at most once a batch (a minute or more apart). A
# reader pinned to one file (DuckDB's iceberg_scan of a metadata.json, Snowflake's METADATA_FILE_PATH) broke when
# Iceberg deleted it, 50 commits later (an hour). Iceberg keeps the newest 1440 now: a day of commits at one a
# minute, longer for a table that changes less often (docs/DEPLOY.md, "Reading the lake from other engines").
TABLE_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.parquet.compression-codec": "zstd",
    # pyarrow's level (the full load's floor writes at it); Parquet's default 3 costs the write ≈ 4 % more CPU
    # for files ≈ 4 % smaller (bench/RESULTS.md, "The full load's task CPU against Spark's own copy")
    "write.parquet.compression-level": "1",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "1440",
}


def table_exists(spark: SparkSession, table: str) -> bool:
    return bool(spark.catalog.tableExists(table))


def ensure_namespace(spark: SparkSession, catalog: str, database: str) -> None:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{quote(database)}")


def create_table(
    spark: SparkSession,
    table: str,
    schema: T.StructType,
    comment: str = "",
    extra_properties: dict[str, str] | None = None,
    partition_by: Sequence[str] = (),
) -> None:
    """Create the table if it does not exist, partitioned by `partition_by` (schema.partition_transforms);
    every name, the comment and every property key and value are written as SQL identifiers and literals
    (lakehouse.base.names), so each holds exactly its text."""
    columns = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in schema.fields)
    properties = properties_sql(TABLE_PROPERTIES | (extra_properties or {}))
    partitioned = f"PARTITIONED BY ({partition_sql(partition_by)}) " if partition_by else ""
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {table} ({columns}) USING iceberg {partitioned}"
        f"COMMENT {sql_string(comment)} TBLPROPERTIES ({properties})"
    )


def file_size_properties(target_file_size_mb: int | None) -> dict[str, str]:
    """The table property that sets its data files' target size (None: Iceberg's default, 512 MB for
    writes; maintenance's own default for compaction)."""
    if target_file_size_mb is None:
        return {}
    return {TARGET_FILE_SIZE: str(target_file_size_mb * 1024 * 1024)}


def partition_sql(transforms: Sequence[str]) -> str:
    """Normalised transforms (`bucket(16, id)`, `days(d)`, `c`) as Iceberg's Spark SQL, columns quoted."""
    parts = []
    for text in transforms:
        transform, buckets, column = parse_transform(text)
        if transform == "bucket":
            parts.append(f"bucket({buckets}, {quote(column)})")
        elif transform:
            parts.append(f"{transform}({quote(column)})")
        else:
            parts.append(quote(column))
    return ", ".join(parts)


def partition_columns(transforms: Sequence[str]) -> list[Column]:
    """Normalised transforms as the partition expressions of a DataFrameWriterV2 (`partitionedBy`)."""
    columns = []
    for text in transforms:
        transform, buckets, column = parse_transform(text)
        if transform == "bucket":
            columns.append(F.bucket(int(buckets or 0), F.col(quote(column))))
        elif transform:
            columns.append(getattr(F, transform)(F.col(quote(column))))
        else:
            columns.append(F.col(quote(column)))
    return columns


_JAVA_TRANSFORMS = {"year": "years", "month": "months", "day": "days", "hour": "hours"}


def partition_spec(spark: SparkSession, table: str, java_table: Any = None) -> tuple[str, ...]:
    """The table's current partition spec, as normalised transforms (unpartitioned: ())."""
    java_table = _loaded(spark, table, java_table)
    schema = java_table.schema()
    transforms = []
    for field in java_list(java_table.spec().fields()):
        kind, column = str(field.transform().toString()), str(schema.findColumnName(field.sourceId()))
        if kind == "identity":
            transforms.append(column)
        elif kind.startswith("bucket["):
            transforms.append(f"bucket({int(kind[7:-1])}, {column})")
        elif kind in _JAVA_TRANSFORMS:
            transforms.append(f"{_JAVA_TRANSFORMS[kind]}({column})")
        elif kind != "void":
            transforms.append(f"{kind}({column})")  # truncate[W] & co: set by someone else, kept as named
    return tuple(transforms)


def align_layout(
    spark: SparkSession,
    table: str,
    partition_by: Sequence[str] | None,
    target_file_size_mb: int | None,
    java_table: Any = None,
) -> list[str]:
    """Give an existing table the schema file's layout: its partition spec (Iceberg partition evolution:
    files written before keep theirs until maintenance rewrites them) and its target file size. None
    leaves what the table has. Returns what changed (each is a commit: fenced)."""
    done: list[str] = []
    java_table = _loaded(spark, table, java_table)
    if partition_by is not None:
        current = partition_spec(spark, table, java_table)
        if tuple(current) != tuple(partition_by):
            check_before_commit()
            for text in current:
                if text not in partition_by:
                    spark.sql(f"ALTER TABLE {table} DROP PARTITION FIELD {_field_sql(text)}")
            for text in partition_by:
                if text not in current:
                    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD {partition_sql([text])}")
            was, now = ", ".join(current) or "nothing", ", ".join(partition_by) or "nothing"
            done.append(f"partitioned by {now} (was {was})")
    wanted = file_size_properties(target_file_size_mb)
    have = table_properties(spark, table, java_table).get(TARGET_FILE_SIZE)
    if wanted and have != wanted[TARGET_FILE_SIZE]:
        check_before_commit()
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({properties_sql(wanted)})")
        done.append(f"target file size {target_file_size_mb} MB")
    if done:
        spark.catalog.refreshTable(table)
        log.info("%s: layout: %s", table, "; ".join(done))
    return done


def _field_sql(text: str) -> str:
    """A transform of the table's spec as DROP PARTITION FIELD takes it (one `partition_spec` returned)."""
    kind, _, rest = text.partition("(")
    if kind.startswith("truncate["):  # set by someone else: the schema file has no truncate
        return f"truncate({int(kind[9:-1])}, {quote(rest.removesuffix(')'))})"
    return partition_sql([text])


def evolve_schema(spark: SparkSession, table: str, wanted: dict[str, T.DataType]) -> list[str]:
    """Add new columns and widen widened types, before the MERGE. Dropped columns stay in the table
    (null from then on). The caller resolved `wanted` (pipeline.resolve_types): a type that is neither
    the column's nor a promotion of it is left as it is and logged."""
    current = {f.name.lower(): f.dataType for f in spark.table(table).schema.fields}
    done: list[str] = []
    added = [(n, t) for n, t in wanted.items() if n not in current]
    if added or any(n in current and current[n] != t and can_widen(current[n], t) for n, t in wanted.items()):
        check_before_commit()  # a schema change is a commit too: never by a run that lost the lease
    if added:
        spec = ", ".join(f"{quote(n)} {t.simpleString()}" for n, t in added)
        spark.sql(f"ALTER TABLE {table} ADD COLUMNS ({spec})")
        done += [f"added {n} {t.simpleString()}" for n, t in added]
    for name, data_type in wanted.items():
        have = current.get(name)
        if have is None or have == data_type:
            continue
        if can_widen(have, data_type):
            spark.sql(f"ALTER TABLE {table} ALTER COLUMN {quote(name)} TYPE {data_type.simpleString()}")
            done.append(f"widened {name} {have.simpleString()} -> {data_type.simpleString()}")
        else:
            log.warning(
                "%s: column %s stays %s (Iceberg can't change it to %s)",
                table,
                name,
                have.simpleString(),
                data_type.simpleString(),
            )
    if done:
        spark.catalog.refreshTable(table)
        log.info("%s: schema evolved: %s", table, "; ".join(done))
    return done


def snapshot_properties(spark: SparkSession, table: str, java_table: Any = None) -> Iterator[dict[str, str]]:
    """Summaries of the table's current lineage, newest first, read from table metadata through the
    Iceberg API (no Spark job; lazily, so a caller that finds what it wants early stops early)."""
    yield from (java_dict(snapshot.summary()) for snapshot in lineage_of(_loaded(spark, table, java_table)))


def lineage_of(java_table: Any) -> Iterator[Any]:
    """The Java snapshots of the table's current lineage, newest first."""
    snapshot = java_table.currentSnapshot()
    while snapshot is not None:
        yield snapshot
        parent = snapshot.parentId()
        snapshot = java_table.snapshot(parent) if parent is not None else None


def table_properties(spark: SparkSession, table: str, java_table: Any = None) -> dict[str, str]:
    """The table's properties, from its current metadata (no Spark job)."""
    return java_dict(_loaded(spark, table, java_table).properties())


def current_snapshot_id(spark: SparkSession, table: str, java_table: Any = None) -> int | None:
    """The table's current snapshot id (None for a table without data yet), fresh from the catalog."""
    snapshot = _loaded(spark, table, java_table).currentSnapshot()
    return int(snapshot.snapshotId()) if snapshot is not None else None


def commit_of_run(spark: SparkSession, table: str, run_id: str) -> int | None:
    """The newest snapshot of the table's lineage that `run_id` committed."""
    for snapshot in lineage_of(iceberg_table(spark, table)):
        if snapshot.summary().get(RUN_ID) == run_id:
            return int(snapshot.snapshotId())
    return None


def iceberg_table(spark: SparkSession, table: str) -> Any:
    """The Iceberg Java table (its metadata fresh from the catalog)."""
    spark3_util = java_class(spark, "org.apache.iceberg.spark.Spark3Util")
    iceberg_table = spark3_util.loadIcebergTable(spark._jsparkSession, table)
    iceberg_table.refresh()
    return iceberg_table


def load_table(spark: SparkSession, table: str) -> Any | None:
    """The Iceberg Java table fresh from the catalog, None if it does not exist: one load answers existence,
    properties, spec, snapshots and bounds (the `java_table` of the functions here)."""
    try:
        return iceberg_table(spark, table)
    except (AnalysisException, Py4JJavaError) as error:
        if "TABLE_OR_VIEW_NOT_FOUND" in str(error) or "NoSuchTableException" in str(error):
            return None
        raise


def _loaded(spark: SparkSession, table: str, java_table: Any) -> Any:
    return iceberg_table(spark, table) if java_table is None else java_table


class _PythonCallable:
    """A java.util.concurrent.Callable that runs a Python function (through py4j's callback server)."""

    def __init__(self, function: Callable[[], Any]) -> None:
        self.function = function
        self.error: BaseException | None = None

    def call(self) -> None:
        try:
            self.function()
        except BaseException as error:  # re-raised on the Python side, with its own traceback
            self.error = error
            raise
        return None

    class Java:
        implements = ["java.util.concurrent.Callable"]


_callback_lock = threading.Lock()


def with_commit_properties(
    spark: SparkSession, properties: dict[str, str], action: Callable[[], Any]
) -> None:
    """Run `action` (a SQL MERGE, DELETE…) so that its Iceberg commit carries `properties` in its snapshot
    summary: the data and the facts about it land in one atomic commit. Fenced: the run's lease is checked
    right before, and its holder and epoch are in the summary too (lakehouse.io.fence)."""
    properties = properties | check_before_commit()
    with _callback_lock:
        ensure_callback_server_started(spark.sparkContext._gateway)
    java_map = java_class(spark, "java.util.HashMap")()
    for key, value in properties.items():
        java_map.put(key, value)
    callable_ = _PythonCallable(action)
    try:
        java_class(spark, "org.apache.iceberg.spark.CommitMetadata").withCommitProperties(
            java_map, callable_, java_class(spark, "java.lang.RuntimeException")().getClass()
        )
    except Exception:
        if callable_.error is not None:
            raise callable_.error from None
        raise


def merge_changes(
    spark: SparkSession,
    table: str,
    changes: DataFrame,
    key: Sequence[str],
    properties: dict[str, str],
    order_column: str | None = None,
    key_range: tuple[str, int, int] | None = None,
    advisory_bytes: int | None = None,
) -> int:
    """One MERGE: deletes, updates and inserts (an insert of an existing key, or an update of a
    missing one, is an upsert; a delete of a missing key does nothing). `changes` has one row per key.
    With `order_column` (the change sequence), a change applies to a row only if it is newer than the
    change the row holds: an older change (a late file, a replay from before a load) never regresses a
    row, and the same change applied again changes nothing. With `key_range` (an integer key column, the
    lowest and the highest key of the batch) the target is read only where the key is in that range: a
    condition on the target alone, which Iceberg evaluates against each data file's key bounds, so a
    batch of recent keys of a serial key reads only the files that may hold them (every matching row is
    in the range: the outcome is the same). With `advisory_bytes` its write is split into partitions of
    about that many shuffle bytes (lakehouse.io.write_split). Returns how many times the MERGE was planned
    again because a concurrent commit won (lakehouse.io.commit_conflicts)."""
    target_columns = [f.name for f in spark.table(table).schema.fields]
    view = f"changes_{abs(hash((table, threading.get_ident())))}"
    source = changes.select(
        *[
            changes[quote(c)] if c in changes.columns else _null_of(spark, table, c).alias(c)
            for c in target_columns
        ],
        OP,
    ).where(F.col(OP).isin(*VALID_OPS))
    # Every change passes that filter, but with it Spark sees a filtered batch and builds a runtime
    # Bloom filter of the batch's keys for the target scan, so only target rows that may match are
    # shuffled and joined (the thresholds are in session.TUNING; bench/RESULTS.md).
    source.createOrReplaceTempView(view)
    on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in key)
    if key_range is not None:
        column, lowest, highest = key_range
        on += f" AND t.{quote(column)} >= {int(lowest)} AND t.{quote(column)} <= {int(highest)}"
    updates = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in target_columns if c not in key)
    inserts = ", ".join(quote(c) for c in target_columns)
    values = ", ".join(f"s.{quote(c)}" for c in target_columns)
    newer = ""
    if order_column:
        c = quote(order_column)
        newer = f" AND (s.{c} IS NULL OR t.{c} IS NULL OR s.{c} > t.{c})"
    update_clause = f"WHEN MATCHED{newer} THEN UPDATE SET {updates} " if updates else ""
    statement = (
        f"MERGE INTO {table} t USING {view} s ON {on} "
        f"WHEN MATCHED AND s.{OP} = 'D'{newer} THEN DELETE "
        f"{update_clause}"
        f"WHEN NOT MATCHED AND s.{OP} <> 'D' THEN INSERT ({inserts}) VALUES ({values})"
    )
    settings = {ADVISORY_PARTITION_SIZE: str(advisory_bytes)} if advisory_bytes else {}

    def merge() -> None:
        if settings:
            sql_with_settings(spark, settings, statement)
        else:
            spark.sql(statement)

    try:
        # A compaction committed since the plan fails the commit's validation: planned again from the batch
        # (nothing was committed), exactly once in effect (lakehouse.io.commit_conflicts).
        return replanned_on_conflict(spark, table, lambda: with_commit_properties(spark, properties, merge))
    finally:
        spark.catalog.dropTempView(view)


# Up to this many data files, key_upper_bound reads the files' bounds from the table's manifests in the driver;
# above it, a Spark query of `data_files` (bench/RESULTS.md, "The fixed cost of a small apply").
DRIVER_BOUND_FILES = 64


def key_upper_bound(
    spark: SparkSession,
    table: str,
    column: str,
    driver_files: int = DRIVER_BOUND_FILES,
    java_table: Any = None,
) -> tuple[bool, Any]:
    """The largest value of `column` a data file of the table's current snapshot may hold, from the
    files' column metrics (rows deleted since still count: a bound never below the true maximum), as the
    Python value Spark gives for the column's type. Returns (known, bound): (True, None) for a table without
    data files; (False, None) when a file lacks the metric (metrics mode none, or the column was added after
    the file was written). A table of at most `driver_files` data files is read in the driver (an integer,
    date or timestamp column), a larger one by a Spark query."""
    java_table = _loaded(spark, table, java_table)
    snapshot = java_table.currentSnapshot()
    if snapshot is None:
        return True, None
    files = snapshot.summary().get("total-data-files")
    field = java_table.schema().caseInsensitiveFindField(column)
    in_driver = files is not None and files.isdigit() and int(files) <= driver_files
    if in_driver and field is not None and field.type().typeId().name() in DRIVER_BOUND_TYPES:
        return bound_from_manifests(spark, java_table, field)
    bound = F.col(f"readable_metrics.{quote(column)}.upper_bound")
    row = (
        spark.table(f"{table}.data_files")
        .agg(
            F.count(F.when(bound.isNull() & (F.col("record_count") > 0), 1)).alias("unknown"),
            F.max(bound).alias("upper"),
        )
        .first()
    )
    if row is None or row["unknown"]:
        return False, None
    return True, row["upper"]


def append_rows(spark: SparkSession, table: str, rows: DataFrame, properties: dict[str, str]) -> None:
    target = spark.table(table).schema
    aligned = rows.select(
        *[
            rows[quote(f.name)].cast(f.dataType)
            if f.name in rows.columns
            else _null_of(spark, table, f.name).alias(f.name)
            for f in target.fields
        ]
    )
    fenced_writer(aligned.writeTo(table), properties).append()


def overwrite_rows(spark: SparkSession, table: str, rows: DataFrame, properties: dict[str, str]) -> None:
    fenced_writer(rows.writeTo(table), properties).overwrite(F.lit(True))


def fenced_writer(writer: DataFrameWriterV2, properties: dict[str, str] | None = None) -> DataFrameWriterV2:
    """`writer` with `properties` and the run's lease (holder, epoch) as snapshot summary properties, the
    lease checked right before (lakehouse.io.fence): call it as the last step before `.append()` & co."""
    for key, value in ((properties or {}) | check_before_commit()).items():
        writer = writer.option(f"snapshot-property.{key}", value)
    return writer


def replace_table(
    spark: SparkSession,
    table: str,
    rows: DataFrame,
    properties: dict[str, str],
    summary: dict[str, str],
    comment: str = "",
    partition_by: Sequence[str] | None = None,
) -> None:
    """Replace the table's schema, rows and properties in ONE commit (Iceberg REPLACE TABLE AS SELECT:
    the history stays, so time travel and rollback still reach the rows before). Creates the table if
    it does not exist. Properties the owner set (e.g. copy-on-write modes) are kept; so is its partition
    spec unless `partition_by` names one (() unpartitioned)."""
    exists = table_exists(spark, table)
    kept = table_properties(spark, table) if exists else {}
    if partition_by is None:
        partition_by = partition_spec(spark, table) if exists else ()
    writer = rows.writeTo(table).using("iceberg")
    if partition_by:
        writer = writer.partitionedBy(*partition_columns(partition_by))
    for key, value in (TABLE_PROPERTIES | kept | properties).items():
        if not (exists and key == "format-version"):  # never change an existing table's format
            writer = writer.tableProperty(key, value)
    if comment:
        writer = writer.tableProperty("comment", comment)  # no SQL: the text as it is
    fenced_writer(writer, summary).createOrReplace()


def _null_of(spark: SparkSession, table: str, column: str):
    data_type = spark.table(table).schema[column].dataType
    return F.lit(None).cast(data_type)

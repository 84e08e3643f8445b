"""Iceberg tables of the clean zone: create, evolve, MERGE, and the watermark in the commit itself."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from typing import Any

from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.changes import OP, VALID_OPS, Watermark
from lakehouse.types import can_widen

log = logging.getLogger(__name__)

WATERMARK_SEQ = "dms.watermark.change-seq"
WATERMARK_FILE = "dms.watermark.cdc-file"
FULL_LOAD_DONE = "dms.full-load.files"
RUN_ID = "dms.run-id"

TABLE_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.parquet.compression-codec": "zstd",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "50",
}


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def table_exists(spark: SparkSession, table: str) -> bool:
    return bool(spark.catalog.tableExists(table))


def ensure_namespace(spark: SparkSession, catalog: str, database: str) -> None:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{quote(database)}")


def create_table(spark: SparkSession, table: str, schema: T.StructType, comment: str = "") -> None:
    columns = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in schema.fields)
    properties = ", ".join(f"'{k}'='{v}'" for k, v in TABLE_PROPERTIES.items())
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {table} ({columns}) USING iceberg "
        f"COMMENT '{comment.replace(chr(39), '')}' TBLPROPERTIES ({properties})"
    )


def evolve_schema(spark: SparkSession, table: str, wanted: dict[str, T.DataType]) -> list[str]:
    """Add new columns and widen widened types, before the MERGE. Dropped columns stay in the table
    (null from then on); a type change Iceberg cannot do is logged and left as it is."""
    current = {f.name.lower(): f.dataType for f in spark.table(table).schema.fields}
    done: list[str] = []
    added = [(n, t) for n, t in wanted.items() if n not in current]
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


def snapshot_properties(spark: SparkSession, table: str) -> Iterator[dict[str, str]]:
    """Summaries of the table's current lineage, newest first, read from table metadata through the
    Iceberg API (no Spark job; lazily, so a caller that finds what it wants early stops early)."""
    jvm = spark.sparkContext._jvm
    iceberg_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    iceberg_table.refresh()
    snapshot = iceberg_table.currentSnapshot()
    while snapshot is not None:
        yield dict(snapshot.summary())
        parent = snapshot.parentId()
        snapshot = iceberg_table.snapshot(parent) if parent is not None else None


def read_watermark(spark: SparkSession, table: str) -> Watermark:
    """The newest watermark committed on the table's current lineage (compactions carry none)."""
    for summary in snapshot_properties(spark, table):
        if WATERMARK_SEQ in summary or WATERMARK_FILE in summary:
            seq = summary.get(WATERMARK_SEQ) or None
            return Watermark(Decimal(seq) if seq else None, summary.get(WATERMARK_FILE) or None)
    return Watermark()


def watermark_properties(watermark: Watermark) -> dict[str, str]:
    properties = {}
    if watermark.change_seq is not None:
        properties[WATERMARK_SEQ] = str(watermark.change_seq)
    if watermark.cdc_file is not None:
        properties[WATERMARK_FILE] = watermark.cdc_file
    return properties


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
    """Run `action` (a SQL MERGE) so that its Iceberg commit carries `properties` in its snapshot
    summary: the data and the watermark land in one atomic commit."""
    with _callback_lock:
        ensure_callback_server_started(spark.sparkContext._gateway)
    jvm = spark.sparkContext._jvm
    java_map = jvm.java.util.HashMap()
    for key, value in properties.items():
        java_map.put(key, value)
    callable_ = _PythonCallable(action)
    try:
        jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
            java_map, callable_, jvm.java.lang.RuntimeException().getClass()
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
) -> None:
    """One MERGE: deletes, updates and inserts (an insert of an existing key, or an update of a
    missing one, is an upsert; a delete of a missing key does nothing). `changes` has one row per key.
    With `order_column` (the change sequence), a change older than the row it would overwrite is
    ignored: e.g. a change DMS replays from before the full-load snapshot never regresses a row."""
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
    updates = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in target_columns if c not in key)
    inserts = ", ".join(quote(c) for c in target_columns)
    values = ", ".join(f"s.{quote(c)}" for c in target_columns)
    newer = ""
    if order_column:
        c = quote(order_column)
        newer = f" AND (s.{c} IS NULL OR t.{c} IS NULL OR s.{c} >= t.{c})"
    update_clause = f"WHEN MATCHED{newer} THEN UPDATE SET {updates} " if updates else ""
    statement = (
        f"MERGE INTO {table} t USING {view} s ON {on} "
        f"WHEN MATCHED AND s.{OP} = 'D'{newer} THEN DELETE "
        f"{update_clause}"
        f"WHEN NOT MATCHED AND s.{OP} <> 'D' THEN INSERT ({inserts}) VALUES ({values})"
    )
    try:
        with_commit_properties(spark, properties, lambda: spark.sql(statement))
    finally:
        spark.catalog.dropTempView(view)


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
    writer = aligned.writeTo(table)
    for key, value in properties.items():
        writer = writer.option(f"snapshot-property.{key}", value)
    writer.append()


def overwrite_rows(spark: SparkSession, table: str, rows: DataFrame, properties: dict[str, str]) -> None:
    from pyspark.sql import functions as F

    writer = rows.writeTo(table)
    for key, value in properties.items():
        writer = writer.option(f"snapshot-property.{key}", value)
    writer.overwrite(F.lit(True))


def _null_of(spark: SparkSession, table: str, column: str):
    from pyspark.sql import functions as F

    data_type = spark.table(table).schema[column].dataType
    return F.lit(None).cast(data_type)

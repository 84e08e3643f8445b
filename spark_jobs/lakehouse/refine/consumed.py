"""What a refine has consumed (lakehouse.refine.refresh): each refined table's commits record, in their snapshot
summary, the input snapshot ids they consumed (`refine.consumed.<table>`); the next run compares them with
the inputs' current snapshots, reads both versions, and rebuilds when a consumed snapshot left its input's
history."""

from __future__ import annotations

import time

from pyspark.sql import DataFrame, SparkSession

from lakehouse.io.iceberg import iceberg_table, snapshot_properties, table_exists
from lakehouse.io.jvm import java_class

CONSUMED_PREFIX = "refine.consumed."
REFINE_RUN_ID = "refine.run-id"


def is_in_history(spark: SparkSession, table: str, snapshot_id: int, current_id: int) -> bool:
    """Whether `snapshot_id` is still readable and an ancestor of (or is) the current snapshot."""
    jtable = iceberg_table(spark, table)
    if jtable.snapshot(snapshot_id) is None:
        return False
    util = java_class(spark, "org.apache.iceberg.util.SnapshotUtil")
    return snapshot_id == current_id or bool(util.isAncestorOf(jtable, current_id, snapshot_id))


def consumed_snapshots(spark: SparkSession, table: str) -> dict[str, int] | None:
    """The input snapshot ids a refined table has consumed (newest refine commit on its lineage)."""
    for summary in snapshot_properties(spark, table):
        consumed = {
            k[len(CONSUMED_PREFIX) :]: int(v) for k, v in summary.items() if k.startswith(CONSUMED_PREFIX)
        }
        if consumed:
            return consumed
    return None


def read_as_of(spark: SparkSession, table: str, snapshot_id: int) -> DataFrame:
    """The table as of a snapshot. Through the `snapshot-id` read option, not `VERSION AS OF`: Spark
    treats two `VERSION AS OF` reads of one table as the same relation, so its optimizer may fold
    `distinct(old UNION new)` into `distinct(old)` (measured: Spark 3.5 + Iceberg 1.10.2); the option is
    part of the relation, which keeps the two versions apart."""
    return spark.read.format("iceberg").option("snapshot-id", str(snapshot_id)).load(table)


def seconds_since_commit(spark: SparkSession, table: str) -> float:
    """Seconds since the table's current snapshot was committed (infinite: no table or no snapshot)."""
    if not table_exists(spark, table):
        return float("inf")
    snapshot = iceberg_table(spark, table).currentSnapshot()
    return float("inf") if snapshot is None else time.time() - snapshot.timestampMillis() / 1000

"""A MERGE's write split by its batch's size, so a large batch's new rows are written by every core.

A merge-on-read MERGE clusters what it writes by the data file a row came from; a new row version comes
from none, so every one lands in one shuffle partition, and adaptive execution splits a partition only
above the write's advisory size: Iceberg's is the table's target file size in shuffle bytes (512 MB x 3 by
default), so a batch of 1M changes (56 MB of shuffle) was written by one task while the other cores idled
(bench/RESULTS.md, "The CDC MERGE's write split by its batch's size"). Here the advisory size is the
estimated write over the job's shuffle partitions (twice its cores), never below a floor: a batch under
the floor still writes one file.

Spark 3.5 gives a MERGE no write options, and `spark.sql.iceberg.advisory-partition-size` is a session setting:
set on the shared session it would reach the writes other tables' threads plan meanwhile. So the MERGE runs in
a copy of the session (its settings, temporary views and functions; its catalogs the session's own) with the
size set there, and only when the batch is large enough to be split at all."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession

from lakehouse.io.jvm import java_class, java_dict

log = logging.getLogger(__name__)

ADVISORY_PARTITION_SIZE = "spark.sql.iceberg.advisory-partition-size"
# Below this many shuffle bytes a write stays one task and one file (about 10 MB of zstd Parquet).
SPLIT_FLOOR_BYTES = 32 * 2**20
# Iceberg's own estimate of an LZ4-compressed shuffle's bytes per byte of a zstd Parquet file
# (SparkCompressionUtil, the ratio its default advisory size uses).
SHUFFLE_BYTES_PER_FILE_BYTE = 3
DEFAULT_TARGET_FILE_BYTES = 512 * 2**20  # Iceberg's write.target-file-size-bytes default
TARGET_FILE_SIZE = "write.target-file-size-bytes"  # Iceberg's: writes and maintenance aim at this size


def write_advisory_bytes(
    rows: int,
    file_bytes_per_row: float,
    partitions: int,
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES,
    floor: int = SPLIT_FLOOR_BYTES,
) -> int | None:
    """The advisory partition size (shuffle bytes) for a write of `rows` rows of about `file_bytes_per_row`
    bytes each in the table's files: the estimate over `partitions`, at least `floor`. None where the estimate
    is at most `floor` (one partition, one file, as Iceberg would) or the size would not be below Iceberg's own
    (the target file size in shuffle bytes): Iceberg's sizing stays."""
    estimate = rows * file_bytes_per_row * SHUFFLE_BYTES_PER_FILE_BYTE
    if estimate <= floor:
        return None
    advisory = max(floor, math.ceil(estimate / max(1, partitions)))
    return advisory if advisory < target_file_bytes * SHUFFLE_BYTES_PER_FILE_BYTE else None


def merge_advisory_bytes(spark: SparkSession, java_table: Any, rows: int) -> int | None:
    """`write_advisory_bytes` for a MERGE writing `rows` new row versions into `java_table` (the Iceberg Java
    table as loaded): a row's bytes are the table's own (its files' bytes over their records, current
    snapshot), the partitions the session's shuffle partitions. None for a table without rows yet."""
    snapshot = java_table.currentSnapshot() if java_table is not None else None
    summary = java_dict(snapshot.summary()) if snapshot is not None else {}
    size, records = int(summary.get("total-files-size") or 0), int(summary.get("total-records") or 0)
    if not size or not records:
        return None
    target = java_dict(java_table.properties()).get(TARGET_FILE_SIZE)
    return write_advisory_bytes(
        rows,
        size / records,
        int(spark.conf.get("spark.sql.shuffle.partitions") or 1),
        int(target) if target else DEFAULT_TARGET_FILE_BYTES,
    )


def sql_with_settings(spark: SparkSession, settings: Mapping[str, str], statement: str) -> None:
    """Run the SQL `statement` in a copy of the session with `settings` on top of its own (`session_copy`):
    the shared session's settings, which other threads' statements read, are untouched. Where no copy can be
    made (a Spark whose catalog manager keeps its catalogs elsewhere), the statement runs in the session as
    it is, without the settings: they change how it is written, never what."""
    try:
        copy = session_copy(spark, settings)
    except Exception as failure:  # py4j's reflection errors: the write is split as Iceberg would, no worse
        log.warning("no session copy for %s (%s): run without them", sorted(settings), failure)
        spark.sql(statement)
        return
    copy.sql(statement)


def session_copy(spark: SparkSession, settings: Mapping[str, str]) -> Any:
    """A copy of the session (a Java SparkSession: its settings, temporary views as they are now, functions)
    with `settings` on top, that loads tables through the session's own catalog instances: the same cached
    metadata, no catalog client made (a copy's catalog manager would make new ones and cache apart, stale
    once the other commits). Spark keeps a session's catalogs in a private field of its CatalogManager."""
    original = spark._jsparkSession
    copy = original.cloneSession()
    for name, value in settings.items():
        copy.conf().set(name, value)
    manager = original.sessionState().catalogManager()
    field = manager.getClass().getDeclaredField("catalogs")
    field.setAccessible(True)
    loaded, copied = field.get(manager), field.get(copy.sessionState().catalogManager())
    converters = java_class(spark, "scala.collection.JavaConverters")
    for name, catalog in java_dict(converters.mapAsJavaMapConverter(loaded).asJava()).items():
        copied.update(name, catalog)
    return copy

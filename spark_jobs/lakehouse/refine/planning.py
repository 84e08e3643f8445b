"""How a refresh's steps are laid out on Spark (lakehouse.refine.changes, incremental, consumed), decided by
planning alone, no Spark job: whether a frame is planned in one partition, whether it fits one task, whether two
frames in one partition each are joined in that partition (no exchange, no broadcast), whether a frame fits a
broadcast or calls for a runtime Bloom filter, and Spark's estimate of a frame's size in bytes.

Why: a change of a few rows pays for each Spark job in latency, not CPU (a broadcast or a shuffle's map and
reduce jobs each a job of its own), so where a change's rows are few their aggregates, distinct and joins run in
the one task that reads them. These decisions read Spark 3.5's planning (its physical plan's output
partitioning, the optimized plan's statistics, adaptive execution's `inputPlan`, the session's size settings as
`JavaUtils` parses them): another Spark may plan otherwise, and they are to be checked again on an upgrade."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from lakehouse.io.jvm import java_class


def in_one_partition(frame: DataFrame) -> bool:
    """Whether Spark plans `frame` in one partition (its physical plan's output partitioning, as adaptive
    execution starts from it: planning alone, no job)."""
    plan = frame._jdf.queryExecution().executedPlan()
    if str(plan.nodeName()) == "AdaptiveSparkPlan":
        plan = plan.inputPlan()
    return int(plan.outputPartitioning().numPartitions()) == 1


def in_one_task_if_small(frame: DataFrame) -> DataFrame:
    """`frame` in one partition when Spark estimates it (planning alone, no job) within what one task is meant
    to take (spark.sql.adaptive.advisoryPartitionSizeInBytes): its aggregates and distinct then need no shuffle,
    so no map job and reduce job each (a change's rows read from a few files). Larger, or of an unknown size (a
    join's estimate is its sides' product): as it is."""
    return frame.coalesce(1) if fits_one_task(frame) else frame


def joined_in_one_task(frame: DataFrame) -> DataFrame:
    """`frame` in one partition, joined by a shuffled hash join (a hint): joined to a side in one partition
    too, the join needs neither an exchange nor a broadcast, and runs in that side's task. A broadcast is a Spark
    job of its own (of a change's keys, of its recomputed rows), which a change of a few rows pays in latency,
    not CPU."""
    return frame.coalesce(1).hint("shuffle_hash")


def single_partition_join_allowed(*sides: DataFrame) -> bool:
    """Whether Spark joins `sides` that are each in one partition in that partition: it shuffles them instead when
    its estimate of one is over spark.sql.maxSinglePartitionBytes, as an estimate of joins over joins (their sides'
    product) can be, even at its default (the largest long). Planning alone, no job."""
    limit = bytes_setting(sides[0].sparkSession, "spark.sql.maxSinglePartitionBytes", str(2**63 - 1) + "b")
    return all(estimated_bytes(side) <= limit for side in sides)


def fits_one_task(frame: DataFrame, rows: int | None = None) -> bool:
    """Whether `frame` is within what one task is meant to take (spark.sql.adaptive.advisoryPartitionSizeInBytes):
    `rows` rows of its columns' default sizes where the rows are counted, else Spark's estimate (planning
    alone, no job)."""
    advisory = bytes_setting(frame.sparkSession, "spark.sql.adaptive.advisoryPartitionSizeInBytes", "64MB")
    size = estimated_bytes(frame) if rows is None else rows * (8 + int(frame._jdf.schema().defaultSize()))
    return size <= advisory


def fits_a_broadcast(spark: SparkSession, frame: DataFrame, rows: int) -> bool:
    """Whether `rows` rows of `frame` (Spark's default size of each of its columns) fit the session's broadcast
    threshold (spark.sql.autoBroadcastJoinThreshold; -1: never broadcast)."""
    threshold = int(spark._jsparkSession.sessionState().conf().autoBroadcastJoinThreshold())
    row_bytes = 8 + int(frame._jdf.schema().defaultSize())
    return threshold >= 0 and rows * row_bytes <= threshold


def bloom_filter_may_apply(spark: SparkSession, target: DataFrame) -> bool:
    """Whether Spark may build a runtime Bloom filter for a join over `target`'s scan: its estimated size
    over the session's threshold (planning alone, no Spark job)."""
    if str(spark.conf.get("spark.sql.optimizer.runtime.bloomFilter.enabled", "true")).lower() != "true":
        return False
    threshold = bytes_setting(
        spark, "spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold", "10GB"
    )
    return estimated_bytes(target) > threshold


def estimated_bytes(frame: DataFrame) -> int:
    """Spark's estimate of the frame's size (its optimized plan's statistics: planning alone, no job)."""
    return int(str(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))


def bytes_setting(spark: SparkSession, key: str, default: str) -> int:
    """A size setting of the session (e.g. "64MB") in bytes."""
    return int(
        java_class(spark, "org.apache.spark.network.util.JavaUtils").byteStringAsBytes(
            spark.conf.get(key, default)
        )
    )

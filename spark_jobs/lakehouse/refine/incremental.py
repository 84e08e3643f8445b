"""The incremental step of a refresh (lakehouse.refine.refresh): the affected keys' rows recomputed and MERGEd.

Recomputing a key's row is running the model for that key alone. Where the model's key is, unchanged, a column of
one input read once (lakehouse.refine.lineage, `key_origin`), the model's rows of the keys are the model run over
that input's rows of the keys: the input is filtered by the keys (first by their range, which Iceberg prunes files
by, then by a semi-join: in the task that reads the rows where they and the keys are few, else a broadcast)
before any join, so a refresh reads the rows it recomputes, not the whole input. Any other model is run over its
whole inputs and its output semi-joined to the keys."""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.base.names import quote, sql_string
from lakehouse.io.iceberg import table_properties, with_commit_properties
from lakehouse.refine.changes import null_safe_join
from lakehouse.refine.lineage import KeyOrigin
from lakehouse.refine.planning import (
    bloom_filter_may_apply,
    fits_a_broadcast,
    fits_one_task,
    in_one_partition,
    joined_in_one_task,
    single_partition_join_allowed,
)

# The columns a MERGE reads of its target's rows besides the key: where each row is (Iceberg's metadata columns).
ROW_POSITION = ("_file", "_pos", "_spec_id", "_partition")
# Key types bounded by a range (a timestamp without time zone is not: its bound would come back zoned).
RANGED_TYPES = (T.NumericType, T.StringType, T.DateType, T.TimestampType)


@dataclass(frozen=True)
class KeysSummary:
    """How many keys, and each key column's (lowest, highest, any null) among them."""

    count: int
    bounds: dict[str, tuple[Any, Any, bool]]


def kept_keys(keys: DataFrame) -> tuple[DataFrame, KeysSummary]:
    """The keys computed once and kept (a local checkpoint), with their count and each column's bounds observed
    as they are kept: one Spark job for both, not a second one to aggregate the kept keys."""
    ranged = [f.name for f in keys.schema.fields if isinstance(f.dataType, RANGED_TYPES)]
    figures = [F.count(F.lit(1)).alias("__count")]
    for index, column in enumerate(ranged):
        value = F.col(quote(column))
        figures += [
            F.min(value).alias(f"__min_{index}"),
            F.max(value).alias(f"__max_{index}"),
            F.max(value.isNull()).alias(f"__null_{index}"),
        ]
    observation = Observation(f"refine_keys_{uuid.uuid4().hex}")
    kept = keys.observe(observation, *figures).localCheckpoint()
    row = observation.get
    bounds = {
        column: (row[f"__min_{i}"], row[f"__max_{i}"], bool(row[f"__null_{i}"]))
        for i, column in enumerate(ranged)
    }
    return kept, KeysSummary(int(row["__count"]), bounds)


def rows_of_input_keys(
    frame: DataFrame, keys: DataFrame, origin: KeyOrigin, summary: KeysSummary
) -> DataFrame:
    """The rows of the input `frame` whose key columns (origin.columns) hold one of `keys`: a range filter Iceberg
    prunes data files by, then a broadcast null-safe semi-join."""
    condition: Column = F.lit(True)
    for column, (lowest, highest, has_null) in summary.bounds.items():
        value = F.col(quote(origin.columns[column]))
        if lowest is None:  # only nulls
            within = value.isNull()
        else:
            within = value.between(F.lit(lowest), F.lit(highest))
            within = within | value.isNull() if has_null else within
        condition = condition & within
    renamed = keys.select(*[F.col(quote(k)).alias(c) for k, c in origin.columns.items()])
    # The rows in the keys' range, when Iceberg plans them as one split (a change of recent rows: a few small
    # files), are read as one partition: the model's joins and aggregates over them then run in that one task,
    # with no shuffle (two jobs fewer for an aggregate with a distinct count); more splits are left parallel.
    # Few keys are joined in that task too (no broadcast: a Spark job fewer), by an inner join, the same as the
    # semi-join for keys without duplicates (they are: kept_keys): Spark pushes a semi-join below the one
    # partition, an inner join it leaves above; the join's output is then said to be in one partition (an inner
    # join's is both sides' partitionings, which Spark does not take as one for the joins above it).
    in_range = frame.where(condition)
    columns = list(origin.columns.values())
    if in_range._jdf.queryExecution().toRdd().getNumPartitions() <= 1:
        in_range = in_range.coalesce(1)
        if fits_one_task(renamed, summary.count):
            joined = null_safe_join(in_range, joined_in_one_task(renamed), columns, "inner").coalesce(1)
            if in_one_partition(joined):
                return joined
    return null_safe_join(in_range, F.broadcast(renamed), columns, "left_semi")


def merge_by_key(
    spark: SparkSession,
    table: str,
    keys: DataFrame,
    rows: DataFrame,
    key: Sequence[str],
    properties: dict[str, str],
    summary: KeysSummary | None = None,
    java_table: Any = None,
) -> None:
    """MERGE `rows` for exactly the `keys` (null-safe: a null is one key value): a key without a row is
    deleted from the table. One commit, carrying `properties`, even when nothing changed (the consumed
    snapshots advance). The keys' bounds (`summary`) bound the target's rows too: Iceberg skips the data
    files outside them."""
    present = rows.withColumn("__present", F.lit(True))
    keyed = keys.select(*[F.col(quote(k)) for k in key])
    source = _joined_in_one_task(keyed, present, key, summary)
    if source is None:
        if summary is not None and fits_a_broadcast(spark, present, summary.count):
            # A unique key has at most one row per key: the rows are at most the keys' count, so a small set is
            # joined to its keys by a broadcast (no shuffle of either side: a Spark job fewer, often two).
            present = F.broadcast(present)
        source = null_safe_join(keyed, present, key, "left")
    source = source.withColumn("__present", F.coalesce(F.col("__present"), F.lit(False)))
    columns = [f.name for f in spark.table(table).schema.fields]
    ranges = [_within_sql(f"t.{quote(c)}", b) for c, b in (summary.bounds if summary else {}).items()]
    within = [r for r in ranges if r is not None]
    # A copy-on-write MERGE reads its source more than once (to find the target's files, then to write): there
    # the recomputed rows are computed once and kept; a merge-on-read MERGE (the refined tables' mode) reads it
    # once, in its join, so keeping them first is a Spark job for nothing (`java_table`: the target's metadata,
    # if the caller loaded it). A large target scan is matched through a runtime Bloom filter of the
    # keys (a change spread over every file of a large refined table then shuffles the rows of its keys, not
    # the whole table: a MERGE that inserts cannot broadcast its source). Spark builds one only for a source
    # of a known size under a filter: so there the rows are cached, which gives the optimizer their true size
    # (a checkpoint carries the estimate of the joins that made it, terabytes; caching costs a Spark job more),
    # and filtered by a condition true of every row.
    kept = source.select(*[F.col(quote(c)) for c in columns], "__present")
    target = spark.table(table).alias("t").where(" AND ".join(within or ["true"]))
    bloom = bloom_filter_may_apply(spark, target.select(*[F.col(quote(k)) for k in key], *ROW_POSITION))
    view = f"refine_source_{abs(hash((table, threading.get_ident())))}"
    on = " AND ".join([*[_key_equal_sql(k, summary) for k in key], *within])
    updates = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in columns if c not in key)
    statement = (
        f"MERGE INTO {table} t USING {view} s ON {on} "
        "WHEN MATCHED AND NOT s.__present THEN DELETE "
        + (f"WHEN MATCHED THEN UPDATE SET {updates} " if updates else "")
        + f"WHEN NOT MATCHED AND s.__present THEN INSERT ({', '.join(quote(c) for c in columns)}) "
        f"VALUES ({', '.join(f's.{quote(c)}' for c in columns)})"
    )
    if bloom:
        kept = kept.persist()
    elif table_properties(spark, table, java_table).get("write.merge.mode") != "merge-on-read":
        kept = kept.localCheckpoint()
    try:
        if bloom:
            kept.write.format("noop").mode("overwrite").save()
        (kept.where(F.col("__present").isin(True, False)) if bloom else kept).createOrReplaceTempView(view)
        with_commit_properties(spark, properties, lambda: spark.sql(statement))
    finally:
        spark.catalog.dropTempView(view)
        if bloom:
            kept.unpersist()


def _joined_in_one_task(
    keys: DataFrame, present: DataFrame, key: Sequence[str], summary: KeysSummary | None
) -> DataFrame | None:
    """The keys left-joined to their rows in one task, where the rows are recomputed in one (a change's few keys)
    and the keys are few: no broadcast, no shuffle (planning.joined_in_one_task). None where Spark would not plan
    it so: Spark shuffles two sides in one partition each when its estimate of either is over
    spark.sql.maxSinglePartitionBytes (planning.single_partition_join_allowed)."""
    if summary is None or not in_one_partition(present) or not fits_one_task(keys, summary.count):
        return None
    if not single_partition_join_allowed(keys, present):
        return None
    joined = null_safe_join(keys.coalesce(1), joined_in_one_task(present), key, "left")
    return joined if in_one_partition(joined) else None


def _key_equal_sql(column: str, summary: KeysSummary | None) -> str:
    """The MERGE's match of the target's and the source's `column`: null-safe, unless no key holds a null
    there (then `=` matches the same rows, and Spark filters the target by one key, not by it and its nullness)."""
    bounds = summary.bounds.get(column) if summary is not None else None
    equal = "=" if bounds is not None and bounds[0] is not None and not bounds[2] else "<=>"
    return f"t.{quote(column)} {equal} s.{quote(column)}"


def _within_sql(column: str, bounds: tuple[Any, Any, bool]) -> str | None:
    """`column` within the keys' bounds, as SQL; None when a bound has no plain literal (a timestamp, NaN)."""
    lowest, highest, has_null = bounds
    if lowest is None:
        return f"{column} IS NULL"
    low, high = _sql_literal(lowest), _sql_literal(highest)
    if low is None or high is None:
        return None
    within = f"{column} BETWEEN {low} AND {high}"
    return f"({within} OR {column} IS NULL)" if has_null else within


def _sql_literal(value: Any) -> str | None:
    if isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return f"{value!r}D"
    if isinstance(value, str):
        return sql_string(value)
    if isinstance(value, date) and not isinstance(value, datetime):
        return f"DATE '{value.isoformat()}'"
    return None

"""Bench-local optimisation experiments: each variant patches the library or the table for one
measurement and undoes it afterwards. Nothing here changes spark_jobs/; a variant that wins is
reported as an exact code change for the core.

A variant name is a `+`-joined list of the knobs below, e.g. `window-dedup+partitions-8`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from lakehouse.dms import changes as C
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


@contextmanager
def _patched(module: Any, name: str, replacement: Any) -> Iterator[None]:
    original = getattr(module, name)
    setattr(module, name, replacement)
    try:
        yield
    finally:
        setattr(module, name, original)


@contextmanager
def _spark_conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def _window_dedup() -> Any:
    """One row per key by `row_number()` over a window ordered by the change order (a code-generated
    sort), instead of `max(struct(order..., payload...))` (a sort aggregate comparing structs)."""
    from pyspark.sql import Window

    def last_change_per_key(changes: DataFrame, key: Any) -> DataFrame:
        order = [
            F.coalesce(F.col(C.SEQ), F.lit(0).cast(C.SEQ_TYPE)).desc(),
            F.col(C.FILE_ORDER).desc(),
            F.col(C.POSITION).desc(),
            F.when(F.col(C.OP) == "D", 0).otherwise(1).desc(),
        ]
        ranked = changes.withColumn("__rank", F.row_number().over(Window.partitionBy(*key).orderBy(*order)))
        return ranked.where(F.col("__rank") == 1).drop("__rank")

    return _patched(C, "last_change_per_key", last_change_per_key)


def _cache_cdc() -> Any:
    """Keep a CDC batch's first pass in Spark's columnar cache, as the full load does, instead of a local
    checkpoint (rejected: 15.9 vs 10.0 s at 10M rows, bench/RESULTS.md §7)."""
    from lakehouse.apply import typed_batch

    return _patched(typed_batch, "_checkpointed", typed_batch.cached)


def _checkpoint_load() -> Any:
    """The full load's first pass kept as a local checkpoint (rows as objects), as before the cache."""
    from lakehouse.apply import full_load, typed_batch

    return _patched(full_load, "cached", typed_batch._checkpointed)


def _merge_always() -> Any:
    """The plan before the append path: every batch of a keyed table is a MERGE, even when each of its
    keys is above the table's highest (cdc_apply._keys_all_new)."""
    from lakehouse.apply import cdc as cdc_apply

    return _patched(cdc_apply, "_keys_all_new", lambda *args, **kwargs: False)


def _shuffle_hash_hint() -> Any:
    """Hint the MERGE source `SHUFFLE_HASH`: the join builds a hash table of the batch and streams the
    target through it, instead of sorting both sides (a right outer join may build its right side)."""
    from lakehouse.apply import cdc as cdc_apply

    original = cdc_apply.merge_changes

    def merge_changes(spark: SparkSession, table: str, changes: DataFrame, *args: Any, **kwargs: Any) -> None:
        original(spark, table, changes.hint("shuffle_hash"), *args, **kwargs)

    return _patched(cdc_apply, "merge_changes", merge_changes)


TableSetup = Callable[[SparkSession, str], None]


def _table_properties(properties: dict[str, str]) -> TableSetup:
    def setup(spark: SparkSession, table: str) -> None:
        assignments = ", ".join(f"'{k}'='{v}'" for k, v in properties.items())
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({assignments})")

    return setup


def table_setups(variant: str) -> list[TableSetup]:
    """Table property changes of a variant (applied after the table is restored, outside the timing)."""
    setups: list[TableSetup] = []
    for knob in _knobs(variant):
        if knob == "cow":
            setups.append(
                _table_properties(
                    {
                        "write.merge.mode": "copy-on-write",
                        "write.update.mode": "copy-on-write",
                        "write.delete.mode": "copy-on-write",
                    }
                )
            )
        elif knob == "dist-none":
            setups.append(_table_properties({"write.merge.distribution-mode": "none"}))
        elif knob.startswith("target-file-mb-"):
            size = int(knob.removeprefix("target-file-mb-")) * 1024 * 1024
            setups.append(_table_properties({"write.target-file-size-bytes": str(size)}))
        elif knob.startswith("zstd-level-"):
            # the data files' level; the delete files' follows it unless set apart
            setups.append(
                _table_properties({"write.parquet.compression-level": knob.removeprefix("zstd-level-")})
            )
    return setups


def _knobs(variant: str) -> list[str]:
    return [k for k in variant.split("+") if k and k != "baseline"]


@contextmanager
def session_patches(spark: SparkSession, variant: str) -> Iterator[None]:
    """Library patches and Spark settings of a variant, for the duration of the block."""
    with ExitStack() as stack:
        for knob in _knobs(variant):
            if knob.startswith("partitions-"):
                value = knob.removeprefix("partitions-")
                stack.enter_context(_spark_conf(spark, "spark.sql.shuffle.partitions", value))
            elif knob.startswith("write-advisory-mb-"):
                # the size Iceberg asks adaptive execution to coalesce (and split skewed) write partitions to
                size = int(knob.removeprefix("write-advisory-mb-")) * 1024 * 1024
                stack.enter_context(
                    _spark_conf(spark, "spark.sql.iceberg.advisory-partition-size", str(size))
                )
            elif knob.startswith("broadcast-mb-"):
                size = int(knob.removeprefix("broadcast-mb-")) * 1024 * 1024
                stack.enter_context(_spark_conf(spark, "spark.sql.autoBroadcastJoinThreshold", str(size)))
            elif knob == "window-dedup":
                stack.enter_context(_window_dedup())
            elif knob == "shj-hint":
                stack.enter_context(_shuffle_hash_hint())
            elif knob == "no-bloom":
                key = "spark.sql.optimizer.runtime.bloomFilter.enabled"
                stack.enter_context(_spark_conf(spark, key, "false"))
            elif knob == "bloom-any-size":
                key = "spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold"
                stack.enter_context(_spark_conf(spark, key, "0"))
            elif knob == "cache-cdc":
                stack.enter_context(_cache_cdc())
            elif knob == "checkpoint-load":
                stack.enter_context(_checkpoint_load())
            elif knob == "merge-always":
                stack.enter_context(_merge_always())
            elif knob == "shj":
                stack.enter_context(_spark_conf(spark, "spark.sql.join.preferSortMergeJoin", "false"))
            elif knob == "no-aqe":
                stack.enter_context(_spark_conf(spark, "spark.sql.adaptive.enabled", "false"))
            elif knob in ("cow", "dist-none") or knob.startswith(("target-file-mb-", "zstd-level-")):
                continue  # table properties: see table_setups
            else:
                raise ValueError(f"unknown experiment knob {knob!r}")
        yield

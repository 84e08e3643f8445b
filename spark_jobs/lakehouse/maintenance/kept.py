"""Snapshots expiry must keep whatever their age: those someone still reads, and a pending load's rows."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import SparkSession

from lakehouse.apply.pending_load import pending_load
from lakehouse.audit.consistent import last_point
from lakehouse.base.config import LakeConfig
from lakehouse.base.names import sql_string
from lakehouse.refine.consumed import CONSUMED_PREFIX, consumed_snapshots


def kept_snapshots(spark: SparkSession, config: LakeConfig, refined: Sequence[str]) -> set[int]:
    """Snapshot ids (unique across tables) that never expire: those the refined tables' newest refine commits
    consumed and those commits themselves (a refine rebuilds in full without them), and the newest consistent
    point's (lakehouse.audit.consistent: a refine `--read_at consistent` and a reader's query read the tables
    at those snapshots, however old the slowest table keeps the point)."""
    return _consumed(spark, refined) | _consistent_point(spark, config)


def _consumed(spark: SparkSession, refined: Sequence[str]) -> set[int]:
    needed = {snapshot for table in refined for snapshot in (consumed_snapshots(spark, table) or {}).values()}
    for table in refined:
        newest = spark.sql(
            f"SELECT snapshot_id FROM {table}.snapshots "
            f"WHERE exists(map_keys(summary), k -> startswith(k, {sql_string(CONSUMED_PREFIX)})) "
            "ORDER BY committed_at DESC LIMIT 1"
        ).first()
        if newest is not None:
            needed.add(int(newest["snapshot_id"]))
    return needed


def _consistent_point(spark: SparkSession, config: LakeConfig) -> set[int]:
    point = last_point(spark, config)
    return set(point.snapshots.values()) if point is not None else set()


def pending_snapshots(spark: SparkSession, tables: Sequence[str]) -> set[int]:
    """The snapshots of the loads left pending among `tables` (lakehouse.apply.pending_load): the floor CDC
    reads from their rows, and the rows the next full load merges around, until that load comes."""
    found = (pending_load(spark, table) for table in tables)
    return {p.snapshot_id for p in found if p is not None and p.snapshot_id is not None}

"""The lake side of the reconcile: a clean table's canonical row hashes and segment sums, in Spark."""

from __future__ import annotations

import logging

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.base.names import COMMIT_TS_COLUMN, quote
from lakehouse.reconcile.plan import (
    SEPARATOR,
    Level,
    SideCounters,
    TablePlan,
    hash_sums,
    lake_field,
    lake_row_hash,
    lake_text,
    rows_within,
)

log = logging.getLogger(__name__)


class LakeSide:
    """The clean table's side, in Spark: the same canonical text and hashes, summed per segment."""

    def __init__(self, spark: SparkSession, cache: bool = True) -> None:
        self.spark = spark
        self.cache = cache
        self.counters = SideCounters()
        self._cached: dict[tuple[str, int], DataFrame] = {}

    def _key_texts(self, plan: TablePlan, frame: DataFrame) -> list[Column]:
        return [lake_text(frame[quote(k.name)], k.data_type) for k in plan.keys]

    def hashed(self, plan: TablePlan, lo: int, span: tuple[int, int] | None = None) -> DataFrame:
        """`x`, `k0…`, `h`, `c` of every row of the clean table (an integer key: of its rows with x in `span`,
        a filter on the key column itself, which Iceberg prunes data files and row groups by). `c`: the source
        commit time of the row's last applied change, microseconds since 1970 UTC (null: none known)."""
        frame = self.spark.table(plan.lake_table)
        if span is not None and plan.integer_key:
            frame = frame.where(F.col(quote(plan.keys[0].name)).between(lo + span[0], lo + span[1]))
        fields = [
            lake_field(lake_text(frame[quote(c.name)], c.data_type) if c.in_lake else F.lit(None))
            for c in plan.columns
        ]
        keys = self._key_texts(plan, frame)
        if plan.integer_key:
            x = frame[quote(plan.keys[0].name)].cast("bigint") - F.lit(lo)
        else:
            x = F.conv(F.substring(F.md5(F.concat_ws(SEPARATOR, *keys)), 1, 15), 16, 10).cast("bigint")
        commit = (
            F.unix_micros(frame[COMMIT_TS_COLUMN].cast("timestamp"))
            if COMMIT_TS_COLUMN in frame.columns
            else F.lit(None).cast("bigint")
        )
        return frame.select(
            x.alias("x"),
            *[k.alias(f"k{i}") for i, k in enumerate(keys)],
            lake_row_hash(fields).alias("h"),
            commit.alias("c"),
        )

    def _rows(
        self, plan: TablePlan, level: Level, parent_shift: int | None, fresh: bool, may_cache: bool
    ) -> DataFrame:
        """The hashed rows of a level's segments. The first level reads the table (a matching table is read
        once, nothing cached); the first bisect level keeps its rows (the differing segments' only) in
        Spark's cache, and every later level of the comparison, being inside them, reads the cache."""
        cached = None if fresh else self._cached.get((plan.lake_table, level.lo))
        if cached is not None:
            return rows_within(cached, level, parent_shift)
        span = None
        if level.within is not None:
            span = (min(a for a, _ in level.within), max(b for _, b in level.within))
        frame = rows_within(self.hashed(plan, level.lo, span), level, parent_shift)
        if self.cache and may_cache and not fresh and parent_shift is not None:
            frame = frame.cache()
            self._cached[(plan.lake_table, level.lo)] = frame
        return frame

    def release(self) -> None:
        for frame in self._cached.values():
            frame.unpersist()
        self._cached.clear()

    def bounds(self, plan: TablePlan) -> tuple[int, int] | None:
        key = plan.keys[0].name
        row = (
            self.spark.table(plan.lake_table)
            .agg(
                F.min(F.col(quote(key)).cast("bigint")).alias("lo"),
                F.max(F.col(quote(key)).cast("bigint")).alias("hi"),
            )
            .first()
        )
        return None if row is None or row["lo"] is None else (int(row["lo"]), int(row["hi"]))

    def estimated_rows(self, plan: TablePlan) -> int:
        """Rows of the current snapshot, from its summary (no scan); a count when the summary lacks it."""
        row = self.spark.sql(
            f"SELECT summary FROM {plan.lake_table}.snapshots ORDER BY committed_at DESC LIMIT 1"
        ).first()
        summary = dict(row["summary"]) if row else {}
        try:
            return max(0, int(summary["total-records"]) - int(summary.get("total-position-deletes", 0)))
        except (KeyError, ValueError):
            return self.spark.table(plan.lake_table).count()

    def segment_sums(
        self, plan: TablePlan, level: Level, parent_shift: int | None, fresh: bool = False
    ) -> dict[int, tuple[int, int]]:
        frame = self._rows(plan, level, parent_shift, fresh, may_cache=True)
        rows = frame.groupBy(F.shiftright("x", level.shift).alias("seg")).agg(*hash_sums()).collect()
        sums = {int(r["seg"]): (int(r["n"]), (int(r["hi"]) << 32) + int(r["lo"])) for r in rows}
        self.counters.rows_hashed += sum(n for n, _ in sums.values())
        return sums

    def row_hashes(
        self, plan: TablePlan, level: Level, parent_shift: int | None, fresh: bool = False
    ) -> dict[tuple[str, ...], int]:
        return {key: h for key, (h, _) in self.row_versions(plan, level, parent_shift, fresh).items()}

    def row_versions(
        self, plan: TablePlan, level: Level, parent_shift: int | None, fresh: bool = False
    ) -> dict[tuple[str, ...], tuple[int, int | None]]:
        """Key -> (row hash, the source commit time of its last applied change in microseconds, or None)."""
        frame = self._rows(plan, level, parent_shift, fresh, may_cache=False)
        columns = [f"k{i}" for i in range(len(plan.keys))]
        rows = frame.select(*columns, "h", "c").collect()
        found = {
            tuple(r[c] for c in columns): (int(r["h"]), None if r["c"] is None else int(r["c"])) for r in rows
        }
        self.counters.rows_fetched += len(found)
        self.counters.rows_hashed += len(found)
        return found

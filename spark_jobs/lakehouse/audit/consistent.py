"""One consistent moment across the clean tables (docs/CONTRACTS.md, "Freshness and consistent points").

A source transaction touching two tables lands in two DMS files (files are per table), which may be applied
by different batches, in any order. A reader joining the tables' current snapshots may then see half of it.
This module finds, after each CDC run, the newest source moment T at which every clean table has a
snapshot that is *exact*: it holds every change committed at or before T and none committed after. The
snapshot ids at T are a consistent point (table `<clean_db>_records.consistent_points`); the refine job reads
every clean table at one.

Facts it works from:

- Each data commit of a clean table carries, in its snapshot summary, `lake.source-commit-ts-max` (the
  newest source commit time the table holds after it: the running maximum) and `lake.source-commit-ts-min`
  (the oldest source commit time among the changes it applied). A compaction (`replace`) holds the same
  rows as its parent; a commit without these facts (written by an older release, or by hand) may hold any
  change: nothing before it is exact after it, and it is exact only if its newest time is known.
- Snapshot i of a table is exact at T iff newest_i <= T (none after T), no later commit of its lineage
  applied a change committed at or before T (oldest_j > T for every later data commit j), and the table
  has applied every change committed at or before T (T < complete_before).
- complete_before (per table): DMS writes each change into a file of its table named (by its time) at most
  `settle` after the change's commit, and that file is in the raw zone by then (the one assumption; the
  `--consistency_settle_seconds` argument, default 300, covers DMS's capture latency, CdcMaxBatchInterval
  and the clocks apart). Let L be when the raw zone was listed and U the name time of the table's oldest
  listed CDC file that is not applied (nor superseded by a reload, nor quarantined whole; None when all
  are). Then every change committed before min(U, L) - settle is applied: its file is named before
  min(U, L), so it was listed, and it is older than U, so it is applied. This holds for a table that had
  no change at all (it has no file: min(U, L) = L), and for a table whose later files were applied before
  an earlier one (U is the earliest one not applied).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.base.config import LakeConfig
from lakehouse.base.names import COMMIT_TS_COLUMN
from lakehouse.io.frames import one_row, rows_frame
from lakehouse.io.iceberg import (
    RUN_ID,
    create_table,
    fenced_writer,
    iceberg_table,
    key_upper_bound,
    table_exists,
)

log = logging.getLogger(__name__)

SOURCE_TS_MAX = "lake.source-commit-ts-max"  # summary: the newest source commit time the table holds
SOURCE_TS_MIN = "lake.source-commit-ts-min"  # summary: the oldest source commit time this commit applied
POINT_AT = "refine.consistent-point"  # summary of a refine commit: the moment it read its inputs at
MICROSECOND = timedelta(microseconds=1)
LINEAGE_LIMIT = 1000  # snapshots read back from the current one (older ones can't be the newest point)
POINTS_SCHEMA = T.StructType(
    [
        T.StructField("point_ts", T.TimestampType()),
        T.StructField("source_table", T.StringType()),
        T.StructField("clean_table", T.StringType()),
        T.StructField("snapshot_id", T.LongType()),
        T.StructField("recorded_at", T.TimestampType()),
        T.StructField("run_id", T.StringType()),
    ]
)


@dataclass(frozen=True)
class Commit:
    """What one snapshot of a clean table's lineage says about source time."""

    snapshot_id: int
    newest: datetime | None  # the newest source commit time the table holds after it (None: unknown)
    oldest: datetime | None  # the oldest source commit time it applied (None: it changed no row)
    run_id: str | None = None
    committed_at: datetime | None = None


@dataclass(frozen=True)
class Interval:
    """Snapshot `snapshot_id` is exact at every moment T with start <= T < end."""

    start: datetime
    end: datetime
    snapshot_id: int


@dataclass(frozen=True)
class Point:
    """A source moment every table has applied exactly, and each table's snapshot at it."""

    at: datetime
    snapshots: dict[str, int]  # clean table (its Iceberg name, e.g. `main_item`) -> snapshot id

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at.isoformat(), "snapshots": dict(sorted(self.snapshots.items()))}


def utc_naive(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment


def parse_moment(text: str | None) -> datetime | None:
    return utc_naive(datetime.fromisoformat(text)) if text else None


def commit_facts(
    snapshot_id: int,
    operation: str | None,
    summary: Mapping[str, str],
    parent: Commit | None,
    committed_at: datetime | None = None,
) -> Commit:
    """A snapshot's facts from its summary (and its parent's, for a commit that changed no row)."""
    run_id = summary.get(RUN_ID)
    if SOURCE_TS_MAX in summary:
        return Commit(
            snapshot_id,
            parse_moment(summary[SOURCE_TS_MAX]),
            parse_moment(summary.get(SOURCE_TS_MIN)),
            run_id,
            committed_at,
        )
    if operation == "replace":  # compaction: the same rows as its parent
        return Commit(snapshot_id, parent.newest if parent else None, None, run_id, committed_at)
    # Written without the facts: it may hold changes of any time.
    return Commit(snapshot_id, None, datetime.min, run_id, committed_at)


def exact_intervals(lineage: Sequence[Commit], complete_before: datetime) -> list[Interval]:
    """Where each snapshot of a lineage (oldest first) is exact (module doc); empty intervals left out."""
    intervals: list[Interval] = []
    later_oldest = complete_before  # min over later data commits' oldest, and the table's completeness
    for commit in reversed(lineage):
        if commit.newest is not None and commit.newest < later_oldest:
            intervals.append(Interval(commit.newest, later_oldest, commit.snapshot_id))
        if commit.oldest is not None:
            later_oldest = min(later_oldest, commit.oldest)
    return intervals[::-1]


def latest_common_moment(intervals: Mapping[str, Sequence[Interval]]) -> Point | None:
    """The newest moment in an interval of every table, with each table's snapshot there; None if there is
    none (or no table). The latest such moment is the end of an interval less a microsecond."""
    if not intervals or any(not found for found in intervals.values()):
        return None
    candidates = sorted(
        {i.end - MICROSECOND for found in intervals.values() for i in found}
        | {i.start for found in intervals.values() for i in found},
        reverse=True,
    )
    highest = min(max(i.end for i in found) for found in intervals.values()) - MICROSECOND
    lowest = max(min(i.start for i in found) for found in intervals.values())
    by_table = {table: sorted(found, key=lambda i: i.start) for table, found in intervals.items()}
    starts = {table: [i.start for i in found] for table, found in by_table.items()}
    for moment in (c for c in candidates if lowest <= c <= highest):
        chosen: dict[str, int] = {}
        for table, found in by_table.items():
            at = bisect.bisect_right(starts[table], moment) - 1
            # Two snapshots exact at one moment hold the same changes: either will do; the newest is taken.
            hit = found[at] if at >= 0 and moment < found[at].end else None
            if (
                hit is None
            ):  # intervals overlap only where rows are the same (a compaction): look further back
                hit = next((i for i in reversed(found[:at]) if i.start <= moment < i.end), None)
            if hit is None:
                break
            chosen[table] = hit.snapshot_id
        else:
            return Point(moment, chosen)
    return None


def complete_before(unapplied: Sequence[datetime], listed_at: datetime, settle: timedelta) -> datetime:
    """Every change of a table committed before the returned moment is applied (module doc): `unapplied`
    are the name times of its listed CDC files not applied, `listed_at` when the listing began."""
    return min([*unapplied, listed_at]) - settle


# ------------------------------------------------------------------------------------------------ I/O


def table_lineage(
    spark: SparkSession, table: str, since: datetime | None = None, limit: int = LINEAGE_LIMIT
) -> list[Commit]:
    """The facts of the table's current lineage, oldest first: back to its first snapshot whose newest
    source time is at or before `since` (the last recorded point: no older snapshot can be exact at a newer
    moment than one it holds the same changes as), at most `limit` snapshots. A current snapshot written
    without the facts gets its newest time from its data files' bounds of `dms_commit_ts` (an upper bound,
    deleted rows included: changes the table applied). Reads three summary entries per snapshot (py4j)."""
    java_table = iceberg_table(spark, table)
    chain: list[tuple[int, str | None, dict[str, str], datetime]] = []
    snapshot = java_table.currentSnapshot()
    while snapshot is not None and len(chain) < limit:
        summary = snapshot.summary()
        facts = {
            k: str(v) for k in (SOURCE_TS_MAX, SOURCE_TS_MIN, RUN_ID) if (v := summary.get(k)) is not None
        }
        operation = snapshot.operation()
        committed = datetime(1970, 1, 1) + timedelta(milliseconds=int(snapshot.timestampMillis()))
        chain.append((int(snapshot.snapshotId()), str(operation) if operation else None, facts, committed))
        newest = parse_moment(facts.get(SOURCE_TS_MAX))
        if since is not None and newest is not None and newest <= since:
            break
        parent = snapshot.parentId()
        snapshot = java_table.snapshot(parent) if parent is not None else None
    commits: list[Commit] = []
    parent_commit: Commit | None = None
    for snapshot_id, operation, facts, committed in reversed(chain):
        parent_commit = commit_facts(snapshot_id, operation, facts, parent_commit, committed)
        commits.append(parent_commit)
    if commits and commits[-1].newest is None:
        newest = newest_by_metrics(spark, table)
        if newest is not None:
            last = commits[-1]
            commits[-1] = Commit(last.snapshot_id, newest, last.oldest, last.run_id, last.committed_at)
    return commits


def newest_by_metrics(spark: SparkSession, table: str) -> datetime | None:
    """The newest `dms_commit_ts` the table's data files may hold, by their bounds (datetime.min: no data
    file; None: unknown)."""

    if COMMIT_TS_COLUMN not in spark.table(table).columns:
        return None
    known, bound = key_upper_bound(spark, table, COMMIT_TS_COLUMN)
    if not known:
        return None
    return utc_naive(bound) if bound is not None else datetime.min


def points_table(config: LakeConfig) -> str:
    return config.consistent_points


def last_point(spark: SparkSession, config: LakeConfig) -> Point | None:
    """The newest consistent point recorded."""
    table = points_table(config)
    if not table_exists(spark, table):
        return None
    newest = one_row(spark.table(table).agg(F.max("point_ts")))[0]
    if newest is None:
        return None
    rows = spark.table(table).where(F.col("point_ts") == F.lit(newest)).collect()
    return Point(utc_naive(newest), {r["clean_table"]: int(r["snapshot_id"]) for r in rows})


def record_point(
    spark: SparkSession,
    config: LakeConfig,
    point: Point,
    source_tables: Mapping[str, str],
    run_id: str,
    recorded_at: datetime,
) -> bool:
    """Append the point (one row per table, one commit) if it is newer than the last recorded one.
    `source_tables`: clean table name -> `schema.table`."""
    previous = last_point(spark, config)
    if previous is not None and point.at <= previous.at:
        return False
    table = points_table(config)
    if not table_exists(spark, table):
        create_table(
            spark, table, POINTS_SCHEMA, "consistent points: each clean table's snapshot at a moment"
        )
    rows = [
        {
            "point_ts": point.at,
            "source_table": source_tables.get(clean),
            "clean_table": clean,
            "snapshot_id": snapshot,
            "recorded_at": recorded_at,
            "run_id": run_id,
        }
        for clean, snapshot in sorted(point.snapshots.items())
    ]
    frame = rows_frame(spark, rows, POINTS_SCHEMA)
    fenced_writer(frame.writeTo(table), {RUN_ID: run_id}).append()
    return True

"""Freshness per table, and the consistent point, measured after each CDC run (docs/CONTRACTS.md,
"Freshness and consistent points").

- Every data commit of a clean table carries the newest source commit time the table holds
  (`lake.source-commit-ts-max`, a running maximum) and the oldest one it applied (`...-min`), next to the
  batch id every commit of the batch shares (`dms.run-id`): `commit_properties` makes them.
- After the run, `measure` reads each clean table's lineage and the raw zone's listing, and writes in one
  commit the table `<clean_db>_records.lake_freshness` (one row per table: its newest source commit time and
  lag, the moment up to which it has applied every change, its last batch and commit), and, when the
  tables have a newer consistent moment, its snapshots to `<clean_db>_records.consistent_points`
  (lakehouse.audit.consistent). The run report carries both.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field, replace
from dataclasses import fields as dataclass_fields
from datetime import UTC, datetime, timedelta
from typing import Any

from lake_contracts.dms_files import NotADmsFileError, parse_dms_key
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.audit.consistent import (
    POINT_AT,
    SOURCE_TS_MAX,
    SOURCE_TS_MIN,
    Commit,
    Point,
    complete_before,
    exact_intervals,
    last_point,
    latest_common_moment,
    newest_by_metrics,
    parse_moment,
    record_point,
    table_lineage,
    utc_naive,
)
from lakehouse.audit.raw_listing import unapplied_by_table
from lakehouse.base.config import LakeConfig
from lakehouse.base.schema import SchemaFile
from lakehouse.io.fence import LeaseLostError
from lakehouse.io.frames import rows_frame
from lakehouse.io.iceberg import (
    RUN_ID,
    create_table,
    fenced_writer,
    load_table,
    snapshot_properties,
    table_exists,
)

log = logging.getLogger(__name__)

DEFAULT_SETTLE_SECONDS = 300
FRESHNESS_SCHEMA = T.StructType(
    [
        T.StructField("source_table", T.StringType()),
        T.StructField("clean_table", T.StringType()),
        T.StructField("newest_source_commit_ts", T.TimestampType()),
        T.StructField("lag_seconds", T.DoubleType()),
        T.StructField("applied_through_ts", T.TimestampType()),
        T.StructField("last_batch_id", T.StringType()),
        T.StructField("last_commit_at", T.TimestampType()),
        T.StructField("snapshot_id", T.LongType()),
        T.StructField("measured_at", T.TimestampType()),
        T.StructField("run_id", T.StringType()),
    ]
)


# ------------------------------------------------------------------------------------ commit properties


def running_newest(previous: datetime | None, batch_newest: datetime | None) -> datetime | None:
    """The newest source commit time a table holds after a commit: a late, older batch never lowers it."""
    return max([t for t in (previous, batch_newest) if t is not None], default=None)


def source_time_summary(
    previous: datetime | None, batch_oldest: datetime | None, batch_newest: datetime | None
) -> dict[str, str]:
    """The snapshot summary properties of a commit that applied changes committed from `batch_oldest` to
    `batch_newest` (None, None: it applied none) to a table whose newest was `previous`."""
    newest = running_newest(previous, batch_newest)
    summary = {SOURCE_TS_MAX: newest.isoformat()} if newest is not None else {}
    if batch_oldest is not None:
        summary[SOURCE_TS_MIN] = utc_naive(batch_oldest).isoformat()
    return summary


def previous_newest(spark: SparkSession, table: str, java_table: Any = None) -> datetime | None:
    """The newest source commit time the table holds now (its newest commit that says so); `java_table`:
    the table as the caller loaded it (lakehouse.io.iceberg.load_table)."""
    java_table = load_table(spark, table) if java_table is None else java_table
    if java_table is None:
        return None
    for summary in snapshot_properties(spark, table, java_table):
        if SOURCE_TS_MAX in summary:
            return parse_moment(summary[SOURCE_TS_MAX])
    newest = newest_by_metrics(spark, table)  # written before the facts: its data files' bounds
    return None if newest == datetime.min else newest


def commit_properties(
    spark: SparkSession,
    table: str,
    batch_oldest: datetime | None,
    batch_newest: datetime | None,
    java_table: Any = None,
) -> dict[str, str]:
    """What a data commit of `table` adds to its snapshot summary (the apply's hook: one line)."""
    return source_time_summary(previous_newest(spark, table, java_table), batch_oldest, batch_newest)


# ------------------------------------------------------------------------------------ freshness rows


@dataclass
class TableFreshness:
    source_table: str
    clean_table: str
    newest_source_commit_ts: datetime | None
    lag_seconds: float | None
    applied_through_ts: datetime | None  # every change committed at or before it is applied
    last_batch_id: str | None
    last_commit_at: datetime | None
    snapshot_id: int | None

    def row(self) -> dict[str, Any]:
        return asdict(self)

    def at(self, now: datetime) -> TableFreshness:
        """The same facts measured at `now` (a table no commit changed since: only its lag grew)."""
        newest = self.newest_source_commit_ts
        lag = round(max((now - newest).total_seconds(), 0.0), 3) if newest is not None else None
        return replace(self, lag_seconds=lag)

    def to_dict(self) -> dict[str, Any]:
        return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in self.row().items()}


def table_freshness(
    source_table: str,
    clean_table: str,
    lineage: Sequence[Commit],
    applied_before: datetime | None,
    now: datetime,
) -> TableFreshness:
    """A table's freshness from its lineage (oldest first) and its completeness (consistent.complete_before)."""
    current = lineage[-1] if lineage else None
    newest = current.newest if current is not None else None
    if newest == datetime.min:
        newest = None  # a table without rows holds no source time
    last_batch = next((c for c in reversed(lineage) if c.run_id), None)
    applied_through = None
    if applied_before is not None:
        applied_through = applied_before - timedelta(microseconds=1)
        if current is None or current.newest is None:
            applied_through = None  # a table whose commits say nothing: unknown
    return TableFreshness(
        source_table,
        clean_table,
        newest,
        round(max((now - newest).total_seconds(), 0.0), 3) if newest is not None else None,
        applied_through,
        last_batch.run_id if last_batch else None,
        last_batch.committed_at if last_batch else None,
        current.snapshot_id if current else None,
    )


# ------------------------------------------------------------------------------------ after a CDC run


@dataclass
class Measurement:
    measured_at: str
    settle_seconds: float
    raw_path: str | None
    tables: list[dict[str, Any]] = field(default_factory=list)
    consistent_point: dict[str, Any] | None = None
    point_recorded: bool = False
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def raw_path_of(uris: Sequence[tuple[str, str, str]]) -> str | None:
    """The raw zone's root from CDC file URIs with their source schema and table ((uri, schema, table))."""
    for uri, schema, table in uris:
        marker = f"/{schema}/{table}/"
        at = uri.rfind(marker)
        if at > 0:
            return uri[:at]
    return None


def measure(
    spark: SparkSession,
    config: LakeConfig,
    schema: SchemaFile,
    raw_path: str | None,
    run_id: str,
    settle_seconds: float = DEFAULT_SETTLE_SECONDS,
    now: datetime | None = None,
    touched: Collection[str] | None = None,
) -> Measurement:
    """Freshness of every clean table of the schema file and the newest consistent point; writes
    `lake_freshness` (one commit) and a newer point to `consistent_points` (one commit). Without a raw
    path nothing is known of what is not applied yet: no completeness, no point; then, given the tables
    the run `touched` (`schema.table`), only those are read again: another table holds what it held at its
    last measurement, whose row is kept with its lag counted to now (no metadata load of its own)."""
    listed_at = utc_naive(now) if now is not None else datetime.now(UTC).replace(tzinfo=None)
    result = Measurement(listed_at.isoformat(), settle_seconds, raw_path)
    settle = timedelta(seconds=settle_seconds)
    previous = last_point(spark, config)
    since = previous.at if previous else None
    recent = since - settle if since else None
    waiting = unapplied_by_table(spark, config, schema, raw_path, listed_at, recent) if raw_path else None
    rows: list[TableFreshness] = []
    intervals = {}
    sources: dict[str, str] = {}
    every_table = True
    kept = previous_rows(spark, config) if waiting is None and touched is not None else {}
    for spec in sorted(schema.tables.values(), key=lambda s: s.qualified_name):
        table = config.clean_table(spec.iceberg_name)
        if spec.qualified_name in kept and spec.qualified_name not in (touched or ()):
            rows.append(kept[spec.qualified_name].at(listed_at))
            continue
        if not table_exists(spark, table):
            every_table = False
            continue
        lineage = table_lineage(spark, table, since)
        before = None
        if waiting is not None:
            before = complete_before(waiting.get(spec.qualified_name.lower(), []), listed_at, settle)
            intervals[spec.iceberg_name] = exact_intervals(lineage, before)
        sources[spec.iceberg_name] = spec.qualified_name
        rows.append(table_freshness(spec.qualified_name, spec.iceberg_name, lineage, before, listed_at))
    result.tables = [r.to_dict() for r in rows]
    if rows:
        write_freshness(spark, config, rows, listed_at, run_id)
    point: Point | None = latest_common_moment(intervals) if every_table and waiting is not None else None
    if point is not None:
        result.consistent_point = point.to_dict()
        result.point_recorded = record_point(spark, config, point, sources, run_id, listed_at)
    return result


def previous_rows(spark: SparkSession, config: LakeConfig) -> dict[str, TableFreshness]:
    """The freshness table's rows (by source table) as the last measurement wrote them (one small read)."""
    table = freshness_table(config)
    if not table_exists(spark, table):
        return {}
    fields = [f.name for f in dataclass_fields(TableFreshness)]
    return {
        row["source_table"]: TableFreshness(*(row[f] for f in fields)) for row in spark.table(table).collect()
    }


def freshness_table(config: LakeConfig) -> str:
    return config.freshness


def write_freshness(
    spark: SparkSession,
    config: LakeConfig,
    rows: Sequence[TableFreshness],
    measured_at: datetime,
    run_id: str,
) -> None:
    """Replace the freshness table's rows in one commit (its history: the table's snapshots)."""
    table = freshness_table(config)
    if not table_exists(spark, table):
        create_table(spark, table, FRESHNESS_SCHEMA, "freshness of each clean table, after each CDC run")
    frame = rows_frame(
        spark,
        [r.row() | {"measured_at": measured_at, "run_id": run_id} for r in rows],
        FRESHNESS_SCHEMA,
    )
    fenced_writer(frame.writeTo(table), {RUN_ID: run_id}).overwrite(F.lit(True))


def after_cdc_run(
    spark: SparkSession,
    config: LakeConfig,
    schema: SchemaFile,
    file_uris: Sequence[str],
    run_id: str,
    raw_path: str | None = None,
    settle_seconds: float = DEFAULT_SETTLE_SECONDS,
    consistent_points: bool = True,
    touched: Collection[str] | None = None,
) -> dict[str, Any]:
    """`measure` after a CDC run (the job's hook), the raw zone's root taken from the batch's files unless
    given. It never fails the run, whose commits stand: a failure is reported in `error` (the next run
    measures again); only a lost lease is raised (lakehouse.io.fence: nothing more is written). Without
    `consistent_points` the raw zone is not listed: each table's freshness only, no applied-through time
    and no point (the listing covers each table's recent days only: lakehouse.audit.raw_listing)."""
    if not consistent_points:
        file_uris, raw_path = (), None

    if raw_path is None and consistent_points:
        located = []
        for uri in file_uris:
            try:
                file = parse_dms_key(uri, 0, lambda owner, name: schema.find(owner, name) is not None)
            except NotADmsFileError:
                continue
            located.append((uri, file.source_schema, file.table))
        raw_path = raw_path_of(located)
    try:
        return measure(spark, config, schema, raw_path, run_id, settle_seconds, touched=touched).to_dict()
    except LeaseLostError:
        raise
    except Exception as error:
        log.exception("measuring freshness and the consistent point failed")
        failed = Measurement(datetime.now(UTC).replace(tzinfo=None).isoformat(), settle_seconds, raw_path)
        failed.error = f"{type(error).__name__}: {error}"[:2000]
        return failed.to_dict()


def describe(spark: SparkSession, config: LakeConfig, refined_table: str | None = None) -> list[str]:
    """Lines for people (the demo): each clean table's freshness, the newest consistent point, and the
    point `refined_table` (a refined table) was built from, if it was built at one."""
    lines = []
    table = freshness_table(config)
    if table_exists(spark, table):
        for row in spark.table(table).orderBy("source_table").collect():
            newest = row["newest_source_commit_ts"]
            through = row["applied_through_ts"]
            lines.append(
                f"{row['source_table']}: newest source change {newest or 'none'}"
                + (f" (lag {row['lag_seconds']:.0f} s at {row['measured_at']})" if newest else "")
                + (f", every change applied up to {through}" if through else "")
                + f", last batch {row['last_batch_id']}"
            )
    else:
        lines.append("no freshness measured yet (lake_freshness: the CDC job writes it after each run)")
    point = last_point(spark, config)
    lines.append(
        f"consistent point: {point.at} (every clean table holds exactly the source's changes up to it: "
        + ", ".join(f"{name}@{snapshot}" for name, snapshot in sorted(point.snapshots.items()))
        + ")"
        if point
        else "consistent point: none recorded yet"
    )
    if refined_table is not None and table_exists(spark, refined_table):
        built = next((p[POINT_AT] for p in snapshot_properties(spark, refined_table) if POINT_AT in p), None)
        lines.append(
            f"refined zone built from the consistent point {built}"
            if built
            else "refined zone built from the clean tables' current snapshots (refine --read_at current)"
        )
    return lines

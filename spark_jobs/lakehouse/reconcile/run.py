"""Source ↔ lake reconciliation: is every clean table still equal to its source table?

How a table is compared (docs/CONTRACTS.md, "Reconcile"):

- Both sides reduce each row to the same canonical text (per column, by the clean table's type: integers
  and decimals as plain digits at the column's scale, floats as the bits of the double, booleans 1/0, dates
  as days and timestamps as microseconds since 1970-01-01 (UTC), binaries as lower-case hex, everything else as the source's
  text; a NULL is `~`, any value `=`+text, so NULL and '' differ) and hash it: the first 64 bits of its MD5,
  as a signed integer. The source computes this in SQL (PostgreSQL), the lake in Spark SQL.
- The key space is cut into segments of 2^shift keys: a single integer key by its value (`k - lo`), any
  other key by the first 60 bits of its own MD5. Each side sums (count, hash) per segment, inside the
  database: a matching table moves only those sums (kilobytes), never its rows.
- A segment whose sums differ is cut into `bisect_factor` smaller ones and compared again (only those key
  ranges are read again); once a differing segment holds at most `leaf_rows` rows, its keys and row
  hashes are fetched from both sides and compared: missing (in the source, not in the lake), extra (in
  the lake only), differing (both, other values).
- Changes in flight are not divergence: a difference is reported only if, after the lake has applied every
  CDC file DMS wrote before the check began (the raw zone's files of the table against what the table
  applied), the same key still differs and its source row did not change meanwhile. Otherwise it is
  counted `in_flight`.

The source is read through Spark's JDBC source (on Glue through a Glue connection), each level's key
ranges split over `parallelism` concurrent queries; SQLite, a test-only source, is read by Python's
sqlite3 and hashed in Spark (its rows cross, bounded by the key ranges asked for).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.apply.clean_table import (
    aligned,
    highest_sequence_unless_time_shaped,
    load_floor,
    sequence_at,
    target_schema,
)
from lakehouse.apply.history import record_emptying
from lakehouse.apply.pending_load import clear_pending_mark
from lakehouse.apply.recorded_source import guard_recorded_source
from lakehouse.apply.run import ApplyOptions
from lakehouse.base.config import LakeConfig
from lakehouse.base.names import CHANGE_SEQ_COLUMN, COMMIT_TS_COLUMN, quote
from lakehouse.base.schema import SchemaFile, TableSpec
from lakehouse.dms.changes import SEQ_TYPE
from lakehouse.io.fence import check_before_commit
from lakehouse.io.frames import one_row
from lakehouse.io.iceberg import (
    FULL_LOAD_DONE,
    LOAD_FLOOR,
    REPLACED_SNAPSHOT,
    RUN_ID,
    current_snapshot_id,
    replace_table,
    table_exists,
)
from lakehouse.reconcile.bisect import CaughtUp, Sightings, compare_table, recheck
from lakehouse.reconcile.lake import LakeSide
from lakehouse.reconcile.plan import (
    DEFAULT_OPTIONS,
    HASH_BITS,
    INTEGER_TYPES,
    Level,
    ReconcileOptions,
    SourceSide,
    TablePlan,
    plan_table,
)
from lakehouse.reconcile.repair_checks import (
    RepairRefused,
    pending_reloads,
    refusal_to_empty,
    refusal_to_reload,
)
from lakehouse.reconcile.report import KINDS, ReconcileReport, TableResult, canonical_json, write_divergence

log = logging.getLogger(__name__)


def _key_json(plan: TablePlan, key: tuple[str, ...]) -> str:
    values = {
        k.name: int(text) if isinstance(k.data_type, INTEGER_TYPES) else text
        for k, text in zip(plan.keys, key, strict=True)
    }
    return canonical_json(values)


def _order(plan: TablePlan, key: tuple[str, ...]) -> tuple:
    return tuple(
        (0, int(text), "") if isinstance(k.data_type, INTEGER_TYPES) else (1, 0, text)
        for k, text in zip(plan.keys, key, strict=True)
    )


def rotation(tables: Sequence[str], start_after: str | None) -> list[str]:
    """The tables in schema-file order, starting after the one the last run checked last."""
    if start_after in tables:
        index = tables.index(start_after) + 1
        return [*tables[index:], *tables[:index]]
    return list(tables)


def reconcile(
    spark: SparkSession,
    config: LakeConfig,
    schema: SchemaFile,
    source: SourceSide,
    options: ReconcileOptions = DEFAULT_OPTIONS,
    run_id: str = "reconcile",
    tables: Sequence[str] = (),
    caught_up: CaughtUp | None = None,
    start_after: str | None = None,
    reload_tables: Callable[[list[TableSpec]], None] | None = None,
    earlier: Mapping[str, Sightings] | None = None,
    reloads_requested: Mapping[str, datetime] | None = None,
) -> ReconcileReport:
    """Compare each table (with a primary key, loaded in the lake) with its source; record what diverged.
    `earlier`: the sightings an earlier run carried over (`report.sightings`), per table; `reloads_requested`:
    the reloads earlier runs asked of DMS (`report.reload_requests`), not asked again while pending."""
    zone = spark.conf.get("spark.sql.session.timeZone")
    if (
        zone != "UTC"
    ):  # a timestamp_ntz's canonical text reads its wall clock as UTC (lakehouse.io.session sets it)
        raise ValueError(f"reconcile needs spark.sql.session.timeZone UTC, not {zone!r}")
    started = time.monotonic()
    t0 = datetime.now(UTC).replace(tzinfo=None)
    report = ReconcileReport(run_id, started_at=t0.isoformat(sep=" "))
    carried = dict(earlier or {})
    chosen = [schema.tables[name] for name in tables] if tables else list(schema.tables.values())
    names = [spec.qualified_name for spec in chosen]
    order = rotation(names, start_after)
    by_name = {spec.qualified_name: spec for spec in chosen}
    plans: dict[str, TablePlan] = {}
    lake = LakeSide(spark, cache=options.cache_lake)
    budget = options.max_source_rows
    spent = 0
    for position, name in enumerate(order):
        spec = by_name[name]
        if not spec.has_primary_key or not table_exists(spark, config.clean_table(spec.iceberg_name)):
            continue
        plan = plans[name] = plan_table(spark, config, spec, options.compare_mysql_float)
        if budget is not None and report.tables:
            estimate = lake.estimated_rows(plan)
            if spent + estimate > budget:
                report.not_checked = order[position:]
                break
        result, carried[name] = _reconcile_table(
            plan, source, lake, options, caught_up, carried.get(name, {})
        )
        report.tables.append(result)
        spent += result.source_rows_hashed
        report.next_table = name
    pending = pending_reloads(
        spark,
        {name: plan.lake_table for name, plan in plans.items()},
        reloads_requested or {},
        t0,
        timedelta(seconds=options.reload_patience_seconds),
    )
    report.reload_requests = dict(pending)
    if report.diverged and options.repair_mode == "reload" and reload_tables is not None:
        try:
            _repair(spark, config, report, plans, source, options, reload_tables, t0)
        except Exception as error:  # the divergence stands recorded; the run fails, alarming
            log.exception("repairing %s failed", [t.table for t in report.diverged if not t.repaired])
            report.error = f"repair: {type(error).__name__}: {error}"[:2000]
    report.divergence_rows_added = write_divergence(spark, config, report, t0)
    repaired = {t.table for t in report.tables if t.repaired}  # reloaded: what it differed in is seen anew
    report.sightings = {name: found for name, found in carried.items() if found and name not in repaired}
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _repair(
    spark: SparkSession,
    config: LakeConfig,
    report: ReconcileReport,
    plans: Mapping[str, TablePlan],
    source: SourceSide,
    options: ReconcileOptions,
    reload_tables: Callable[[list[TableSpec]], None],
    t0: datetime,
) -> None:
    """RepairMode=reload: each diverged table is reloaded by DMS, or emptied here when its source is empty
    (DMS's reload of an empty table writes no LOAD file), once the source's own statistics agree with what
    the reader saw (`repair_checks`); a reload still pending is not asked again. Raises RepairRefused naming
    the checks that refused a repair, after the repairs that passed."""
    refused: list[str] = []
    reloaded: list[TableResult] = []
    emptied: list[TableResult] = []
    for result in report.diverged:
        plan = plans[result.table]
        if result.table in report.reload_requests:
            result.reload_pending = True
            log.warning("%s: diverged; its reload asked of DMS is still pending", result.table)
            continue
        rows_now = count_source_rows(plan, source) if result.source_empty else result.source_rows
        if result.source_empty and rows_now == 0:
            reason = refusal_to_empty(result.table, source.statistics(plan))
            if reason is None and not options.empty_clean_tables:
                log.warning(
                    "%s: the source is empty; a run without the pipeline lease never writes a clean table, so"
                    " the loop's next reconcile (RepairMode=reload) empties it",
                    result.table,
                )
                continue
            chosen = emptied
        else:
            reason = refusal_to_reload(result.table, rows_now, source.statistics(plan))
            chosen = reloaded
        if reason is not None:
            result.repair_refused = reason
            refused.append(reason)
        else:
            chosen.append(result)
    if reloaded:
        reload_tables([plans[t.table].spec for t in reloaded])
        for result in reloaded:
            result.repaired = True
            report.reload_requests[result.table] = t0
        report.repairs += len(reloaded)
    for result in emptied:
        empty_clean_table(spark, config, plans[result.table].spec, t0, report.run_id)
        result.emptied = result.repaired = True
        report.repairs += 1
    if refused:
        raise RepairRefused("; ".join(refused))


def _reconcile_table(
    plan: TablePlan,
    source: SourceSide,
    lake: LakeSide,
    options: ReconcileOptions,
    caught_up: CaughtUp | None,
    earlier: Sightings,
) -> tuple[TableResult, Sightings]:
    started = time.monotonic()
    carried: Sightings = dict(earlier)  # a failed comparison keeps what earlier runs saw
    result = TableResult(plan.spec.qualified_name, "range" if plan.integer_key else "hash")
    before_source = asdict(source.counters)
    before_lake = asdict(lake.counters)
    try:
        comparison = compare_table(plan, source, lake, options)
        confirmed, in_flight, what, carried = recheck(
            plan, comparison, source, lake, caught_up, earlier, options
        )
        result.segments, result.levels, result.in_flight, result.recheck = (
            comparison.segments,
            comparison.levels,
            in_flight,
            what,
        )
        result.source_rows = comparison.source_rows
        result.source_empty = comparison.source_rows == 0
        result.not_compared = list(plan.not_compared)
        for kind in KINDS:
            keys = sorted((k for k, d in confirmed.items() if d[0] == kind), key=lambda k: _order(plan, k))
            setattr(result, kind, len(keys))
            if keys:
                result.samples[kind] = [json.loads(_key_json(plan, k)) for k in keys[: options.sample_keys]]
    except Exception as error:  # one table's failure does not stop the others
        log.exception("%s: reconcile failed", plan.spec.qualified_name)
        result.error = f"{type(error).__name__}: {error}"[:2000]
    finally:
        lake.release()
    after_source = asdict(source.counters)
    result.source_rows_hashed = after_source["rows_hashed"] - before_source["rows_hashed"]
    result.source_rows_fetched = after_source["rows_fetched"] - before_source["rows_fetched"]
    result.source_bytes = after_source["bytes_moved"] - before_source["bytes_moved"]
    result.source_queries = after_source["queries"] - before_source["queries"]
    result.lake_rows_hashed = lake.counters.rows_hashed - before_lake["rows_hashed"]
    result.seconds = round(time.monotonic() - started, 3)
    if result.diverged:
        log.warning(
            "%s DIVERGED: %d missing, %d extra, %d differing",
            result.table,
            result.missing,
            result.extra,
            result.differing,
        )
    return result, carried


def epoch_micros(moment: datetime) -> int:
    """A naive UTC moment as microseconds since 1970 (the lake's commit times, `F.unix_micros`)."""
    return (moment - datetime(1970, 1, 1)) // timedelta(microseconds=1)


def count_source_rows(plan: TablePlan, source: SourceSide) -> int:
    """Asked again right before the repair: the source table's rows as the reader sees them (one segment sum
    over the whole key space: an empty table returns no sums)."""
    return sum(n for n, _ in source.segment_sums(plan, Level(HASH_BITS, 0, None)).values())


def empty_clean_table(
    spark: SparkSession,
    config: LakeConfig,
    spec: TableSpec,
    t0: datetime,
    run_id: str,
    margin_seconds: int | None = None,
) -> None:
    """Repair a table whose source is empty (a TRUNCATE, which DMS does not replicate): what a reload with no
    LOAD rows makes of it (lakehouse.apply.full_load `_replace_with_load` / `_reloaded`), read at `t0` and placed
    by time as such a reload is: the rows go, except a row holding a change newer than `t0` + the margin
    (made after the check, which its later changes follow); the table's floor becomes `t0` - the margin, so
    a late change older than the check can't bring a row back and a newer one applies. Sequences no time
    maps onto (a log position, as the local DMS's) are placed by the rows' commit times instead, the floor
    at the newest change removed. One fenced REPLACE,
    the history kept (time travel and rollback reach the rows before). DMS is not asked: its reload of an
    empty table writes no LOAD file and would remove the table's raw files (CDC not applied yet with them)."""

    table = config.clean_table(spec.iceberg_name)
    guard_recorded_source(spark, table, spec.qualified_name)  # never empties another source's replica
    margin = timedelta(
        seconds=ApplyOptions().reload_margin_seconds if margin_seconds is None else margin_seconds
    )
    seq = F.col(quote(CHANGE_SEQ_COLUMN))
    rows = spark.table(table)
    floors = [load_floor(spark, table)]
    if highest_sequence_unless_time_shaped(spark, table) is None:
        placed, settled = sequence_at(t0 - margin), sequence_at(t0 + margin)
        newer = seq.isNotNull() & (seq > F.lit(str(settled)).cast(SEQ_TYPE))
        floors.append(placed)
    else:
        # sequences of the source's own log (the local DMS's LSNs): no time maps onto them. The rows' commit
        # times tell which are newer than the check; the floor is the newest change the repair removes.
        commit = F.unix_micros(F.col(quote(COMMIT_TS_COLUMN)).cast("timestamp"))
        newer = commit.isNotNull() & (commit > F.lit(epoch_micros(t0 + margin)))
        floors.append(one_row(rows.where(~newer).agg(F.max(seq)))[0])
    floor = max((Decimal(f) for f in floors if f is not None), default=Decimal(0))
    target = target_schema(spark, table, spec, {})
    kept = aligned(rows, target).where(newer)
    record_emptying(spark, config, spec, table, kept, floor, t0, run_id)  # its history closes what goes
    replace_table(
        spark,
        table,
        kept,
        {LOAD_FLOOR: str(floor)},
        {FULL_LOAD_DONE: "0", RUN_ID: run_id, REPLACED_SNAPSHOT: str(current_snapshot_id(spark, table))},
        f"DMS replica of {spec.qualified_name}",
    )
    clear_pending_mark(spark, table)  # emptied as a reload with no LOAD rows would: no load pending since
    log.warning("%s: the source is empty; emptied the clean table (floor %s)", spec.qualified_name, floor)


def dms_reloader(dms_client: Any, task_arn: str) -> Callable[[list[TableSpec]], None]:
    """Repair: ask DMS to reload the tables (fresh LOAD files, which the pipeline turns into the
    order-independent reload while CDC goes on)."""

    def reload(specs: list[TableSpec]) -> None:
        check_before_commit()  # a run that lost the pipeline lease asks DMS for nothing
        dms_client.reload_tables(
            ReplicationTaskArn=task_arn,
            TablesToReload=[{"SchemaName": s.source_schema, "TableName": s.name} for s in specs],
            ReloadOption="data-reload",
        )

    return reload


METRICS_NAMESPACE = "DmsIcebergLake"
METRICS_SERVICE = "reconcile"


def publish_metrics(report: ReconcileReport, cloudwatch: Any, namespace: str = METRICS_NAMESPACE) -> None:
    """The run's figures, dimension service=reconcile, zero included (the dashboard shows every run):
    `DivergedTables` and `DivergedRows` (missing + extra + differing; the alarm's metric), `RowsInFlight`,
    `Repairs`, `SourceRowsHashed`, `SourceBytes`, and `ReconcileFailedTables`."""
    totals = report.totals()
    figures = {
        "DivergedTables": totals["diverged_tables"],
        "DivergedRows": totals["missing"] + totals["extra"] + totals["differing"],
        "RowsInFlight": totals["in_flight"],
        "Repairs": totals["repairs"],
        "SourceRowsHashed": totals["source_rows_hashed"],
        "SourceBytes": totals["source_bytes"],
        "ReconcileFailedTables": len(report.failed),
    }
    dimensions = [{"Name": "service", "Value": METRICS_SERVICE}]
    cloudwatch.put_metric_data(
        Namespace=namespace,
        MetricData=[
            {
                "MetricName": name,
                "Dimensions": dimensions,
                "Value": float(value),
                "Unit": "Bytes" if name == "SourceBytes" else "Count",
            }
            for name, value in figures.items()
        ],
    )

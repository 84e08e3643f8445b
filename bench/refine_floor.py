"""The engine's floor under an incremental refresh (bench/refine_models.py's data and session): in one warm
SparkSession, the 1 % change of the newest sales refreshed (the refine, `--runs` times, the refined tables rolled
back between runs), then the least work any refresh of that change must do, each alone, `--runs` times:

    a. a bare Iceberg MERGE INTO sales_enriched of exactly the rows the refresh recomputes (its updated and
       inserted rows, and its deleted keys), precomputed and cached before the timing, matched by key;
    b. the same for each aggregate's affected groups (its rows of the days the change reaches);
    c. one empty Iceberg commit: through Iceberg's API alone (no Spark job), and through Spark (an INSERT of
       no row: its planning, its job and its commit);
    d. the change's rows read from the clean sales table between its two snapshots (the data files added and
       the positions deleted, as the refresh finds them from metadata, read in full to a no-op sink);

then the rebuild (`--runs` times, every refined table dropped before each). Each with its wall seconds, Spark
jobs, tasks and task CPU (Spark's event log, bench/refine_models.py's profiler) and the load average.

    .venv/bin/python bench/refine_floor.py --rows 10000000 [--files 100] [--fraction 0.01] [--runs 3]
        [--out bench/results/refine-floor-…/floor-10m.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lakehouse.base.config import LakeConfig
from lakehouse.io.iceberg import current_snapshot_id, iceberg_table
from lakehouse.refine.consumed import StagedReads, candidate_rows, file_changes, read_as_of
from lakehouse.refine.refresh import RefineOptions
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from refine_models import (
    SALE_ID,
    change_sales,
    clean_zone,
    finish,
    profile_of,
    spark_work,
    timed_refine,
)

KEYS = {
    "sales_enriched": ["ws_item_sk", "ws_order_number"],
    "daily_revenue_by_category": ["sold_date", "category"],
    "daily_revenue_by_state": ["sold_date", "customer_state"],
}
BOUNDED = {"sales_enriched": "ws_order_number"}  # the key column whose range prunes the target's files
AGGREGATES = ("daily_revenue_by_category", "daily_revenue_by_state")


def measured(
    spark: SparkSession, event_log: Path, group: str, work: Callable[[], Any]
) -> dict[str, float | int]:
    """`work`'s wall seconds, Spark jobs, tasks and task-CPU seconds (job group `group`)."""
    context = spark.sparkContext
    context.setJobGroup(group, group)
    begun = time.monotonic()
    work()
    seconds = time.monotonic() - begun
    context._jsc.sc().listenerBus().waitUntilEmpty(30_000)
    steps = profile_of(event_log, group)["by_step"].values()
    return {
        "seconds": round(seconds, 3),
        **spark_work(spark, group),
        "cpu_s": round(sum(s["cpu_ns"] for s in steps) / 1e9, 3),
        "load": round(os.getloadavg()[0], 2),
    }


def median_of(runs: list[dict[str, Any]]) -> dict[str, float]:
    return {
        name: round(statistics.median(r[name] for r in runs), 3)
        for name in ("seconds", "jobs", "tasks", "cpu_s")
        if all(name in r for r in runs)
    }


def snapshot_of(spark: SparkSession, table: str) -> int:
    snapshot = current_snapshot_id(spark, table)
    assert snapshot is not None, table
    return snapshot


def rollback(spark: SparkSession, config: LakeConfig, table: str, snapshot_id: int) -> None:
    if current_snapshot_id(spark, table) != snapshot_id:
        name = table.split(".", 1)[1]
        spark.sql(f"CALL {config.catalog_name}.system.rollback_to_snapshot('{name}', {snapshot_id})")


def merge_statement(table: str, view: str, key: list[str], columns: list[str], bounds: str) -> str:
    """The refresh's MERGE (lakehouse.refine.incremental.merge_by_key) of a source with `__present`, bare."""
    on = " AND ".join([*(f"t.{k} = s.{k}" for k in key), *([bounds] if bounds else [])])
    updates = ", ".join(f"t.{c} = s.{c}" for c in columns if c not in key)
    return (
        f"MERGE INTO {table} t USING {view} s ON {on} "
        "WHEN MATCHED AND NOT s.__present THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {updates} "
        f"WHEN NOT MATCHED AND s.__present THEN INSERT ({', '.join(columns)}) "
        f"VALUES ({', '.join(f's.{c}' for c in columns)})"
    )


def merge_source(
    spark: SparkSession, table: str, snapshot_id: int, keys: DataFrame, key: list[str]
) -> tuple[DataFrame, str]:
    """(the refreshed rows of `keys` as of the refresh's snapshot, with `__present`, cached and counted; the
    MERGE's bound on the target, as the refresh's keys' summary bounds it)."""
    rows = read_as_of(spark, table, snapshot_id).withColumn("__present", F.lit(True))
    source = keys.join(rows, key, "left").withColumn("__present", F.coalesce("__present", F.lit(False)))
    source = source.select(*rows.columns).cache()
    source.count()
    bounded = BOUNDED.get(table.rsplit(".", 1)[1], key[0])
    low, high = source.agg(F.min(bounded), F.max(bounded)).first()  # type: ignore[misc]
    bound = f"t.{bounded} >= {literal(low)} AND t.{bounded} <= {literal(high)}"
    return source, bound


def literal(value: Any) -> str:
    return f"DATE '{value}'" if hasattr(value, "isoformat") else str(value)


PLAN_CALLS = (  # lakehouse.refine.refresh's calls before a model's first Spark step ("plan and model")
    "table_exists",
    "consumed_snapshots",
    "newest_summary_value",
    "iceberg_table",
    "is_in_history",
    "input_size",
    "file_changes",
    "read_as_of",
    "incremental_blocker",
    "schema_of",
    "key_origin",
    "key_traces",
    "columns_read",
    "columns_wanted",
    "live_rows",
    "current_snapshot_id",
)
REFINER_CALLS = ("inputs_of", "cheaper_rebuild", "commit_properties")
CALLS: dict[str, list[float]] = {}  # call → [calls, seconds], summed over threads, since the last clear


def timed_calls() -> None:
    """Each of the refresh's PLAN_CALLS and REFINER_CALLS, and each model's evaluation (its SQL analysed into a
    DataFrame), counted and timed into CALLS."""
    from lakehouse.refine import refresh

    def timing(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            begun = time.monotonic()
            try:
                return call(*args, **kwargs)
            finally:
                spent = CALLS.setdefault(name, [0, 0.0])
                spent[0] += 1
                spent[1] += time.monotonic() - begun

        return timed

    for name in PLAN_CALLS:
        if hasattr(refresh, name):
            setattr(refresh, name, timing(name, getattr(refresh, name)))
    for name in REFINER_CALLS:
        setattr(refresh._Refiner, name, timing(name, getattr(refresh._Refiner, name)))
    evaluator = refresh._Refiner.evaluator

    def timed_evaluator(refiner: Any, *args: Any) -> Any:
        return timing("evaluate (the model's SQL analysed)", evaluator(refiner, *args))

    refresh._Refiner.evaluator = timed_evaluator  # type: ignore[method-assign,assignment]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-refine-floor-"))
    spark, config, event_log = clean_zone(work, args.rows, args.files, True, True)
    assert event_log is not None
    options = RefineOptions()
    results: dict[str, Any] = {"rows": args.rows, "fraction": args.fraction, "files": args.files}
    results["build"] = timed_refine(spark, config, "build", options, event_log)
    refined = {name: config.table(config.refined_database, name) for name in results["build"]["models"]}
    built = {name: snapshot_of(spark, table) for name, table in refined.items()}
    sales = config.clean_table("main_web_sales")
    before_change = snapshot_of(spark, sales)
    change_sales(spark, config, args.rows, args.fraction, recent=True)
    after_change = snapshot_of(spark, sales)

    def roll_back_refined() -> None:
        for name, table in refined.items():
            rollback(spark, config, table, built[name])

    timed_calls()
    refreshes = []
    for run in range(args.runs):
        roll_back_refined()
        CALLS.clear()
        refreshes.append(timed_refine(spark, config, f"refresh-{run}", options, event_log))
        refreshes[-1]["calls"] = {name: [n, round(t, 3)] for name, (n, t) in sorted(CALLS.items())}
    results["refresh"] = {
        "runs": refreshes,
        "median_seconds": statistics.median(r["seconds"] for r in refreshes),
    }
    refreshed = {name: snapshot_of(spark, table) for name, table in refined.items()}

    # The sources, from the last refresh's results: sales_enriched's changed keys (updated, and deleted: no row),
    # each aggregate's groups of the days those sales fall on.
    newest = int(args.rows * (1 - args.fraction))
    sale_keys = (
        read_as_of(spark, sales, before_change)
        .where(f"{SALE_ID} >= {newest}")
        .select(*KEYS["sales_enriched"])
    )
    sources = {
        "sales_enriched": merge_source(
            spark, refined["sales_enriched"], refreshed["sales_enriched"], sale_keys, KEYS["sales_enriched"]
        )
    }
    days = sources["sales_enriched"][0].where("__present").select("sold_date").distinct()
    for name in AGGREGATES:
        groups = read_as_of(spark, refined[name], refreshed[name]).join(days, "sold_date", "left_semi")
        sources[name] = merge_source(
            spark, refined[name], refreshed[name], groups.select(*KEYS[name]), KEYS[name]
        )
    results["source_rows"] = {name: source.count() for name, (source, _) in sources.items()}
    roll_back_refined()

    floor: dict[str, list[dict[str, Any]]] = {}
    for name, (source, bound) in sources.items():
        view = f"floor_{name}"
        source.createOrReplaceTempView(view)
        columns = [f.name for f in spark.table(refined[name]).schema.fields]
        statement = merge_statement(refined[name], view, KEYS[name], columns, bound)
        for run in range(args.runs):
            rollback(spark, config, refined[name], built[name])
            floor.setdefault(f"merge {name}", []).append(
                measured(spark, event_log, f"floor-merge-{name}-{run}", partial(spark.sql, statement))
            )
        rollback(spark, config, refined[name], built[name])

    target = refined["daily_revenue_by_state"]

    def commit_through_api() -> None:
        iceberg_table(spark, target).newAppend().commit()

    def commit_through_spark() -> None:
        spark.sql(f"INSERT INTO {target} SELECT * FROM {target} WHERE false")

    for run in range(args.runs):
        for item, commit in (
            ("empty commit, Iceberg API", commit_through_api),
            ("empty commit, Spark INSERT", commit_through_spark),
        ):
            before = current_snapshot_id(spark, target)
            taken = measured(spark, event_log, f"floor-{item}-{run}", commit)
            floor.setdefault(item, []).append(
                taken | {"committed": current_snapshot_id(spark, target) != before}
            )
    rollback(spark, config, target, built["daily_revenue_by_state"])

    def read_change() -> None:
        java_table = iceberg_table(spark, sales)
        files = file_changes(spark, sales, before_change, after_change, java_table)
        assert files is not None
        reads = StagedReads(spark)
        try:
            removed, added = candidate_rows(
                spark, sales, before_change, after_change, files, reads, java_table
            )
            removed.unionByName(added).write.format("noop").mode("overwrite").save()
        finally:
            reads.release()

    for run in range(args.runs):
        floor.setdefault("read the change's rows", []).append(
            measured(spark, event_log, f"floor-read-{run}", read_change)
        )
    results["floor"] = {item: {"runs": runs, "median": median_of(runs)} for item, runs in floor.items()}

    rebuilds = []
    for run in range(args.runs):
        for table in refined.values():
            spark.sql(f"DROP TABLE {table}")
        rebuilds.append(timed_refine(spark, config, f"rebuild-{run}", options, event_log))
    results["rebuild"] = {
        "runs": rebuilds,
        "median_seconds": statistics.median(r["seconds"] for r in rebuilds),
    }
    spent = {item: value["median"]["seconds"] for item, value in results["floor"].items()}
    results["summary"] = {
        "refresh_median_s": results["refresh"]["median_seconds"],
        "rebuild_median_s": results["rebuild"]["median_seconds"],
        "ten_percent_of_rebuild_s": round(results["rebuild"]["median_seconds"] / 10, 2),
        "floor_s": spent,
        # each MERGE commits once: the empty commit (c) is a part of (a) and (b), not added to them
        "floor_sum_s (a + b + d)": round(
            sum(v for k, v in spent.items() if k.startswith(("merge", "read"))), 3
        ),
    }
    finish(spark, results, "bench/refine_floor.py", args.out, work)


if __name__ == "__main__":
    main()

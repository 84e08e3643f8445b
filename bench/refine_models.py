"""The example models (models/*.sql) refreshed incrementally against a rebuild: a synthetic clean zone of N sales
with their dimensions, the first refine (a build), then a change of a fraction of the sales (updates and
deletes), then of the same fraction of the items (reclassified), each followed by an incremental refine, then
the same state rebuilt from scratch (every refined table dropped). Seconds of each refine, per model, with its
mode and the keys it recomputed; the machine's load beside them.

    .venv/bin/python bench/refine_models.py --rows 1000000 [--fraction 0.01] [--files 100 --recent [--dated]]
        [--rebuild_above_affected_fraction 0.5] [--models_at_once N] [--profile] [--out bench/results/…json]

`--profile`: each refine's Spark jobs by model and step (the step a job ran in, its seconds, and its stages'
input rows and bytes, shuffle and executor CPU), from Spark's event log, in the results' "profile".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# `--library DIR`: the lakehouse package from another checkout's spark_jobs (an A/B against an earlier commit:
# `git archive <rev> spark_jobs | tar -x -C DIR`), read before the imports below.
LIBRARY = sys.argv[sys.argv.index("--library") + 1] if "--library" in sys.argv else str(ROOT / "spark_jobs")
sys.path[:0] = [str(ROOT), LIBRARY]

from lakehouse.base.config import LakeConfig  # noqa: E402
from lakehouse.io.iceberg import TABLE_PROPERTIES, ensure_namespace  # noqa: E402
from lakehouse.io.session import build_session  # noqa: E402
from lakehouse.refine.refresh import RefineOptions, RefineReport, refine  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

ITEMS = 1000


def money(column: Any) -> Any:
    return (column % 10000 / 100).cast("decimal(7,2)")


def source_tables(
    spark: SparkSession, rows: int, files: int = 0, dated: bool = False
) -> dict[str, DataFrame]:
    """The six sources the example models read, with the columns they use; `files`: the sales in that many
    data files, each a range of ids (0: Spark's default partitions); `dated`: a sale's day follows its id (the
    newest sales are the newest days), else the days are spread over the ids."""
    ids = spark.range(0, rows, numPartitions=files) if files else spark.range(rows)
    day = (F.col("id") * 365 / rows).cast("bigint") + 1 if dated else F.col("id") * 7 % 365 + 1
    sales = ids.select(
        (F.col("id") % ITEMS + 1).alias("ws_item_sk"),
        (F.col("id") / ITEMS).cast("bigint").alias("ws_order_number"),
        day.alias("ws_sold_date_sk"),
        (F.col("id") % 24 + 1).alias("ws_sold_time_sk"),
        (F.col("id") % max(rows // 100, 1) + 1).alias("ws_bill_customer_sk"),
        (F.col("id") % 20 + 1).cast("int").alias("ws_quantity"),
        *[
            money(F.col("id") * (n + 3)).alias(name)
            for n, name in enumerate(
                [
                    "ws_list_price",
                    "ws_sales_price",
                    "ws_ext_sales_price",
                    "ws_ext_discount_amt",
                    "ws_coupon_amt",
                    "ws_net_paid",
                    "ws_ext_wholesale_cost",
                    "ws_net_profit",
                ]
            )
        ],
    )
    dates = spark.range(1, 366).select(
        F.col("id").alias("d_date_sk"),
        F.date_add(F.lit("2024-01-01").cast("date"), F.col("id").cast("int")).alias("d_date"),
        F.lit(2024).alias("d_year"),
        (F.col("id") % 12 + 1).cast("int").alias("d_moy"),
        F.when(F.col("id") % 30 == 0, "Y").otherwise("N").alias("d_holiday"),
    )
    times = spark.range(1, 25).select(F.col("id").alias("t_time_sk"), F.col("id").cast("int").alias("t_hour"))
    items = spark.range(1, ITEMS + 1).select(
        F.col("id").alias("i_item_sk"),
        F.format_string("item-%d", "id").alias("i_item_id"),
        F.format_string("product %d", "id").alias("i_product_name"),
        F.format_string("category-%d", F.col("id") % 10).alias("i_category"),
        F.format_string("class-%d", F.col("id") % 50).alias("i_class"),
        F.format_string("brand-%d", F.col("id") % 100).alias("i_brand"),
    )
    customers = spark.range(1, max(rows // 100, 1) + 1).select(
        F.col("id").alias("c_customer_sk"),
        (F.col("id") % max(rows // 200, 1) + 1).alias("c_current_addr_sk"),
        F.format_string("first-%d", "id").alias("c_first_name"),
        F.format_string("last-%d", "id").alias("c_last_name"),
    )
    addresses = spark.range(1, max(rows // 200, 1) + 1).select(
        F.col("id").alias("ca_address_sk"),
        F.format_string("S%d", F.col("id") % 50).alias("ca_state"),
        F.format_string("city-%d", F.col("id") % 500).alias("ca_city"),
    )
    return {
        "web_sales": sales,
        "date_dim": dates,
        "time_dim": times,
        "item": items,
        "customer": customers,
        "customer_address": addresses,
    }


def spark_work(spark: SparkSession, group: str) -> dict[str, int]:
    """The Spark jobs (with adaptive execution, one per query stage: a shuffle adds one) and tasks run in job
    group `group`: counts, stable on a shared machine where seconds swing."""
    tracker = spark.sparkContext.statusTracker()
    jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(group)]
    stage_ids = {s for job in jobs if job is not None for s in job.stageIds}
    stages = [tracker.getStageInfo(s) for s in stage_ids]
    return {"jobs": len(jobs), "tasks": sum(s.numCompletedTasks for s in stages if s is not None)}


STEPS = {  # lakehouse.refine.refresh's steps a profile names the jobs by (module, function)
    "changed rows": ("lakehouse.refine.refresh", "changed_rows_between"),
    "affected keys": ("lakehouse.refine.refresh", "affected_keys"),
    "keys kept": ("lakehouse.refine.refresh", "kept_keys"),
    "keys summary": ("lakehouse.refine.refresh", "summarize_keys"),  # before 4e00ace
    "recompute and MERGE": ("lakehouse.refine.refresh", "merge_by_key"),
}


STEP_SECONDS: dict[str, float] = {}  # wall seconds by step (driver and Spark), since the last refine


def label_steps(spark: SparkSession) -> None:
    """Each refresh step's Spark jobs described by its model and step (`spark.job.description`): the jobs
    that follow a step's call until the next one are counted to it, and so are the wall seconds
    (STEP_SECONDS)."""
    import importlib

    from lakehouse.refine import refresh

    context = spark.sparkContext
    thread = threading.local()  # the model and step of this thread (models may be refreshed at once)

    def switch(label: str | None) -> None:
        now = time.monotonic()
        if getattr(thread, "label", None) is not None:
            STEP_SECONDS[thread.label] = STEP_SECONDS.get(thread.label, 0.0) + now - thread.since
        thread.label, thread.since = label, now
        context.setJobDescription(label)  # type: ignore[arg-type]

    unwrapped_refresh = refresh._Refiner.refresh

    def refresh_labelled(refiner: Any, model: Any) -> Any:
        thread.model = model.name
        switch(f"{model.name}: plan and model")
        try:
            return unwrapped_refresh(refiner, model)
        finally:
            switch(None)

    refresh._Refiner.refresh = refresh_labelled  # type: ignore[method-assign,assignment]
    unwrapped_write = refresh._Refiner._write_full

    def write_labelled(refiner: Any, *args: Any) -> Any:
        switch(f"{thread.model}: rebuild write")
        return unwrapped_write(refiner, *args)

    refresh._Refiner._write_full = write_labelled  # type: ignore[method-assign,assignment]
    for step, (module_name, function) in STEPS.items():
        module = importlib.import_module(module_name)
        unwrapped = getattr(module, function, None)
        if unwrapped is None:  # a step of another version of the library
            continue

        def labelled(*args: Any, _step: str = step, _unwrapped: Any = unwrapped, **kwargs: Any) -> Any:
            switch(f"{thread.model}: {_step}")
            return _unwrapped(*args, **kwargs)

        setattr(module, function, labelled)


METRICS = {
    "internal.metrics.executorRunTime": "run_ms",
    "internal.metrics.executorCpuTime": "cpu_ns",
    "internal.metrics.input.recordsRead": "input_rows",
    "internal.metrics.input.bytesRead": "input_bytes",
    "internal.metrics.shuffle.read.recordsRead": "shuffle_rows",
    "internal.metrics.shuffle.write.bytesWritten": "shuffle_bytes",
}


def profile_of(event_log: Path, group: str) -> dict[str, Any]:
    """The job group's Spark jobs from the event log: each job's step, wall ms and its stages' metrics, and
    their sums by step."""
    jobs: dict[int, dict[str, Any]] = {}
    stage_job: dict[int, int] = {}
    for path in sorted(event_log.iterdir()):
        for line in path.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            kind = event.get("Event")
            if kind == "SparkListenerJobStart":
                properties = event.get("Properties") or {}
                if properties.get("spark.jobGroup.id") != group:
                    continue
                job = jobs[event["Job ID"]] = {
                    "step": properties.get("spark.job.description") or "?",
                    "start": event["Submission Time"],
                    "ms": 0,
                    "stages": 0,
                    "tasks": 0,
                    **dict.fromkeys(METRICS.values(), 0),
                }
                for stage in event.get("Stage IDs", []):
                    stage_job[stage] = event["Job ID"]
            elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
                job = jobs[event["Job ID"]]
                job["ms"] = event["Completion Time"] - job["start"]
            elif kind == "SparkListenerStageCompleted":
                info = event["Stage Info"]
                if stage_job.get(info["Stage ID"]) not in jobs:
                    continue
                job = jobs[stage_job[info["Stage ID"]]]
                job["stages"] += 1
                job["tasks"] += info.get("Number of Tasks", 0)
                for accumulable in info.get("Accumulables", []):
                    name = METRICS.get(accumulable.get("Name"))
                    if name:
                        job[name] += int(accumulable.get("Value") or 0)
    by_step: dict[str, dict[str, int]] = {}
    for job in jobs.values():
        total = by_step.setdefault(job["step"], {"jobs": 0, "ms": 0, **dict.fromkeys(METRICS.values(), 0)})
        total["jobs"] += 1
        for name in ("ms", *METRICS.values()):
            total[name] += job[name]
    for job in jobs.values():
        job.pop("start")
    return {"by_step": by_step, "jobs": {str(j): job for j, job in sorted(jobs.items())}}


def timed_refine(
    spark: SparkSession,
    config: LakeConfig,
    run_id: str,
    options: RefineOptions,
    event_log: Path | None = None,
) -> dict[str, Any]:
    spark.sparkContext.setJobGroup(run_id, f"refine {run_id}")
    STEP_SECONDS.clear()
    begun = time.monotonic()
    report: RefineReport = refine(spark, config, options, run_id=run_id)
    seconds = time.monotonic() - begun
    assert not report.failed, report.failed
    if event_log is not None:
        spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(30_000)
    return {
        **(
            {"profile": profile_of(event_log, run_id) | {"step_seconds": dict(STEP_SECONDS)}}
            if event_log is not None
            else {}
        ),
        "seconds": round(seconds, 2),
        "load": os.getloadavg()[0],
        "spark": spark_work(spark, run_id),
        "models": {
            t.table: {
                "mode": t.mode,
                "seconds": t.seconds,
                "affected": t.affected,
                "changed": t.changed_inputs,
                "untraced": t.untraced,
                "reason": t.reason,
            }
            for t in report.tables
        },
    }


def clean_zone(
    work: Path, rows: int, files: int, dated: bool, profile: bool
) -> tuple[SparkSession, LakeConfig, Path | None]:
    """The bench's session (its settings; with `profile`, Spark's event log under `work`, each refresh step's
    jobs labelled) and its clean zone of `rows` sales (source_tables) written as Iceberg tables under `work`:
    (the session, its lake's config, the event log's folder or None)."""
    config = LakeConfig(
        warehouse=str(work / "warehouse"), staging_dir=str(work / "staging"), shuffle_partitions=4
    )
    os.environ.setdefault("LAKE_SPARK_DRIVER_MEMORY", "3g")
    event_log = work / "events" if profile else None
    tuning = {}
    if event_log is not None:
        event_log.mkdir(parents=True, exist_ok=True)
        tuning = {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": event_log.as_uri(),
            "spark.eventLog.compress": "false",
        }
    spark = build_session(config, "bench-refine-models", tuning)
    if event_log is not None:
        label_steps(spark)
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    for name, frame in source_tables(spark, rows, files, dated).items():
        writer = frame.writeTo(config.clean_table(f"main_{name}")).using("iceberg")
        for key, value in TABLE_PROPERTIES.items():
            writer = writer.tableProperty(key, value)
        writer.createOrReplace()
    return spark, config, event_log


SALE_ID = f"(ws_order_number * {ITEMS} + ws_item_sk - 1)"  # the id a sale was made from


def change_sales(spark: SparkSession, config: LakeConfig, rows: int, fraction: float, recent: bool) -> None:
    """The sales' change: `fraction` of them updated (their net paid), a tenth of those deleted; `recent`:
    the newest sales (a CDC stream's usual change: a few files), else every 1/fraction-th sale."""
    sales = config.clean_table("main_web_sales")
    every = max(int(1 / fraction), 1)
    if recent:
        newest = int(rows * (1 - fraction))
        spark.sql(f"UPDATE {sales} SET ws_net_paid = ws_net_paid + 1 WHERE {SALE_ID} >= {newest}")
        spark.sql(f"DELETE FROM {sales} WHERE {SALE_ID} >= {newest} AND {SALE_ID} % 10 = 1")
    else:
        spark.sql(
            f"UPDATE {sales} SET ws_net_paid = ws_net_paid + 1 "
            f"WHERE (ws_order_number * {ITEMS} + ws_item_sk) % {every} = 0"
        )
        spark.sql(f"DELETE FROM {sales} WHERE (ws_order_number * {ITEMS} + ws_item_sk) % {every * 10} = 1")


def change_items(spark: SparkSession, config: LakeConfig, fraction: float) -> None:
    """The items' change: every 1/fraction-th item reclassified."""
    every = max(int(1 / fraction), 1)
    items = config.clean_table("main_item")
    spark.sql(f"UPDATE {items} SET i_category = 'reclassified' WHERE i_item_sk % {every} = 0")


def finish(
    spark: SparkSession, results: dict[str, Any], script: str, out: str | None, work: Path | None
) -> None:
    """The results, with their command and time, printed and written to `out`; the session stopped and the
    scratch folder `work` removed (None: kept)."""
    results["command"] = " ".join([script, *sys.argv[1:]])
    results["at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = json.dumps(results, indent=2)
    print(text)
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")
    spark.stop()
    if work is not None:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--work", default=None)
    parser.add_argument("--out", default=None, help="the results file (JSON)")
    parser.add_argument(
        "--files", type=int, default=0, help="write the sales in this many files (0: Spark's)"
    )
    parser.add_argument(
        "--recent",
        action="store_true",
        help="change the newest fraction of the sales (a CDC stream's usual change: a few files), not every "
        "1/fraction-th sale (every file)",
    )
    parser.add_argument(
        "--dated",
        action="store_true",
        help="a sale's day follows its id, so the newest sales (--recent) are the newest days: the aggregates' "
        "groups a change reaches are those days', not every day's",
    )
    parser.add_argument(
        "--rebuild_above_affected_fraction",
        type=float,
        default=0.5,
        help="rebuild a model whose affected keys are over this share of its rows (the refine job's default); "
        "1: always refresh incrementally",
    )
    parser.add_argument(
        "--models_at_once",
        type=int,
        default=None,
        help="models refreshed at once (the refine job's --models_at_once; default: the library's)",
    )
    parser.add_argument("--library", default=None, help="the spark_jobs folder to import lakehouse from")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="each refine's Spark jobs by model and step (Spark's event log)",
    )
    args = parser.parse_args()
    at_once = {} if args.models_at_once is None else {"models_at_once": args.models_at_once}
    options = RefineOptions(rebuild_above_affected_fraction=args.rebuild_above_affected_fraction, **at_once)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-refine-"))
    spark, config, event_log = clean_zone(work, args.rows, args.files, args.dated, args.profile)
    results: dict[str, Any] = {
        "rows": args.rows,
        "fraction": args.fraction,
        "files": args.files,
        "recent": args.recent,
        "dated": args.dated,
        "rebuild_above_affected_fraction": args.rebuild_above_affected_fraction,
        "models_at_once": args.models_at_once,
        "cores": os.cpu_count(),
    }
    results["build"] = timed_refine(spark, config, "build", options, event_log)

    change_sales(spark, config, args.rows, args.fraction, args.recent)
    results["sales_changed"] = timed_refine(spark, config, "sales-changed", options, event_log)
    change_items(spark, config, args.fraction)
    results["items_changed"] = timed_refine(spark, config, "items-changed", options, event_log)

    for table in results["build"]["models"]:
        spark.sql(f"DROP TABLE {config.table(config.refined_database, table)}")
    results["rebuild"] = timed_refine(spark, config, "rebuild", options, event_log)
    results["library"] = LIBRARY
    finish(spark, results, "bench/refine_models.py", args.out, None if args.work else work)


if __name__ == "__main__":
    main()

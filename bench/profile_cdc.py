"""Where a CDC apply spends its time: one warm apply of a bench batch, then every Spark stage it ran
(from the Spark event log) with its duration, rows, bytes read and shuffled, and the time in the MERGE; the
Spark jobs it ran and the table metadata loads it made (bench/many_tables.py's counters).

    .venv/bin/python bench/profile_cdc.py --rows 10000000
    .venv/bin/python bench/profile_cdc.py --rows 10000000 --variant dist-none+partitions-8
    .venv/bin/python bench/profile_cdc.py --rows 10000000 --format parquet
    .venv/bin/python bench/profile_cdc.py --rows 10000000 --format parquet --library /tmp/before/spark_jobs

Uses the datasets and base snapshots of bench/run.py (run it once at that size first).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

BENCH = Path(__file__).resolve().parent
# `--library DIR`: import lakehouse from another checkout's spark_jobs (an A/B against an earlier commit, e.g.
# `git archive <rev> spark_jobs | tar -x -C /tmp/before`), read before the imports below
_LIBRARY = (
    sys.argv[sys.argv.index("--library") + 1] if "--library" in sys.argv[:-1] else BENCH.parent / "spark_jobs"
)
sys.path[:0] = [str(BENCH), str(Path(_LIBRARY).resolve())]

from datasets import DATA, Dataset  # noqa: E402
from experiments import session_patches, table_setups  # noqa: E402
from generate import write_schema  # noqa: E402
from lake_runs import Lake, apply_in_session, backup_dir, refreshed, restore, table_name  # noqa: E402
from many_tables import counting_loads, jobs_so_far  # noqa: E402

EVENT_LOG = DATA / "eventlog"


def stages(log: Path) -> list[dict]:
    """Completed stages of an event log, in submission order."""
    found = []
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event["Event"] != "SparkListenerStageCompleted":
            continue
        info = event["Stage Info"]
        metrics = {a["Name"]: a.get("Value", 0) for a in info.get("Accumulables", [])}
        found.append(
            {
                "stage": info["Stage ID"],
                "name": info["Stage Name"],
                "tasks": info["Number of Tasks"],
                "seconds": (info["Completion Time"] - info["Submission Time"]) / 1000,
                "submitted": info["Submission Time"],
                "cpu_seconds": int(metrics.get("internal.metrics.executorCpuTime", 0) or 0) / 1e9,
                "run_seconds": int(metrics.get("internal.metrics.executorRunTime", 0) or 0) / 1e3,
                "gc_seconds": int(metrics.get("internal.metrics.jvmGCTime", 0) or 0) / 1e3,
                "input_rows": int(metrics.get("internal.metrics.input.recordsRead", 0) or 0),
                "input_mb": int(metrics.get("internal.metrics.input.bytesRead", 0) or 0) / 2**20,
                "shuffle_read_mb": int(metrics.get("internal.metrics.shuffle.read.remoteBytesRead", 0) or 0)
                / 2**20
                + int(metrics.get("internal.metrics.shuffle.read.localBytesRead", 0) or 0) / 2**20,
                "shuffle_write_mb": int(metrics.get("internal.metrics.shuffle.write.bytesWritten", 0) or 0)
                / 2**20,
            }
        )
    return sorted(found, key=lambda s: s["submitted"])


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--format", default="csv", choices=("csv", "parquet"), help="DMS DataFormat")
    parser.add_argument("--variant", default="baseline")
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument("--warmups", type=int, default=2, help="throw-away applies of the whole batch first")
    parser.add_argument(
        "--library", default=str(_LIBRARY), help="the spark_jobs folder to import lakehouse from"
    )
    args = parser.parse_args(argv)

    dataset = Dataset(args.rows, max(args.files, args.rows // 10), args.files, args.format)
    lake = Lake(DATA / "warehouse", write_schema(DATA / "schema.json"), args.shuffle_partitions)
    database = lake.database(args.rows, args.format)
    table_dir = lake.table_dir(database, "orders")
    if not backup_dir(table_dir).exists():
        raise SystemExit(
            f"no base snapshot for {args.rows} rows: run bench/run.py --rows {args.rows} --formats {args.format} first"
        )
    EVENT_LOG.mkdir(parents=True, exist_ok=True)
    os.environ["LAKE_SPARK_DRIVER_MEMORY"] = "8g"
    os.environ["PYSPARK_SUBMIT_ARGS"] = (
        f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir={EVENT_LOG.as_uri()} pyspark-shell"
    )
    from lakehouse.apply import cdc as cdc_apply
    from lakehouse.io.session import APPLY_TUNING, build_session

    spark = build_session(lake.config("bench"), "profile", APPLY_TUNING)
    spark.conf.set("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
    table = table_name(lake, database)
    files = dataset.cdc_files
    for warmup in range(args.warmups):
        restore(table_dir)
        refreshed(spark, table)
        apply_in_session(spark, lake, database, files, f"warmup{warmup}")

    merge_seconds: list[float] = []
    original_merge = cdc_apply.merge_changes

    def timed_merge(*a, **k):
        started = time.perf_counter()
        try:
            return original_merge(*a, **k)
        finally:
            merge_seconds.append(time.perf_counter() - started)

    cdc_apply.merge_changes = timed_merge
    restore(table_dir)
    refreshed(spark, table)
    for setup in table_setups(args.variant):
        setup(spark, table)
    refreshed(spark, table)
    app = spark.sparkContext.applicationId
    loads: list[str] = []
    with session_patches(spark, args.variant), counting_loads(spark, loads):
        since_ms = time.time() * 1000
        jobs_before = jobs_so_far(spark)
        started = time.perf_counter()
        report = apply_in_session(spark, lake, database, files, "profile")
        total = time.perf_counter() - started
        jobs = jobs_so_far(spark) - jobs_before
    from lakehouse.io.iceberg import iceberg_table

    # what the apply's commit wrote, from the table's metadata (no Spark job)
    written = dict(iceberg_table(spark, table).currentSnapshot().summary())
    spark.stop()
    rows = [s for s in stages(EVENT_LOG / app) if s["submitted"] >= since_ms]
    print(f"variant {args.variant}: apply {total:.2f} s, of which MERGE {merge_seconds[-1]:.2f} s "
          f"(report {report.seconds} s); load {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"Spark jobs {jobs}, metadata loads {len(loads)} ({', '.join(sorted(set(loads)))})")
    print(f"files written: {written.get('added-data-files', 0)} data, {written.get('added-delete-files', 0)} delete, "
          f"{int(written.get('added-files-size', 0)) / 2**20:.1f} MB")  # fmt: skip
    print(
        "| stage | name | tasks | s | task CPU s | input rows | input MB | shuffle read MB | shuffle write MB |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for s in rows:
        print(
            f"| {s['stage']} | {s['name'][:60]} | {s['tasks']} | {s['seconds']:.2f} | {s['cpu_seconds']:.2f} "
            f"| {s['input_rows']:,} "
            f"| {s['input_mb']:.1f} | {s['shuffle_read_mb']:.1f} | {s['shuffle_write_mb']:.1f} |"
        )
    print(f"sum of stage seconds: {sum(s['seconds'] for s in rows):.2f}, "
          f"task CPU seconds: {sum(s['cpu_seconds'] for s in rows):.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

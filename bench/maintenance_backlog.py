"""CDC beside a maintenance backlog: a pass is a bounded slice, so a backlog delays a CDC batch by one slice.

    .venv/bin/python bench/maintenance_backlog.py --rows 10000000 --slice-mb 32

A table of `--rows` rows in files of `--rows-per-file` rows (its target file size their size) loses a quarter
of every file's rows (one merge-on-read delete: every file is due). Then, as the state machine interleaves them,
maintenance passes of `--slice-mb` alternate with CDC batches (`maintenance_scale.merge_batch`: 2,000 changes)
until nothing is due. Recorded per pass: the bytes due before it, rewritten, deferred, its seconds and Spark
jobs; per batch: its seconds. Then the same backlog made again is cleared by one pass with the template's budget
(`MaintenanceMbPerPass`, 4,096 MB) for comparison: what a CDC batch would wait without slices. The rewrite rate
(MB/s of the single pass) is what bench/deployment_planner.py takes for a slice (`--maintenance` this JSON). Results:
bench/results/maintenance-backlog-<time>.json and a Markdown table on stdout; the machine's load is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "spark_jobs"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions" / "shared"))

from maintenance_scale import bench_lake, create, merge_batch, run_document

RESULTS = Path(__file__).resolve().parent / "results"


def backlog(spark: Any, table: str, rows: int, rows_per_file: int) -> None:
    """The table, then a quarter of every file's rows deleted: every data file is due."""
    create(spark, table, rows, rows_per_file)
    spark.sql(f"DELETE FROM {table} WHERE id % 4 = 0")


def one_pass(spark: Any, config: Any, table: str, options: Any, run_id: str) -> dict[str, Any]:
    from lakehouse.maintenance.run import maintain

    report = maintain(spark, config, options, run_id=run_id)
    [entry] = [t for t in report.tables if t.table == table]
    assert not report.failed, report.failed
    return {
        "due_bytes": entry.due_bytes,
        "rewritten_bytes": entry.rewritten_bytes,
        "deferred_bytes": entry.deferred_bytes,
        "rewritten_data_files": entry.rewritten_data_files,
        "lost_data_files": entry.lost_data_files,
        "seconds": report.seconds,
        "spark_jobs": report.spark_jobs,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--rows-per-file", type=int, default=50_000)
    parser.add_argument("--slice-mb", type=float, default=32.0, help="the interleaved passes' budget (MB)")
    parser.add_argument("--whole-mb", type=float, default=4096.0, help="the single pass's budget (MB)")
    parser.add_argument("--max-passes", type=int, default=40)
    args = parser.parse_args(argv)

    folder, config, spark = bench_lake("maintenance-backlog")
    from lakehouse.maintenance.run import MaintenanceOptions

    load = os.getloadavg()
    table = config.clean_table("orders")
    sliced = MaintenanceOptions(remove_orphans=False, rewrite_mb_per_pass=args.slice_mb)
    whole = MaintenanceOptions(remove_orphans=False, rewrite_mb_per_pass=args.whole_mb)
    passes, batches = [], []
    try:
        backlog(spark, table, args.rows, args.rows_per_file)
        for number in range(args.max_passes):
            passes.append(one_pass(spark, config, table, sliced, f"slice-{number}"))
            started = time.perf_counter()
            merge_batch(spark, table, args.rows, number, 2000, 50_000)
            batches.append(round(time.perf_counter() - started, 3))
            print(json.dumps({"pass": passes[-1], "batch_seconds": batches[-1]}), flush=True)
            if passes[-1]["deferred_bytes"] == 0:
                break
        spark.sql(f"DROP TABLE {table} PURGE")
        backlog(spark, table, args.rows, args.rows_per_file)
        single = one_pass(spark, config, table, whole, "whole")
        print(json.dumps({"whole": single}), flush=True)
    finally:
        spark.stop()
        shutil.rmtree(folder, ignore_errors=True)
    document = run_document(args, load) | {
        "passes": passes,
        "batch_seconds": batches,
        "whole": single,
        # What bench/deployment_planner.py reads (`--maintenance`): the rate of the pass that rewrote it all.
        "planner": {"rewrite_bytes_per_second": round(single["rewritten_bytes"] / single["seconds"])},
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"maintenance-backlog-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(document, indent=2))
    print("| pass | due MB | rewritten MB | deferred MB | pass s | MB/s | Spark jobs | next batch s |")
    print("|---|---|---|---|---|---|---|---|")
    for number, (done, batch) in enumerate(zip(passes, batches, strict=True)):
        rate = done["rewritten_bytes"] / 1e6 / done["seconds"] if done["seconds"] else 0.0
        print(
            f"| {number} | {done['due_bytes'] / 1e6:.1f} | {done['rewritten_bytes'] / 1e6:.1f} "
            f"| {done['deferred_bytes'] / 1e6:.1f} | {done['seconds']} | {rate:.1f} | {done['spark_jobs']} "
            f"| {batch} |"
        )
    rate = single["rewritten_bytes"] / 1e6 / single["seconds"] if single["seconds"] else 0.0
    print(
        f"| whole backlog, one pass | {single['due_bytes'] / 1e6:.1f} | {single['rewritten_bytes'] / 1e6:.1f} "
        f"| {single['deferred_bytes'] / 1e6:.1f} | {single['seconds']} | {rate:.1f} | {single['spark_jobs']} | |"
    )
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Benchmarks of the Spark pipeline. Not tests: nothing here asserts a timing.

    .venv/bin/python bench/run.py --quick                    # smoke run, small sizes, < 2 min
    .venv/bin/python bench/run.py --rows 1000000 10000000    # CDC at 1M and 10M rows + full load
    .venv/bin/python bench/run.py --rows 10000000 --only cdc-session --variants baseline,window-dedup

Measured side by side on the same generated DMS files (bench/data/, cached):
- cdc-job:        our CDC job, one process (`spark_jobs/cdc_job.py`) on one manifest of all files
- cdc-session:    the same apply in a warm session (apply_cdc), per optimisation variant
- perfile-job:    the per-file baseline: one job process per file (a Glue run per file), sampled
- perfile-session: the same job in the same session, one apply per file, sampled
- pyiceberg:      PyIceberg delete + upsert of the same changes in one transaction
- full-load:      DMS LOAD files → a new Iceberg table (full_load) vs the pyarrow floor (the same files →
                  zstd Parquet), narrow in each --formats, wide from CSV

Each table is built once by our full load and restored to that snapshot before every measured run
(its metadata folder is put back; data files are never deleted), so every run does the same work.
Results: printed as Markdown and written to bench/data/results/<time>.json.

This file is the command line; the measurements are in bench/measurements.py, the lake they run on (base
snapshots, job processes, the warm session's apply) in bench/lake_runs.py, the timed figures and the
report in bench/timings.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(BENCH), str(ROOT / "spark_jobs")]

from datasets import DATA, Dataset  # noqa: E402
from generate import write_schema  # noqa: E402
from lake_runs import Lake, spark_session  # noqa: E402
from measurements import measure_cdc, measure_full_load  # noqa: E402
from timings import Figure, machine, markdown  # noqa: E402

ALL_PARTS = ("full-load", "cdc-job", "cdc-session", "perfile-job", "perfile-session", "pyiceberg")


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description="Pipeline benchmarks (see bench/RESULTS.md)")
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000], help="table sizes for CDC")
    parser.add_argument("--change-ratio", type=float, default=0.1, help="changes per batch / table rows")
    parser.add_argument("--files", type=int, default=200, help="CDC files per batch")
    parser.add_argument("--formats", default="csv", help="comma list of DMS DataFormats: csv, parquet")
    parser.add_argument(
        "--mix",
        default="mixed",
        help="comma list of CDC batches: mixed (10%% D, 15%% I, 75%% U), inserts (new keys)",
    )
    parser.add_argument("--full-load-rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmups", type=int, default=2, help="throw-away applies before cdc-session")
    parser.add_argument("--sample", type=int, default=10, help="files measured in the per-file baselines")
    parser.add_argument("--pyiceberg-runs", type=int, default=3)
    parser.add_argument("--pyiceberg-timeout", type=int, default=900)
    parser.add_argument("--variants", default="baseline", help="comma list, see bench/experiments.py")
    parser.add_argument("--only", default=",".join(ALL_PARTS), help=f"comma list of {ALL_PARTS}")
    parser.add_argument("--shuffle-partitions", type=int, default=4, help="the jobs' --shuffle_partitions")
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument(
        "--job-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Spark setting of the job processes",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, one run each: a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.files, args.full_load_rows = [20_000], 20, 20_000
        args.runs, args.sample, args.pyiceberg_runs = 1, 2, 1
    args.parts = {p.strip() for p in args.only.split(",") if p.strip()}
    args.format_list = [f.strip() for f in args.formats.split(",") if f.strip()]
    args.mix_list = [m.strip() for m in args.mix.split(",") if m.strip()]
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = args.parts - set(ALL_PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}")

    lake = Lake(DATA / "warehouse", write_schema(DATA / "schema.json"), args.shuffle_partitions)
    info = machine()
    print(f"machine: {info}; load average {os.getloadavg()}", flush=True)
    figures: list[Figure] = []
    started = time.perf_counter()
    spark = spark_session(lake, args.driver_memory)
    try:
        for rows in args.rows if args.parts - {"full-load"} else []:
            for fmt in args.format_list:
                for mix in args.mix_list:
                    changes = max(args.files, int(rows * args.change_ratio))
                    dataset = Dataset(rows, changes, args.files, fmt, mix)
                    print(f"CDC: {dataset.name}", flush=True)
                    measure_cdc(spark, lake, dataset, args, figures)
        if "full-load" in args.parts:
            print(f"full load: {args.full_load_rows} rows", flush=True)
            measure_full_load(spark, lake, args.full_load_rows, args, figures)
    finally:
        spark.stop()
    table = markdown(figures)
    print(table)
    out = DATA / "results" / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": info,
        "argv": list(argv),
        "seconds": round(time.perf_counter() - started, 1),
        "figures": [asdict(f) | {"median": f.median, "per_second": f.per_second} for f in figures],
    }
    out.write_text(json.dumps(document, indent=2, default=str))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

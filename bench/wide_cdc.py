"""CDC apply into a wide table, warm session: `bench.wide_sales` (40 columns) full-loaded with --rows rows,
then a batch shaped like bench/run.py's (10 % of the rows, 200 files, 10 % deletes, repeated keys).

For an A/B of the local JVM's options, run it twice, e.g. with the JVM's defaults:

    .venv/bin/python bench/wide_cdc.py --rows 1000000
    LAKE_SPARK_JAVA_OPTIONS= .venv/bin/python bench/wide_cdc.py --rows 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent / "spark_jobs")]

from datasets import DATA, Dataset, wide_cdc_files, wide_load_raw  # noqa: E402
from generate import SOURCE_SCHEMA, WIDE, write_schema  # noqa: E402
from lake_runs import Lake, apply_in_session, backup_base, backup_dir, expected_rows, refreshed, restore  # noqa: E402


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmups", type=int, default=2)
    args = parser.parse_args(argv)

    changes = args.rows // 10
    files = wide_cdc_files(args.rows, changes, args.files)
    lake = Lake(DATA / "warehouse", write_schema(DATA / "schema.json"), 4)
    database = f"wide_{args.rows}"
    config = lake.config(database)
    table_dir = lake.table_dir(database, WIDE)
    table = f"lake.{database}.{SOURCE_SCHEMA}_{WIDE}"
    os.environ.setdefault("LAKE_SPARK_DRIVER_MEMORY", "8g")
    from lakehouse.apply.full_load import full_load
    from lakehouse.base.schema import SchemaFile
    from lakehouse.io.session import LOCAL_JAVA_OPTIONS, build_session

    spark = build_session(config, "wide-cdc")
    if not backup_dir(table_dir).exists():
        schema = SchemaFile.from_dict(json.loads(lake.schema_file.read_text()))
        report = full_load(
            spark, config, schema, str(wide_load_raw(args.rows)), [f"{SOURCE_SCHEMA}.{WIDE}"], reload=True
        )
        if report.failed:
            raise SystemExit(f"full load failed: {report.to_dict()}")
        backup_base(table_dir)
    expected = expected_rows(Dataset(args.rows, changes, args.files))

    def apply(run_id: str) -> float:
        restore(table_dir)
        refreshed(spark, table)
        started = time.perf_counter()
        apply_in_session(spark, lake, database, files, run_id)
        seconds = time.perf_counter() - started
        refreshed(spark, table)
        count = spark.table(table).count()
        if count != expected:
            raise SystemExit(f"{run_id}: {count} rows after the batch, expected {expected}")
        return seconds

    for warmup in range(args.warmups):
        apply(f"warmup{warmup}")
    loads, seconds = [], []
    for run in range(args.runs):
        loads.append(round(os.getloadavg()[0], 1))
        seconds.append(round(apply(f"run{run}"), 2))
    median = statistics.median(seconds)
    java_options = os.environ.get("LAKE_SPARK_JAVA_OPTIONS", LOCAL_JAVA_OPTIONS)
    print(
        f"wide CDC, {args.rows:,} rows, {changes:,} changes in {len(files)} files, JVM options "
        f"{java_options!r}: runs {seconds} s, median {median:.2f} s ({changes / median:,.0f} changes/s), "
        f"load {loads}"
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A full load of a new table against a reload of the loaded one, alternated in one process (bench/RESULTS.md
§7): the reload also joins the table's rows, so its figures are not a new table's.

    .venv/bin/python bench/reload_vs_new.py --rows 1000000 --table wide_sales
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
sys.path[:0] = [str(BENCH), str(BENCH.parent / "spark_jobs")]

from datasets import DATA, Dataset, wide_load_raw  # noqa: E402
from generate import NARROW, SOURCE_SCHEMA, WIDE, write_schema  # noqa: E402
from lake_runs import Lake  # noqa: E402


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--table", choices=(NARROW, WIDE), default=WIDE)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of (reload, new table)")
    parser.add_argument("--runs", type=int, default=2, help="timed runs of each per round")
    args = parser.parse_args(argv)

    os.environ["LAKE_SPARK_DRIVER_MEMORY"] = "8g"
    from lakehouse.apply.full_load import full_load
    from lakehouse.base.schema import SchemaFile
    from lakehouse.io.session import build_session

    lake = Lake(DATA / "warehouse", write_schema(DATA / "schema.json"), 4)
    config = lake.config("reload_vs_new")
    schema = SchemaFile.from_dict(json.loads(lake.schema_file.read_text()))
    raw = Dataset(args.rows, 0).load_raw if args.table == NARROW else wide_load_raw(args.rows)
    qualified = f"{SOURCE_SCHEMA}.{args.table}"
    clean = config.clean_table(schema.tables[qualified].iceberg_name)
    spark = build_session(config, "reload-vs-new")
    spark.sql(f"DROP TABLE IF EXISTS {clean} PURGE")
    full_load(spark, config, schema, str(raw), [qualified])  # warm-up, and the table a reload replaces
    for _ in range(args.rounds):
        for mode in ("reload", "new table"):
            seconds = []
            for _ in range(args.runs):
                if mode == "new table":
                    spark.sql(f"DROP TABLE IF EXISTS {clean} PURGE")
                started = time.perf_counter()
                report = full_load(spark, config, schema, str(raw), [qualified], reload=mode == "reload")
                seconds.append(round(time.perf_counter() - started, 2))
                if report.failed:
                    raise RuntimeError(f"{mode}: {report.failed}")
            print(f"{mode}: {seconds} s; load {os.getloadavg()[0]:.2f}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

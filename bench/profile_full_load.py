"""Where a full load spends its time: the same LOAD files read (1) as DMS wrote them, (2) typed and
validated, both into Spark's `noop` sink, (3) copied by Spark as they are into a new Iceberg table (Spark's
own floor: no typing, no checks), then (4) the whole `full_load` of a new table; task-CPU seconds from the
Spark event log for each, so the pieces can be told apart on a shared machine.

    .venv/bin/python bench/profile_full_load.py --rows 1000000 --table wide_sales
    .venv/bin/python bench/profile_full_load.py --rows 10000000 --format parquet
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent / "spark_jobs")]

from datasets import DATA, Dataset, wide_load_raw  # noqa: E402
from experiments import session_patches  # noqa: E402
from generate import NARROW, SOURCE_SCHEMA, WIDE, write_schema  # noqa: E402
from lake_runs import Lake  # noqa: E402
from profile_cdc import stages  # noqa: E402

EVENT_LOG = DATA / "eventlog"


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--table", choices=(NARROW, WIDE), default=NARROW)
    parser.add_argument("--format", choices=("csv", "parquet"), default="csv", help="DMS DataFormat")
    parser.add_argument("--variant", default="baseline", help="see bench/experiments.py")
    parser.add_argument("--load-only", action="store_true", help="time only the full_load piece")
    parser.add_argument("--runs", type=int, default=2, help="timed runs of each piece (the last is profiled)")
    args = parser.parse_args(argv)

    if args.table == WIDE and args.format != "csv":
        parser.error("the wide table's LOAD files are CSV only")
    raw = (
        Dataset(args.rows, 0, fmt=args.format).load_raw if args.table == NARROW else wide_load_raw(args.rows)
    )
    lake = Lake(DATA / "warehouse", write_schema(DATA / "schema.json"), 4)
    EVENT_LOG.mkdir(parents=True, exist_ok=True)
    os.environ["LAKE_SPARK_DRIVER_MEMORY"] = "8g"
    os.environ["PYSPARK_SUBMIT_ARGS"] = (
        f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir={EVENT_LOG.as_uri()} pyspark-shell"
    )
    from lake_contracts.dms_files import parse_dms_key
    from lakehouse.apply.full_load import full_load
    from lakehouse.apply.run import ApplyOptions, ApplyRun
    from lakehouse.base.schema import SchemaFile
    from lakehouse.io.session import build_session

    config = lake.config("profile_full_load")
    schema = SchemaFile.from_dict(json.loads(lake.schema_file.read_text()))
    qualified = f"{SOURCE_SCHEMA}.{args.table}"
    spec = schema.tables[qualified]
    spark = build_session(config, "profile-full-load")
    app = spark.sparkContext.applicationId
    folder = raw / SOURCE_SCHEMA / args.table
    files = [parse_dms_key(p.as_uri(), p.stat().st_size) for p in sorted(folder.glob(f"LOAD*.{args.format}"))]

    def frames():
        run = ApplyRun(spark, config, schema, ApplyOptions(), "profile", "full-load")
        return run.read_typed(spec, files)

    clean = config.clean_table(spec.iceberg_name)
    copy = config.clean_table("spark_copy")

    def new_table_load() -> object:
        spark.sql(f"DROP TABLE IF EXISTS {clean} PURGE")
        spark.catalog.clearCache()
        with session_patches(spark, args.variant):
            return full_load(spark, config, schema, str(raw), [qualified])

    def spark_copy() -> None:
        read = spark.read.parquet if args.format == "parquet" else spark.read.option("header", "true").csv
        read(*(f.uri for f in files)).writeTo(copy).using("iceberg").tableProperty(
            "write.parquet.compression-codec", "zstd"
        ).createOrReplace()

    read_as_written = (
        "read Parquet (noop sink)" if args.format == "parquet" else "read CSV as text (noop sink)"
    )
    pieces: dict[str, Callable[[], object]] = {
        read_as_written: lambda: frames()[0].write.format("noop").mode("overwrite").save(),
        "read + type + validate (noop sink)": lambda: (
            frames()[1].write.format("noop").mode("overwrite").save()
        ),
        "Spark copies the files into Iceberg as they are": spark_copy,
        "full_load of a new table": new_table_load,
    }
    if args.load_only:
        pieces = {name: piece for name, piece in pieces.items() if piece is new_table_load}
    new_table_load()  # warm-up: table, JVM, JIT
    print(
        f"{qualified}, {args.rows:,} rows, {len(files)} {args.format} LOAD files, variant {args.variant}; load {os.getloadavg()[0]:.2f}"
    )
    print("| piece | wall s (runs) | task CPU s (last run) | stages over 0.1 s of task time |")
    print("| --- | --- | ---: | --- |")
    for name, piece in pieces.items():
        walls = []
        for _ in range(args.runs):
            since_ms = time.time() * 1000
            started = time.perf_counter()
            piece()
            walls.append(time.perf_counter() - started)
        time.sleep(1)  # the event log is flushed asynchronously
        log = EVENT_LOG / app
        found = [
            s
            for s in stages(log if log.exists() else log.with_name(f"{app}.inprogress"))
            if s["submitted"] >= since_ms
        ]
        detail = "; ".join(
            f"{s['name'][:24]}: {s['seconds']:.2f} s, run {s['run_seconds']:.2f}, CPU {s['cpu_seconds']:.2f}, "
            f"GC {s['gc_seconds']:.2f}"
            for s in found
            if s["run_seconds"] > 0.1
        )
        cpu = sum(s["cpu_seconds"] for s in found)
        print(f"| {name} | {', '.join(f'{w:.2f}' for w in walls)} | {cpu:.2f} | {detail} |", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

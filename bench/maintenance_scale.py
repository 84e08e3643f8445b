"""Maintenance sized to the changes: the same batches into tables of different sizes, then one maintenance pass.

    .venv/bin/python bench/maintenance_scale.py --rows 1000000,10000000 --batches 20 --changes-per-batch 2000

Each table (id, amount, status, note) is written in files of `--rows-per-file` rows, with its target file size
set to their size, then takes the same `--batches` merge-on-read MERGEs: the same keys whatever the table's size
(half spread over the first `--hot-keys` ids, a quarter over the first ten times as many, updates and deletes; a quarter
inserts of new ids). Then `lakehouse.maintenance.run.maintain` runs twice (as the state machine would, the
second time with nothing new). Recorded per table: the bytes the first pass found due and rewrote, what it
deferred, its Spark jobs and seconds, the second pass's jobs and seconds, and the best of three full-scan
timings before and after the pass against a fresh copy of the same rows (one write). Results:
bench/results/maintenance-scale-<time>.json and a Markdown table on stdout (bench/RESULTS.md). The machine's
load average is recorded with them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "spark_jobs"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions" / "shared"))

RESULTS = Path(__file__).resolve().parent / "results"
SCAN = "SELECT count(*), sum(amount), max(note), count(DISTINCT status) FROM {t}"
MERGE_ON_READ = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
}


def best_of(spark: Any, sql: str, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        spark.sql(sql).collect()
        times.append(time.perf_counter() - started)
    return round(min(times), 3)


def create(spark: Any, table: str, rows: int, rows_per_file: int) -> None:
    from pyspark.sql import functions as F

    properties = ", ".join(f"'{k}'='{v}'" for k, v in MERGE_ON_READ.items())
    spark.sql(
        f"CREATE TABLE {table} (id bigint, amount double, status string, note string) USING iceberg "
        f"TBLPROPERTIES ({properties})"
    )
    files = max(1, rows // rows_per_file)
    frame = spark.range(0, rows, numPartitions=files).select(
        "id",
        (F.col("id") % 9973 / 7).alias("amount"),
        F.concat(F.lit("s"), (F.col("id") % 5).cast("string")).alias("status"),
        F.concat(F.lit("note "), F.sha1(F.col("id").cast("string"))).alias("note"),
    )
    frame.writeTo(table).append()
    sizes = sorted(r[0] for r in spark.sql(f"SELECT file_size_in_bytes FROM {table}.data_files").collect())
    target = sizes[len(sizes) // 2]
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.target-file-size-bytes'='{target}')")


def merge_batch(spark: Any, table: str, rows: int, number: int, changes: int, hot_keys: int) -> None:
    """One batch: the same keys and values for every table size (a seed per batch)."""
    from pyspark.sql import functions as F

    seed = 1000 + number
    quarter = changes // 4
    hot = spark.range(changes // 2).select((F.rand(seed) * hot_keys).cast("long").alias("id"))
    spread = spark.range(quarter).select(
        (F.rand(seed + 1) * min(rows, 10 * hot_keys)).cast("long").alias("id")
    )
    new = spark.range(quarter).select((F.lit(rows + number * changes) + F.col("id")).alias("id"))
    batch = (
        hot.union(spread)
        .union(new)
        .dropDuplicates(["id"])
        .select(
            "id",
            (F.rand(seed + 2) * 1000).alias("amount"),
            F.lit("updated").alias("status"),
            F.concat(F.lit(f"batch {number} "), F.col("id").cast("string")).alias("note"),
            (F.rand(seed + 3) < 0.1).alias("is_delete"),
        )
    )
    batch.createOrReplaceTempView("batch")
    spark.sql(
        f"MERGE INTO {table} t USING batch s ON t.id = s.id "
        "WHEN MATCHED AND s.is_delete THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET amount = s.amount, status = s.status, note = s.note "
        "WHEN NOT MATCHED AND NOT s.is_delete THEN INSERT (id, amount, status, note) "
        "VALUES (s.id, s.amount, s.status, s.note)"
    )


def run_size(spark: Any, config: Any, rows: int, args: argparse.Namespace) -> dict[str, Any]:
    from lakehouse.maintenance.run import MaintenanceOptions, maintain

    table = config.clean_table(f"orders_{rows}")
    started = time.perf_counter()
    create(spark, table, rows, args.rows_per_file)
    created = time.perf_counter() - started
    for number in range(args.batches):
        merge_batch(spark, table, rows, number, args.changes_per_batch, args.hot_keys)
    scan_before = best_of(spark, SCAN.format(t=table))
    options = MaintenanceOptions(remove_orphans=False, rewrite_mb_per_pass=args.rewrite_mb)
    first = maintain(spark, config, options, run_id="first")
    second = maintain(spark, config, options, run_id="second")
    scan_after = best_of(spark, SCAN.format(t=table))
    fresh = config.clean_table(f"fresh_{rows}")
    spark.sql(f"CREATE TABLE {fresh} USING iceberg AS SELECT * FROM {table}")
    scan_fresh = best_of(spark, SCAN.format(t=fresh))
    spark.sql(f"DROP TABLE {fresh}")
    [entry] = [t for t in first.tables if t.table == table]
    [again] = [t for t in second.tables if t.table == table]
    spark.sql(f"DROP TABLE {table}")
    return {
        "rows": rows,
        "create_seconds": round(created, 1),
        "data_files_before": entry.data_files_before,
        "delete_files_before": entry.delete_files_before,
        "due_bytes": entry.due_bytes,
        "rewritten_bytes": entry.rewritten_bytes,
        "deferred_bytes": entry.deferred_bytes,
        "rewritten_data_files": entry.rewritten_data_files,
        "removed_delete_files": entry.removed_delete_files,
        "pass_seconds": entry.seconds,
        "pass_spark_jobs": first.spark_jobs,
        "second_pass_nothing_due": again.nothing_due,
        "second_pass_spark_jobs": second.spark_jobs,
        "second_pass_seconds": again.seconds,
        "scan_before": scan_before,
        "scan_after": scan_after,
        "scan_fresh": scan_fresh,
    }


def bench_lake(name: str) -> tuple[Path, Any, Any]:
    """A new local lake in a temporary folder (its clean namespace made) and a session over it (4 GB driver)."""
    os.environ.setdefault("LAKE_SPARK_DRIVER_MEMORY", "4g")
    from lakehouse.base.config import LakeConfig
    from lakehouse.io.session import build_session

    folder = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    config = LakeConfig(
        warehouse=str(folder / "warehouse"),
        staging_dir=str(folder / "staging"),
        clean_database="bench_clean",
        shuffle_partitions=2,
    )
    spark = build_session(config, f"bench-{name}")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {config.catalog_name}.{config.clean_database}")
    return folder, config, spark


def run_document(args: argparse.Namespace, load_before: tuple[float, float, float]) -> dict[str, Any]:
    """What a result JSON starts with: when, the arguments, the machine's load before and after."""
    return {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "arguments": vars(args),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1000000,10000000", help="table sizes, comma-separated")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--changes-per-batch", type=int, default=2000)
    parser.add_argument(
        "--hot-keys", type=int, default=50_000, help="half of each batch's keys are below this"
    )
    parser.add_argument("--rows-per-file", type=int, default=250_000)
    parser.add_argument("--rewrite-mb", type=float, default=4096, help="the pass's budget (MB)")
    args = parser.parse_args(argv)

    folder, config, spark = bench_lake("maintenance-scale")
    load = os.getloadavg()
    results = []
    try:
        for rows in (int(r) for r in args.rows.split(",")):
            results.append(run_size(spark, config, rows, args))
            print(json.dumps(results[-1]), flush=True)
    finally:
        spark.stop()
        shutil.rmtree(folder, ignore_errors=True)
    document = run_document(args, load) | {"results": results}
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"maintenance-scale-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(document, indent=2))
    print(
        "| rows | due MB | rewritten MB | deferred MB | pass s | pass jobs | 2nd pass jobs | 2nd pass s "
        "| scan before / after / fresh (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['rows']:,} | {r['due_bytes'] / 1e6:.1f} | {r['rewritten_bytes'] / 1e6:.1f} "
            f"| {r['deferred_bytes'] / 1e6:.1f} | {r['pass_seconds']} | {r['pass_spark_jobs']} "
            f"| {r['second_pass_spark_jobs']} | {r['second_pass_seconds']} "
            f"| {r['scan_before']} / {r['scan_after']} / {r['scan_fresh']} |"
        )
    print(
        f"results: {out}; load average {document['load_average_before']} -> {document['load_average_after']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

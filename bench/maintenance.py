"""Long-run read cost: many small CDC batches into one table, with and without table maintenance.

    .venv/bin/python bench/maintenance.py --rows 1000000 --batches 300 --changes-per-batch 2000 \
        --measure-every 50 --maintain-every 50

For each variant (`none`: no maintenance; `maintained`: `lakehouse.maintenance.run.maintain` every N
batches, as the state machine schedules it) the table gets the same batches, and after every
`--measure-every` batches it records: data files, delete files, snapshots, metadata size on disk, and the
best of three timings of a full scan, a point lookup and an aggregate. At the end a freshly loaded copy of
the table (the same rows, one write) gives the reference timings; the ratios are variant / fresh.
Results: bench/results/maintenance-<time>.json and a Markdown table on stdout (bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "spark_jobs"))

from datasets import DATA, Dataset
from generate import NARROW, SOURCE_SCHEMA, CdcSpec, ensure_dataset, write_cdc, write_schema

RESULTS = Path(__file__).resolve().parent / "results"
QUERIES = {
    "full scan": "SELECT count(*), sum(amount), max(updated_at) FROM {t}",
    "point lookup": "SELECT * FROM {t} WHERE order_id = 123457",
    "aggregate": "SELECT status, count(*), sum(quantity), avg(amount) FROM {t} GROUP BY status",
}


def best_of(spark, sql: str, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        spark.sql(sql).collect()
        times.append(time.perf_counter() - started)
    return min(times)


def table_shape(spark, table: str, folder: Path) -> dict[str, float]:
    files = spark.sql(
        f"SELECT count_if(content = 0) AS data, count_if(content <> 0) AS deletes FROM {table}.files"
    ).first()
    snapshots = spark.sql(f"SELECT count(*) AS n FROM {table}.snapshots").first()["n"]
    metadata = sum(p.stat().st_size for p in (folder / "metadata").glob("*") if p.is_file())
    return {
        "data_files": files["data"],
        "delete_files": files["deletes"],
        "snapshots": snapshots,
        "metadata_mb": round(metadata / 1e6, 2),
    }


def timings(spark, table: str) -> dict[str, float]:
    return {name: round(best_of(spark, sql.format(t=table)), 3) for name, sql in QUERIES.items()}


def interleaved_timings(
    spark, table: str, fresh: str, runs: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Each query's best time on `table` and on `fresh`, the two run in turns `runs` times."""
    best: dict[str, dict[str, float]] = {table: {}, fresh: {}}
    for _ in range(runs):
        for name, sql in QUERIES.items():
            for side in (table, fresh):
                took = best_of(spark, sql.format(t=side), runs=1)
                best[side][name] = round(min(best[side].get(name, took), took), 3)
    return best[table], best[fresh]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--changes-per-batch", type=int, default=2000)
    parser.add_argument("--measure-every", type=int, default=50)
    parser.add_argument("--maintain-every", type=int, default=50)
    parser.add_argument("--variants", default="none,maintained")
    parser.add_argument("--final-runs", type=int, default=7, help="the last comparison's turns a side")
    args = parser.parse_args(argv)

    os.environ.setdefault("LAKE_SPARK_DRIVER_MEMORY", "6g")
    from lake_contracts.documents import Manifest, ManifestFile
    from lakehouse.apply.cdc import apply_cdc
    from lakehouse.apply.full_load import full_load
    from lakehouse.base.config import LakeConfig
    from lakehouse.base.schema import SchemaFile
    from lakehouse.io.session import build_session
    from lakehouse.maintenance.run import MaintenanceOptions, maintain

    load_raw = Dataset(args.rows, 0).load_raw
    changes = args.batches * args.changes_per_batch
    cdc_folder = ensure_dataset(
        DATA / f"longrun-{args.rows}-{args.batches}x{args.changes_per_batch}",
        lambda folder: write_cdc(folder / "raw", CdcSpec(args.rows, changes, args.batches)),
    )
    files = sorted((cdc_folder / "raw" / SOURCE_SCHEMA / NARROW).glob("*.csv"))
    schema = SchemaFile.from_dict(json.loads(write_schema(DATA / "schema.json").read_text()))
    warehouse = DATA / "maintenance-warehouse"
    shutil.rmtree(warehouse, ignore_errors=True)
    spark = build_session(LakeConfig(warehouse=str(warehouse)), "bench-maintenance")
    # Maintenance as scheduled between CDC runs: snapshots older than the retention go; in the bench the
    # retention is a number of batches' worth of time (a batch here takes seconds, not a minute).
    options = MaintenanceOptions(snapshot_retention_hours=0, retain_last=args.maintain_every)
    results: dict[str, Any] = {
        "command": "bench/maintenance.py " + " ".join(argv),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_average_start": os.getloadavg(),
        "variants": {},
    }
    for variant in args.variants.split(","):
        config = LakeConfig(
            warehouse=str(warehouse), clean_database=f"longrun_{variant}", shuffle_partitions=4
        )
        table = config.clean_table(f"{SOURCE_SCHEMA}_{NARROW}")
        folder = warehouse / config.clean_database / f"{SOURCE_SCHEMA}_{NARROW}"
        full_load(spark, config, schema, str(load_raw), tables=[f"{SOURCE_SCHEMA}.{NARROW}"])
        rows = [{"batches": 0, **table_shape(spark, table, folder), **timings(spark, table)}]
        apply_seconds, maintenance_seconds = 0.0, []
        for number, path in enumerate(files, start=1):
            started = time.perf_counter()
            report = apply_cdc(spark, config, schema, Manifest(f"b{number}", [ManifestFile(str(path))]))
            apply_seconds += time.perf_counter() - started
            assert report.ok, report.failed
            if variant == "maintained" and number % args.maintain_every == 0:
                started = time.perf_counter()
                done = maintain(
                    spark, config, options, f"m{number}", now=datetime.utcnow() + timedelta(seconds=1)
                )
                maintenance_seconds.append(round(time.perf_counter() - started, 2))
                assert not done.failed, done.failed
            if number % args.measure_every == 0:
                rows.append({"batches": number, **table_shape(spark, table, folder), **timings(spark, table)})
                print(variant, rows[-1], f"load {os.getloadavg()[0]:.2f}", flush=True)
        fresh = f"{table}_fresh"
        spark.table(table).writeTo(fresh).using("iceberg").create()
        # The ratio from the table and its fresh copy measured in turns, each query's best of `--final-runs`
        # a side: the load of a shared machine drifts between two measurements taken minutes apart.
        final, reference = interleaved_timings(spark, table, fresh, args.final_runs)
        results["variants"][variant] = {
            "measurements": rows,
            "final_interleaved": final,
            "fresh_copy": reference,
            "fresh_copy_shape": table_shape(spark, fresh, folder.with_name(folder.name + "_fresh")),
            "ratio_to_fresh": {q: round(final[q] / reference[q], 2) for q in QUERIES},
            "apply_seconds_total": round(apply_seconds, 1),
            "maintenance_seconds": maintenance_seconds,
        }
    results["load_average_end"] = os.getloadavg()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"maintenance-{datetime.now(UTC):%Y%m%dT%H%M%S}.json"
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"\n{out}\n")
    print(
        "| variant | batches | data files | delete files | snapshots | metadata MB | full scan s | point s | aggregate s |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for variant, body in results["variants"].items():
        for row in body["measurements"]:
            print(
                f"| {variant} | {row['batches']} | {row['data_files']} | {row['delete_files']} | {row['snapshots']} | "
                f"{row['metadata_mb']} | {row['full scan']} | {row['point lookup']} | {row['aggregate']} |"
            )
        final = body["final_interleaved"]
        print(
            f"| {variant} | last, in turns with its copy | | | | | {final['full scan']} | {final['point lookup']} | {final['aggregate']} |"
        )
        print(
            f"| {variant} | fresh copy | | | | | {body['fresh_copy']['full scan']} | {body['fresh_copy']['point lookup']} | {body['fresh_copy']['aggregate']} |"
        )
        print(
            f"| {variant} | ratio to fresh | | | | | {body['ratio_to_fresh']['full scan']} | {body['ratio_to_fresh']['point lookup']} | {body['ratio_to_fresh']['aggregate']} |"
        )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A constant CDC batch (1% of the keys: updates, deletes, inserts) into a table of N rows, unpartitioned
or bucketed (the schema file's `partition_by`): seconds, what the MERGE read (Iceberg's
scan metrics of the target: files, bytes) and what it wrote or removed (the commit's snapshot summary).

    .venv/bin/python bench/partitioned_merge.py --rows 1000000 --layouts none,bucket16,bucket64 \
        [--keys random|newest] [--batches 2]

`--keys random` draws the batch's keys uniformly over the table; `newest` from its newest 2% (serial
keys: the recent rows are the ones changed). The table is written as the full load writes it (the
library's replace_table with the layout), then the batches are applied by apply_cdc from DMS CSV files.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "spark_jobs")]

from lakehouse.apply.cdc import apply_cdc  # noqa: E402
from lakehouse.apply.clean_table import clean_schema  # noqa: E402
from lakehouse.base.config import LakeConfig  # noqa: E402
from lakehouse.base.schema import SchemaFile  # noqa: E402
from lakehouse.io.frames import one_row  # noqa: E402
from lakehouse.io.iceberg import ensure_namespace, replace_table  # noqa: E402
from lakehouse.io.session import build_session  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from tests.support import DmsWriter, manifest  # noqa: E402

TABLE = "sales.customer"
COLUMNS = ["id", "name", "balance", "city"]
LAYOUTS = {"none": [], **{f"bucket{n}": [f"bucket({n}, id)"] for n in (4, 8, 16, 32, 64, 128, 256)}}


def schema_file(layout: list[str]) -> SchemaFile:
    return SchemaFile.from_dict(
        {
            "tables": {
                TABLE: {
                    "primary_key": ["id"],
                    "columns": [
                        {"name": "id", "type": "bigint"},
                        {"name": "name", "type": "varchar(40)"},
                        {"name": "balance", "type": "decimal(12,2)"},
                        {"name": "city", "type": "varchar(30)"},
                    ],
                    "partition_by": layout,
                }
            }
        }
    )


def build_table(spark: SparkSession, config: LakeConfig, schema: SchemaFile, rows: int) -> str:
    spec = schema.tables[TABLE]
    table = config.clean_table(spec.iceberg_name)
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    frame = spark.range(1, rows + 1, numPartitions=8).select(
        F.col("id"),
        F.concat(F.lit("customer "), F.col("id")).alias("name"),
        (F.col("id") % 100000 / 100).cast("decimal(12,2)").alias("balance"),
        F.concat(F.lit("city "), F.col("id") % 997).alias("city"),
        F.lit("2026-01-01 00:00:00").cast("timestamp").alias("dms_commit_ts"),
        F.lit("1").cast(clean_schema(spec)["dms_change_seq"].dataType).alias("dms_change_seq"),
    )
    replace_table(spark, table, frame, {}, {}, "bench", spec.partition_by)
    return table


def batch_keys(rows: int, count: int, keys: str, seed: int) -> list[int]:
    chooser = random.Random(seed)
    if keys == "newest":
        return chooser.sample(range(max(0, rows - 2 * count) + 1, rows + 1), count)
    return chooser.sample(range(1, rows + 1), count)


def write_batch(dms: DmsWriter, rows: int, count: int, keys: str, seed: int, first_new: int) -> str:
    """count changes: 70% updates and 20% deletes of existing keys, 10% inserts of new keys."""
    chosen = batch_keys(rows, count * 9 // 10, keys, seed)
    changes: list[tuple[str, tuple]] = []
    for n, key in enumerate(chosen):
        if n % 9 < 7:
            changes.append(("U", (key, f"updated {key}", n % 1000, "changed")))
        else:
            changes.append(("D", (key, None, None, None)))
    for key in range(first_new, first_new + count - len(chosen)):
        changes.append(("I", (key, f"new {key}", 1, "new")))
    random.Random(seed).shuffle(changes)
    return dms.cdc(TABLE, COLUMNS, changes)


def scan_metrics(spark: SparkSession, after: int, table: str) -> dict[str, int]:
    """Iceberg's scan metrics of the MERGE into `table` (the SQL executions after `after` whose plan
    writes it: WriteDelta), summed; "merge executions" says over how many (a nested execution repeats
    the plan, so per-MERGE figures are these divided by it)."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(30_000)
    store = spark._jsparkSession.sharedState().statusStore()
    executions = store.executionsList()
    totals: dict[str, int] = {}
    for i in range(executions.size()):
        execution = executions.apply(i)
        plan = execution.physicalPlanDescription()
        if execution.executionId() <= after or "WriteDelta" not in plan or table.split(".")[-1] not in plan:
            continue
        totals["merge executions"] = totals.get("merge executions", 0) + 1
        totals["dynamic pruning"] = totals.get("dynamic pruning", 0) + plan.count("dynamicpruning")
        values = store.executionMetrics(execution.executionId())
        metrics = execution.metrics()
        for j in range(metrics.size()):
            metric = metrics.apply(j)
            name = metric.name()
            if any(w in name for w in ("data files", "file size", "delete files")):
                value = values.get(metric.accumulatorId())
                if value.isDefined():
                    text = str(value.get()).split("\n")[0].replace(",", "")
                    try:
                        number = int(float(text.split()[0]))
                    except ValueError:
                        continue
                    totals[name] = totals.get(name, 0) + number
    return totals


def last_execution(spark: SparkSession) -> int:
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    return max((executions.apply(i).executionId() for i in range(executions.size())), default=-1)


def commit_summary(spark: SparkSession, table: str) -> dict[str, str]:
    row = one_row(spark.sql(f"SELECT summary FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"))
    keep = (
        "added-data-files",
        "removed-data-files",
        "added-delete-files",
        "added-position-deletes",
        "added-files-size",
        "removed-files-size",
        "total-data-files",
        "total-delete-files",
        "total-files-size",
    )
    return {k: row["summary"].get(k, "0") for k in keep}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--layouts", default="none,bucket16")
    parser.add_argument("--keys", choices=["random", "newest"], default="random")
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--work", default=None)
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-partitioned-"))
    config = LakeConfig(
        warehouse=str(work / "warehouse"), staging_dir=str(work / "staging"), shuffle_partitions=4
    )
    os.environ.setdefault("LAKE_SPARK_DRIVER_MEMORY", "3g")
    spark = build_session(config, "bench-partitioned")
    count = int(args.rows * args.fraction)
    results = []
    for layout_name in args.layouts.split(","):
        layout = LAYOUTS[layout_name]
        schema = schema_file(layout)
        lake = LakeConfig(
            warehouse=config.warehouse,
            staging_dir=config.staging_dir,
            shuffle_partitions=4,
            clean_database=f"clean_{layout_name}",
        )
        started = time.monotonic()
        table = build_table(spark, lake, schema, args.rows)
        load_seconds = time.monotonic() - started
        dms = DmsWriter(work / f"raw_{layout_name}")
        for number in range(args.batches):
            path = write_batch(
                dms, args.rows, count, args.keys, seed=number, first_new=args.rows + 1 + number * count
            )
            before = last_execution(spark)
            begun = time.monotonic()
            report = apply_cdc(spark, lake, schema, manifest(path, run_id=f"b{number}"))
            seconds = time.monotonic() - begun
            assert report.ok, report.failed
            result = {
                "layout": layout_name,
                "rows": args.rows,
                "keys": args.keys,
                "batch": number,
                "changes": count,
                "seconds": round(seconds, 2),
                "load_seconds": round(load_seconds, 1),
                "scan": scan_metrics(spark, before, table),
                "commit": commit_summary(spark, table),
            }
            results.append(result)
            print(json.dumps(result), flush=True)
    spark.stop()
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

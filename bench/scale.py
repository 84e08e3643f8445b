"""Cost growth with the table: one constant batch of DMS Parquet changes (1M mixed: 10%
deletes, 15% inserts of new keys, 75% updates, half of them on a hot 5% of the keys) applied to tables of 1M,
10M and 100M rows, and the full load of each table. Not a test: nothing here asserts a timing.

    .venv/bin/python bench/scale.py --rows 1000000 10000000 100000000 --changes 1000000

For each size: the table is built once by our full load from DMS Parquet LOAD files (timed: the full-load
figure; cached with run.py's datasets and base snapshots in bench/data/), then `--warmups` throw-away applies
and `--runs` measured applies of the same batch, each from the base snapshot. Per measured apply: seconds,
what the MERGE read of the table (Iceberg's scan metrics: data files, bytes), what the commit wrote (snapshot
summary), every Spark stage with its seconds and task-CPU seconds (event log), and the JVM's peak resident
memory. Disk: the table's files after the full load. Row counts are checked against the generator's.
Results: printed as Markdown and written to bench/results/scale-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent / "spark_jobs"), str(BENCH.parent)]

from datasets import DATA, Dataset  # noqa: E402
from generate import write_schema  # noqa: E402
from lake_runs import (  # noqa: E402
    Lake,
    apply_in_session,
    build_base,
    expected_rows,
    refreshed,
    restore,
    table_name,
)
from partitioned_merge import commit_summary, last_execution, scan_metrics  # noqa: E402
from profile_cdc import stages  # noqa: E402
from timings import Figure, load_average, machine  # noqa: E402

EVENT_LOG = DATA / "eventlog"
RESULTS = BENCH / "results"


class PeakMemory:
    """The peak resident memory (VmHWM) of the JVMs under this process, read from /proc: the kernel keeps
    each process's high-water mark, so sampling only finds the JVM; the mark itself is exact."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self.peak_bytes = 0
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _children(self) -> list[int]:
        parents: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    parents[int(entry.name)] = int(fields[1])
                except (OSError, IndexError, ValueError):
                    continue
        mine, found = {os.getpid()}, []
        changed = True
        while changed:
            changed = False
            for pid, parent in parents.items():
                if parent in mine and pid not in mine:
                    mine.add(pid)
                    found.append(pid)
                    changed = True
        return found

    def _watch(self) -> None:
        while not self._stop.wait(2.0):
            for pid in self._children():
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                for line in status.splitlines():
                    if line.startswith("VmHWM:"):
                        self.peak_bytes = max(self.peak_bytes, int(line.split()[1]) * 1024)

    def stop(self) -> None:
        self._stop.set()


def folder_bytes(folder: Path, suffix: str = "") -> tuple[int, int]:
    files = [p for p in folder.rglob(f"*{suffix}") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def stage_table(since_ms: float, app: str) -> list[dict[str, Any]]:
    log = EVENT_LOG / app
    if not log.exists():  # the event log of a running application has an .inprogress suffix
        log = EVENT_LOG / f"{app}.inprogress"
    return [s for s in stages(log) if s["submitted"] >= since_ms]


def measure(spark, lake: Lake, rows: int, args: argparse.Namespace, memory: PeakMemory) -> dict[str, Any]:
    dataset = Dataset(rows, args.changes, args.files, "parquet")
    database = lake.database(rows, "parquet")
    figures: list[Figure] = []
    memory.peak_bytes = 0
    table_dir = build_base(spark, lake, dataset, figures)
    load_peak = memory.peak_bytes
    table = table_name(lake, database)
    files = dataset.cdc_files
    expected = expected_rows(dataset)
    data_files, data_bytes = folder_bytes(table_dir / "data", ".parquet")
    result: dict[str, Any] = {
        "rows": rows,
        "changes": args.changes,
        "batch_files": len(files),
        "batch_bytes": sum(f.stat().st_size for f in files),
        "table_data_files": data_files,
        "table_bytes": data_bytes,
        "full_load": [
            {"seconds": f.seconds[0], "load": f.load[0], "peak_rss_bytes": load_peak} for f in figures
        ],
        "applies": [],
    }
    for number in range(args.warmups + args.runs):
        restore(table_dir)
        refreshed(spark, table)
        spark.catalog.clearCache()
        memory.peak_bytes = 0
        before = last_execution(spark)
        since_ms = time.time() * 1000
        load = load_average()
        started = time.perf_counter()
        apply_in_session(spark, lake, database, files, f"scale-{rows}-{number}")
        seconds = time.perf_counter() - started
        refreshed(spark, table)
        count = spark.table(table).count()
        if count != expected:
            raise RuntimeError(
                f"{rows} rows, run {number}: {count} rows after the batch, expected {expected}"
            )
        warmup = number < args.warmups
        print(
            f"  {rows:,} rows {'warm-up' if warmup else 'run'} {number}: {seconds:.2f} s (load {load})",
            flush=True,
        )
        if warmup:
            continue
        stage_rows = stage_table(since_ms, spark.sparkContext.applicationId)
        result["applies"].append(
            {
                "seconds": round(seconds, 2),
                "load": load,
                "peak_rss_bytes": memory.peak_bytes,
                "scan": scan_metrics(spark, before, table),
                "commit": commit_summary(spark, table),
                "stages": stage_rows,
                "task_cpu_seconds": round(sum(s["cpu_seconds"] for s in stage_rows), 2),
            }
        )
    return result


def markdown(results: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| table rows | full load s | batch s (runs) | task CPU s | target files read (skipped) | target MB read "
        "| files written (data + delete) | MB written | table MB | JVM peak RSS GB (load / batch) |",
        "| ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for r in results:
        applies = r["applies"]
        last = applies[-1]
        scan, commit = last["scan"], last["commit"]
        executions = max(1, scan.get("merge executions", 1))
        read_files = next((v for k, v in scan.items() if "result data files" in k), 0) // executions
        read_bytes = next((v for k, v in scan.items() if "total data file size" in k), 0) // executions
        skipped = next((v for k, v in scan.items() if "skipped data files" in k), 0) // executions
        load_seconds = r["full_load"][0]["seconds"] if r["full_load"] else float("nan")
        load_peak = r["full_load"][0]["peak_rss_bytes"] / 2**30 if r["full_load"] else float("nan")
        runs = ", ".join(f"{a['seconds']:.1f}" for a in applies)
        lines.append(
            f"| {r['rows']:,} | {load_seconds:.1f} | {runs} "
            f"| {last['task_cpu_seconds']:.1f} | {read_files} ({skipped}) | {read_bytes / 2**20:.1f} "
            f"| {commit['added-data-files']} + {commit['added-delete-files']} "
            f"| {int(commit['added-files-size']) / 2**20:.1f} | {r['table_bytes'] / 2**20:.0f} "
            f"| {load_peak:.1f} / {max(a['peak_rss_bytes'] for a in applies) / 2**30:.1f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000, 100_000_000])
    parser.add_argument("--changes", type=int, default=1_000_000, help="changes in the constant batch")
    parser.add_argument("--files", type=int, default=200, help="DMS files of the batch")
    parser.add_argument("--warmups", type=int, default=1, help="throw-away applies per size")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--shuffle-partitions", type=int, default=0, help="0: derived, as the jobs do")
    parser.add_argument("--driver-memory", default="8g")
    args = parser.parse_args(argv)

    EVENT_LOG.mkdir(parents=True, exist_ok=True)
    os.environ["LAKE_SPARK_DRIVER_MEMORY"] = args.driver_memory
    os.environ["PYSPARK_SUBMIT_ARGS"] = (
        f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir={EVENT_LOG.as_uri()} pyspark-shell"
    )
    from lakehouse.io.session import APPLY_TUNING, build_session

    lake = Lake(DATA / "warehouse", write_schema(DATA / "schema.json"), args.shuffle_partitions)
    info = machine()
    print(f"machine: {info}; load average {os.getloadavg()}", flush=True)
    memory = PeakMemory()
    started = time.perf_counter()
    spark = build_session(lake.config("bench"), "bench-scale", APPLY_TUNING)
    results = []
    try:
        for rows in args.rows:
            print(f"{rows:,} rows, a batch of {args.changes:,} changes", flush=True)
            results.append(measure(spark, lake, rows, args, memory))
    finally:
        spark.stop()
        memory.stop()
    print(markdown(results))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"scale-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    document = {
        "machine": info,
        "argv": list(argv),
        "seconds": round(time.perf_counter() - started, 1),
        "results": results,
    }
    out.write_text(json.dumps(document, indent=2, default=str))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

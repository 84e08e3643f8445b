"""The engine's floor of a CDC apply: what Spark + Iceberg alone cost for the irreducible parts of applying the
batch of `bench/run.py --rows 10000000 --formats parquet --only cdc-session` (1M changes from 200 DMS Parquet
files into the 10M-row table), beside the pipeline's own apply of the same batch, by step, in one warm session.

    .venv/bin/python bench/cdc_floor.py --rows 10000000 --runs 3 --out bench/results/cdc-floor-<time>

The floor's steps, each its own query (the event log gives every stage's task CPU and every job's step):
- read:    the batch's files, the columns the apply needs (all of them: the Op, the sequence, the time, the row),
           into Spark's noop sink
- latest:  the same read, the last change per key (`max_by` over the sequence's text, fixed width in DMS), no
           typing, no checks, into noop
- merge:   one bare Iceberg MERGE INTO the table (a fresh copy each run: its base snapshot restored) from that
           query: delete, update, insert by the Op, the table's own properties (merge-on-read), the two metadata
           columns cast from the change's texts; the whole floor of an apply in one statement
- merge-kept: the same MERGE from the latest changes kept first by a local checkpoint (as the apply keeps its
           batch): the MERGE's own share; the checkpoint itself is `keep`
- append-kept: the kept latest changes appended to the table, no target read: what a write of the batch costs
           alone (an apply by equality deletes would add a file of the keys to it, and move the match to readers)
- empty-commit: one Iceberg commit of no rows (an append)
The pipeline's apply (`apply_cdc`, as bench/run.py's warm session runs it) is split by the function that ran
each job: the first pass (`typed_batch`), the tombstones and quarantine (`ApplyRun.before_commits`), the MERGE
(`merge_changes`), the ledger (`ApplyRun.finish`), and the rest (the ledger's read, the files' schema). Rounds
alternate the floor's order against the apply's. Uses the datasets and base snapshots of bench/run.py (run it
once at that size first). Prints a Markdown table of medians; writes every run to <out>/runs.jsonl.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent / "spark_jobs")]

from datasets import DATA, Dataset  # noqa: E402
from generate import write_schema  # noqa: E402
from lake_runs import (  # noqa: E402
    Lake,
    apply_in_session,
    backup_dir,
    check_rows,
    expected_rows,
    reset_table,
    spark_session,
    table_name,
)
from profile_cdc import EVENT_LOG, stages  # noqa: E402
from timings import load_average  # noqa: E402

STEP = "bench.step"
FLOOR_STEPS = ("read", "latest", "merge", "keep", "merge-kept", "append-kept", "empty-commit")
OURS_STEPS = ("first pass", "tombstones, quarantine", "MERGE", "ledger", "rest")


@contextlib.contextmanager
def step(spark: Any, name: str) -> Iterator[None]:
    """Jobs started meanwhile by this thread (and the subqueries it starts) carry `name` in the event log."""
    context = spark.sparkContext
    before = context.getLocalProperty(STEP)
    context.setLocalProperty(STEP, name)
    try:
        yield
    finally:
        context.setLocalProperty(STEP, before)


def labelled(spark: Any, owner: Any, attribute: str, name: str, run: Callable[[], str]) -> Callable[[], None]:
    """Patch `owner.attribute` so its jobs carry `<name>#<run()>`; returns the undo."""
    original = getattr(owner, attribute)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with step(spark, f"ours {name}#{run()}"):
            return original(*args, **kwargs)

    setattr(owner, attribute, wrapper)
    return lambda: setattr(owner, attribute, original)


def floor_queries(spark: Any, files: Sequence[Path], table: str) -> dict[str, Callable[[], Any]]:
    from pyspark.sql import functions as F

    target = spark.table(table).schema
    data_columns = [f.name for f in target.fields if not f.name.startswith("dms_")]
    read = spark.read.parquet(*[str(f) for f in files]).select(
        "Op", "dms_timestamp", "AR_H_CHANGE_SEQ", *data_columns
    )
    key = data_columns[0]  # order_id, the table's key
    payload = [c for c in read.columns if c != key]
    latest = (
        read.groupBy(key)
        .agg(F.max_by(F.struct(*payload), F.col("AR_H_CHANGE_SEQ")).alias("last"))
        .select(key, *[F.col(f"last.{c}").alias(c) for c in payload])
    )
    typed_types = {f.name: f.dataType for f in target.fields}
    typed = latest.select(
        *[F.col(c).cast(typed_types[c]).alias(c) for c in data_columns],
        F.to_timestamp("dms_timestamp").alias("dms_commit_ts"),
        F.col("AR_H_CHANGE_SEQ").cast(typed_types["dms_change_seq"]).alias("dms_change_seq"),
        "Op",
    )

    def filtered(frame: Any) -> Any:  # as merge_changes: a filtered batch gets the runtime Bloom filter
        return frame.where(F.col("Op").isin("I", "U", "D"))

    columns = [f.name for f in target.fields]
    statement = (
        f"MERGE INTO {table} t USING {{view}} s ON t.{key} = s.{key} "
        "WHEN MATCHED AND s.Op = 'D' THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {', '.join(f't.{c} = s.{c}' for c in columns if c != key)} "
        f"WHEN NOT MATCHED AND s.Op <> 'D' THEN INSERT ({', '.join(columns)}) "
        f"VALUES ({', '.join(f's.{c}' for c in columns)})"
    )
    kept: dict[str, Any] = {}

    def merge(frame: Any) -> None:
        frame.createOrReplaceTempView("floor_source")
        spark.sql(statement.format(view="floor_source"))
        spark.catalog.dropTempView("floor_source")

    def keep() -> None:
        kept["source"] = typed.localCheckpoint(eager=True)

    def empty_commit() -> None:
        spark.createDataFrame([], target).writeTo(table).append()

    return {
        "read": lambda: read.write.format("noop").mode("overwrite").save(),
        "latest": lambda: latest.write.format("noop").mode("overwrite").save(),
        "merge": lambda: merge(filtered(typed)),
        "keep": keep,
        "merge-kept": lambda: merge(filtered(kept["source"])),
        "append-kept": lambda: kept.pop("source").drop("Op").writeTo(table).append(),
        "empty-commit": empty_commit,
    }


def by_step(log: Path, windows: dict[str, tuple[float, float]]) -> tuple[dict[str, float], dict[str, int]]:
    """Task-CPU seconds and Spark jobs of each labelled step in the event log; a job or stage without a label
    (one a pool thread of the apply started) is the step whose time window (epoch ms) holds its start."""

    def named(event: dict[str, Any], moment: float) -> str | None:
        name = (event.get("Properties") or {}).get(STEP)
        return name or next((n for n, (a, b) in windows.items() if a <= moment <= b), None)

    stage_step: dict[int, str] = {}
    jobs: dict[str, int] = {}
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event["Event"] == "SparkListenerStageSubmitted":
            info = event["Stage Info"]
            name = named(event, info.get("Submission Time") or 0)
            if name:
                stage_step[info["Stage ID"]] = name
        elif event["Event"] == "SparkListenerJobStart":
            name = named(event, event.get("Submission Time") or 0)
            if name:
                jobs[name] = jobs.get(name, 0) + 1
    cpu: dict[str, float] = {}
    for stage in stages(log):
        name = stage_step.get(stage["stage"])
        if name:
            cpu[name] = cpu.get(name, 0.0) + stage["cpu_seconds"]
    return cpu, jobs


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--out", type=Path, default=DATA / "results" / f"cdc-floor-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    )
    args = parser.parse_args(argv)

    dataset = Dataset(args.rows, max(args.files, args.rows // 10), args.files, "parquet")
    lake = Lake(DATA / "warehouse", write_schema(DATA / "schema.json"), 4)  # bench/run.py's lake and session
    database = lake.database(args.rows, "parquet")
    table_dir = lake.table_dir(database, "orders")
    if not backup_dir(table_dir).exists():
        raise SystemExit(f"no base snapshot: run bench/run.py --rows {args.rows} --formats parquet first")
    EVENT_LOG.mkdir(parents=True, exist_ok=True)
    os.environ["PYSPARK_SUBMIT_ARGS"] = (
        f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir={EVENT_LOG.as_uri()} pyspark-shell"
    )
    spark = spark_session(lake, "8g")
    from lakehouse.apply import cdc as cdc_apply
    from lakehouse.apply.run import ApplyRun

    table, files, expected = table_name(lake, database), dataset.cdc_files, expected_rows(dataset)
    app = spark.sparkContext.applicationId
    current = {"run": "warm"}
    undo = [
        labelled(spark, cdc_apply, "typed_batch", "first pass", lambda: current["run"]),
        labelled(spark, ApplyRun, "before_commits", "tombstones, quarantine", lambda: current["run"]),
        labelled(spark, cdc_apply, "merge_changes", "MERGE", lambda: current["run"]),
        labelled(spark, ApplyRun, "finish", "ledger", lambda: current["run"]),
    ]
    records: list[dict[str, Any]] = []
    windows: dict[str, tuple[float, float]] = {}  # the apply's jobs that no patched function started

    def reset() -> None:
        reset_table(spark, table_dir, table)

    def checked(label: str) -> None:
        check_rows(spark, table, expected, label)

    def floor(run: str) -> None:
        queries = floor_queries(spark, files, table)
        for name in FLOOR_STEPS:
            if name in ("merge", "merge-kept", "append-kept", "empty-commit"):
                reset()
            load, started = load_average(), time.perf_counter()
            with step(spark, f"floor {name}#{run}"):
                queries[name]()
            records.append(
                {"run": run, "step": f"floor {name}", "wall": time.perf_counter() - started, "load": load}
            )
            if name.startswith("merge"):
                checked(f"floor {name}")

    def ours(run: str) -> None:
        reset()
        current["run"] = run
        load, started, since = load_average(), time.perf_counter(), time.time() * 1000
        with step(spark, f"ours rest#{run}"):
            apply_in_session(spark, lake, database, files, f"floor-{run}")
        windows[f"ours rest#{run}"] = (since, time.time() * 1000)
        records.append(
            {"run": run, "step": "ours apply", "wall": time.perf_counter() - started, "load": load}
        )
        checked("our apply")

    try:
        ours("warm")
        floor("warm")
        for run in range(1, args.runs + 1):
            for part in (floor, ours) if run % 2 else (ours, floor):
                part(str(run))
                print(f"round {run}: {part.__name__} done, load {load_average()}", flush=True)
    finally:
        for restore_original in undo:
            restore_original()
        reset()
        spark.stop()
    cpu, jobs = by_step(EVENT_LOG / app, windows)
    for record in records:
        label = f"{record['step']}#{record['run']}"
        record |= {"cpu": round(cpu.get(label, 0.0), 3), "jobs": jobs.get(label, 0)}
        if record["step"] == "ours apply":  # the apply's steps, and its whole
            parts = {s: f"ours {s}#{record['run']}" for s in OURS_STEPS}
            record["steps"] = {s: [round(cpu.get(p, 0.0), 3), jobs.get(p, 0)] for s, p in parts.items()}
            record["cpu"] = round(sum(v[0] for v in record["steps"].values()), 3)
            record["jobs"] = sum(v[1] for v in record["steps"].values())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    print(report([r for r in records if r["run"] != "warm"]))
    print(f"runs: {args.out / 'runs.jsonl'}")
    return 0


def report(records: list[dict[str, Any]]) -> str:
    lines = [
        "| step | task CPU s, runs | median | jobs | wall s, median | load at start |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    rows: dict[str, list[tuple[float, int, float, float]]] = {}
    for r in records:
        rows.setdefault(r["step"], []).append((r["cpu"], r["jobs"], r["wall"], r["load"]))
        for name, (cpu, jobs) in r.get("steps", {}).items():
            rows.setdefault(f"  ours: {name}", []).append((cpu, jobs, float("nan"), r["load"]))
    for name, runs in rows.items():
        cpus = ", ".join(f"{c:.2f}" for c, *_ in runs)
        walls = [w for _, _, w, _ in runs if w == w]
        wall = f"{statistics.median(walls):.2f}" if walls else ""
        loads = ", ".join(f"{x:.1f}" for *_, x in runs)
        median_cpu = statistics.median(c for c, *_ in runs)
        median_jobs = statistics.median(j for _, j, _, _ in runs)
        lines.append(f"| {name} | {cpus} | {median_cpu:.2f} | {median_jobs:g} | {wall} | {loads} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

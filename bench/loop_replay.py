"""A time-compressed replay of many small tables through the real loop on the local stack, and the planner's
model of the same replay beside it. A benchmark, not a test: nothing here asserts a timing.

    .venv/bin/python bench/loop_replay.py --tables 30 --interval 30 --minutes 6
    .venv/bin/python bench/loop_replay.py --tables 5 --interval 10 --minutes 1      # a smoke run
    .venv/bin/python bench/loop_replay.py --loop RunPaceSeconds=10 --loop RefineEveryMinutes=1  # other settings
    .venv/bin/python bench/loop_replay.py --remodel bench/results/loop-replay-<time>.json  # the model again

Deploys as bench/freshness.py does (its own LocalStack on port 4578, the SQLite source, samconfig's local
loop settings), with `--tables` small tables of its own added to the source and to the schema file. Once the
full load is in, each table gets one changed row every `--interval` seconds, the tables in turn (a change
every interval / tables seconds in all), for `--minutes`; the local DMS writes each into a CDC file. Then it
waits until every file is applied and measures, from the tables' Iceberg metadata and the execution history:
each file's freshness (its name's time -> the commit that names it applied), the CDC, refine and maintenance
runs of the replay (their state's seconds, the tables each CDC batch touched) and the loop's own time before a
run (DrainQueue entered -> the run's state entered). The planner (bench/deployment_planner.py) then models the
same replay (tables, arrival rate, loop settings) with the local per-run figures: a CDC run's seconds fitted
against the tables it touched, the refine and maintenance runs' means, how long before its end a run commits. Prints both, writes
bench/results/loop-replay-<UTC time>.json; stops what it started, also on Ctrl-C or failure.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "spark_jobs"), str(REPO / "bench")]

from deployment_planner import Deployment, Measured, RunSize, deployment_day  # noqa: E402
from many_tables import fit_line  # noqa: E402

from localaws import replication, sam_app  # noqa: E402
from localaws.pipeline_run import LocalPipeline, RunSettings  # noqa: E402
from localaws.progress import APPLIED_FILES, cdc_file_time  # noqa: E402
from localaws.stack import StackConfig, running_stack  # noqa: E402

RESULTS = REPO / "bench" / "results"
RUN_STATES = {
    "RunCdc": "cdc",
    "RunRefine": "refine",
    "RunIdleRefine": "refine",
    "RunMaintenance": "maintenance",
    "PaceRuns": "pause",  # not a run: the loop's pause after a batch that emptied the queue (RunPaceSeconds)
}


def replay_tables(count: int) -> list[str]:
    return [f"replay_{number:02d}" for number in range(count)]


@dataclass(frozen=True)
class Run:
    kind: str  # cdc, refine, maintenance, pause
    entered: float  # epoch seconds
    seconds: float
    before_seconds: float = 0.0  # the loop's own time before it: DrainQueue entered -> this state entered
    run_id: str = ""
    tables: int = 0  # a CDC run: the replay's tables its batch touched


def percentiles(values: Sequence[float]) -> dict[str, float]:
    cuts = statistics.quantiles(values, n=20, method="inclusive") if len(values) > 1 else [values[0]] * 19
    return {"p50": round(statistics.median(values), 2), "p95": round(cuts[18], 2), "n": len(values)}


def file_freshness(snapshots: Sequence[dict[str, Any]], since: float) -> dict[str, float]:
    """Each CDC file a table's snapshots name applied, landed (its name's time) at or after `since`: seconds
    from landing to the first commit that names it."""
    committed: dict[str, float] = {}
    for snapshot in sorted(snapshots, key=lambda s: s["timestamp-ms"]):
        for name in json.loads(snapshot.get("summary", {}).get(APPLIED_FILES, "[]")):
            committed.setdefault(name, snapshot["timestamp-ms"] / 1e3)
    fresh = {}
    for name, at in committed.items():
        landed = cdc_file_time(name)
        if landed is not None and landed.timestamp() >= since:
            fresh[name] = round(at - landed.timestamp(), 3)
    return fresh


def commit_tail(runs: Sequence[Run], committed: Sequence[float]) -> float:
    """How long before its end a CDC run commits, on average: each run's end less the mean of the commits
    (epoch seconds) made while it ran."""
    tails = []
    for run in (r for r in runs if r.kind == "cdc"):
        end = run.entered + run.seconds
        inside = [at for at in committed if run.entered <= at <= end]
        if inside:
            tails.append(end - statistics.mean(inside))
    return statistics.mean(tails) if tails else 0.0


def local_measured(runs: Sequence[Run], tables: int, tail: float = 0.0) -> tuple[Measured, RunSize]:
    """The planner's figures from the replay's own runs: a CDC run's seconds = a + b x tables touched (so the
    run's fixed cost a + b holds one table, each further table b), the refine and maintenance runs' means, and
    the loop's own time before a run as the start-up, and `tail`: how long before its end a run commits."""
    cdc = [r for r in runs if r.kind == "cdc"]
    if len({r.tables for r in cdc}) > 1:
        line = fit_line([(r.tables, r.seconds) for r in cdc])
        overhead, per_table = line.intercept + line.slope, max(0.0, line.slope)
    else:
        overhead, per_table = statistics.mean(r.seconds for r in cdc), 0.0
    refine = [r.seconds for r in runs if r.kind == "refine"]
    maintenance = [r.seconds for r in runs if r.kind == "maintenance"]
    measured = Measured(
        overhead_seconds=overhead,
        changes_per_second=1e12,
        table_fixed_seconds=per_table,
        table_seconds_per_million_rows=0.0,
        refine_seconds=(statistics.mean(refine) - overhead) if refine else 0.0,
        maintenance_table_seconds=max(0.0, statistics.mean(maintenance) - overhead) / tables
        if maintenance
        else 0.0,
        maintenance_due_table_seconds=0.0,
        maintained_tables_per_table=1.0,
        commit_before_end_seconds=tail,
        expiry_seconds_per_table=0.0,
        rewrite_bytes_per_second=1e18,
        sources=("the replay's own runs",),
    )
    start = statistics.mean(r.before_seconds for r in cdc)
    return measured, RunSize(glue_start_seconds=start)


def execution_runs(pipeline: LocalPipeline, since: float) -> list[Run]:
    """The CDC, refine and maintenance runs entered at or after `since`, from every execution's history."""
    sfn, runs = pipeline.aws("stepfunctions"), []
    for execution in sorted(pipeline.executions(), key=lambda e: e["startDate"]):
        pages = sfn.get_paginator("get_execution_history").paginate(executionArn=execution["executionArn"])
        events = [e for page in pages for e in page["events"]]
        drain, open_run = 0.0, None
        for event in events:
            when = event["timestamp"].timestamp()
            if entered := event.get("stateEnteredEventDetails"):
                if entered["name"] == "DrainQueue":
                    drain = when
                elif entered["name"] in RUN_STATES:
                    run_id = ""
                    if entered["name"] == "RunCdc":
                        run_id = json.loads(entered["input"])["batch"]["value"]["run_id"]
                    open_run = (RUN_STATES[entered["name"]], when, when - drain if drain else 0.0, run_id)
            elif (
                (exited := event.get("stateExitedEventDetails")) and exited["name"] in RUN_STATES and open_run
            ):
                kind, at, before, run_id = open_run
                if at >= since:
                    runs.append(Run(kind, at, round(when - at, 3), round(before, 3), run_id))
                open_run = None
    return runs


def with_tables(pipeline: LocalPipeline, runs: list[Run], names: set[str]) -> list[Run]:
    """Each CDC run with the count of the replay's tables its manifest named."""
    assert pipeline.app is not None
    s3, bucket = pipeline.aws("s3"), pipeline.app.artifacts_bucket
    counted = []
    for run in runs:
        if run.kind == "cdc":
            try:
                body = s3.get_object(Bucket=bucket, Key=f"manifests/done/{run.run_id}.json")["Body"].read()
                uris = [f["uri"] for f in json.loads(body).get("files", [])]
            except Exception:  # a manifest not there: the run counts no table
                uris = []
            touched = {uri.rsplit("/", 2)[-2] for uri in uris} & names
            run = replace(run, tables=len(touched))
        counted.append(run)
    return counted


def change_rows(
    pipeline: LocalPipeline, names: list[str], interval: float, seconds: float, stop: threading.Event
) -> int:
    """One changed row a table every `interval` seconds, the tables in turn, for `seconds`."""
    gap, began, done = interval / len(names), time.monotonic(), 0
    while not stop.is_set() and time.monotonic() - began < seconds:
        table = names[done % len(names)]
        pipeline.execute_sql(
            f"UPDATE {table} SET qty = qty + 1, label = ? WHERE id = ?", (f"c{done}", done % 50)
        )
        done += 1
        stop.wait(max(0.0, began + done * gap - time.monotonic()))
    return done


def loads() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def loop_overrides(pairs: Sequence[str]) -> dict[str, str]:
    """`--loop Name=value` pairs: loop settings of the template in place of samconfig's local ones."""
    overrides = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in LOOP_SETTINGS or not value:
            raise SystemExit(f"--loop {pair}: one of {', '.join(LOOP_SETTINGS)}, as Name=value")
        overrides[name] = value
    return overrides


def run(args: argparse.Namespace) -> int:
    begun, started, load = time.monotonic(), datetime.now(UTC), {"start": loads()}
    names = replay_tables(args.tables)
    config = StackConfig(port=args.port, state_dir=REPO / "var" / "localstack-replay")
    name = f"replay{uuid.uuid4().hex[:6]}"
    dms = replication.ReplicationSettings(
        bucket="(set at deploy)", cdc_max_batch_interval_seconds=args.dms_interval, poll_seconds=0.3,
        tables=(*replication.SOURCE_TABLES, *names),
    )  # fmt: skip
    parameters = {k: str(v) for k, v in sam_app.samconfig_parameters("local").items() if k in LOOP_SETTINGS}
    parameters |= loop_overrides(args.loop)
    settings = RunSettings(
        name, args.scale, 42, REPO / "var" / "replay" / name, parameters, dms, source="sqlite"
    )
    stop = threading.Event()
    with running_stack(config) as endpoint:
        pipeline = LocalPipeline(endpoint, settings, config)
        try:
            sam_app.build(endpoint)
            pipeline.create_source()
            for table in names:
                pipeline.execute_sql(
                    f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, qty INTEGER, label TEXT)"
                )
                for key in range(args.rows):
                    pipeline.execute_sql(f"INSERT INTO {table} VALUES (?, ?, ?)", (key, 0, "loaded"))
            pipeline.deploy(build=False)
            assert pipeline.app is not None
            replication.upload_schema_file(
                pipeline.aws("s3"), pipeline.app.artifacts_bucket, pipeline.source_db, dms.tables
            )
            pipeline.start_replication()
            pipeline.start_execution()
            print(f"[{time.monotonic() - begun:5.0f}s] deployed; waiting for the full load", flush=True)
            pipeline.wait_until_applied(args.timeout)
            load["before"], since = loads(), time.time()
            print(f"[{time.monotonic() - begun:5.0f}s] replaying {args.minutes} min", flush=True)
            changes = change_rows(pipeline, names, args.interval, args.minutes * 60, stop)
            load["after_changes"] = loads()
            pipeline.wait_until_applied(args.timeout)
            ended = time.time()
            print(f"[{time.monotonic() - begun:5.0f}s] all applied; reading the history", flush=True)
            runs = with_tables(pipeline, execution_runs(pipeline, since), set(names))
            fresh: dict[str, float] = {}
            clean = pipeline.stack.warehouse / pipeline.app.clean_database
            for table in names:
                folder = clean / f"{pipeline.source_schema}_{table}" / "metadata"
                metadata = json.loads(
                    (
                        folder / f"v{(folder / 'version-hint.text').read_text().strip()}.metadata.json"
                    ).read_text()
                )
                fresh |= file_freshness(metadata.get("snapshots") or [], since)
        finally:
            stop.set()
            pipeline.close(delete_stack=True)
    load["end"] = loads()
    replayed = percentiles(list(fresh.values()))
    counts = {
        kind: sum(r.kind == kind for r in runs if r.entered <= ended)
        for kind in ("cdc", "refine", "maintenance", "pause")
    }
    result = {
        "command": "python bench/loop_replay.py " + " ".join(sys.argv[1:]),
        "started": started.isoformat(timespec="seconds"),
        "wall_seconds": round(time.monotonic() - begun, 1),
        "settings": vars(args)
        | {"loop": parameters, "dms_interval": args.dms_interval, "cores": os.cpu_count()},
        "load_average": load,
        "changes": changes,
        "replay": {"freshness": replayed, "runs": counts},
        "runs": [asdict(r) for r in runs],
        "freshness_by_file": fresh,
    }
    result |= model_beside(result)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"loop-replay-{started:%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result) + f"\n\nJSON: {out.relative_to(REPO)}")
    return 0


def model_beside(result: dict[str, Any]) -> dict[str, Any]:
    """The planner's model of a replay (its tables, changes, loop settings and its own runs' figures) and the
    ratios model / replay."""
    settings, runs = result["settings"], [Run(**r) for r in result["runs"]]
    landed = {name: cdc_file_time(name) for name in result["freshness_by_file"]}
    committed = [at.timestamp() + result["freshness_by_file"][name] for name, at in landed.items() if at]
    measured, size = local_measured(runs, settings["tables"], commit_tail(runs, committed))
    loop = {k: float(v) for k, v in settings["loop"].items()}
    plan = Deployment(
        rows=settings["rows"] * settings["tables"], tables=settings["tables"],
        changes_per_day=result["changes"] * 86_400 / (settings["minutes"] * 60), file_interval=settings["interval"],
        loop_wait=loop.get("LoopWaitSeconds", 60.0), max_files_per_run=int(loop.get("MaxFilesPerRun", 500)),
        refine_every=int(loop.get("RefineEveryNBatches", 5)),
        refine_every_minutes=loop.get("RefineEveryMinutes", 0.0), run_pace=loop.get("RunPaceSeconds", 0.0),
        maintenance_every=int(loop.get("MaintenanceEveryNBatches", 50)), hours=settings["minutes"] / 60,
    )  # fmt: skip
    model = deployment_day(plan, measured, size, "glue")
    replayed, counts = result["replay"]["freshness"], result["replay"]["runs"]
    return {
        "model": {
            "freshness": {"p50": round(model.freshness_p50, 2), "p95": round(model.freshness_p95, 2)},
            "runs": {
                "cdc": model.cdc_runs,
                "refine": model.refine_runs,
                "maintenance": model.maintenance_runs,
                "pause": model.pauses,
            },
            "measured": asdict(measured),
            "start_seconds": size.glue_start_seconds,
            "plan": asdict(plan),
        },
        "ratio_model_to_replay": {
            "p50": round(model.freshness_p50 / replayed["p50"], 3),
            "p95": round(model.freshness_p95 / replayed["p95"], 3),
            "cdc_runs": round(model.cdc_runs / max(1, counts["cdc"]), 3),
        },
    }


def remodel(path: Path) -> int:
    """The model of a replay written before, again (after a change to the planner), into the same JSON."""
    result = json.loads(path.read_text())
    result |= model_beside(result)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result) + f"\n\nJSON: {path}")
    return 0


LOOP_SETTINGS = (
    "LoopWaitSeconds", "RunPaceSeconds", "MaxFilesPerRun", "RefineEveryNBatches", "RefineEveryMinutes",
    "MaintenanceEveryNBatches",
)  # fmt: skip


def markdown(result: dict[str, Any]) -> str:
    replay, model, ratio = result["replay"], result["model"], result["ratio_model_to_replay"]
    m = model["measured"]
    return "\n".join(
        [
            f"| {result['settings']['tables']} tables, {result['changes']} changes | replay | model | model / replay |",
            "| --- | ---: | ---: | ---: |",
            f"| CDC / refine / maintenance runs | {replay['runs']['cdc']} / {replay['runs']['refine']} / "
            f"{replay['runs']['maintenance']} | {model['runs']['cdc']} / {model['runs']['refine']} / "
            f"{model['runs']['maintenance']} | {ratio['cdc_runs']:.2f} (CDC) |",
            f"| pauses (RunPaceSeconds) | {replay['runs'].get('pause', 'not counted')} | {model['runs'].get('pause', 0)} | |",
            f"| freshness p50 (s) | {replay['freshness']['p50']:.1f} | {model['freshness']['p50']:.1f} | {ratio['p50']:.2f} |",
            f"| freshness p95 (s) | {replay['freshness']['p95']:.1f} | {model['freshness']['p95']:.1f} | {ratio['p95']:.2f} |",
            f"\nLocal per-run figures: a CDC run {m['overhead_seconds']:.1f} s + {m['table_fixed_seconds']:.2f} s a "
            f"further table, the loop's own {model['start_seconds']:.1f} s before a run, a refine run "
            f"{m['overhead_seconds'] + m['refine_seconds']:.1f} s, the commits {m['commit_before_end_seconds']:.1f} s "
            f"before a run's end. Load: {result['load_average']}.",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--tables", type=int, default=30)
    parser.add_argument("--rows", type=int, default=50, help="rows of each replayed table")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between two changes of a table")
    parser.add_argument("--minutes", type=float, default=6.0, help="the replay's length")
    parser.add_argument("--dms-interval", type=int, default=2, help="the local DMS's CdcMaxBatchInterval, s")
    parser.add_argument("--scale", type=float, default=0.01, help="the sample source's size")
    parser.add_argument("--port", type=int, default=4578, help="LocalStack port (4566 may be another run's)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the files applied")
    parser.add_argument("--remodel", type=Path, help="a replay's JSON: model it again, run nothing")
    parser.add_argument(
        "--loop",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a loop setting instead of samconfig's local one (RunPaceSeconds=10, RefineEveryMinutes=1, ...)",
    )
    args = parser.parse_args()
    if args.remodel:
        return remodel(args.remodel)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return run(args)
    except KeyboardInterrupt:
        print("interrupted: stopped what this run started", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

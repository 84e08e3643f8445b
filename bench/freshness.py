"""End-to-end freshness on the local stack: a CDC file landed in the raw bucket -> its
change visible in the clean Iceberg table. A benchmark, not a test: nothing here asserts a timing.

    .venv/bin/python bench/freshness.py --probes 20        # --probes 3 for a smoke run

Deploys as tests/integration/pipeline/conftest.py does, on its own LocalStack (port 4577: 4566 may be another
run's), and waits until warm (full load and a CDC batch applied). Each probe, after a seeded random pause (to
hit every phase of the Idle wait loop), sets one customer's e-mail to a unique value on the SQLite source.
Start: the time in the name of the raw CDC file holding it, which the local DMS takes just before PutObject
(S3 LastModified, also kept, has whole seconds only). End: the first poll (every --poll s) of the table's
current Iceberg metadata whose commit names that file as applied (data and name are one commit); the row is
then read back with PyIceberg. The execution history and run reports split each latency. Prints Markdown,
writes bench/data/results/freshness-<UTC time>.json; stops what it started, also on Ctrl-C or failure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "spark_jobs")]

from localaws import replication, sam_app  # noqa: E402
from localaws.pipeline_run import LocalPipeline, RunSettings  # noqa: E402
from localaws.progress import APPLIED_FILES, cdc_file_time, read_clean_table  # noqa: E402
from localaws.stack import StackConfig, running_stack  # noqa: E402

RESULTS = REPO / "bench" / "data" / "results"
# Measured on the SQLite source (trigger capture) since the first round; its results stay comparable.
SCHEMA, TABLE, KEY, COLUMN = "main", "customer", "c_customer_sk", "c_email_address"
DMS: dict[str, Any] = {"cdc_max_batch_interval_seconds": 1, "poll_seconds": 0.3}  # as the pipeline tests
HEADLINE = "landed -> visible (poll)"


@dataclass
class Probe:
    number: int
    key: int
    value: str
    pause: float  # seconds slept before the change
    file: str = ""
    # epoch seconds: source (change committed), landed (the file name's time), last_modified (S3's, whole
    # seconds), committed (Iceberg snapshot), seen (first poll), drain and cdc (their states entered)
    at: dict[str, float] = field(default_factory=dict)
    apply_seconds: float | None = None  # the CDC run's own apply time (its report)
    run_id: str = ""
    refine_before: bool = False  # a refine run was going on between landing and the drain
    value_check: str = ""

    def parts(self) -> dict[str, float | None]:
        def span(a: str, b: str) -> float | None:
            return round(self.at[b] - self.at[a], 3) if a in self.at and b in self.at else None

        return {
            HEADLINE: span("landed", "seen"),
            "landed -> Iceberg commit": span("landed", "committed"),
            "source commit -> visible": span("source", "seen"),
            "source commit -> landed": span("source", "landed"),
            "landed -> drain start": span("landed", "drain"),
            "drain start -> CDC run state": span("drain", "cdc"),
            "CDC run state -> commit": span("cdc", "committed"),
            "of which apply (run report)": self.apply_seconds,
            "commit -> seen (poll)": span("committed", "seen"),
        }


def metadata(table_dir: Path) -> Path:
    """The current metadata file of a hadoop-catalog table."""
    folder = table_dir / "metadata"
    return folder / f"v{(folder / 'version-hint.text').read_text().strip()}.metadata.json"


def read_back(table_dir: Path, key: int, value: str) -> str:
    """The probe row as a reader sees it (PyIceberg over the current metadata): 'ok' or what was there."""
    try:
        from pyiceberg.expressions import EqualTo
        from pyiceberg.table import StaticTable

        table = StaticTable.from_metadata(str(metadata(table_dir)))
        # pyiceberg's predicates take (term, value) positionally; mypy sees only their pydantic fields
        probe_row = EqualTo(KEY, key)  # type: ignore[call-arg, arg-type]
        values = table.scan(probe_row, selected_fields=(COLUMN,)).to_arrow()[COLUMN].to_pylist()
        return "ok" if values == [value] else f"read {values}"
    except Exception as error:  # the check is extra information, not the measurement
        return f"error {type(error).__name__}: {error}"[:200]


def find_file(s3: Any, bucket: str, prefix: str, after: str, value: str) -> tuple[str, float] | None:
    """The first CDC file after `after` that holds `value`, with its LastModified."""
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, StartAfter=after).get("Contents", [])
    for item in sorted(listed, key=lambda i: i["Key"]):
        if value in s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read().decode():
            return item["Key"], item["LastModified"].timestamp()
    return None


def take_probe(pipeline: LocalPipeline, probe: Probe, after: str, poll: float, timeout: float) -> Probe:
    assert pipeline.app is not None
    s3, bucket = pipeline.aws("s3"), pipeline.app.raw_bucket
    prefix = f"{pipeline.replication_settings().folder}/{SCHEMA}/{TABLE}/"
    table_dir = pipeline.stack.warehouse / pipeline.app.clean_database / f"{SCHEMA}_{TABLE}"
    time.sleep(probe.pause)
    pipeline.execute_sql(f"UPDATE {TABLE} SET {COLUMN} = ? WHERE {KEY} = ?", (probe.value, probe.key))
    probe.at["source"], deadline, name = time.time(), time.monotonic() + timeout, ""
    while True:
        if not name and (found := find_file(s3, bucket, prefix, after, probe.value)):
            (probe.file, probe.at["last_modified"]), name = found, found[0].rsplit("/", 1)[1]
            probe.at["landed"] = cdc_file_time(name).timestamp()  # type: ignore[union-attr]
        state = read_clean_table(table_dir) if name else None
        if state and name in state.applied_files:
            probe.at["seen"] = time.time()
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"probe {probe.number} not visible after {timeout:.0f}s (file {probe.file!r})")
        time.sleep(poll)
    snaps = json.loads(metadata(table_dir).read_text())["snapshots"]  # committed: the first covering it
    probe.at["committed"] = min(
        s["timestamp-ms"] / 1e3 for s in snaps if name in json.loads(s["summary"].get(APPLIED_FILES, "[]"))
    )
    probe.value_check = read_back(table_dir, probe.key, probe.value)
    return probe


def history(pipeline: LocalPipeline) -> tuple[dict[str, dict[str, float]], list[tuple[float, float]]]:
    """Per CDC run id: when its drain and its CDC run state began; and when refine runs went on."""
    sfn, runs, refines = pipeline.aws("stepfunctions"), {}, []
    for execution in sorted(pipeline.executions(), key=lambda e: e["startDate"]):
        pages = sfn.get_paginator("get_execution_history").paginate(executionArn=execution["executionArn"])
        drain = refine = 0.0
        for event in (e for page in pages for e in page["events"] if "stateEnteredEventDetails" in e):
            when, entered = event["timestamp"].timestamp(), event["stateEnteredEventDetails"]
            if refine and entered["name"] != "RunRefine":  # retries stay in RunRefine
                refines.append((refine, when))
                refine = 0.0
            if entered["name"] == "DrainQueue":
                drain = when
            elif entered["name"] == "RunCdc":
                runs[json.loads(entered["input"])["batch"]["value"]["run_id"]] = {"drain": drain, "cdc": when}
            elif entered["name"] == "RunRefine":
                refine = refine or when
    return runs, refines


def explain(pipeline: LocalPipeline, probes: list[Probe]) -> None:
    """Fill each probe's breakdown from the execution history, the manifests and the CDC run reports."""
    assert pipeline.app is not None
    s3, artifacts = pipeline.aws("s3"), pipeline.app.artifacts_bucket
    with contextlib.suppress(TimeoutError):  # the last batch: manifest done and report written at its end
        listing = {"Bucket": artifacts, "Prefix": "manifests/pending/"}
        replication.wait_for(lambda: not s3.list_objects_v2(**listing)["KeyCount"], 300, "last batch", 1.0)
    runs, refines = history(pipeline)

    def read(key: str) -> dict[str, Any]:
        try:
            return json.loads(s3.get_object(Bucket=artifacts, Key=key)["Body"].read())
        except Exception:  # a report or manifest not there: that part stays unknown
            return {}

    files = {run: {f["uri"] for f in read(f"manifests/done/{run}.json").get("files", [])} for run in runs}
    for probe in probes:
        uri = f"s3://{pipeline.app.raw_bucket}/{probe.file}"
        probe.run_id = next((r for r, uris in files.items() if uri in uris), "")
        if probe.run_id:
            probe.at |= runs[probe.run_id]
            probe.apply_seconds = read(f"manifests/reports/{probe.run_id}.json").get("seconds")
            probe.refine_before = any(a < probe.at["drain"] and b > probe.at["landed"] for a, b in refines)


def percentiles(values: list[float]) -> dict[str, float]:
    """p50 and p95 interpolated between the samples (statistics.quantiles, inclusive), max, count."""
    cuts = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else [values[0]] * 99
    p50, p95, top = (round(x, 2) for x in (cuts[49], cuts[94], max(values)))
    return {"p50": p50, "p95": p95, "max": top, "n": len(values)}


def report(result: dict[str, Any], probes: list[Probe]) -> str:
    load, names = result["load_average"], list(probes[0].parts())
    lines = [
        f"## Freshness on the local stack ({result['started']}, run {result['wall_seconds']:.0f}s)",
        "Settings: " + ", ".join(f"{k} {v}" for k, v in result["settings"].items()) + ".",
        f"Load average (1/5/15 min): start {load['start']}, before probes {load['before']}, after {load['after']}.",
        "\n| seconds | p50 | p95 | max | n |\n| --- | ---: | ---: | ---: | ---: |",
    ]
    for k, s in result["summary"].items():
        lines.append(f"| {k} | {s['p50']:.2f} | {s['p95']:.2f} | {s['max']:.2f} | {s['n']} |")
    lines += ["\n| # | pause | " + " | ".join(names) + " | refine before | read back |"]
    lines.append("| ---: " * (len(names) + 2) + "| --- | --- |")
    for p in probes:
        cells = " | ".join("-" if v is None else f"{v:.2f}" for v in p.parts().values())
        check = p.value_check if p.value_check == "ok" else f"`{p.value_check}`"
        lines.append(f"| {p.number} | {p.pause:.1f} | {cells} | {p.refine_before} | {check} |")
    return "\n".join(lines)


def loads() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run(args: argparse.Namespace) -> int:
    begun, started, load = time.monotonic(), datetime.now(UTC), {"start": loads()}
    pause_max = args.max_pause if args.max_pause is not None else 2.0 * (args.loop_wait_seconds + 1)
    config = StackConfig(port=args.port, state_dir=REPO / "var" / "localstack-freshness")
    name = f"fresh{uuid.uuid4().hex[:6]}"
    dms = replication.ReplicationSettings(bucket="(set at deploy)", **DMS)
    loop_wait = {"LoopWaitSeconds": str(args.loop_wait_seconds)}
    settings = RunSettings(
        name, args.scale, args.seed, REPO / "var" / "freshness" / name, loop_wait, dms, source="sqlite"
    )
    rng, probes = random.Random(args.seed), []
    with running_stack(config) as endpoint:
        pipeline = LocalPipeline(endpoint, settings, config)
        try:
            sam_app.build(endpoint)
            counts = pipeline.create_source()
            pipeline.deploy(build=False)
            pipeline.start_replication()
            pipeline.start_execution()
            print(f"[{time.monotonic() - begun:5.0f}s] deployed {pipeline.stack_name}; waiting to be warm")
            pipeline.wait_until_applied(args.timeout)
            pipeline.run_workload(20, args.seed)  # changes for a first CDC batch
            while not any(s.applied_files for s in pipeline.wait_until_applied(args.timeout).clean.values()):
                time.sleep(1)
            print(f"[{time.monotonic() - begun:5.0f}s] warm: full load and a CDC batch applied", flush=True)
            load["before"], after = loads(), ""
            keys = [row[0] for row in pipeline.source_rows(f"SELECT {KEY} FROM {TABLE}")]
            for number in range(1, args.probes + 1):
                value = f"probe{number}-{uuid.uuid4().hex[:10]}@freshness.example"
                probe = Probe(number, rng.choice(keys), value, round(rng.uniform(0, pause_max), 2))
                probes.append(take_probe(pipeline, probe, after, args.poll, args.probe_timeout))
                after, shown = probe.file, list(probe.parts().items())[:4]
                print(f"[{time.monotonic() - begun:5.0f}s] probe {number}: {shown}", flush=True)
            load["after"] = loads()
            try:
                explain(pipeline, probes)
            except Exception as error:  # the breakdown is extra; the samples stand without it
                print(f"no breakdown: {type(error).__name__}: {error}", flush=True)
        finally:
            pipeline.close(delete_stack=True)
    parts = [p.parts() for p in probes]
    known = [k for k in parts[0] if any(p[k] is not None for p in parts)]
    summary = {k: percentiles([v for p in parts if (v := p[k]) is not None]) for k in known}
    clear = [v for p in probes if p.run_id and not p.refine_before and (v := p.parts()[HEADLINE]) is not None]
    if clear:
        summary[f"{HEADLINE}, no refine run in the way"] = percentiles(clear)
    result = {
        "started": f"{started:%Y-%m-%dT%H:%MZ}",
        "wall_seconds": round(time.monotonic() - begun, 1),
        "settings": vars(args)
        | {"max_pause": pause_max, "source_rows": sum(counts.values()), "cores": os.cpu_count()}
        | {f"dms_{k}": v for k, v in DMS.items()},
        "load_average": load,
        "summary": summary,
        "probes": [asdict(p) | {"parts": p.parts()} for p in probes],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"freshness-{started:%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print("\n" + report(result, probes) + f"\n\nJSON: {out.relative_to(REPO)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    loop_wait = int(sam_app.samconfig_parameters("local").get("LoopWaitSeconds", "60"))
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--loop-wait-seconds", type=int, default=loop_wait, help="default: samconfig local's")
    parser.add_argument("--scale", type=float, default=0.05, help="source size (as the pipeline tests)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--poll", type=float, default=0.5, help="seconds between polls of bucket and table")
    parser.add_argument("--max-pause", type=float, default=None, help="default 2 x (loop wait + 1) s")
    parser.add_argument("--port", type=int, default=4577, help="LocalStack port (4566 may be another run's)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to warm up")
    parser.add_argument("--probe-timeout", type=float, default=900.0, help="seconds per probe")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # cleanup as on Ctrl-C
    try:
        return run(args)
    except KeyboardInterrupt:
        print("interrupted: stopped what this run started", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

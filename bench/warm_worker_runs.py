"""What a warm Spark worker of the local AWS spends on each job run, and how much of it is garbage collection:
the pipeline tests' tables (`tools.sample_data`) full-loaded by `spark_jobs/full_load_job.py`, then CDC runs of
their workload by `spark_jobs/cdc_job.py` (each run one manifest of every table's files, as the drain writes
it), one after the other on one worker (`localaws_plugin.host_runs.WarmPool`, as the local Glue runs them).
For each run: wall time and CPU seconds of the worker (its Python and its JVM); at the end, the JVM's
collections and their pause time (`jstat -gcutil`), and what the idle worker's JVM holds (its resident memory)
from the last run to `--idle` seconds later (its periodic collection gives the heap back).

    .venv/bin/python bench/warm_worker_runs.py --runs 12

Writes bench/results/warm-worker-runs-<UTC time>.json and prints a summary. LAKE_SPARK_JAVA_OPTIONS sets the
worker JVM's options (as in the tests: tests/conftest.py TEST_JIT_OPTIONS); the worker adds its heap options
(spark_worker.IDLE_HEAP_OPTIONS).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(ROOT / "spark_jobs"), str(ROOT / "localaws" / "plugin")]

from localaws_plugin import host_runs, settings  # noqa: E402
from localaws_plugin.spark_worker import heap_options  # noqa: E402

from tools import sample_data  # noqa: E402
from tools.dms_csv import CsvFormat  # noqa: E402
from tools.schema_gen import reflect_schema  # noqa: E402

NULL_MARKER = "NULL"
JSTAT_FIELDS = ("S0", "S1", "E", "O", "M", "CCS", "YGC", "YGCT", "FGC", "FGCT", "CGC", "CGCT", "GCT")


def group_processes(group: int) -> list[tuple[int, str, float]]:
    """(pid, command name, CPU seconds) of every live process in process group `group` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        if int(fields[2]) == group:
            found.append(
                (int(entry.name), name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
            )
    return found


def jstat(pid: int) -> dict[str, float]:
    lines = subprocess.run(["jstat", "-gcutil", str(pid)], capture_output=True, text=True).stdout.split("\n")
    values = lines[1].split() if len(lines) > 1 else []
    return {name: float(value) for name, value in zip(JSTAT_FIELDS, values, strict=False)}


def resident_mb(pid: int) -> float:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS:"))
    return round(int(line.split()[1]) / 1024, 1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=12, help="CDC runs after the full load")
    parser.add_argument("--scale", type=float, default=0.05, help="tools.sample_data's (the tests': 0.05)")
    parser.add_argument("--changes", type=int, default=150, help="business operations a CDC run")
    parser.add_argument("--pause", type=float, default=2.0, help="seconds between runs (the state machine's)")
    parser.add_argument("--idle", type=int, default=90, help="seconds idle after the runs (memory)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="warm-worker-runs-"))
    raw, db, warehouse = root / "raw" / "dms", root / "source.db", root / "warehouse"
    fmt = CsvFormat(csv_null_value=NULL_MARKER)
    sample_data.create_source_database(db, args.scale, 42)
    schema_file = root / "schema.json"
    schema_file.write_text(json.dumps(reflect_schema(f"sqlite:///{db}", [sample_data.SOURCE_SCHEMA])))
    sample_data.write_full_load_files(db, raw, fmt=fmt)
    common = [
        "--warehouse",
        str(warehouse),
        "--schema_file",
        str(schema_file),
        "--csv_null_value",
        NULL_MARKER,
    ]
    common += ["--staging_dir", str(root / "staging")]
    jobs: list[tuple[str, list[str]]] = [("full_load_job.py", [*common, "--raw_path", str(raw)])]
    next_seq = 1
    for number in range(1, args.runs + 1):
        workload = sample_data.run_workload(db, args.changes, 42 + number)
        files = sample_data.write_cdc_files(db, workload.changes, raw, first_change_seq=next_seq, fmt=fmt)
        next_seq += len(workload.changes)
        manifest = root / f"manifest-{number}.json"
        manifest.write_text(json.dumps({"run_id": f"cdc-{number}", "files": [{"uri": f} for f in files]}))
        jobs.append(("cdc_job.py", [*common, "--manifest", str(manifest), "--raw_path", str(raw)]))

    env = settings.host_process_base_env() | {"PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}
    pool = host_runs.WarmPool(
        sys.executable, str(ROOT / "spark_jobs"), root / "workers", env, size=1, runs_per_worker=10_000
    )
    try:
        if not pool.wait_warm(600):
            raise SystemExit("the warm worker did not start")
        group = pool._idle[0].process.pid  # its own process group: the worker and its JVM
        java = next(pid for pid, name, _ in group_processes(group) if name == "java")
        warm_up_cpu = sum(cpu for _, _, cpu in group_processes(group))
        warm_up_gc = jstat(java)
        runs: list[dict[str, Any]] = []
        for number, (script, job_argv) in enumerate(jobs):
            run_dir = root / "runs" / str(number)
            run_dir.mkdir(parents=True)
            cpu, started = sum(cpu for _, _, cpu in group_processes(group)), time.perf_counter()
            handle = pool.run(str(ROOT / "spark_jobs" / script), job_argv, run_dir, dict(os.environ), [])
            if handle is None or handle.wait() != 0:
                raise SystemExit(
                    f"run {number} ({script}) failed: {(run_dir / 'stderr.log').read_text()[-3000:]}"
                )
            runs.append(
                {
                    "script": script,
                    "wall_seconds": round(time.perf_counter() - started, 2),
                    "cpu_seconds": round(sum(cpu for _, _, cpu in group_processes(group)) - cpu, 2),
                }
            )
            print(json.dumps(runs[-1]), flush=True)
            time.sleep(args.pause)
        gc = jstat(java)
        resident = {"0": resident_mb(java)}
        for second in range(1, int(args.idle) + 1):
            time.sleep(1)
            if second % 15 == 0:
                resident[str(second)] = resident_mb(java)
    finally:
        pool.shutdown()
        shutil.rmtree(root, ignore_errors=True)

    by_script: dict[str, list[dict]] = defaultdict(list)
    for run in runs:
        by_script[run["script"]].append(run)
    result = {
        "command": f"python bench/warm_worker_runs.py --runs {args.runs} --scale {args.scale} "
        f"--changes {args.changes} --pause {args.pause} --idle {args.idle}",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "java_options": f"{os.environ.get('LAKE_SPARK_JAVA_OPTIONS', '(lakehouse.io.session)')} "
        + heap_options(os.environ.get("LAKE_SPARK_DRIVER_MEMORY", "4g")),
        "warm_up": {"cpu_seconds": round(warm_up_cpu, 2), "gc": warm_up_gc},
        "runs": runs,
        "cdc_runs_mean": {
            key: round(statistics.mean(r[key] for r in by_script["cdc_job.py"]), 2)
            for key in ("wall_seconds", "cpu_seconds")
        },
        "cpu_seconds_of_runs": round(sum(r["cpu_seconds"] for r in runs), 2),
        "gc_of_runs": {name: round(gc[name] - warm_up_gc.get(name, 0.0), 3) for name in JSTAT_FIELDS[6:]},
        "jvm_resident_mb_by_idle_second": resident,
    }
    out = BENCH / "results" / f"warm-worker-runs-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        json.dumps(
            {k: result[k] for k in ("java_options", "cdc_runs_mean", "cpu_seconds_of_runs", "gc_of_runs")}
        )
    )
    print("->", out)


if __name__ == "__main__":
    main()

"""The whole pipeline on the embedded local AWS, end to end (`make demo`):

    python -m localaws.demo [--scale 0.3] [--changes 1200] [--rounds 4] [--keep-running]

Starts LocalStack (host mode, our plugins), `sam build` + `sam deploy --config-env local` of template.yaml,
creates the TPC-DS-like source (SQLite: web_sales, customer, customer_address, item, date_dim, time_dim),
creates and starts a DMS task replicating it into the raw bucket, starts the state machine, runs a
workload of inserts/updates/deletes on the source while printing progress, waits until the clean zone has
applied everything, checks every clean table against its source (row checksums), prints a summary and
stops what it started (also on Ctrl-C or failure; `--keep-running` leaves it all running).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from localaws import sam_app, stack
from localaws.pipeline_run import LocalPipeline, RunSettings
from localaws.progress import ProgressMonitor


class _ProgressPrinter(threading.Thread):
    """Prints one progress line every `every` seconds until stopped."""

    def __init__(self, monitor: ProgressMonitor, every: float) -> None:
        super().__init__(name="progress", daemon=True)
        self.monitor = monitor
        self.every = every
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            try:
                print(self.monitor.snapshot().line(), flush=True)
            except Exception as error:  # progress is best effort; the run itself reports failures
                print(f"(progress unavailable: {type(error).__name__}: {error})", flush=True)


def _raise_interrupt(_signal: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _step(started: float, text: str) -> None:
    print(f"[{time.monotonic() - started:6.0f}s] {text}", flush=True)


def run_demo(args: argparse.Namespace) -> int:
    started = time.monotonic()
    config = stack.StackConfig()
    already_running = stack.read_pid(config) is not None or stack.is_healthy(config)
    if not already_running:
        stack.start(config)
    _step(started, f"local AWS up at {config.endpoint_url}" + (" (reused)" if already_running else ""))
    settings = RunSettings(name=args.name, scale=args.scale, seed=args.seed, workdir=Path(args.workdir))
    pipeline = LocalPipeline(config.endpoint_url, settings, config)
    printer: _ProgressPrinter | None = None
    ok = False
    try:
        counts = pipeline.create_source()
        _step(started, f"source {pipeline.source_db}: " + ", ".join(f"{t} {n}" for t, n in counts.items()))
        app = pipeline.deploy()
        _step(started, f"deployed stack {app.stack_name} (sam build + sam deploy --config-env local)")
        pipeline.start_replication()
        pipeline.start_execution()
        _step(started, f"DMS task {pipeline.task_arn} and execution {pipeline.execution_arn} started")
        monitor = pipeline.monitor()
        printer = _ProgressPrinter(
            ProgressMonitor(
                aws=lambda service: sam_app.client(service, config.endpoint_url),
                task_arn=monitor.task_arn,
                raw_bucket=monitor.raw_bucket,
                warehouse=monitor.warehouse,
                clean_database=monitor.clean_database,
                state_machine_arn=monitor.state_machine_arn,
                started=started,
            ),
            args.every,
        )
        printer.start()
        per_round = max(1, args.changes // args.rounds)
        for number in range(1, args.rounds + 1):
            made = pipeline.run_workload(per_round, args.seed + number)
            _step(
                started,
                f"workload round {number}/{args.rounds}: {per_round} transactions, {made} row changes",
            )
            time.sleep(args.pause)
        final = pipeline.wait_until_applied(args.timeout)
        printer.stopped.set()
        print(final.line(), flush=True)
        _step(started, "caught up; verifying every clean table against its source")
        checks = pipeline.verify()
        for check in checks:
            print("  " + check.line())
        ok = all(c.matches for c in checks)
        runs = sam_app.client("glue", config.endpoint_url).get_job_runs(JobName=app.cdc_job_name)["JobRuns"]
        print(
            f"\nsummary: {sum(counts.values())} source rows at scale {args.scale}, "
            f"{pipeline.row_changes} row changes in {args.changes} transactions, "
            f"{final.raw.load_files} load + {final.raw.cdc_files} CDC files, "
            f"{len(runs)} CDC runs, {final.executions} execution(s), "
            f"{len(checks)} tables {'ALL MATCH' if ok else 'MISMATCH'}, "
            f"wall time {time.monotonic() - started:.0f}s"
        )
    except KeyboardInterrupt:
        print("\ninterrupted: stopping what the demo started", file=sys.stderr)
    except Exception as error:
        traceback.print_exc()
        print(f"\nFAILED: {type(error).__name__}: {str(error)[:3000]}", file=sys.stderr)
    finally:
        if printer is not None:
            printer.stopped.set()
        if args.keep_running:
            print(
                f"left running: LocalStack at {config.endpoint_url}, stack {pipeline.stack_name}; "
                "stop with `make local-down`"
            )
        else:
            pipeline.close()
            if not already_running:
                stack.stop(config)
            _step(
                started,
                "stopped the execution, the DMS task" + ("" if already_running else " and LocalStack"),
            )
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=0.3, help="source size (1 ≈ 20k web_sales rows)")
    parser.add_argument(
        "--changes", type=int, default=1200, help="workload transactions (≈ 2.6 row changes each)"
    )
    parser.add_argument("--rounds", type=int, default=4, help="the workload runs in this many rounds")
    parser.add_argument("--pause", type=float, default=10.0, help="seconds between workload rounds")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--name", default="demo", help="environment name (stack lake-<name>)")
    parser.add_argument("--workdir", default="var/demo")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between progress lines")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the clean zone")
    parser.add_argument(
        "--keep-running", action="store_true", help="leave LocalStack, DMS and the execution up"
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    return run_demo(args)


if __name__ == "__main__":
    sys.exit(main())

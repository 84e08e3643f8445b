"""The whole pipeline on the embedded local AWS, end to end (`make demo`):

    python -m localaws.demo [--scale 0.3] [--changes 1200] [--rounds 4] [--source postgresql] [--keep-running]

Starts LocalStack (host mode, our plugins) and an embedded PostgreSQL 16 server (`wal_level=logical`),
`sam build` + `sam deploy --config-env local` of template.yaml, creates the TPC-DS-like source (web_sales,
customer, customer_address, item, date_dim, time_dim), creates and starts a DMS task replicating it into the
raw bucket through a logical replication slot, starts the state machine, runs a workload of
inserts/updates/deletes on the source, with an `ALTER TABLE … ADD COLUMN` halfway (the schema file
regenerated from the live catalog), while printing progress (the state machine refines every
3 batches, runs maintenance every 6 and rolls over to a fresh execution on a low history threshold), waits
until the clean zone has applied everything, checks every clean table against its source (row checksums),
then stops the state machine, runs the refine job once more and one maintenance pass, checks the refined
table of each model the stack published (the example models, models/) against the model's SQL run over the
source database's rows, runs the BI queries (bi/queries), prints each clean
table's freshness, the consistent point the refined zone was built from and every version of one customer
(the stack keeps the customer table's row history: HistoryTables; localaws/history_demo.py), writes the
dashboard (its path is printed), prints a summary and stops what it started (also on Ctrl-C or failure;
`--keep-running` leaves it all running; `--source sqlite` replicates an SQLite file through triggers instead;
`--source mysql` (`make demo SOURCE=mysql`) a local MariaDB server read from its binlog, as DMS reads MySQL).

Divergence and repair (PostgreSQL source, unless `--no-divergence`): before the last workload round
the source's calendar `date_dim` is rebuilt without its first year (TRUNCATE + INSERT, which DMS does not
replicate: the lake keeps the dropped rows) and a customer is renumbered (a primary-key update, which DMS does
write to S3); once the lake caught up the demo shows the lake against the source, runs the deployed reconcile
Glue job with `--repair_mode reload`, prints what it found and repaired (its report, `dms_divergence`), waits
until the loop applied DMS's reload, and a second reconcile run shows every table equal
(localaws/demo_repair.py, localaws/divergence.py).
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from localaws import history_demo, replication, sam_app, stack
from localaws.demo_finale import finale, job_name
from localaws.demo_output import ProgressPrinter, step
from localaws.demo_repair import diverge_source, reconcile_and_repair
from localaws.divergence import SourceDivergence
from localaws.pipeline_run import LocalPipeline, RunSettings
from localaws.progress import ProgressMonitor


def _raise_interrupt(_signal: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_demo(args: argparse.Namespace) -> int:
    started = time.monotonic()
    config = stack.StackConfig()
    already_running = stack.read_pid(config) is not None or stack.is_healthy(config)
    if not already_running:
        stack.start(config)
    step(started, f"local AWS up at {config.endpoint_url}" + (" (reused)" if already_running else ""))
    settings = RunSettings(
        name=args.name,
        scale=args.scale,
        seed=args.seed,
        workdir=Path(args.workdir),
        # a low threshold: the demo shows the hand-over to a fresh execution (#2 in the progress line)
        # and the consistent point after each CDC run (asked for: it lists the raw zone, small here)
        # S: the local DMS writes a change within seconds of its commit (AWS: CdcMaxBatchInterval, 60 s)
        parameters={
            "HistoryThreshold": str(args.history_threshold),
            "ConsistentPoints": "true",
            "DmsSettleSeconds": "30",
        },
        replication=replication.ReplicationSettings(bucket="(set at deploy)", data_format=args.dms_format),
        source=args.source,
    )
    act = not args.no_divergence and args.source == "postgresql"
    if act and "ReconcileEveryMinutes" in sam_app.template_parameters():
        settings.parameters["ReconcileEveryMinutes"] = "0"  # the demo runs the reconcile when it chooses
    pipeline = LocalPipeline(config.endpoint_url, settings, config)
    printer: ProgressPrinter | None = None
    ok = False
    source_changes: SourceDivergence | None = None
    jdbc_url = ""
    try:
        if act and pipeline.postgres is not None:  # the reconcile job reads the source over JDBC (TCP)
            port = pipeline.postgres.start(tcp_port=_free_port()).port
            jdbc_url = f"jdbc:postgresql://127.0.0.1:{port}/postgres"
        counts = pipeline.create_source()
        step(
            started,
            f"source ({pipeline.source_db.dialect}) {pipeline.source_db}: "
            + ", ".join(f"{t} {n}" for t, n in counts.items()),
        )
        if "HistoryTables" in sam_app.template_parameters():  # customer's row history, printed at the end
            history = history_demo.history_tables_parameter(pipeline.source_schema)
            settings.parameters["HistoryTables"] = history
        app = pipeline.deploy()
        step(started, f"deployed stack {app.stack_name} (sam build + sam deploy --config-env local)")
        pipeline.start_replication()
        pipeline.start_execution()
        step(started, f"DMS task {pipeline.task_arn} and execution {pipeline.execution_arn} started")
        monitor = pipeline.monitor()
        printer = ProgressPrinter(
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
            step(
                started,
                f"workload round {number}/{args.rounds}: {per_round} transactions, {made} row changes",
            )
            if number == args.rounds // 2:
                _add_column_mid_stream(pipeline, started)
            if act and number == max(1, args.rounds - 1):
                source_changes = diverge_source(pipeline, started)
            time.sleep(args.pause)
        final = pipeline.wait_until_applied(args.timeout)
        printer.stopped.set()
        print(printer.monitor.snapshot().line(), flush=True)  # the same clock as the lines before it
        if source_changes is not None:
            repaired = reconcile_and_repair(pipeline, app, started, source_changes, jdbc_url, args.timeout)
            final = repaired or final
        step(started, "caught up; verifying every clean table against its source")
        checks = pipeline.verify()
        for check in checks:
            print("  " + check.line())
        clean_ok = all(c.matches for c in checks)
        refined_checks, maintenance_runs = finale(pipeline, app, started, Path(args.workdir))
        ok = clean_ok and all(c.matches for c in refined_checks)
        glue = sam_app.client("glue", config.endpoint_url)
        runs = glue.get_job_runs(JobName=app.cdc_job_name)["JobRuns"]
        refines = glue.get_job_runs(JobName=job_name(app, "RefineJob"))["JobRuns"]
        print(
            f"\nsummary: {sum(counts.values())} source rows at scale {args.scale}, "
            f"{pipeline.row_changes} row changes in {args.changes} transactions, "
            f"{final.raw.load_files} load + {final.raw.cdc_files} CDC files, "
            f"{len(runs)} CDC runs, {len(refines)} refine runs, {maintenance_runs} maintenance runs, "
            f"{len(pipeline.executions())} execution(s), "
            f"{len(checks)} clean tables {'ALL MATCH' if clean_ok else 'MISMATCH'}, "
            f"{len(refined_checks)} refined tables "
            f"{'ALL MATCH' if all(c.matches for c in refined_checks) else 'MISMATCH'}, "
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
            step(
                started,
                "stopped the execution, the DMS task"
                + (", PostgreSQL" if pipeline.postgres is not None else "")
                + (", MariaDB" if pipeline.mariadb is not None else "")
                + ("" if already_running else " and LocalStack"),
            )
    return 0 if ok else 1


def _add_column_mid_stream(pipeline: LocalPipeline, started: float) -> None:
    """A DBA's DDL while CDC runs: a new column on `item`, the schema file regenerated from the live catalog
    (the documented procedure), then values for it; the next files carry the column in their header."""
    pipeline.add_column("item", "i_eco_score", "NUMERIC(5,2)")
    changed = pipeline.execute_sql(
        "UPDATE item SET i_eco_score = (i_item_sk % 100) / 10.0 WHERE i_item_sk % 7 = 0"
    )
    pipeline.row_changes += changed
    step(
        started,
        f"source DDL: ALTER TABLE item ADD COLUMN i_eco_score NUMERIC(5,2); {changed} rows given a value",
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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
        "--history-threshold", type=int, default=40, help="events before the execution rolls over"
    )
    parser.add_argument(
        "--dms-format",
        choices=["csv", "parquet"],
        default="csv",
        help="what the local DMS writes (DataFormat)",
    )
    parser.add_argument(
        "--source",
        choices=["postgresql", "mysql", "sqlite"],
        default="postgresql",
        help="the source database: an embedded PostgreSQL server read through a replication slot, a local"
        " MariaDB server read from its binlog (`make demo SOURCE=mysql`), or an SQLite file read through triggers",
    )
    parser.add_argument(
        "--no-divergence",
        action="store_true",
        help="skip the TRUNCATE and key update, the reconcile runs and the repair (the PostgreSQL source"
        " has them by default)",
    )
    parser.add_argument(
        "--keep-running", action="store_true", help="leave LocalStack, DMS and the execution up"
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    return run_demo(args)


if __name__ == "__main__":
    sys.exit(main())

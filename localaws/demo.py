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
then stops the state machine, runs the refine job once more and one maintenance pass, checks every refined
table against a recomputation from the source database, runs the BI queries (bi/queries), prints each clean
table's freshness, the consistent point the refined zone was built from and every version of one customer
(the stack keeps the customer table's row history: HistoryTables; localaws/history_demo.py), writes the
dashboard (its path is printed), prints a summary and stops what it started (also on Ctrl-C or failure;
`--keep-running` leaves it all running; `--source sqlite` replicates an SQLite file through triggers instead;
`--source mysql` (`make demo SOURCE=mysql`) a local MariaDB server read from its binlog, as DMS reads MySQL).

Divergence and repair (issue 25; PostgreSQL source, unless `--no-divergence`): before the last workload round
the source's calendar `date_dim` is rebuilt without its first year (TRUNCATE + INSERT, which DMS does not
replicate: the lake keeps the dropped rows) and a customer is renumbered (a primary-key update, which DMS does
write to S3); once the lake caught up the demo shows the lake against the source, runs the deployed reconcile
Glue job with `--repair_mode reload`, prints what it found and repaired (its report, `dms_divergence`), waits
until the loop applied DMS's reload, and a second reconcile run shows every table equal
(localaws/divergence.py).
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from localaws import divergence, history_demo, replication, sam_app, stack
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
    printer: _ProgressPrinter | None = None
    ok = False
    source_changes: divergence.SourceDivergence | None = None
    jdbc_url = ""
    try:
        if act and pipeline.postgres is not None:  # the reconcile job reads the source over JDBC (TCP)
            port = pipeline.postgres.start(tcp_port=_free_port()).port
            jdbc_url = f"jdbc:postgresql://127.0.0.1:{port}/postgres"
        counts = pipeline.create_source()
        _step(
            started,
            f"source ({pipeline.source_db.dialect}) {pipeline.source_db}: "
            + ", ".join(f"{t} {n}" for t, n in counts.items()),
        )
        if "HistoryTables" in sam_app.template_parameters():  # customer's row history, printed at the end
            history = history_demo.history_tables_parameter(pipeline.source_schema)
            settings.parameters["HistoryTables"] = history
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
            if number == args.rounds // 2:
                _add_column_mid_stream(pipeline, started)
            if act and number == max(1, args.rounds - 1):
                source_changes = _diverge_source(pipeline, started)
            time.sleep(args.pause)
        final = pipeline.wait_until_applied(args.timeout)
        printer.stopped.set()
        print(printer.monitor.snapshot().line(), flush=True)  # the same clock as the lines before it
        if source_changes is not None:
            repaired = _reconcile_and_repair(pipeline, app, started, source_changes, jdbc_url, args.timeout)
            final = repaired or final
        _step(started, "caught up; verifying every clean table against its source")
        checks = pipeline.verify()
        for check in checks:
            print("  " + check.line())
        clean_ok = all(c.matches for c in checks)
        refined_checks, maintenance_runs = _finale(pipeline, app, started, Path(args.workdir))
        ok = clean_ok and all(c.matches for c in refined_checks)
        glue = sam_app.client("glue", config.endpoint_url)
        runs = glue.get_job_runs(JobName=app.cdc_job_name)["JobRuns"]
        refines = glue.get_job_runs(JobName=_job(app, "RefineJob"))["JobRuns"]
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
            _step(
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
    _step(
        started,
        f"source DDL: ALTER TABLE item ADD COLUMN i_eco_score NUMERIC(5,2); {changed} rows given a value",
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _diverge_source(pipeline: LocalPipeline, started: float) -> divergence.SourceDivergence:
    """During CDC: a TRUNCATE DMS does not replicate, and a primary-key update (localaws/divergence.py)."""
    done = divergence.diverge_source(pipeline.source_db)
    pipeline.row_changes += done.rows_after + 1
    _step(
        started,
        f"source: {done.rebuilt_table} rebuilt from {divergence.REBUILT_FROM} on (TRUNCATE + INSERT in one "
        f"transaction: {done.rows_before} -> {done.rows_after} rows); {done.renumbered_table} key "
        f"{done.old_key} -> {done.new_key} (UPDATE of the primary key)",
    )
    return done


def _reconcile_job(app: Any) -> str | None:
    return app.outputs.get("ReconcileJobName") or app.resources.get("ReconcileJob")


def _reconcile_and_repair(
    pipeline: LocalPipeline,
    app: Any,
    started: float,
    changes: divergence.SourceDivergence,
    jdbc_url: str,
    timeout: float,
) -> Any:
    """The lake against the source, a reconcile run with `--repair_mode reload`, the reload applied by the
    loop, and a second reconcile run; prints what was found and repaired. Returns the snapshot once caught up
    after the repair (None when the stack has no reconcile job)."""
    from lakehouse.base.schema import SchemaFile

    schema = SchemaFile.from_dict(replication.schema_document(pipeline.source_db))
    source_schema = pipeline.source_schema
    specs = {spec.name: spec for spec in schema.tables.values()}
    lake = pipeline.lake_config()
    names = {
        table: lake.clean_table(specs[table].iceberg_name)
        for table in (changes.rebuilt_table, changes.renumbered_table)
    }
    before = divergence.lake_view(
        pipeline.spark(), names[changes.rebuilt_table], names[changes.renumbered_table], changes
    )
    _step(started, "caught up: the lake against the source after the TRUNCATE and the key update")
    source_keys = divergence.source_key_rows(pipeline.source_db, changes)
    for line in divergence.describe_before_repair(changes, before, source_keys, source_schema):
        print("  " + line, flush=True)
    job = _reconcile_job(app)
    if job is None:
        _step(started, "the stack has no reconcile job (template.yaml without it): no reconcile, no repair")
        return None
    snapshot = None
    for number, repair in ((1, True), (2, False)):
        run_id = f"demo-reconcile-{number}"
        report_key = f"manifests/reports/{run_id}.json"
        arguments = divergence.reconcile_arguments(
            run_id=run_id,
            jdbc_url=jdbc_url,
            user="postgres",
            raw_path=f"s3://{app.raw_bucket}/dms",
            schema_file=f"s3://{app.artifacts_bucket}/{replication.SCHEMA_FILE_KEY}",
            report_uri=f"s3://{app.artifacts_bucket}/{report_key}",
            task_arn=pipeline.task_arn,
            repair=repair,
        )
        since = time.time()
        _step(
            started,
            f"reconcile run {number} (Glue job {job}, --repair_mode {arguments['--repair_mode']}): every clean "
            "table against its source, by key-range hashes",
        )
        # by hand, without a lease: the lease function leaves a check run going through rollovers
        pipeline.run_job(job, arguments, timeout=timeout)
        body = pipeline.aws("s3").get_object(Bucket=app.artifacts_bucket, Key=report_key)["Body"].read()
        report = json.loads(body)
        for line in divergence.summarize_report(report, _divergence_rows(pipeline, run_id)):
            print("  " + line, flush=True)
        if not repair:
            break
        repaired = [t["table"] for t in report["tables"] if t.get("repaired")]
        if not repaired:
            _step(started, "nothing to repair")
            break
        _wait_for_reload(pipeline, app, repaired, since, timeout)
        snapshot = pipeline.wait_until_applied(timeout)
        after = divergence.lake_view(
            pipeline.spark(), names[changes.rebuilt_table], names[changes.renumbered_table], changes
        )
        _step(
            started,
            f"repaired: DMS reloaded {', '.join(repaired)} and the loop applied the reload (full-load job "
            f"--reload); the lake's {changes.rebuilt_table} now {after.rebuilt_rows} rows "
            f"({after.rebuilt_rows_before_cut} before {divergence.REBUILT_FROM})",
        )
    return snapshot


def _divergence_rows(pipeline: LocalPipeline, run_id: str) -> dict[str, int]:
    """The run's `dms_divergence` rows per table (none when nothing diverged: the table may not exist)."""
    spark = pipeline.spark()
    table = pipeline.lake_config().clean_table("dms_divergence")
    if not spark.catalog.tableExists(table):
        return {}
    rows = spark.table(table).where(f"run_id = '{run_id}'").groupBy("source_table").count().collect()
    return {row["source_table"]: int(row["count"]) for row in rows}


def _wait_for_reload(
    pipeline: LocalPipeline, app: Any, tables: list[str], since: float, timeout: float
) -> None:
    """Until the full-load job ran a reload of `tables` started after `since` (epoch seconds) and succeeded,
    and no reload request is pending."""
    glue = pipeline.aws("glue")
    deadline = time.monotonic() + timeout

    def reloaded() -> bool:
        runs = glue.get_job_runs(JobName=app.full_load_job_name)["JobRuns"]
        done = [
            r
            for r in runs
            if r.get("Arguments", {}).get("--reload") == "true"
            and r["StartedOn"].timestamp() >= since
            and r["JobRunState"] == "SUCCEEDED"
            and all(t in r.get("Arguments", {}).get("--tables", "") for t in tables)
        ]
        return bool(done) and not pipeline.reloads_pending()

    while not reloaded():
        if time.monotonic() > deadline:
            pending = pipeline.reloads_pending()
            raise TimeoutError(
                f"the reload of {tables} not applied after {timeout:.0f}s (pending: {pending})"
            )
        time.sleep(2.0)


def _wait_for_rollover(pipeline: LocalPipeline, timeout: float) -> int:
    """The number of executions, once a rollover happened or `timeout` seconds passed."""
    deadline = time.monotonic() + timeout
    while len(executions := pipeline.executions()) < 2 and time.monotonic() < deadline:
        time.sleep(2.0)
    return len(executions)


def _job(app: Any, logical_id: str) -> str:
    return app.outputs.get(f"{logical_id}Name") or app.resources[logical_id]


def _finale(pipeline: LocalPipeline, app: Any, started: float, workdir: Path) -> tuple[list[Any], int]:
    """Refine once more, one maintenance pass, the refined check, the BI queries and the dashboard."""
    from lakehouse.audit.freshness import describe

    from tools.asl_engine import load_template
    from tools.bi import load_queries, run_query, spark_names, timestamp_as_of
    from tools.dashboard import collect_figures, run_metrics, write_dashboard

    executions = _wait_for_rollover(pipeline, timeout=45)
    _step(
        started,
        f"{executions} execution(s): "
        + (
            "the first handed the loop and the lease over to a fresh one (history rollover)"
            if executions > 1
            else "NO ROLLOVER happened: the demo did not show the hand-over "
            "(raise --changes or lower --history-threshold)"
        ),
    )
    pipeline.stop_executions()  # nothing races the jobs below; the pending batch (none) would stay
    _step(started, "state machine stopped; running the refine job on the final clean zone")
    pipeline.run_job(_job(app, "RefineJob"), {"--run_id": "demo-final-refine"})
    glue = pipeline.aws("glue")
    maintenance = app.outputs.get("MaintenanceJobName") or app.resources.get("MaintenanceJob")
    maintenance_runs = 0
    if maintenance:
        in_loop = len(glue.get_job_runs(JobName=maintenance)["JobRuns"])
        _step(started, f"maintenance ran {in_loop} time(s) in the loop; one more pass now")
        report_key = "manifests/reports/maintenance-demo.json"
        pipeline.run_job(  # every file here is minutes old: no orphan could be old enough, so none is sought
            maintenance,
            {
                "--run_id": "demo-maintenance",
                "--report_uri": f"s3://{app.artifacts_bucket}/{report_key}",
                "--orphan_file_age_hours": "0",
            },
        )
        maintenance_runs = in_loop + 1
        body = pipeline.aws("s3").get_object(Bucket=app.artifacts_bucket, Key=report_key)["Body"].read()
        tables = json.loads(body)["tables"]
        print(
            f"  maintenance: {len(tables)} tables, "
            f"{sum(t['rewritten_data_files'] for t in tables)} data files compacted, "
            f"{sum(t['removed_delete_files'] for t in tables)} delete files removed, "
            f"{sum(t['expired_snapshots'] for t in tables)} snapshots expired, "
            f"data files {sum(t['data_files_before'] for t in tables)} -> {sum(t['data_files_after'] for t in tables)}"
        )
    _step(started, "verifying every refined table against a recomputation from the source database")
    refined_checks = pipeline.verify_refined()
    for check in refined_checks:
        print("  " + check.line())
    spark, lake = pipeline.spark(), pipeline.lake_config()
    _step(started, "BI queries (bi/queries) on the refined zone, first rows of each")
    # The time-travel queries look back to the earliest moment every refined table has a snapshot for
    # (the first refine's commits; each table has its own snapshot ids, so a moment, not an id).
    refined = f"{lake.catalog_name}.{lake.refined_database}"
    firsts = [
        spark.sql(f"SELECT min(committed_at) AS at FROM {refined}.{row['tableName']}.snapshots").first()["at"]
        for row in spark.sql(f"SHOW TABLES IN {refined}").collect()
    ]
    moment = max(firsts).strftime("%Y-%m-%d %H:%M:%S.%f") if firsts and all(firsts) else None
    names = spark_names(lake, timestamp_as_of(moment) if moment else None)
    for query in load_queries().values():
        if not query.placeholders <= set(names):
            print(f"  {query.name}: skipped, the refined zone has no earlier snapshot to travel to")
            continue
        rows = run_query(spark, query, names).limit(3).collect()
        as_of = f" [as of {moment}]" if "as_of" in query.placeholders else ""
        description = query.description.replace("${as_of}", moment or "an earlier point")
        print(f"  {query.name}: {description}{as_of}")
        for row in rows:
            print("    " + ", ".join(f"{k}={v}" for k, v in row.asDict().items()))
        if not rows:
            print("    (no rows)")
    _step(started, "freshness of each clean table, and the consistent point (docs/BI.md)")
    for line in describe(spark, lake, f"{refined}.sales_enriched"):
        print("  " + line)
    _step(started, "row history: every version of one customer (the template's Athena named query, in Spark)")
    resources = load_template()["Resources"]
    for line in history_demo.describe(spark, lake, pipeline.source_schema, resources):
        print("  " + line)
    reports = pipeline.run_reports()
    saved = workdir / "reports"  # `make dashboard` draws the same runs from here
    saved.mkdir(parents=True, exist_ok=True)
    for report in reports:
        (saved / f"{report['run_id']}.json").write_text(json.dumps(report), encoding="utf-8")
    metrics = run_metrics(reports)
    path = write_dashboard(workdir / "dashboard.html", collect_figures(spark, lake), metrics)
    _step(started, f"dashboard written: {path.resolve()} (open it in a browser; it works offline)")
    return refined_checks, maintenance_runs


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

"""The demo's divergence and repair act (`python -m localaws.demo`, PostgreSQL source, unless
`--no-divergence`): during CDC the source is changed in ways DMS does not deliver as they happened (a TRUNCATE,
a primary-key update); once the lake caught up, the lake is shown against the source, the deployed reconcile
Glue job runs with `--repair_mode reload`, the loop applies DMS's reload, and a second reconcile run shows
every table equal. What is done to the source and read from the lake: `localaws/divergence.py`.
"""

from __future__ import annotations

import json
import time

from localaws import divergence, replication
from localaws.demo_output import step
from localaws.pipeline_run import AppHandles, LocalPipeline
from localaws.progress import ProgressSnapshot


def diverge_source(pipeline: LocalPipeline, started: float) -> divergence.SourceDivergence:
    """During CDC: a TRUNCATE DMS does not replicate, and a primary-key update (localaws/divergence.py)."""
    done = divergence.diverge_source(pipeline.source_db)
    pipeline.row_changes += done.rows_after + 1
    step(
        started,
        f"source: {done.rebuilt_table} rebuilt from {divergence.REBUILT_FROM} on (TRUNCATE + INSERT in one "
        f"transaction: {done.rows_before} -> {done.rows_after} rows); {done.renumbered_table} key "
        f"{done.old_key} -> {done.new_key} (UPDATE of the primary key)",
    )
    return done


def _reconcile_job(app: AppHandles) -> str | None:
    return app.outputs.get("ReconcileJobName") or app.resources.get("ReconcileJob")


def reconcile_and_repair(
    pipeline: LocalPipeline,
    app: AppHandles,
    started: float,
    changes: divergence.SourceDivergence,
    jdbc_url: str,
    timeout: float,
) -> ProgressSnapshot | None:
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
    step(started, "caught up: the lake against the source after the TRUNCATE and the key update")
    source_keys = divergence.source_key_rows(pipeline.source_db, changes)
    for line in divergence.describe_before_repair(changes, before, source_keys, source_schema):
        print("  " + line, flush=True)
    job = _reconcile_job(app)
    if job is None:
        step(started, "the stack has no reconcile job (template.yaml without it): no reconcile, no repair")
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
        step(
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
            step(started, "nothing to repair")
            break
        _wait_for_reload(pipeline, app, repaired, since, timeout)
        snapshot = pipeline.wait_until_applied(timeout)
        after = divergence.lake_view(
            pipeline.spark(), names[changes.rebuilt_table], names[changes.renumbered_table], changes
        )
        step(
            started,
            f"repaired: DMS reloaded {', '.join(repaired)} and the loop applied the reload (full-load job "
            f"--reload); the lake's {changes.rebuilt_table} now {after.rebuilt_rows} rows "
            f"({after.rebuilt_rows_before_cut} before {divergence.REBUILT_FROM})",
        )
    return snapshot


def _divergence_rows(pipeline: LocalPipeline, run_id: str) -> dict[str, int]:
    """The run's `dms_divergence` rows per table (none when nothing diverged: the table may not exist)."""
    spark = pipeline.spark()
    table = pipeline.lake_config().divergence
    if not spark.catalog.tableExists(table):
        return {}
    rows = spark.table(table).where(f"run_id = '{run_id}'").groupBy("source_table").count().collect()
    return {row["source_table"]: int(row["count"]) for row in rows}


def _wait_for_reload(
    pipeline: LocalPipeline, app: AppHandles, tables: list[str], since: float, timeout: float
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

"""The demo's finale (`python -m localaws.demo`), once the clean zone caught up and was checked: the state
machine stopped, the refine job and a maintenance pass run once more, every refined table checked against its
model's SQL over the source, the BI queries (bi/queries), each clean table's freshness, one customer's row history
(`localaws/history_demo.py`), the runs' reports kept and the dashboard written.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from localaws import history_demo
from localaws.demo_output import step
from localaws.pipeline_run import AppHandles, LocalPipeline


def _wait_for_rollover(pipeline: LocalPipeline, timeout: float) -> int:
    """The number of executions, once a rollover happened or `timeout` seconds passed."""
    deadline = time.monotonic() + timeout
    while len(executions := pipeline.executions()) < 2 and time.monotonic() < deadline:
        time.sleep(2.0)
    return len(executions)


def job_name(app: AppHandles, logical_id: str) -> str:
    return app.outputs.get(f"{logical_id}Name") or app.resources[logical_id]


def finale(pipeline: LocalPipeline, app: AppHandles, started: float, workdir: Path) -> tuple[list[Any], int]:
    """Refine once more, one maintenance pass, the refined check, the BI queries and the dashboard."""
    from lakehouse.audit.freshness import describe

    from tools.bi import load_queries, run_query, spark_names, timestamp_as_of
    from tools.dashboard import collect_figures, run_metrics, write_dashboard
    from tools.emr_serverless_asl import load_template

    executions = _wait_for_rollover(pipeline, timeout=45)
    step(
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
    step(started, "state machine stopped; running the refine job on the final clean zone")
    pipeline.run_job(job_name(app, "RefineJob"), {"--run_id": "demo-final-refine"})
    glue = pipeline.aws("glue")
    maintenance = app.outputs.get("MaintenanceJobName") or app.resources.get("MaintenanceJob")
    maintenance_runs = 0
    if maintenance:
        in_loop = len(glue.get_job_runs(JobName=maintenance)["JobRuns"])
        step(started, f"maintenance ran {in_loop} time(s) in the loop; one more pass now")
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
    step(started, "verifying each model's refined table against the model's SQL over the source database")
    refined_checks = pipeline.verify_refined()
    for check in refined_checks:
        print("  " + check.line())
    spark, lake = pipeline.spark(), pipeline.lake_config()
    step(started, "BI queries (bi/queries) on the refined zone, first rows of each")
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
    step(started, "freshness of each clean table, and the consistent point (docs/BI.md)")
    for line in describe(spark, lake, f"{refined}.sales_enriched"):
        print("  " + line)
    step(started, "row history: every version of one customer (the template's Athena named query, in Spark)")
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
    step(started, f"dashboard written: {path.resolve()} (open it in a browser; it works offline)")
    return refined_checks, maintenance_runs

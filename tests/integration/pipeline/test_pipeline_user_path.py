"""A user's path on the local AWS, with the commands docs/DEPLOY.md gives and nothing else: the schema file from
`tools.schema_gen`, the stack from what `make deploy` runs (`python -m deploy.release`, AWS_ENDPOINT_URL naming
the local AWS), and the pipeline operated with `lakectl` alone: start, reload, reconcile, rollback, status.

One stack, the embedded PostgreSQL source on TCP (the schema file's and the reconcile's JDBC connection), a DMS
task of the user's own (`CreateDmsTask=false`, as the local DMS cannot be made by CloudFormation)."""

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from lakehouse.base.names import table_name

from deploy import stack_names
from localaws import replication, sam_app
from localaws.pipeline_run import LocalPipeline
from tests.integration.pipeline.test_pipeline_end_to_end import assert_clean_equals_source, lakectl, wait_for
from tests.integration.pipeline.test_pipeline_reconcile import free_port

pytestmark = pytest.mark.integration


def raw_bucket_named(pipeline: LocalPipeline) -> str:
    """The raw bucket the stack will create, named before it exists (the task's target must be it)."""
    account = pipeline.aws("sts").get_caller_identity()["Account"]
    resources = stack_names.named_resources(
        {"EnvironmentName": pipeline.settings.name}, account, sam_app.REGION, pipeline.stack_name
    )
    return next(r.name for r in resources if r.logical_id == "RawBucket")


def schema_file(port: int, out: Path) -> Path:
    """docs/DEPLOY.md's first step: the schema file from the source's catalog."""
    url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    command = [
        sys.executable,
        "-m",
        "tools.schema_gen",
        "--url",
        url,
        "--schema",
        "public",
        "--out",
        str(out),
    ]
    subprocess.run(command, cwd=sam_app.REPO_ROOT, check=True, capture_output=True, timeout=120)
    return out


def equal_to_source(pipeline: LocalPipeline) -> bool:
    """Every clean table of the source's tables equals it (row checksums), none missing."""
    checks = pipeline.verify()
    wanted = {f"{pipeline.source_schema}.{t}" for t in replication.SOURCE_TABLES}
    return all(c.matches for c in checks) and {c.table for c in checks} == wanted


def snapshot_ids(pipeline: LocalPipeline, table: str) -> list[int]:
    """The clean table's snapshots, oldest first."""
    clean = pipeline.lake_config().clean_table(table_name(pipeline.source_schema, table))
    rows = pipeline.spark().sql(f"SELECT snapshot_id FROM {clean}.snapshots ORDER BY committed_at").collect()
    return [row["snapshot_id"] for row in rows]


def test_a_user_deploys_with_the_release_and_runs_it_with_lakectl_alone(
    make_pipeline, pipeline_endpoint, tmp_path: Path
) -> None:
    """Given a PostgreSQL source on TCP, a secret with its credentials for the reconcile, and the schema file made
    by `tools.schema_gen`,
    When the user deploys with what `make deploy` runs before creating the DMS task the stack is to follow,
    Then the preflight refuses, naming the task, and nothing is built or created;
    When the task exists (writing to the raw bucket the stack will create) and the deploy runs again,
    Then the stack's jobs run the code and the schema file the release published under versioned keys;
    When the user operates it with lakectl alone: `start --wait` (no input chosen by hand: the full load),
    two tables reloaded (`reload`) while changes keep coming, `reconcile --wait`, and web_sales rolled back
    past its newest changes (`rollback --wait`, which re-drives their files),
    Then the reloads are applied by full-load runs (`--reload`), every table equals its source, the on-demand
    reconcile finds every table equal, the rollback undoes only commits after its target and the loop
    applies the re-driven files again, exactly once: the clean zone equals the source, and `status` shows the
    execution holding the lease, no batch out of line and the last reconcile clean."""
    port = free_port()
    secret = {"username": "postgres", "host": "127.0.0.1", "port": port, "dbname": "postgres"}
    secret_arn = sam_app.client("secretsmanager", pipeline_endpoint).create_secret(
        Name=f"source-{uuid.uuid4().hex[:8]}", SecretString=json.dumps(secret)
    )["ARN"]
    # the refine is the rollover test's (HasRefineModels=false overrides what the models folder says)
    pipeline = make_pipeline(deploy=False, parameters={"ReconcileSourceSecretArn": secret_arn})
    assert pipeline.postgres is not None
    pipeline.source_db = pipeline.postgres.start(tcp_port=port).source
    schema = schema_file(port, tmp_path / "schema.json")

    refused = pipeline.release(schema)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"DmsReplicationTaskArn {pipeline.task_arn}: no such DMS task" in refused.stderr, refused.stderr
    assert "Build Succeeded" not in refused.stdout + refused.stderr
    stacks = pipeline.aws("cloudformation").list_stacks()["StackSummaries"]
    assert pipeline.stack_name not in {s["StackName"] for s in stacks}

    pipeline.create_replication(raw_bucket_named(pipeline))
    deployed = pipeline.release(schema)
    assert deployed.returncode == 0, deployed.stderr[-4000:]
    app = pipeline.app
    assert app is not None and pipeline.deployed.schema_key.startswith("config/schema-")
    glue = pipeline.aws("glue")
    script = glue.get_job(JobName=app.cdc_job_name)["Job"]["Command"]["ScriptLocation"]
    assert script.startswith(f"s3://{app.artifacts_bucket}/glue/code/"), script

    pipeline.start_replication()
    code, started = lakectl(pipeline, "start", "--wait")
    assert (code, started["started"], started["input"], started["state"]) == (0, True, {}, "HOLDS_LEASE")
    pipeline.run_workload(300, seed=31)
    pipeline.wait_until_applied(timeout=420)

    # reloads while changes keep coming (DMS empties the folders, deleting CDC files perhaps not applied yet)
    pipeline.run_workload(150, seed=32)
    for table in ("customer", "web_sales"):
        code, reload = lakectl(pipeline, "reload", f"{pipeline.source_schema}.{table}")
        assert (code, reload["reload"]) == (0, "requested"), reload
    pipeline.run_workload(150, seed=33)
    requested = wait_for(lambda: pipeline.reloads_pending(), 120)
    assert requested and set(requested) <= {"public.customer", "public.web_sales"}, requested
    assert wait_for(lambda: not pipeline.reloads_pending() or None, 420) is not None, (
        pipeline.reloads_pending()
    )
    pipeline.wait_until_applied(timeout=420)
    full_loads = glue.get_job_runs(JobName=app.full_load_job_name)["JobRuns"]
    reloads = [r for r in full_loads if r.get("Arguments", {}).get("--reload") == "true"]
    assert reloads and all(r["JobRunState"] == "SUCCEEDED" for r in reloads), full_loads

    # the lake caught up after the reloads: the on-demand reconcile finds no difference at all (none diverged,
    # none in flight), so every table equals its source
    code, reconcile = lakectl(pipeline, "reconcile", "--wait")
    assert (code, reconcile["state"]) == (0, "SUCCEEDED"), reconcile
    key = f"manifests/reports/{reconcile['run_id']}.json"
    report = json.loads(pipeline.aws("s3").get_object(Bucket=app.artifacts_bucket, Key=key)["Body"].read())
    assert (report["totals"]["diverged_tables"], report["totals"]["in_flight"]) == (0, 0), report
    assert {t["table"] for t in report["tables"]} == {f"public.{t}" for t in replication.SOURCE_TABLES}

    # a rollback that commits: web_sales back to where the reload left it, its newer commits' files re-driven
    target = snapshot_ids(pipeline, "web_sales")[-1]
    pipeline.run_workload(80, seed=34)
    pipeline.wait_until_applied(timeout=420)
    newer = snapshot_ids(pipeline, "web_sales")
    assert newer[-1] != target, "the workload changed no web_sales row"
    code, rollback = lakectl(
        pipeline, "rollback", f"{pipeline.source_schema}.web_sales", "--to-snapshot", str(target), "--wait"
    )
    plan = rollback["report"]
    assert (code, rollback["state"], plan["rolled_back"]) == (0, "SUCCEEDED", True), rollback
    assert set(plan["rolled_back_snapshot_ids"]) <= set(newer[newer.index(target) + 1 :]), plan
    assert sorted(rollback["redrive"]["sent"]) == sorted(
        uri.removeprefix(f"s3://{app.raw_bucket}/") for uri in plan["files_to_redrive"]
    ), rollback
    # the loop applies the re-driven files again, in commits of its own (the files may come in two batches)
    assert wait_for(lambda: snapshot_ids(pipeline, "web_sales")[-1] not in newer, 420, 3)
    pipeline.wait_until_applied(timeout=420)
    if not wait_for(lambda: equal_to_source(pipeline), 60, 10):
        assert_clean_equals_source(pipeline)  # says which table differs, and how

    code, status = lakectl(pipeline, "status")
    assert code == 0 and status["lease"]["holder"] == started["execution_arn"], status
    assert (status["full_load_recorded"], status["pending_batches"], status["failed_batches"]) == (
        True,
        [],
        [],
    )
    assert (
        status["last_reconcile"]["run_id"] == reconcile["run_id"] and not status["last_reconcile"]["diverged"]
    )

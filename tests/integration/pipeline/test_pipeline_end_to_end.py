"""The deployed template, end to end: DMS → raw bucket → queue → state machine → Glue → clean zone,
checked against the source by row checksums; rollover; injected faults; a failing DMS task."""

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from lakehouse.base.names import table_name
from lakehouse.refine.models import parse_model

from deploy import glue_artifacts
from localaws import replication, sam_app
from localaws.pipeline_run import LocalPipeline

pytestmark = pytest.mark.integration

# Template parameter of the history guard's threshold (events before a rollover).
HISTORY_THRESHOLD_PARAMETER = "HistoryThreshold"


def assert_clean_equals_source(pipeline: LocalPipeline) -> None:
    checks = pipeline.verify()
    lines = "\n".join(c.line() for c in checks)
    assert checks and all(c.matches for c in checks), lines
    assert {c.table for c in checks} == {f"{pipeline.source_schema}.{t}" for t in replication.SOURCE_TABLES}


def start(pipeline: LocalPipeline) -> None:
    pipeline.start_replication()
    pipeline.start_execution()


def test_a_postgresql_source_through_ddl_a_killed_task_and_its_resume_ends_equal_to_the_source(
    make_pipeline,
) -> None:
    """Given the pipeline replicating PostgreSQL through a logical replication slot, DMS writing Parquet
    (DataFormat=parquet; the CSV path: every other test),
    the alarm topic subscribed by a queue,
    When a DBA adds a column and widens two types mid-stream (the schema file regenerated from the live
    catalog), rows use them, the DMS task's source connection is killed while the workload runs (the task
    fails, as DMS does: no file arrives, so only a check of the task itself can notice),
    Then the local DMS had published CDCLatencySource under the dimensions the template's alarm watches, the
    execution fails in DmsTaskStopped with DMS's LastFailureMessage as its cause, and the task's
    REPLICATION_TASK_FAILED event reaches the alarm topic;
    When the operator resumes the task and starts an execution with skip_full_load (the runbook),
    Then the slot replays what was not yet written, the files after the DDL carry the new column, and every
    clean table equals its source: nothing lost, a replayed change applied once."""
    pipeline = make_pipeline(parameters={"DmsReplicationInstanceIdentifier": "local"}, data_format="parquet")
    assert pipeline.source_db.dialect == "postgresql"
    alarms = subscribe_queue_to_alarms(pipeline)
    start(pipeline)
    changes = pipeline.run_workload(300, seed=41)
    pipeline.wait_until_applied(timeout=420)
    assert_cdc_latency_published_for_the_alarm(pipeline)

    pipeline.add_column("item", "i_eco_score", "NUMERIC(5,2)")
    # Widened where the workload does no arithmetic with the values (it derives sale amounts from prices).
    pipeline.widen_column("customer_address", "ca_gmt_offset", "NUMERIC(9,2)")
    pipeline.widen_column("time_dim", "t_time", "BIGINT")
    changes += pipeline.execute_sql(
        "UPDATE item SET i_eco_score = i_item_sk % 97 + 0.25 WHERE i_item_sk % 3 = 0"
    )
    changes += pipeline.execute_sql(
        "UPDATE customer_address SET ca_gmt_offset = 1234567.89 WHERE ca_address_sk % 4 = 0"
    )
    changes += pipeline.execute_sql(
        "UPDATE time_dim SET t_time = t_time + 5000000000 WHERE t_time_sk % 9 = 0"
    )
    changes += pipeline.run_workload(150, seed=42)

    assert pipeline.kill_replication_connection() >= 1
    changes += pipeline.run_workload(150, seed=43)  # committed while the task is down
    dms = pipeline.aws("dms")
    failed = wait_for(
        lambda: replication.describe_task(dms, pipeline.task.arn)["Status"] == "failed", 60, 0.5
    )
    assert failed, replication.describe_task(dms, pipeline.task.arn)
    reason = replication.describe_task(dms, pipeline.task.arn)["LastFailureMessage"]
    assert reason
    # the loop's next pass sees the failed task: the execution ends in DmsTaskStopped with DMS's reason
    ended = wait_for(lambda: pipeline.executions()[0]["status"] != "RUNNING", 600, 1)  # after a CDC run
    assert ended and pipeline.executions()[0]["status"] == "FAILED", pipeline.executions()
    described = pipeline.aws("stepfunctions").describe_execution(
        executionArn=pipeline.executions()[0]["executionArn"]
    )
    assert described["error"] == "DmsTaskStopped", described
    assert reason in json.loads(described["cause"])["errorMessage"], described["cause"]
    events = wait_for(lambda: task_events(pipeline, alarms), 30, 1)
    assert events, "no DMS state-change event reached the alarm topic"
    assert events[0]["detail-type"] == "DMS Replication Task State Change"
    assert events[0]["detail"]["eventType"] == "REPLICATION_TASK_FAILED"
    assert reason in events[0]["detail"]["detailMessage"]
    pipeline.resume_replication()
    pipeline.settings.execution_input = {"skip_full_load": True}  # the runbook: full-load.json exists
    pipeline.start_execution()
    changes += pipeline.run_workload(150, seed=44)
    pipeline.wait_until_applied(timeout=480)

    assert changes >= 1000
    assert_clean_equals_source(pipeline)
    s3 = pipeline.aws("s3")
    keys = [
        o["Key"]
        for o in s3.list_objects_v2(Bucket=pipeline.app.raw_bucket, Prefix="dms/public/item/")["Contents"]
    ]
    newest = max((k for k in keys if "LOAD" not in k), key=lambda k: k.rsplit("/", 1)[-1])
    assert all(k.endswith(".parquet") for k in keys), keys
    body = s3.get_object(Bucket=pipeline.app.raw_bucket, Key=newest)["Body"].read()
    assert "i_eco_score" in pq.read_schema(io.BytesIO(body)).names


def wait_for(probe, timeout: float, every: float = 3.0):
    """Poll `probe` until it returns something truthy (returned) or `timeout` seconds pass (None)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(every)
    return None


def subscribe_queue_to_alarms(pipeline: LocalPipeline) -> str:
    """A queue subscribed to the stack's alarm topic (raw delivery); its URL."""
    sqs, sns = pipeline.aws("sqs"), pipeline.aws("sns")
    queue_url = sqs.create_queue(QueueName=f"alarms-{pipeline.settings.name}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    sns.subscribe(
        TopicArn=pipeline.app.outputs["AlarmTopicArn"],
        Protocol="sqs",
        Endpoint=queue_arn,
        Attributes={"RawMessageDelivery": "true"},
    )
    return queue_url


def task_events(pipeline: LocalPipeline, queue_url: str) -> list[dict]:
    """The DMS state-change events of this pipeline's task that reached the alarm topic's queue."""
    received = pipeline.aws("sqs").receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1
    )
    bodies = [json.loads(m["Body"]) for m in received.get("Messages", [])]
    return [b for b in bodies if b.get("source") == "aws.dms" and b.get("resources") == [pipeline.task.arn]]


def assert_cdc_latency_published_for_the_alarm(pipeline: LocalPipeline) -> None:
    """The CDC latency alarm watches AWS/DMS CDCLatencySource of this task, and the local DMS publishes it."""
    cloudwatch = pipeline.aws("cloudwatch")
    alarm = cloudwatch.describe_alarms(
        AlarmNames=[f"{pipeline.settings.name}-pipeline-dms-cdc-latency-source"]
    )
    (metric,) = [m["MetricStat"]["Metric"] for m in alarm["MetricAlarms"][0]["Metrics"] if "MetricStat" in m]
    assert metric["Namespace"] == "AWS/DMS" and metric["MetricName"] == "CDCLatencySource"
    assert {d["Name"]: d["Value"] for d in metric["Dimensions"]} == {
        "ReplicationInstanceIdentifier": "local",
        "ReplicationTaskIdentifier": pipeline.task.arn.rsplit(":", 1)[-1],
    }
    published = wait_for(
        lambda: cloudwatch.list_metrics(
            Namespace="AWS/DMS", MetricName="CDCLatencySource", Dimensions=metric["Dimensions"]
        )["Metrics"],
        30,
        1,
    )
    assert published, "the local DMS published no CDCLatencySource for the alarm's dimensions"


def lease_holder(pipeline: LocalPipeline) -> str | None:
    """The execution named by the pipeline lease, or None before any took it."""
    s3 = pipeline.aws("s3")
    try:
        body = s3.get_object(Bucket=pipeline.app.artifacts_bucket, Key="locks/pipeline-lease.json")["Body"]
    except s3.exceptions.NoSuchKey:
        return None
    return json.loads(body.read())["holder"]


# A model a user adds to the models folder, beside the examples: rebuilt by each refine whose inputs changed
# (here a rebuild is a second, an incremental refresh of it seven).
USERS_MODEL = """{{ config(materialized='table') }}
-- Customers by the state of their current address.
SELECT a.ca_state AS state, count(*) AS customers
FROM {{ source('customer') }} c
LEFT JOIN {{ source('customer_address') }} a ON c.c_current_addr_sk = a.ca_address_sk
GROUP BY a.ca_state
"""


def test_rollover_hands_over_to_a_new_execution_and_loses_nothing(make_pipeline, tmp_path: Path) -> None:
    """Given a low history threshold, a second execution started by hand, a refine after every batch and a
    model of the user's own added to the models folder and published with the job code,
    Then the hand-started execution exits at once saying who holds the lease, the running one rolls over
    to exactly one successor (which takes the lease over), the clean zone equals the source, and the
    loop's own refine runs bring every model's refined table, the user's too, to its SQL over the source; the
    user's table equals its SQL over the clean zone."""
    pipeline = make_pipeline(
        parameters={HISTORY_THRESHOLD_PARAMETER: "60", "RefineEveryNBatches": "1"}, refine=True
    )
    models = tmp_path / "models"
    models.mkdir()
    for example in glue_artifacts.model_files():
        shutil.copy(example, models / example.name)
    (models / "customers_by_state.sql").write_text(USERS_MODEL, encoding="utf-8")
    pipeline.publish_models(models)
    start(pipeline)
    first = pipeline.execution_arn
    sfn = pipeline.aws("stepfunctions")
    assert wait_for(lambda: lease_holder(pipeline) == first, 120), lease_holder(pipeline)
    intruder = sfn.start_execution(
        stateMachineArn=pipeline.app.state_machine_arn, name="started-by-hand", input="{}"
    )["executionArn"]
    ended = wait_for(
        lambda: (d := sfn.describe_execution(executionArn=intruder))["status"] != "RUNNING" and d, 120
    )
    assert ended and ended["status"] == "SUCCEEDED", ended
    output = json.loads(ended["output"])
    assert output["holder"] == first and "another execution holds the pipeline lease" in output["exited"]
    for round_number in range(4):
        pipeline.run_workload(150, seed=10 + round_number)
        time.sleep(4)
    pipeline.wait_until_applied(timeout=480)
    # The idle loop keeps adding events (drain, wait, guard): the handover comes within a few loops.
    executions = wait_for(lambda: pipeline.executions() if len(pipeline.executions()) >= 2 else None, 300)
    assert executions and len(executions) >= 2, pipeline.executions()
    pipeline.run_workload(150, seed=20)  # the successor execution applies new changes too
    pipeline.wait_until_applied(timeout=480)
    executions = pipeline.executions()
    assert sum(e["status"] == "RUNNING" for e in executions) == 1
    assert all(e["status"] in ("RUNNING", "SUCCEEDED") for e in executions), executions
    assert_clean_equals_source(pipeline)

    def the_running_successor_holds_the_lease() -> str | None:
        # read again: the idle loop (HistoryThreshold 60) may have rolled over while the tables were compared
        running = [e["executionArn"] for e in pipeline.executions() if e["status"] == "RUNNING"]
        return running[0] if len(running) == 1 and lease_holder(pipeline) == running[0] else None

    running = wait_for(the_running_successor_holds_the_lease, 60)
    assert running and running != first, (running, lease_holder(pipeline), pipeline.executions())
    # The loop itself brings the refined zone up to date: a refine after every batch here, and one when
    # the queue runs empty with batches applied since the last refine. No refine by hand: a refine run that
    # started after the last CDC run finished must have succeeded, and the refined zone then equals a
    # recomputation from the source database.
    glue, refine_job = pipeline.aws("glue"), pipeline.app.resources["RefineJob"]

    def runs(job: str) -> list[dict]:
        return glue.get_job_runs(JobName=job)["JobRuns"]

    last_cdc = max(
        r["CompletedOn"] for r in runs(pipeline.app.cdc_job_name) if r["JobRunState"] == "SUCCEEDED"
    )
    refreshed = wait_for(
        lambda: any(r["JobRunState"] == "SUCCEEDED" and r["StartedOn"] >= last_cdc for r in runs(refine_job)),
        300,
    )
    assert refreshed, (last_cdc, runs(refine_job))
    pipeline.stop_executions()
    idle = wait_for(lambda: all(r["JobRunState"] != "RUNNING" for r in runs(refine_job)), 300)
    assert idle, runs(refine_job)
    checks = pipeline.verify_refined()
    assert checks and all(c.matches for c in checks), "\n".join(c.line() for c in checks)
    assert sorted(c.table for c in checks) == sorted(f"refined.{m.stem}" for m in models.glob("*.sql"))
    spark, lake = pipeline.spark(), pipeline.lake_config()
    over_clean = parse_model("customers_by_state.sql", USERS_MODEL).render(
        lambda source: lake.clean_table(table_name(pipeline.source_schema, source.name))
    )
    refined = spark.table(lake.table(lake.refined_database, "customers_by_state"))
    expected = [tuple(r) for r in spark.sql(over_clean).orderBy("state").collect()]
    assert expected and [
        tuple(r) for r in refined.select("state", "customers").orderBy("state").collect()
    ] == (expected)


FAIL_ONCE_CDC_SCRIPT = """
import os
import sys

import boto3

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lakehouse.io.fence import fenced
from lakehouse.jobs.cdc import main as cdc_main

BUCKET, KEY = {bucket!r}, "faults/cdc-fail-once"
s3 = boto3.client("s3")
try:
    s3.head_object(Bucket=BUCKET, Key=KEY)
except Exception:
    sys.exit(fenced(cdc_main)(sys.argv[1:]))  # as spark_jobs/cdc_job.py: the run carries the lease arguments
s3.delete_object(Bucket=BUCKET, Key=KEY)
print("injected failure: this CDC run fails once", file=sys.stderr)
sys.exit(3)
"""

POISON_FILE = "20200101-000000000.csv"


def test_faults_retry_poison_file_and_poison_message(make_pipeline) -> None:
    pipeline = make_pipeline()
    app = pipeline.app
    s3, sqs, glue = pipeline.aws("s3"), pipeline.aws("sqs"), pipeline.aws("glue")
    # A CDC run that fails once: the deployed script replaced by one that fails while a marker exists.
    s3.put_object(
        Bucket=app.artifacts_bucket,
        Key="glue/scripts/cdc_job.py",
        Body=FAIL_ONCE_CDC_SCRIPT.format(bucket=app.artifacts_bucket).encode(),
    )
    s3.put_object(Bucket=app.artifacts_bucket, Key="faults/cdc-fail-once", Body=b"1")
    start(pipeline)
    pipeline.run_workload(200, seed=21)
    # A poison file (not a DMS CSV) in one table's folder, and a poison message (not an S3 event).
    s3.put_object(
        Bucket=app.raw_bucket,
        Key=f"dms/{pipeline.source_schema}/item/{POISON_FILE}",
        Body=b'Op,"unterminated\n\x00\x01 garbage',
    )
    if app.queue_url:
        sqs.send_message(
            QueueUrl=app.queue_url,
            MessageBody="this is not an EventBridge S3 event",
            MessageGroupId="poison",
            MessageDeduplicationId="poison-1",
        )
    pipeline.run_workload(200, seed=22)
    pipeline.wait_until_applied(timeout=480, ignore_files=frozenset({POISON_FILE}))

    def finished_runs() -> list[dict] | None:
        runs = glue.get_job_runs(JobName=app.cdc_job_name)["JobRuns"]
        return runs if any(r["JobRunState"] == "SUCCEEDED" for r in runs) else None

    runs = wait_for(finished_runs, 180) or glue.get_job_runs(JobName=app.cdc_job_name)["JobRuns"]
    failed = [r for r in runs if r["JobRunState"] == "FAILED"]
    assert failed and "injected failure" in failed[0].get("ErrorMessage", ""), runs
    assert any(r["JobRunState"] == "SUCCEEDED" for r in runs)
    assert_clean_equals_source(pipeline)  # the retried run applied everything exactly once

    quarantined = [r for r in pipeline.quarantined() if r["source_uri"].endswith(POISON_FILE)]
    assert quarantined and quarantined[0]["reason"], (
        "the poison file is in the quarantine table with its reason"
    )
    if app.dead_letter_queue_url:
        dead = sqs.receive_message(
            QueueUrl=app.dead_letter_queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=2
        )
        bodies = [m["Body"] for m in dead.get("Messages", [])]
        assert any("not an EventBridge S3 event" in b for b in bodies), bodies
    operate_with_lakectl(pipeline)


def lakectl(pipeline: LocalPipeline, *command: str) -> tuple[int, dict]:
    """The installed console script, run as docs/DEPLOY.md ("Operate") gives it for the local AWS."""
    script = Path(sys.executable).parent / "lakectl"
    argv = [str(script), "--stack-name", pipeline.stack_name, "--endpoint-url", pipeline.endpoint_url]
    environment = os.environ | {
        "AWS_DEFAULT_REGION": sam_app.REGION,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
    }
    done = subprocess.run(
        [*argv, *command, "--json"], capture_output=True, text=True, env=environment, timeout=120
    )
    assert done.stdout.strip(), done.stderr
    return done.returncode, json.loads(done.stdout)


def operate_with_lakectl(pipeline: LocalPipeline) -> None:
    """Given the running pipeline that quarantined a poison file, When the operator runs lakectl against its
    stack, Then status names the execution holding the lease, the recorded full load, no batch out of line and
    the last run's freshness; start starts no second execution; requeue lists nothing; redrive refuses the
    poison file (named 2020: past the tombstones); reload asks the local DMS for a table's reload; reapply (a
    dry run) runs the stack's reapply job under the lease holder, which refuses the poison file the reload
    removed from the raw zone and reports why; rollback (a dry run) of web_sales to its full load plans it in
    the same job: every later commit it would undo and their files, web_sales' own, to re-drive, nothing
    rolled back."""
    code, status = lakectl(pipeline, "status")
    assert code == 0, status
    assert status["execution"] and status["lease"]["holder"] == status["execution"]["arn"], status
    assert (status["full_load_recorded"], status["pending_batches"], status["failed_batches"]) == (
        True,
        [],
        [],
    )
    assert status["last_run"] and status["last_run"]["freshness"], status["last_run"]

    code, start = lakectl(pipeline, "start")
    assert (code, start["started"], start["execution_arn"]) == (0, False, status["execution"]["arn"])
    assert lakectl(pipeline, "requeue") == (0, {"pending": [], "failed": []})

    poison = f"dms/{pipeline.source_schema}/item/{POISON_FILE}"
    code, redriven = lakectl(pipeline, "redrive", poison)
    assert (code, redriven["sent"], [r["key"] for r in redriven["refused"]]) == (1, [], [poison])

    code, reload = lakectl(pipeline, "reload", f"{pipeline.source_schema}.item")
    assert (code, reload["reload"]) == (0, "requested"), reload

    # DMS's reload empties the table's folder, the quarantined poison file with it: reapply runs the stack's
    # fenced Glue job, which finds the file gone and refuses it, saying what to do
    s3, raw = pipeline.aws("s3"), pipeline.app.raw_bucket
    assert wait_for(lambda: "Contents" not in s3.list_objects_v2(Bucket=raw, Prefix=poison), 120, 1)
    poison_uri = f"s3://{raw}/{poison}"
    code, reapply = lakectl(pipeline, "reapply", "--file", poison_uri, "--dry-run", "--wait")
    assert (code, reapply["lease_holder"], reapply["state"]) == (0, status["execution"]["arn"], "FAILED"), (
        reapply
    )
    bucket, key = reapply["report_uri"].removeprefix("s3://").split("/", 1)
    report = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    assert (report["files"], report["refused"], report["run"]) == (
        [],
        {poison_uri: "the file is not in the raw zone: upload the fixed file first"},
        None,
    ), report

    sales = f"{pipeline.source_schema}.web_sales"
    clean_sales = pipeline.lake_config().clean_table(table_name(pipeline.source_schema, "web_sales"))
    snapshots = pipeline.spark().sql(f"SELECT snapshot_id FROM {clean_sales}.snapshots ORDER BY committed_at")
    [loaded, *later] = [row["snapshot_id"] for row in snapshots.collect()]
    code, rollback = lakectl(pipeline, "rollback", sales, "--to-snapshot", str(loaded), "--dry-run", "--wait")
    plan = rollback["report"]
    assert (code, rollback["lease_holder"], rollback["state"]) == (0, status["execution"]["arn"], "SUCCEEDED")
    assert set(plan["rolled_back_snapshot_ids"]) <= set(later), plan
    done = (plan["ok"], plan["dry_run"], plan["rolled_back"], "redrive" in rollback)
    assert done == (True, True, False, False), rollback
    assert plan["rolled_back_snapshot_ids"] and plan["files_to_redrive"], plan
    folder = f"s3://{raw}/dms/{sales.replace('.', '/')}/"
    assert all(uri.startswith(folder) for uri in plan["files_to_redrive"]), plan


def test_a_failing_dms_task_fails_the_execution_with_a_clear_error(make_pipeline) -> None:
    pipeline = make_pipeline()
    # The task selects a table the source does not have: DMS fails it (FATAL_ERROR) at start.
    for table in replication.SOURCE_TABLES:
        pipeline.execute_sql(f'ALTER TABLE "{table}" RENAME TO "old_{table}"')
    start(pipeline)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        statuses = [e["status"] for e in pipeline.executions()]
        if statuses and statuses[0] != "RUNNING":
            break
        time.sleep(2)
    assert pipeline.executions()[0]["status"] == "FAILED"
    failure = pipeline.execution_failure()
    assert "DMS task" in failure and "failed" in failure, failure
    assert "matches the table mappings" in json.dumps(failure)

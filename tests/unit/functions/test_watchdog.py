"""The watchdog (moto Step Functions): how many pipeline executions run, published for the alarms."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3

from tests.unit.functions.conftest import FakeContext, event


def test_counts_running_executions_of_the_pipeline(aws, load_handler, capsys):
    """Given a state machine with no execution, then one running and one stopped, When the scheduled
    watchdog runs, Then it publishes PipelineExecutionsRunning 0, then 1."""
    role = boto3.client("iam").create_role(RoleName="pipeline", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    definition = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 3600, "End": True}}}
    sfn = boto3.client("stepfunctions")
    machine = sfn.create_state_machine(name="dev-pipeline", definition=json.dumps(definition), roleArn=role)
    app = load_handler("watchdog", STATE_MACHINE_ARN=machine["stateMachineArn"])

    assert app.handler(event("watchdog_schedule.json"), FakeContext()) == {"running": 0}
    sfn.start_execution(stateMachineArn=machine["stateMachineArn"], name="running")
    stopped = sfn.start_execution(stateMachineArn=machine["stateMachineArn"], name="stopped")["executionArn"]
    sfn.stop_execution(executionArn=stopped)
    assert app.handler(event("watchdog_schedule.json"), FakeContext()) == {"running": 1}

    published = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert [p["PipelineExecutionsRunning"] for p in published] == [[0.0], [1.0]]


REFINED_REPORT = "manifests/reports/refine-latest.json"


def _refined_zone(bucket: str, refine_started: datetime, done_run_ids: list[str]) -> Any:
    """An artifacts bucket holding the newest fully refreshed refine's report (its `batch`: its start in
    milliseconds) and the done manifests of `done_run_ids`."""
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    report = {
        "run_id": "idle-x",
        "batch": int(refine_started.timestamp() * 1000),
        "status": "done",
        "tables": [],
    }
    s3.put_object(Bucket=bucket, Key=REFINED_REPORT, Body=json.dumps(report).encode())
    for run_id in done_run_ids:
        s3.put_object(Bucket=bucket, Key=f"manifests/done/{run_id}.json", Body=b"{}")
    return s3


def _retired_at(s3: Any, bucket: str, run_id: str) -> datetime:
    return s3.head_object(Bucket=bucket, Key=f"manifests/done/{run_id}.json")["LastModified"]


def test_the_refined_lag_counts_from_the_first_batch_retired_after_the_newest_refine(aws, load_handler):
    """Given the newest refine that left no model failed started at 10:00, and batches drained at 09:59 (before
    it: refined) and at 10:07 and 10:30 (after it), When the watchdog measures at various moments, Then the lag
    is now minus when the 10:07 batch was retired (its done manifest written), growing with every run of the
    schedule however many refines fail or do not start; with only the 09:59 batch it is 0 (nothing unrefined:
    a quiet source never looks stale)."""
    app = load_handler("watchdog")
    from lake_contracts.layout import ArtifactsLayout

    started = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    before, first_after = "20261130T095900000000Z-0000aaaa", "20261130T100700000000Z-0000bbbb"
    s3 = _refined_zone("artifacts", started, [before])
    layout = ArtifactsLayout()
    now = datetime.now(UTC)
    assert app.refined_lag_seconds(s3, "artifacts", layout, now) == 0.0

    s3.put_object(Bucket="artifacts", Key=f"manifests/done/{first_after}.json", Body=b"{}")
    s3.put_object(Bucket="artifacts", Key="manifests/done/20261130T103000000000Z-0000cccc.json", Body=b"{}")
    retired = _retired_at(s3, "artifacts", first_after)
    for minutes in (5, 60, 600):
        later = retired + timedelta(minutes=minutes)
        assert app.refined_lag_seconds(s3, "artifacts", layout, later) == minutes * 60


def test_no_refined_lag_is_measured_before_a_refine_reported_or_from_a_report_without_its_start(
    aws, load_handler
):
    """Given no refine report yet (a new stack, or every refine so far failed: the Glue failure rule's), then a
    report whose `batch` is not a time, When the watchdog measures, Then it has nothing to measure from (None),
    never a made-up age."""
    app = load_handler("watchdog")
    from lake_contracts.layout import ArtifactsLayout

    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="artifacts")
    s3.put_object(Bucket="artifacts", Key="manifests/done/20261130T100700000000Z-0000bbbb.json", Body=b"{}")
    now = datetime.now(UTC)
    assert app.refined_lag_seconds(s3, "artifacts", ArtifactsLayout(), now) is None
    for document in ({"batch": "soon"}, {"batch": True}, [], {"status": "done"}):
        s3.put_object(Bucket="artifacts", Key=REFINED_REPORT, Body=json.dumps(document).encode())
        assert app.refined_lag_seconds(s3, "artifacts", ArtifactsLayout(), now) is None, document
    s3.put_object(Bucket="artifacts", Key=REFINED_REPORT, Body=b"not json")
    assert app.refined_lag_seconds(s3, "artifacts", ArtifactsLayout(), now) is None


def test_the_watchdog_publishes_the_refined_lag_only_on_a_stack_with_refined_models(
    aws, load_handler, capsys
):
    """Given a refine report and a batch retired after it, When the scheduled watchdog runs on a stack with
    refined models, Then it publishes RefinedLagSeconds beside PipelineExecutionsRunning; on a stack without
    (MEASURE_REFINED_LAG false: no refine runs, a report left by an earlier deployment is stale by design),
    Then it publishes no RefinedLagSeconds, so its alarm cannot fire."""
    role = boto3.client("iam").create_role(RoleName="pipeline", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    definition = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 3600, "End": True}}}
    machine = boto3.client("stepfunctions").create_state_machine(
        name="dev-pipeline", definition=json.dumps(definition), roleArn=role
    )["stateMachineArn"]
    _refined_zone("artifacts", datetime(2026, 11, 30, 10, 0, tzinfo=UTC), ["20261130T100700000000Z-0000bbbb"])
    published = {}
    for measured in ("true", "false"):
        app = load_handler(
            "watchdog", STATE_MACHINE_ARN=machine, ARTIFACTS_BUCKET="artifacts", MEASURE_REFINED_LAG=measured
        )
        result = app.handler(event("watchdog_schedule.json"), FakeContext())
        (document,) = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
        published[measured] = (result, document)

    result, document = published["true"]
    assert result["running"] == 0 and result["refined_lag_seconds"] >= 0
    assert document["RefinedLagSeconds"] == [result["refined_lag_seconds"]]
    result, document = published["false"]
    assert result == {"running": 0} and "RefinedLagSeconds" not in document

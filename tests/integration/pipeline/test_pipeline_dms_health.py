"""DMS health during CDC (issue 25), on the deployed template: a DMS task that fails during CDC writes no
file, so only a check of the task itself notices. The loop checks it every pass, and the local DMS sends the
task's state-change event to EventBridge (the template's rule forwards it to the alarm topic) and publishes
CDCLatencySource/CDCLatencyTarget as AWS DMS does."""

import json
import time

import pytest

from localaws import replication

pytestmark = pytest.mark.integration


def wait_for(probe, timeout: float, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(every)
    return None


def test_a_dms_task_that_fails_during_cdc_fails_the_execution_with_dms_reason_and_alarms(
    make_pipeline,
) -> None:
    """Given the pipeline in its CDC loop (full load applied and recorded), the alarm topic subscribed by a queue,
    Then the local DMS has published CDCLatencySource under the dimensions the template's alarm watches;
    When the DMS task's source connection is killed (the task fails, as DMS does: LastFailureMessage),
    Then the execution fails in DmsTaskStopped with that message as its cause, and the REPLICATION_TASK_FAILED
    event of exactly this task reaches the alarm topic."""
    pipeline = make_pipeline(parameters={"DmsReplicationInstanceIdentifier": "local"})
    sqs, sns, cloudwatch = pipeline.aws("sqs"), pipeline.aws("sns"), pipeline.aws("cloudwatch")
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
    pipeline.start_replication()
    pipeline.start_execution()
    s3 = pipeline.aws("s3")

    def in_the_loop() -> bool:  # the full load applied and recorded: the execution is in its CDC loop
        listed = s3.list_objects_v2(Bucket=pipeline.app.artifacts_bucket, Prefix="manifests/full-load.json")
        return bool(listed.get("KeyCount")) and pipeline.executions()[0]["status"] == "RUNNING"

    assert wait_for(in_the_loop, 900, 3), pipeline.execution_failure()

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
    )
    assert published, "the local DMS published no CDCLatencySource for the alarm's dimensions"

    assert pipeline.kill_replication_connection() >= 1
    dms = pipeline.aws("dms")
    failed = wait_for(
        lambda: replication.describe_task(dms, pipeline.task.arn)["Status"] == "failed", 60, 0.5
    )
    assert failed, replication.describe_task(dms, pipeline.task.arn)
    reason = replication.describe_task(dms, pipeline.task.arn)["LastFailureMessage"]
    assert reason

    # at the next pass: after the step running now (a Glue run can take minutes on a busy machine)
    ended = wait_for(lambda: [e for e in pipeline.executions() if e["status"] != "RUNNING"], 600, 2)
    assert ended and ended[0]["status"] == "FAILED", pipeline.executions()
    described = pipeline.aws("stepfunctions").describe_execution(executionArn=ended[0]["executionArn"])
    assert described["error"] == "DmsTaskStopped", described
    assert reason in json.loads(described["cause"])["errorMessage"], described["cause"]

    def task_events() -> list[dict]:
        received = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        bodies = [json.loads(m["Body"]) for m in received.get("Messages", [])]
        return [
            b for b in bodies if b.get("source") == "aws.dms" and b.get("resources") == [pipeline.task.arn]
        ]

    events = wait_for(task_events, 30)
    assert events, "no DMS state-change event reached the alarm topic"
    assert events[0]["detail-type"] == "DMS Replication Task State Change"
    assert events[0]["detail"]["eventType"] == "REPLICATION_TASK_FAILED"
    assert reason in events[0]["detail"]["detailMessage"]

"""The drain and the acknowledge on the local AWS (LocalStack's own S3 → EventBridge → SQS FIFO events): keys
with `+`, `%`, space, `:` and unicode are batched by their real key, and the fenced writes work where S3's
conditional delete is not implemented (LocalStack 2026.3 answers 501)."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration  # the local AWS (`make test-unit` leaves it out)

FUNCTIONS = Path(__file__).resolve().parents[3] / "functions"
EXECUTION = "arn:aws:states:us-east-1:000000000000:execution:dev-pipeline:keys"
KEYS = [
    "dms/sales/plus+sign/20261122-101010000.csv",
    "dms/sales/per%2Bcent/20261122-101011000.csv",
    "dms/sales/with space/20261122-101012000.csv",
    "dms/sales/ünïcödé/20261122-101013000.csv",
    "dms/sales/colon:x/20261122-101014000.csv",
]


def _load(function: str, module: str) -> Any:
    """functions/<function>/<module>.py, its folder on the path while it loads (as on Lambda): the function's
    other modules it imports are found by their names."""
    folder = str(FUNCTIONS / function)
    spec = importlib.util.spec_from_file_location(f"_local_{module}", FUNCTIONS / function / f"{module}.py")
    assert spec and spec.loader
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(loaded)
    finally:
        sys.path.remove(folder)
    return loaded


@pytest.fixture
def wired(aws):
    """A raw bucket whose Object Created events reach a FIFO queue through an EventBridge rule, as deployed."""
    suffix = uuid.uuid4().hex[:8]
    raw, artifacts = f"raw-keys-{suffix}", f"artifacts-keys-{suffix}"
    s3, sqs, events = aws("s3"), aws("sqs"), aws("events")
    for bucket in (raw, artifacts):
        s3.create_bucket(Bucket=bucket)
    s3.put_bucket_notification_configuration(
        Bucket=raw, NotificationConfiguration={"EventBridgeConfiguration": {}}
    )
    fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    queue = sqs.create_queue(QueueName=f"cdc-keys-{suffix}.fifo", Attributes=fifo)["QueueUrl"]
    dlq = sqs.create_queue(QueueName=f"dlq-keys-{suffix}.fifo", Attributes=fifo)["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    rule = f"raw-keys-{suffix}"
    pattern = {"source": ["aws.s3"], "detail-type": ["Object Created"], "detail": {"bucket": {"name": [raw]}}}
    events.put_rule(Name=rule, EventPattern=json.dumps(pattern))
    events.put_targets(
        Rule=rule,
        Targets=[{"Id": "q", "Arn": queue_arn, "SqsParameters": {"MessageGroupId": "dms-cdc-files"}}],
    )
    s3.put_object(Bucket=artifacts, Key="locks/pipeline-lease.json", Body=json.dumps({"holder": EXECUTION}))
    yield s3, sqs, raw, artifacts, queue, dlq
    events.remove_targets(Rule=rule, Ids=["q"])
    events.delete_rule(Name=rule)


def _wait_for_messages(sqs: Any, queue: str, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        attributes = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["ApproximateNumberOfMessages"])
        if int(attributes["Attributes"]["ApproximateNumberOfMessages"]) >= count:
            return
        time.sleep(0.5)
    raise AssertionError(f"fewer than {count} events reached the queue in {timeout} s")


def test_localstack_events_of_hostile_keys_are_batched_by_their_real_keys_and_retired_fenced(wired):
    """Given DMS-like files whose table folders are `plus+sign`, `per%2Bcent`, `with space`, `ünïcödé`,
    `colon:x` written to a raw bucket that sends its events through EventBridge to the FIFO queue, When the
    fenced drain runs, Then the manifest names every file by its real key and nothing is dead-lettered; When
    the batch is acknowledged with the handed-out version, Then it moves to done/ (the conditional delete
    falls back to an ETag check where S3 answers 501)."""
    s3, sqs, raw, artifacts, queue, dlq = wired
    drain, ack = _load("queue_drain", "drain"), _load("acknowledge", "ack")
    drain_config, drain_fence = _load("queue_drain", "drain_config"), _load("queue_drain", "drain_fence")
    for key in KEYS:
        s3.put_object(Bucket=raw, Key=key, Body=b"x")
    _wait_for_messages(sqs, queue, len(KEYS))
    where = drain_config.Locations(queue, dlq, artifacts, raw_bucket=raw, raw_prefix="dms")
    fence = drain_fence.DrainFence(s3, artifacts, "locks/pipeline-lease.json", EXECUTION, where.claim_key)

    batch = drain.drain(s3, sqs, where, drain_config.DrainLimits(wait_seconds=1), fence=fence)

    document = json.loads(s3.get_object(Bucket=artifacts, Key=batch["manifest_key"])["Body"].read())
    assert sorted(f["uri"] for f in document["files"]) == sorted(f"s3://{raw}/{key}" for key in KEYS)
    assert batch["poison_messages"] == 0
    retired = ack.acknowledge(
        s3, artifacts, batch["manifest_key"], batch["manifest_etag"], ("locks/pipeline-lease.json", EXECUTION)
    )
    assert retired == {"acknowledged": batch["manifest_key"].replace("/pending/", "/done/"), "already": False}
    assert s3.list_objects_v2(Bucket=artifacts, Prefix="manifests/pending/").get("KeyCount", 0) == 0

"""The drain's hand-off on moto's SQS FIFO and S3: byte and time bounds, the manifest contract, a crash
between the manifest write and the delete, and which pending manifest goes first."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from lake_contracts.layout import new_run_id

from tests.unit.functions.conftest import FakeContext, drain_request, event, hold_pipeline_lease

ARTIFACTS = "dev-artifacts"
RAW = "dev-raw-123456789012-us-east-1"
GROUP = "dms-cdc-files"


class SqsSpy:
    """The real (moto) SQS client, recording receives and optionally failing the deletes."""

    def __init__(self, client: Any, fail_deletes: bool = False) -> None:
        self.client = client
        self.fail_deletes = fail_deletes
        self.receives: list[dict[str, Any]] = []
        self.received: list[dict[str, Any]] = []

    def receive_message(self, **request: Any) -> dict[str, Any]:
        self.receives.append(request)
        response = self.client.receive_message(**request)
        self.received.extend(response.get("Messages", []))
        return response

    def delete_message_batch(self, **request: Any) -> dict[str, Any]:
        if self.fail_deletes:
            raise ConnectionError("the Lambda died before deleting the page")
        return self.client.delete_message_batch(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


@pytest.fixture
def queues(aws) -> Iterator[tuple[Any, str, str]]:
    sqs = boto3.client("sqs")
    dlq = sqs.create_queue(
        QueueName="dlq.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )
    queue = sqs.create_queue(
        QueueName="cdc.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "4500"},
    )
    boto3.client("s3").create_bucket(Bucket=ARTIFACTS)
    hold_pipeline_lease(ARTIFACTS, drain_request()["execution_arn"])
    yield sqs, queue["QueueUrl"], dlq["QueueUrl"]


@pytest.fixture
def drain_module(queues, load_handler) -> Any:
    _, queue_url, dlq_url = queues
    load_handler(
        "queue_drain", QUEUE_URL=queue_url, DEAD_LETTER_QUEUE_URL=dlq_url, ARTIFACTS_BUCKET=ARTIFACTS
    )
    import drain

    return drain


def locations(drain_module: Any, queues: tuple[Any, str, str]) -> Any:
    from drain_config import Locations  # on the path once `drain_module` loaded the drain

    _, queue_url, dlq_url = queues
    return Locations(queue_url=queue_url, dead_letter_queue_url=dlq_url, artifacts_bucket=ARTIFACTS)


def drain_limits(**bounds: Any) -> Any:
    from drain_config import DrainLimits  # on the path once `drain_module` loaded the drain

    return DrainLimits(**bounds)


def send_file_events(sqs: Any, queue_url: str, sizes: list[int], sent: list[dict] | None = None) -> list[str]:
    """One EventBridge "Object Created" message per size; `sent` collects SendMessage's answers."""
    keys = [f"dms/sales/web_sales/20261122-1010{n:02d}000.csv" for n in range(len(sizes))]
    for key, size in zip(keys, sizes, strict=True):
        body = copy.deepcopy(event("s3_object_created_message.json"))
        body["detail"]["object"] |= {"key": key, "size": size}
        answer = sqs.send_message(
            QueueUrl=queue_url, MessageBody=json.dumps(body), MessageGroupId=GROUP, MessageDeduplicationId=key
        )
        if sent is not None:
            sent.append(answer)
    return keys


def manifest_at(key: str) -> dict[str, Any]:
    return json.loads(boto3.client("s3").get_object(Bucket=ARTIFACTS, Key=key)["Body"].read())


def uris(manifest: dict[str, Any]) -> list[str]:
    return [f["uri"] for f in manifest["files"]]


def retire(key: str) -> None:
    """What the acknowledge step does, so the next drain takes new messages."""
    s3 = boto3.client("s3")
    s3.copy_object(
        Bucket=ARTIFACTS, Key=key.replace("/pending/", "/done/"), CopySource={"Bucket": ARTIFACTS, "Key": key}
    )
    s3.delete_object(Bucket=ARTIFACTS, Key=key)


def queue_depth(sqs: Any, url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def test_the_byte_bound_is_exact_and_the_rest_of_the_page_goes_back_in_order(queues, drain_module):
    """Given 12 files of 40 bytes in one FIFO group, When drained with a bound of 100 bytes,
    Then the batch holds the first 2 files (a third would exceed it), the other 10 are visible again
    at once, and the next batch starts with the third file."""
    sqs, queue_url, _ = queues
    keys = send_file_events(sqs, queue_url, [40] * 12)
    where = locations(drain_module, queues)
    limits = drain_limits(max_bytes=100, wait_seconds=0)

    first = drain_module.drain(boto3.client("s3"), sqs, where, limits)

    assert (first["file_count"], first["total_bytes"]) == (2, 80)
    assert uris(manifest_at(first["manifest_key"])) == [f"s3://{RAW}/{k}" for k in keys[:2]]
    assert queue_depth(sqs, queue_url) == 10
    retire(first["manifest_key"])
    second = drain_module.drain(boto3.client("s3"), sqs, where, limits)
    assert uris(manifest_at(second["manifest_key"])) == [f"s3://{RAW}/{k}" for k in keys[2:4]]


def test_a_file_larger_than_the_byte_bound_is_a_batch_of_its_own(queues, drain_module):
    """Given a 500-byte file then a 10-byte one, When drained with a bound of 100 bytes,
    Then the big file is taken alone (never stuck), and the small one waits for the next batch."""
    sqs, queue_url, _ = queues
    send_file_events(sqs, queue_url, [500, 10])
    where = locations(drain_module, queues)

    result = drain_module.drain(boto3.client("s3"), sqs, where, drain_limits(max_bytes=100, wait_seconds=0))

    assert (result["file_count"], result["total_bytes"]) == (1, 500)
    assert queue_depth(sqs, queue_url) == 1


def test_the_manifest_follows_the_contract_with_sequence_numbers_in_arrival_order(queues, drain_app):
    """Given 13 file events, When the handler drains them (two receives), Then the manifest has exactly
    the contract's fields, and each file, in arrival order, its size and the message id and SQS
    sequence number the queue gave it."""
    sqs, queue_url, _ = queues
    sent: list[dict] = []
    keys = send_file_events(sqs, queue_url, list(range(100, 113)), sent)

    result = drain_app.handler(event("queue_drain.json"), FakeContext())

    manifest = manifest_at(result["manifest_key"])
    assert set(manifest) == {"version", "run_id", "created_at", "attempts", "files"}
    assert manifest["attempts"] == 1
    assert manifest["version"] == 1 and manifest["run_id"] == result["run_id"]
    assert datetime.strptime(manifest["created_at"], "%Y-%m-%dT%H:%M:%SZ")
    assert [(f["uri"], f["size"]) for f in manifest["files"]] == [
        (f"s3://{RAW}/{k}", 100 + n) for n, k in enumerate(keys)
    ]
    assert [(f["message_id"], f["sequence_number"]) for f in manifest["files"]] == [
        (s["MessageId"], s["SequenceNumber"]) for s in sent
    ]
    assert result["total_bytes"] == sum(range(100, 113))


@pytest.fixture
def drain_app(queues, load_handler) -> Any:
    _, queue_url, dlq_url = queues
    return load_handler(
        "queue_drain", QUEUE_URL=queue_url, DEAD_LETTER_QUEUE_URL=dlq_url, ARTIFACTS_BUCKET=ARTIFACTS
    )


def test_the_handler_keeps_received_pages_invisible_only_for_its_own_run(queues, drain_app):
    """Given a queue whose visibility timeout outlasts a CDC run (4,500 s), When the handler drains with
    120 s left, Then it receives with a visibility just past its own end, so a drain that dies blocks
    the FIFO group for minutes, not for a CDC timeout."""
    sqs, queue_url, _ = queues
    send_file_events(sqs, queue_url, [10])
    spy = SqsSpy(sqs)
    drain_app.sqs = spy

    drain_app.handler(drain_request(), FakeContext(remaining_ms=120_000))

    assert spy.receives and all(r["VisibilityTimeout"] == 150 for r in spy.receives)


def test_a_crash_between_manifest_write_and_delete_loses_nothing(queues, drain_module):
    """Given a drain that wrote its manifest but died before deleting the page,
    When the pipeline drains again, Then it gets that pending manifest back first (the batch is retried);
    and once the messages reappear, their files are listed again in a later manifest: at least once,
    which the CDC job's watermark makes harmless."""
    sqs, queue_url, _ = queues
    keys = send_file_events(sqs, queue_url, [10, 20, 30])
    where = locations(drain_module, queues)
    limits = drain_limits(wait_seconds=0)
    dying = SqsSpy(sqs, fail_deletes=True)

    with pytest.raises(ConnectionError):
        drain_module.drain(boto3.client("s3"), dying, where, limits)

    retried = drain_module.drain(boto3.client("s3"), sqs, where, limits)
    assert retried["resumed"] and uris(manifest_at(retried["manifest_key"])) == [
        f"s3://{RAW}/{k}" for k in keys
    ]
    retire(retried["manifest_key"])
    sqs.change_message_visibility_batch(  # the dead drain's visibility timeout runs out
        QueueUrl=queue_url,
        Entries=[
            {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
            for n, m in enumerate(dying.received)
        ],
    )
    again = drain_module.drain(boto3.client("s3"), sqs, where, limits)
    assert not again["resumed"] and uris(manifest_at(again["manifest_key"])) == [
        f"s3://{RAW}/{k}" for k in keys
    ]
    assert queue_depth(sqs, queue_url) == 0


def test_the_oldest_pending_manifest_goes_first(queues, drain_module):
    """Given two pending manifests left by failed runs, When drained, Then the older one is returned,
    and no message is taken from the queue."""
    sqs, queue_url, _ = queues
    send_file_events(sqs, queue_url, [10])
    s3 = boto3.client("s3")
    run_ids = [
        new_run_id(datetime(2026, 11, 22, 10, 0, tzinfo=UTC)),
        new_run_id(datetime(2026, 11, 22, 9, 0, tzinfo=UTC)),
    ]
    for run_id in run_ids:
        body = {"version": 1, "run_id": run_id, "created_at": "2026-11-22T09:00:00Z", "files": []}
        s3.put_object(Bucket=ARTIFACTS, Key=f"manifests/pending/{run_id}.json", Body=json.dumps(body))

    result = drain_module.drain(s3, sqs, locations(drain_module, queues), drain_limits())

    assert result["resumed"] and result["run_id"] == run_ids[1]
    assert queue_depth(sqs, queue_url) == 1


def test_the_time_budget_ends_the_drain_with_what_is_recorded(queues, drain_module, monkeypatch):
    """Given 25 file events and a clock that moves 3 s per look, When drained with a 5 s budget,
    Then one page (10 files) is recorded and deleted, and the rest stays queued for the next batch."""
    sqs, queue_url, _ = queues
    send_file_events(sqs, queue_url, [10] * 25)
    ticks = iter(range(0, 300, 3))
    monkeypatch.setattr(drain_module.time, "monotonic", lambda: next(ticks))

    result = drain_module.drain(
        boto3.client("s3"),
        sqs,
        locations(drain_module, queues),
        drain_limits(time_budget_seconds=5, wait_seconds=0),
    )

    assert result["file_count"] == 10
    assert queue_depth(sqs, queue_url) == 15


def _event(detail_type: str, key: str, **extra: Any) -> dict[str, Any]:
    body = copy.deepcopy(event("s3_object_created_message.json"))
    body["detail-type"] = detail_type
    body["detail"]["object"]["key"] = key
    body |= extra
    return body


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (_event("Object Deleted", "dms/sales/item/20261122-101010000.csv"), "unexpected event"),
        (_event("Object Created", "dms/x/"), "is not a DMS file"),
        (
            {"detail-type": "Object Created", "detail": {"object": {"key": "dms/a/b/1.csv"}}},
            "ValidationError",
        ),
    ],
)
def test_events_that_name_no_file_are_poison(drain_module, body, reason):
    """Given a message that is JSON but not an Object Created event of a file,
    Then it is poison, with a reason that says why."""
    from file_events import PoisonMessageError, parse_file_event

    with pytest.raises(PoisonMessageError, match=reason):
        parse_file_event(json.dumps(body))


def test_files_larger_than_a_tenth_of_the_byte_bound_never_end_in_the_dead_letter_queue(queues, drain_module):
    """Given a queue that redrives to the DLQ after 5 receives and 14 files of which only one fits a batch,
    When batches are drained and acknowledged until the queue is empty,
    Then every file is applied exactly in arrival order and none reached the DLQ: a message that was
    given back too often is taken even though its page then exceeds the byte bound."""
    sqs, queue_url, dlq_url = queues
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5})
    sqs.set_queue_attributes(QueueUrl=queue_url, Attributes={"RedrivePolicy": redrive})
    keys = send_file_events(sqs, queue_url, [60] * 14)
    where = locations(drain_module, queues)
    limits = drain_limits(max_bytes=100, wait_seconds=0, max_receive_count=5)

    applied: list[str] = []
    batches = 0
    while (result := drain_module.drain(boto3.client("s3"), sqs, where, limits))["has_work"]:
        applied.extend(uris(manifest_at(result["manifest_key"])))
        retire(result["manifest_key"])
        batches += 1

    assert applied == [f"s3://{RAW}/{k}" for k in keys]
    assert queue_depth(sqs, dlq_url) == 0
    assert batches < 14  # some pages were taken whole instead of given back once more

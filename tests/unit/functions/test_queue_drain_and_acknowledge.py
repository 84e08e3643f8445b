"""Drain → manifest → acknowledge, on moto's SQS FIFO and S3: order, bounds, durability, poison."""

from __future__ import annotations

import copy
import json

import boto3
import pytest

from tests.unit.functions.conftest import FakeContext, drain_request, event, hold_pipeline_lease

ARTIFACTS = "dev-artifacts"
RAW = "dev-raw-123456789012-us-east-1"


@pytest.fixture
def queues(aws):
    sqs = boto3.client("sqs")
    dlq = sqs.create_queue(
        QueueName="dlq.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )
    queue = sqs.create_queue(
        QueueName="cdc.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )
    boto3.client("s3").create_bucket(Bucket=ARTIFACTS)
    hold_pipeline_lease(ARTIFACTS, drain_request()["execution_arn"])
    return sqs, queue["QueueUrl"], dlq["QueueUrl"]


@pytest.fixture
def drain_app(queues, load_handler):
    _, queue_url, dlq_url = queues
    return load_handler(
        "queue_drain",
        QUEUE_URL=queue_url,
        DEAD_LETTER_QUEUE_URL=dlq_url,
        ARTIFACTS_BUCKET=ARTIFACTS,
        MAX_FILES_PER_RUN="500",
    )


def send_file_event(sqs, queue_url: str, key: str, size: int = 100) -> None:
    body = copy.deepcopy(event("s3_object_created_message.json"))
    body["detail"]["object"] |= {"key": key, "size": size}
    sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(body), MessageGroupId="dms-cdc-files")


def manifest_at(key: str) -> dict:
    return json.loads(boto3.client("s3").get_object(Bucket=ARTIFACTS, Key=key)["Body"].read())


def queue_depth(sqs, url: str) -> int:
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def test_drain_takes_more_than_one_page_in_arrival_order_into_one_manifest(queues, drain_app):
    """Given 25 CDC file events in one FIFO group (more than SQS's 10 per receive),
    When drained with a bound of 23 files,
    Then one pending manifest lists the first 23 files in arrival order and only they left the queue, and the
    batch is not caught up (a limit cut it: the loop does not pace the next run)."""
    sqs, queue_url, _ = queues
    keys = [f"dms/sales/customer/20261122-1010{n:02d}000.csv" for n in range(25)]
    for key in keys:
        send_file_event(sqs, queue_url, key)

    result = drain_app.handler(event("queue_drain_small_batch.json") | {"max_files": 23}, FakeContext())

    assert result["has_work"] and result["file_count"] == 23 and not result["resumed"]
    assert result["caught_up"] is False
    manifest = manifest_at(result["manifest_key"])
    assert [f["uri"] for f in manifest["files"]] == [f"s3://{RAW}/{k}" for k in keys[:23]]
    assert result["manifest_uri"] == f"s3://{ARTIFACTS}/{result['manifest_key']}"
    assert queue_depth(sqs, queue_url) == 2


def test_a_pending_manifest_is_returned_again_until_acknowledged(queues, drain_app, load_handler):
    """Given a drained batch whose CDC run has not succeeded,
    When the drain runs again, Then it returns the same manifest (a retry) and takes no new messages, and
    only the batch that emptied the queue says it caught up (a retried one may be a backlog);
    When the batch is acknowledged, Then the manifest moves to done/ and the next drain takes new files."""
    sqs, queue_url, _ = queues
    send_file_event(sqs, queue_url, "dms/sales/item/20261122-101010000.csv")
    first = drain_app.handler(drain_request(), FakeContext())
    send_file_event(sqs, queue_url, "dms/sales/item/20261122-101011000.csv")

    again = drain_app.handler(drain_request(), FakeContext())
    assert again["resumed"] and again["manifest_key"] == first["manifest_key"]
    assert first["caught_up"] is True and "caught_up" not in again
    assert queue_depth(sqs, queue_url) == 1

    ack = load_handler("acknowledge", ARTIFACTS_BUCKET=ARTIFACTS)
    request = event("acknowledge.json") | {
        "manifest_key": first["manifest_key"],
        "run_id": first["run_id"],
        "manifest_etag": again["manifest_etag"],  # the version handed out last
    }
    assert ack.handler(request, FakeContext())["already"] is False
    assert ack.handler(request, FakeContext())["already"] is True  # a retried acknowledge is harmless
    done = first["manifest_key"].replace("/pending/", "/done/")
    assert manifest_at(done)["run_id"] == first["run_id"]

    drain_app_again = load_handler("queue_drain")
    following = drain_app_again.handler(drain_request(), FakeContext())
    assert not following["resumed"]
    assert [f["uri"] for f in manifest_at(following["manifest_key"])["files"]] == [
        f"s3://{RAW}/dms/sales/item/20261122-101011000.csv"
    ]


def test_poison_messages_go_to_the_dead_letter_queue_and_initial_load_files_are_left_to_the_full_load(
    queues, drain_app
):
    """Given a garbage message, a LOAD file created before the pipeline's full-load job started and a CDC
    file event, When drained, Then the garbage is in the DLQ with its reason, the LOAD file is skipped
    (the full-load job read it), and the manifest holds only the CDC file; the queue is empty."""
    sqs, queue_url, dlq_url = queues
    boto3.client("s3").put_object(
        Bucket=ARTIFACTS, Key="manifests/full-load.json", Body=b'{"started_at": "2026-11-22T10:20:00.000Z"}'
    )
    sqs.send_message(QueueUrl=queue_url, MessageBody="not json at all", MessageGroupId="dms-cdc-files")
    send_file_event(sqs, queue_url, "dms/sales/item/LOAD00000001.csv")  # event time 2026-11-22T10:10:10Z
    send_file_event(sqs, queue_url, "dms/sales/item/20261122-101010000.csv")

    result = drain_app.handler(drain_request(), FakeContext())

    assert (result["file_count"], result["poison_messages"], result["skipped_full_load"]) == (1, 1, 1)
    assert result["reloads_pending"] == []
    dead = sqs.receive_message(QueueUrl=dlq_url, MessageAttributeNames=["All"])["Messages"]
    assert dead[0]["Body"] == "not json at all"
    assert dead[0]["MessageAttributes"]["reason"]["StringValue"].startswith("not an S3 Object Created event")
    assert queue_depth(sqs, queue_url) == 0


def test_an_empty_queue_means_no_work(queues, drain_app):
    assert drain_app.handler(event("queue_drain.json"), FakeContext()) == {
        "has_work": False,
        "file_count": 0,
        "poison_messages": 0,
        "skipped_full_load": 0,
        "duplicates": 0,
        "reload_files": 0,
        "moved_aside": [],
        "reloads_pending": [],
    }


def test_acknowledging_a_manifest_that_was_never_drained_is_an_error(queues, load_handler):
    ack = load_handler("acknowledge", ARTIFACTS_BUCKET=ARTIFACTS)
    import ack as module

    with pytest.raises(module.ManifestNotPendingError):
        ack.handler(event("acknowledge.json"), FakeContext())


@pytest.mark.parametrize(
    ("function", "bad_event", "field"),
    [
        ("acknowledge", {"run_id": "20261122T101010123456Z-3f2a9c1d"}, "manifest_key"),
        ("queue_drain", drain_request(max_files=0), "max_files"),
    ],
)
def test_events_that_do_not_fit_the_model_are_refused_before_any_work(
    queues, load_handler, function, bad_event, field
):
    """Given an event the function's model rejects, When the handler runs, Then Powertools' parser raises
    a validation error naming the field, and nothing is drained or moved."""
    from pydantic import ValidationError

    sqs, queue_url, dlq_url = queues
    send_file_event(sqs, queue_url, "dms/sales/item/20261122-101010000.csv")
    app = load_handler(
        function, QUEUE_URL=queue_url, DEAD_LETTER_QUEUE_URL=dlq_url, ARTIFACTS_BUCKET=ARTIFACTS
    )

    with pytest.raises(ValidationError, match=field):
        app.handler(bad_event, FakeContext())
    assert queue_depth(sqs, queue_url) == 1
    listed = boto3.client("s3").list_objects_v2(Bucket=ARTIFACTS).get("Contents", [])
    assert [item["Key"] for item in listed] == ["locks/pipeline-lease.json"]  # nothing but the lease

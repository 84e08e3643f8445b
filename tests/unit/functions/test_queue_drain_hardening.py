"""The drain as an adversary sees it (moto): malformed messages, keys as S3 encodes them, duplicates, table
reloads during CDC, a pending manifest that keeps failing or is corrupt, and an execution without the lease."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote_plus, unquote

import boto3
import pytest
from lake_contracts.names import decode_key, dms_layout, key_readings
from lake_contracts.s3 import LeaseLostError

from tests.unit.functions.conftest import FakeContext, drain_request, event, hold_pipeline_lease

ARTIFACTS = "dev-artifacts"
RAW = "dev-raw-123456789012-us-east-1"
GROUP = "dms-cdc-files"
GOOD_KEY = "dms/sales/web_sales/20261122-101010000.csv"
EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:dev-pipeline:first"


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
    boto3.client("s3").create_bucket(Bucket=RAW)  # the drain checks that an event's object exists
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
        RAW_BUCKET=RAW,
        RAW_PREFIX="dms",
        MAX_MANIFEST_ATTEMPTS="3",
        ON_STUCK_BATCH="continue",
    )


def body_for(key: str, size: Any = 100, time: str = "2026-11-22T10:10:10Z", bucket: str = RAW) -> dict:
    body = copy.deepcopy(event("s3_object_created_message.json"))
    body["detail"]["object"] |= {"key": key, "size": size}
    body["detail"]["bucket"]["name"] = bucket
    body["time"] = time
    return body


def send(sqs, queue_url: str, body: dict | str, dedup: str | None = None, create: bool = True) -> None:
    """Send `body`; with `create`, first write the object its raw-bucket event names (key percent-decoded)."""
    detail = body.get("detail") if isinstance(body, dict) else None
    if create and isinstance(detail, dict) and detail.get("bucket", {}).get("name") == RAW:
        key = detail.get("object", {}).get("key")
        if isinstance(key, str) and key and not key.endswith("/"):
            boto3.client("s3").put_object(Bucket=RAW, Key=unquote(key, errors="replace"), Body=b"x")
    text = body if isinstance(body, str) else json.dumps(body)
    extra = {"MessageDeduplicationId": dedup} if dedup else {}
    sqs.send_message(QueueUrl=queue_url, MessageBody=text, MessageGroupId=GROUP, **extra)


def manifest_at(key: str) -> dict:
    return json.loads(boto3.client("s3").get_object(Bucket=ARTIFACTS, Key=key)["Body"].read())


def keys_under(prefix: str) -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=ARTIFACTS, Prefix=prefix)
    return sorted(item["Key"] for item in listed.get("Contents", []))


def queue_depth(sqs, url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def dead_letters(sqs, dlq_url: str) -> list[dict]:
    found = sqs.receive_message(QueueUrl=dlq_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
    return found.get("Messages", [])


def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


BAD_MESSAGES = {
    "key of the wrong type": body_for(GOOD_KEY)
    | {"detail": body_for(GOOD_KEY)["detail"] | {"object": {"key": 7}}},
    "size Infinity": json.dumps(body_for(GOOD_KEY)).replace('"size": 100', '"size": Infinity'),
    "size 1e400": json.dumps(body_for(GOOD_KEY)).replace('"size": 100', '"size": 1e400'),
    "negative size": body_for(GOOD_KEY, size=-5),
    "fractional size": body_for(GOOD_KEY, size=1.5),
    "size above 5 TiB": body_for(GOOD_KEY, size=6 * 1024**4),
    "deeply nested JSON": nested(100_000),
    "not JSON": "not json at all",
    "empty body": " ",
    "a JSON list": "[1, 2, 3]",
    "another bucket": body_for(GOOD_KEY, bucket="someone-elses-bucket"),
    "outside the DMS prefix": body_for("other/sales/web_sales/20261122-101010000.csv"),
    "not a DMS file name": body_for("dms/sales/web_sales/notes.txt"),
    "a folder too deep": body_for("dms/sales/web_sales/extra/20261122-101010000.csv"),  # not a date folder
    "a folder marker": body_for("dms/sales/web_sales/"),
    "invalid percent-encoding": body_for("dms/sales/web_sales/%FF%FE.csv"),
    "an Object Deleted event": body_for(GOOD_KEY) | {"detail-type": "Object Deleted"},
}


@pytest.mark.parametrize("what", list(BAD_MESSAGES))
def test_every_malformed_message_goes_to_the_dead_letter_queue_with_a_reason(queues, drain_app, what):
    """Given a malformed message (fuzz findings among them: a key of the wrong type, size Infinity, deeply
    nested JSON) followed by a valid CDC file event, When drained, Then the drain does not fail: the bad
    message is in the DLQ with a `reason`, the valid file is in the manifest, and the queue is empty."""
    sqs, queue_url, dlq_url = queues
    send(sqs, queue_url, BAD_MESSAGES[what], dedup="bad")
    send(sqs, queue_url, body_for(GOOD_KEY), dedup="good")

    result = drain_app.handler(drain_request(), FakeContext())

    assert result["poison_messages"] == 1 and result["file_count"] == 1
    assert [f["uri"] for f in manifest_at(result["manifest_key"])["files"]] == [f"s3://{RAW}/{GOOD_KEY}"]
    dead = dead_letters(sqs, dlq_url)
    assert len(dead) == 1 and dead[0]["MessageAttributes"]["reason"]["StringValue"].strip()
    assert queue_depth(sqs, queue_url) == 0


def test_a_key_form_encoded_as_in_s3_notifications_is_found_by_its_existing_reading(queues, drain_app):
    """Given an object whose key holds a `+`, a literal `%2B` and a space, and its event carrying the key
    form-URL-encoded as S3 *notifications* do (space → `+`, `+` → `%2B`, `%` → `%25`; not what EventBridge
    sends, docs/CONTRACTS.md), When drained, Then the manifest names the object by its real key: of the
    key's readings, the one that exists."""
    sqs, queue_url, _ = queues
    real = "dms/sales/a+b c%2B/20261122-101010000.csv"
    encoded = quote_plus(real, safe="/")
    assert encoded == "dms/sales/a%2Bb+c%252B/20261122-101010000.csv"
    assert decode_key(encoded) != real and real in key_readings(encoded)
    boto3.client("s3").put_object(Bucket=RAW, Key=real, Body=b"x")
    send(sqs, queue_url, body_for(encoded), create=False)

    result = drain_app.handler(drain_request(), FakeContext())

    assert [f["uri"] for f in manifest_at(result["manifest_key"])["files"]] == [f"s3://{RAW}/{real}"]


def test_a_file_announced_twice_is_listed_once(queues, drain_app):
    """Given two events of the same object (an S3 retry, an operator's replay), When drained,
    Then the manifest lists the file once and both messages leave the queue."""
    sqs, queue_url, _ = queues
    send(sqs, queue_url, body_for(GOOD_KEY), dedup="first")
    send(sqs, queue_url, body_for(GOOD_KEY, time="2026-11-22T10:11:00Z"), dedup="second")

    result = drain_app.handler(drain_request(), FakeContext())

    assert result["file_count"] == 1 and result["duplicates"] == 1
    assert queue_depth(sqs, queue_url) == 0


def mark_full_load(started_at: str = "2026-11-22T10:00:00.000Z") -> None:
    body = json.dumps({"started_at": started_at}).encode()
    boto3.client("s3").put_object(Bucket=ARTIFACTS, Key="manifests/full-load.json", Body=body)


def test_a_load_file_written_during_cdc_is_recorded_as_a_reload_request_never_batched(queues, drain_app):
    """Given the full-load job started at 10:00 and, later, LOAD files of a reloaded table (DMS reload)
    among CDC files, When drained twice, Then no LOAD file is in a manifest, the table's reload request
    holds every LOAD file with the time it was first seen, and the drain reports the table as pending."""
    sqs, queue_url, _ = queues
    mark_full_load()
    send(sqs, queue_url, body_for("dms/sales/item/LOAD00000001.csv", time="2026-11-22T10:30:00Z"))
    send(sqs, queue_url, body_for(GOOD_KEY))

    first = drain_app.handler(drain_request(), FakeContext())

    assert [f["uri"] for f in manifest_at(first["manifest_key"])["files"]] == [f"s3://{RAW}/{GOOD_KEY}"]
    assert (first["reload_files"], first["reloads_pending"]) == (1, ["sales.item"])
    request = manifest_at("manifests/reloads/sales.item.json")
    assert request["table"] == "sales.item"
    assert request["files"] == [f"s3://{RAW}/dms/sales/item/LOAD00000001.csv"]
    assert request["first_seen"].startswith("2026-11-22T10:30:00")

    boto3.client("s3").delete_object(Bucket=ARTIFACTS, Key=first["manifest_key"])  # acknowledged
    send(sqs, queue_url, body_for("dms/sales/item/LOAD00000002.csv", time="2026-11-22T10:31:00Z"))
    second = drain_app.handler(drain_request(), FakeContext())

    assert not second["has_work"] and second["reloads_pending"] == ["sales.item"]
    request = manifest_at("manifests/reloads/sales.item.json")
    assert [u.rsplit("/", 1)[-1] for u in request["files"]] == ["LOAD00000001.csv", "LOAD00000002.csv"]
    assert request["first_seen"].startswith("2026-11-22T10:30:00")
    assert request["last_seen"].startswith("2026-11-22T10:31:00")
    assert queue_depth(sqs, queue_url) == 0


def test_a_reload_request_is_durable_before_its_message_leaves_the_queue(queues, drain_app):
    """Given a drain that dies after recording a page but before deleting it, Then the reload request
    is on S3 already and the LOAD file's message is still in the queue (at least once, never dropped)."""
    from tests.unit.functions.test_queue_drain_bounds_and_durability import SqsSpy

    sqs, queue_url, _ = queues
    mark_full_load()
    send(sqs, queue_url, body_for("dms/sales/item/LOAD00000001.csv", time="2026-11-22T10:30:00Z"))
    drain_app.sqs = SqsSpy(sqs, fail_deletes=True)

    with pytest.raises(ConnectionError):
        drain_app.handler(drain_request(), FakeContext())

    assert keys_under("manifests/reloads/") == ["manifests/reloads/sales.item.json"]
    assert queue_depth(sqs, queue_url) == 1


def test_without_a_full_load_marker_every_load_file_is_a_reload_request(queues, drain_app):
    """Given no record of the pipeline's full-load job (an execution started with skip_full_load), When a
    LOAD file event is drained, Then it becomes a reload request: it may cost a reload, it loses nothing."""
    sqs, queue_url, _ = queues
    send(sqs, queue_url, body_for("dms/sales/item/LOAD00000001.csv", time="2020-01-01T00:00:00Z"))

    result = drain_app.handler(drain_request(), FakeContext())

    assert result["reloads_pending"] == ["sales.item"] and result["skipped_full_load"] == 0


def put_pending(run_id: str, body: bytes | None = None, attempts: int = 1) -> str:
    key = f"manifests/pending/{run_id}.json"
    document = {"version": 1, "run_id": run_id, "created_at": "2026-11-22T09:00:00Z", "attempts": attempts}
    document["files"] = [{"uri": f"s3://{RAW}/{GOOD_KEY}", "size": 1}]
    boto3.client("s3").put_object(Bucket=ARTIFACTS, Key=key, Body=body or json.dumps(document).encode())
    return key


RUN_ID = "20261122T090000000000Z-0123abcd"


def test_a_manifest_whose_run_keeps_failing_is_moved_aside_after_n_attempts(queues, drain_app):
    """Given a pending manifest (handed out once, by the drain that wrote it) whose CDC run fails every
    time, and a new file in the queue, When the drain runs again and again without an acknowledge,
    Then it hands the manifest out twice more (attempts 2 and 3 of MAX_MANIFEST_ATTEMPTS=3), and the next
    drain moves it to failed/ (reported, for the alarm) and batches the queued file: nothing is blocked."""
    sqs, queue_url, _ = queues
    key = put_pending(RUN_ID)
    send(sqs, queue_url, body_for("dms/sales/item/20261122-111111000.csv"))

    retries = [drain_app.handler(drain_request(), FakeContext()) for _ in range(2)]
    after = drain_app.handler(drain_request(), FakeContext())

    assert [(r["manifest_key"], r["resumed"], r["attempt"]) for r in retries] == [
        (key, True, 2),
        (key, True, 3),
    ]
    assert not after["resumed"] and after["file_count"] == 1
    assert (
        after["moved_aside"][0]["manifest_key"] == key
        and "failed 3 times" in after["moved_aside"][0]["reason"]
    )
    assert keys_under("manifests/failed/") == [f"manifests/failed/{RUN_ID}.json"]
    assert keys_under("manifests/pending/") == [after["manifest_key"]]


class FailingReceives:
    """The real (moto) SQS client, except that every receive fails (the Lambda dies mid-run)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def receive_message(self, **request: Any) -> dict[str, Any]:
        raise ConnectionError("the drain failed after moving a batch aside")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def printed(output: str) -> list[dict]:
    """The JSON documents the handler printed (the EMF metrics have "_aws")."""
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def moved_aside_metrics(documents: list[dict]) -> list[float]:
    """The ManifestsMovedAside values published (EMF gives a value or a list of values)."""
    values: list[float] = []
    for document in documents:
        if "_aws" in document and "ManifestsMovedAside" in document:
            value = document["ManifestsMovedAside"]
            values += value if isinstance(value, list) else [value]
    return values


def test_a_batch_moved_aside_is_alarmed_even_when_the_drain_fails_afterwards(
    capsys, caplog, queues, drain_app
):
    """Given a pending manifest handed out MAX_MANIFEST_ATTEMPTS times, When the drain moves it to failed/
    and then fails (receiving from the queue breaks), Then the ManifestsMovedAside metric (in the
    namespace and with the service dimension the alarm watches) and the error log were published at the
    move, not lost with the failed run."""
    sqs, _, _ = queues
    put_pending(RUN_ID, attempts=3)
    drain_app.sqs = FailingReceives(sqs)

    with pytest.raises(ConnectionError):
        drain_app.handler(drain_request(), FakeContext())

    assert keys_under("manifests/failed/") == [f"manifests/failed/{RUN_ID}.json"]
    documents = printed(capsys.readouterr().out)
    assert moved_aside_metrics(documents) == [1.0]
    (metric,) = [d for d in documents if "ManifestsMovedAside" in d]
    assert metric["service"] == "test" and metric["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Test"
    logged = [r for r in caplog.records if r.getMessage() == "pending manifest moved aside"]
    assert [(r.levelname, r.manifest_key) for r in logged] == [("ERROR", f"manifests/pending/{RUN_ID}.json")]


def test_a_batch_moved_aside_is_counted_once(capsys, queues, drain_app):
    """Given a pending manifest handed out MAX_MANIFEST_ATTEMPTS times, When a drain moves it aside and
    succeeds, Then ManifestsMovedAside adds up to 1 over everything the run published."""
    put_pending(RUN_ID, attempts=3)

    assert len(drain_app.handler(drain_request(), FakeContext())["moved_aside"]) == 1

    assert sum(moved_aside_metrics(printed(capsys.readouterr().out))) == 1


def test_attempts_are_counted_per_hand_out(queues, drain_app):
    """Given a new batch (attempt 1), When it is handed out again twice, Then the attempts read 2 and 3,
    in the result and in the manifest, so a retried drain cannot reset them."""
    sqs, queue_url, _ = queues
    send(sqs, queue_url, body_for(GOOD_KEY))
    first = drain_app.handler(drain_request(), FakeContext())
    again = [drain_app.handler(drain_request(), FakeContext()) for _ in range(2)]

    assert [first["attempt"], *(r["attempt"] for r in again)] == [1, 2, 3]
    assert manifest_at(first["manifest_key"])["attempts"] == 3


@pytest.mark.parametrize(
    "body",
    [b"{not json", b'{"version": 1, "run_id": "../../etc", "files": []}', b'{"run_id": 1}', b"[]"],
    ids=["not JSON", "bad run_id", "run_id not text", "not an object"],
)
def test_a_corrupt_pending_manifest_is_moved_aside_at_once_and_the_drain_goes_on(queues, drain_app, body):
    """Given a corrupt pending manifest (it used to crash every drain) and a queued file, When drained,
    Then the manifest is moved to failed/ with its reason and the queued file is batched."""
    sqs, queue_url, _ = queues
    put_pending(RUN_ID, body=body)
    send(sqs, queue_url, body_for(GOOD_KEY))

    result = drain_app.handler(drain_request(), FakeContext())

    assert result["file_count"] == 1 and not result["resumed"]
    assert "corrupt" in result["moved_aside"][0]["reason"]
    assert keys_under("manifests/failed/") == [f"manifests/failed/{RUN_ID}.json"]


def test_with_the_stop_policy_a_stuck_manifest_stops_the_drain_and_stays_pending(queues, load_handler):
    """Given ON_STUCK_BATCH=stop and a manifest handed out 3 times already, When drained, Then the drain
    raises StuckBatchError (the execution fails, alarmed) and the manifest stays where it is."""
    _, queue_url, dlq_url = queues
    app = load_handler(
        "queue_drain",
        QUEUE_URL=queue_url,
        DEAD_LETTER_QUEUE_URL=dlq_url,
        ARTIFACTS_BUCKET=ARTIFACTS,
        MAX_MANIFEST_ATTEMPTS="3",
        ON_STUCK_BATCH="stop",
    )
    import pending_manifests  # the module the handler loaded

    key = put_pending(RUN_ID, attempts=3)
    with pytest.raises(pending_manifests.StuckBatchError, match="failed 3 times"):
        app.handler(drain_request(), FakeContext())
    assert keys_under("manifests/pending/") == [key] and keys_under("manifests/failed/") == []


def put_lease(holder: str) -> None:
    body = json.dumps({"holder": holder}).encode()
    boto3.client("s3").put_object(Bucket=ARTIFACTS, Key="locks/pipeline-lease.json", Body=body)


@pytest.mark.parametrize(
    "holder", [None, "arn:aws:states:us-east-1:123456789012:execution:dev-pipeline:other"]
)
def test_only_the_lease_holder_drains(queues, drain_app, holder):
    """Given the lease is missing or held by another execution, When an execution asks to drain,
    Then LeaseLostError is raised and no message is taken; the holder itself drains."""
    sqs, queue_url, _ = queues
    send(sqs, queue_url, body_for(GOOD_KEY))
    if holder:
        put_lease(holder)
    else:
        boto3.client("s3").delete_object(Bucket=ARTIFACTS, Key="locks/pipeline-lease.json")

    with pytest.raises(LeaseLostError):
        drain_app.handler({"execution_arn": EXECUTION}, FakeContext())
    assert queue_depth(sqs, queue_url) == 1

    put_lease(EXECUTION)
    assert drain_app.handler({"execution_arn": EXECUTION}, FakeContext())["file_count"] == 1


@pytest.mark.parametrize("request_without_execution", [{}, {"max_files": 20, "max_bytes": 104857600}])
def test_a_drain_that_names_no_execution_is_refused_before_any_work(
    queues, drain_app, request_without_execution
):
    """Given a queued file and a pending manifest, When the drain is invoked without execution_arn (the
    state machine always passes it; only a caller bypassing the lease would not), Then the event is
    refused naming execution_arn: nothing is received, handed out or moved."""
    from pydantic import ValidationError

    sqs, queue_url, _ = queues
    send(sqs, queue_url, body_for(GOOD_KEY))
    pending = put_pending(RUN_ID, attempts=1)

    with pytest.raises(ValidationError, match="execution_arn"):
        drain_app.handler(request_without_execution, FakeContext())

    assert queue_depth(sqs, queue_url) == 1 and manifest_at(pending)["attempts"] == 1


DMS_NAMES = [
    "dms/sales/item/LOAD00000001.csv",
    "dms/sales/item/LOAD0000000A.csv.gz",
    "dms/sales/item/LOAD_2_0000000B.parquet",
    "dms/sales/item/20141029-1134010000.csv",
    "dms/sales/item/20261122-101010123.csv.gz",
    "dms/sales/item/20261122-101010123456789.parquet",
    "dms/sales/item/20261122-101010.csv",
    "dms/sales/item/2026/11/22/20261122-101010123.csv",
    "dms/sales/item/2026/11/22/10/20261122-101010123.csv",
    "dms/sales/item/2026-11-22/20261122-101010123.csv",
    "dms/sales/item/20261122/20261122-101010123.parquet",
    "dms/sales/2026/20261122-101010123.csv",  # a table named 2026
    # not DMS files
    "dms/sales/item/LOAD1.csv",
    "dms/sales/item/load00000001.csv",
    "dms/sales/item/20261122-1010.csv",
    "dms/sales/item/20261122-101010123.json",
    "dms/sales/item/20261122-101010123.csv.tmp",
    "dms/item/20261122-101010123.csv",
    "dms/a/b/c/20261122-101010123.csv",
    "dms/sales/item/2026/11/22/10/59/20261122-101010123.csv",
    "dms/sales/item/_SUCCESS",
]


@pytest.mark.parametrize("key", DMS_NAMES)
def test_the_drain_accepts_exactly_the_files_the_spark_jobs_read(drain_app, key):
    """Given an object key below the DMS prefix,
    When the drain classifies it (knowing the prefix: `names.dms_layout`) and the Spark jobs parse it
    (`dms_files.parse_dms_key`, the one file contract both build on),
    Then both agree: same schema, table and kind, or both refuse it (no file the jobs could apply is
    sent to the dead-letter queue, and none they would reject is batched)."""
    from lake_contracts.dms_files import NotADmsFileError, parse_dms_key

    schema, table, kind = dms_layout(key, "dms")
    try:
        parsed = parse_dms_key(key.removeprefix("dms/"))  # the reader sees keys below the raw path
        expected = (parsed.source_schema, parsed.table, "load" if parsed.is_full_load else "cdc")
    except NotADmsFileError:
        expected = ("", "", "cdc")
    if key.startswith("dms/a/b/c/") or key.endswith("/10/59/20261122-101010123.csv"):
        expected = ("", "", "cdc")  # the reader takes the last two folders; the drain knows the prefix
    assert (schema, table, kind) == expected


def test_a_batch_requeued_by_the_operator_is_handed_out_first_with_its_attempts_renewed(queues, drain_app):
    """Given a batch moved aside after MAX_MANIFEST_ATTEMPTS failed runs, When the operator requeues it
    (tools.requeue_batch) after fixing the cause, Then the next drain hands it out again before new files,
    as attempt 1 of a fresh MAX_MANIFEST_ATTEMPTS."""
    from tools import requeue_batch

    key = put_pending(RUN_ID)
    for _ in range(3):  # handed out twice more, then moved aside
        drain_app.handler(drain_request(), FakeContext())
    s3 = boto3.client("s3")
    (failed,) = requeue_batch.failed_batches(s3, ARTIFACTS)
    requeue_batch.requeue(s3, ARTIFACTS, failed, 35, now=datetime(2026, 11, 23, tzinfo=UTC))

    resumed = drain_app.handler(drain_request(), FakeContext())

    assert (resumed["manifest_key"], resumed["resumed"], resumed["attempt"]) == (key, True, 1)
    assert keys_under("manifests/failed/") == []

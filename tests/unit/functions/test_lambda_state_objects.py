"""Corrupt state objects are named and set aside, never stop everything; changes
skipped as older are published; a moved-aside batch is not requeued past TombstoneRetentionDays (moto)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime

import boto3
import pytest
from lake_contracts.reload_requests import ReloadRequestStore, retire_requests

from tests.unit.functions.conftest import FakeContext, drain_request, event, hold_pipeline_lease

ARTIFACTS = "dev-artifacts"
RAW = "dev-raw-123456789012-us-east-1"
TASK = "arn:aws:dms:us-east-1:123456789012:task:DEVTORAW"
DONE_AT = datetime(2026, 11, 22, 11, 0, tzinfo=UTC)

CORRUPT = {
    "empty": b"",
    "not JSON": b"{not json",
    "a JSON list": b"[1, 2]",
    "null": b"null",
    "a time that is not ISO-8601": json.dumps({"table": "sales.bad", "last_seen": "yesterday"}).encode(),
    "a count that is not an integer": json.dumps({"table": "sales.bad", "attempts": "two"}).encode(),
}


class CompletedDms:
    def describe_table_statistics(self, **request):
        rows = [
            {"SchemaName": s, "TableName": t, "TableState": "Table completed", "FullLoadEndTime": DONE_AT}
            for s, t in (("sales", "good"), ("sales", "bad"))
        ]
        return {"TableStatistics": rows}

    def describe_replication_tasks(self, **request):
        return {"ReplicationTasks": []}


@pytest.fixture
def s3(aws):
    client = boto3.client("s3")
    client.create_bucket(Bucket=ARTIFACTS)
    return client


def put_request(s3, table: str, body: bytes) -> None:
    s3.put_object(Bucket=ARTIFACTS, Key=f"manifests/reloads/{table}.json", Body=body)


def keys(s3, prefix: str) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=ARTIFACTS, Prefix=prefix).get("Contents", []))


def emitted(capsys) -> dict:
    for line in capsys.readouterr().out.splitlines():
        if '"_aws"' in line:
            return json.loads(line)
    raise AssertionError("no metrics were emitted")


@pytest.mark.parametrize("what", sorted(CORRUPT))
def test_one_corrupt_reload_request_is_set_aside_and_alarmed_while_a_good_one_proceeds(
    s3, load_handler, capsys, what
):
    """Given a good reload request (sales.good) and a corrupt one (sales.bad: empty, not JSON, a list, null,
    a non-ISO time or a non-integer count), When the reloads function checks, Then sales.good is ready, the
    corrupt request is moved to reloads-failed/ with its reason naming the object, and
    ReloadRequestsSetAside=1 is published (alarmed)."""
    good = {"version": 1, "table": "sales.good", "files": [], "last_seen": "2026-11-22T10:31:00.000000Z"}
    put_request(s3, "sales.good", json.dumps(good).encode())
    put_request(s3, "sales.bad", CORRUPT[what])
    app = load_handler("reloads", ARTIFACTS_BUCKET=ARTIFACTS, DMS_TASK_ARN=TASK)
    app.dms = CompletedDms()

    result = app.handler(event("reloads_check.json"), FakeContext())

    assert result["ready"] == ["sales.good"]
    (aside,) = result["set_aside"]
    assert aside["request_key"] == "manifests/reloads/sales.bad.json"
    assert "manifests/reloads/sales.bad.json is corrupt" in aside["reason"]
    assert keys(s3, "manifests/reloads/") == ["manifests/reloads/sales.good.json"]
    assert keys(s3, "manifests/reloads-failed/") == [aside["set_aside_key"]]
    assert s3.get_object(Bucket=ARTIFACTS, Key=aside["set_aside_key"])["Body"].read() == CORRUPT[what]
    assert emitted(capsys)["ReloadRequestsSetAside"] == [1.0]


def test_a_reload_request_whose_key_is_no_encoded_name_is_set_aside(s3, load_handler):
    """Given a request under a key that does not decode to a name (`%FF`), When checked, Then it is set
    aside naming its key, and the check completes."""
    put_request(s3, "sales.%FF", b'{"table": "sales.x"}')
    app = load_handler("reloads", ARTIFACTS_BUCKET=ARTIFACTS, DMS_TASK_ARN=TASK)

    result = app.handler(event("reloads_check.json"), FakeContext())

    assert [a["request_key"] for a in result["set_aside"]] == ["manifests/reloads/sales.%FF.json"]
    assert result["ready"] == [] and keys(s3, "manifests/reloads/") == []


@pytest.mark.parametrize("action", ["done", "failed"])
def test_retiring_or_recording_a_corrupt_request_sets_it_aside_instead_of_failing(s3, load_handler, action):
    """Given a request that turned corrupt after its check, When the run is done or failed, Then it is set
    aside (named) and the step completes."""
    put_request(s3, "sales.bad", b"[]")
    app = load_handler("reloads", ARTIFACTS_BUCKET=ARTIFACTS, DMS_TASK_ARN=TASK)
    request = {"action": action, "checked": {"sales.bad": "x"}, "tables": ["sales.bad"], "error": "x"}

    result = app.handler(request, FakeContext())

    assert [a["request_key"] for a in result["set_aside"]] == ["manifests/reloads/sales.bad.json"]
    assert keys(s3, "manifests/reloads/") == []


@pytest.fixture
def drain_app(s3, load_handler):
    sqs = boto3.client("sqs")
    fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    dlq = sqs.create_queue(QueueName="dlq.fifo", Attributes=fifo)["QueueUrl"]
    queue = sqs.create_queue(QueueName="cdc.fifo", Attributes=fifo)["QueueUrl"]
    s3.create_bucket(Bucket=RAW)
    hold_pipeline_lease(ARTIFACTS, drain_request()["execution_arn"])
    app = load_handler(
        "queue_drain", QUEUE_URL=queue, DEAD_LETTER_QUEUE_URL=dlq, ARTIFACTS_BUCKET=ARTIFACTS, RAW_BUCKET=RAW
    )
    return app, sqs, queue


def send(sqs, s3, queue: str, key: str) -> None:
    s3.put_object(Bucket=RAW, Key=key, Body=b"x")
    body = copy.deepcopy(event("s3_object_created_message.json"))
    body["detail"]["object"] |= {"key": key, "size": 10}
    body["detail"]["bucket"]["name"] = RAW
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(body), MessageGroupId="dms-cdc-files")


@pytest.mark.parametrize("what", sorted(CORRUPT))
def test_the_drain_replaces_a_corrupt_reload_request_and_keeps_the_corrupt_one_aside(
    s3, drain_app, capsys, what
):
    """Given a corrupt reload request of sales.bad, When the drain records a new LOAD file of sales.bad,
    Then the corrupt request is kept under reloads-failed/, a new request names the file (the reload still
    happens), and ReloadRequestsSetAside=1 is published: no JSONDecodeError/AttributeError stops the drain."""
    app, sqs, queue = drain_app
    put_request(s3, "sales.bad", CORRUPT[what])
    send(sqs, s3, queue, "dms/sales/bad/LOAD00000002.csv")

    result = app.handler(drain_request(), FakeContext())

    assert result["reloads_pending"] == ["sales.bad"] and result["reload_requests_set_aside"] == 1
    request = json.loads(
        s3.get_object(Bucket=ARTIFACTS, Key="manifests/reloads/sales.bad.json")["Body"].read()
    )
    assert (request["table"], request["files"]) == (
        "sales.bad",
        [f"s3://{RAW}/dms/sales/bad/LOAD00000002.csv"],
    )
    assert len(keys(s3, "manifests/reloads-failed/")) == 1
    assert emitted(capsys)["ReloadRequestsSetAside"] == [1.0]


RUN_ID = "20261122T090000000000Z-0123abcd"
MANIFEST = {"version": 1, "run_id": RUN_ID, "created_at": "2026-11-22T09:00:00Z", "attempts": 1}
CORRUPT_MANIFESTS = {
    "a created_at that is not ISO-8601": MANIFEST | {"created_at": "last tuesday", "files": []},
    "attempts that is not an integer": MANIFEST | {"attempts": "2", "files": []},
    "attempts that is a boolean": MANIFEST | {"attempts": True, "files": []},
    "a file size that is not a count": MANIFEST | {"files": [{"uri": "s3://raw/a.csv", "size": "big"}]},
}


@pytest.mark.parametrize("what", sorted(CORRUPT_MANIFESTS))
def test_a_pending_manifest_with_a_bad_time_or_count_is_moved_aside_not_a_crash(s3, drain_app, what):
    """Given a pending manifest whose created_at is not ISO-8601 or whose count is not an integer, When the
    drain runs, Then it is moved to failed/ as corrupt with the reason, and the drain goes on."""
    app, _, _ = drain_app
    s3.put_object(
        Bucket=ARTIFACTS, Key=f"manifests/pending/{RUN_ID}.json", Body=json.dumps(CORRUPT_MANIFESTS[what])
    )

    result = app.handler(drain_request(), FakeContext())

    (moved,) = result["moved_aside"]
    assert moved["failed_key"] == f"manifests/failed/{RUN_ID}.json"
    assert moved["reason"].startswith("corrupt manifest")
    assert keys(s3, "manifests/pending/") == [] and not result["has_work"]


def test_the_drain_publishes_the_age_of_the_oldest_moved_aside_batch(s3, drain_app, capsys):
    """Given two batches moved aside (drained 2026-11-22 09:00 and 2026-11-24 09:00 by their run ids),
    When the drain runs, Then OldestMovedAsideBatchAgeDays is the first one's age (the aging alarm's metric)."""
    app, _, _ = drain_app
    for run_id in (RUN_ID, "20261124T090000000000Z-4567cdef"):
        s3.put_object(Bucket=ARTIFACTS, Key=f"manifests/failed/{run_id}.json", Body=b"{}")

    app.handler(drain_request(), FakeContext())

    expected = (datetime.now(UTC) - datetime(2026, 11, 22, 9, 0, tzinfo=UTC)).total_seconds() / 86400
    (published,) = emitted(capsys)["OldestMovedAsideBatchAgeDays"]
    assert abs(published - expected) < 0.01


def test_a_batch_past_tombstone_retention_is_not_requeued(s3):
    """Given a batch moved aside that was drained 35 days ago, When the operator requeues it with
    TombstoneRetentionDays 35, Then it is refused (its deletes' tombstones may be gone: deleted rows would
    come back) and stays in failed/; one drained 34 days ago is requeued."""
    from tools import requeue_batch

    for run_id in ("20261020T090000000000Z-0123abcd", "20261021T090000000000Z-4567cdef"):
        body = MANIFEST | {"run_id": run_id, "files": [{"uri": "s3://raw/a.csv", "size": 1}]}
        s3.put_object(Bucket=ARTIFACTS, Key=f"manifests/failed/{run_id}.json", Body=json.dumps(body))
    old, young = requeue_batch.failed_batches(s3, ARTIFACTS)
    now = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)

    with pytest.raises(requeue_batch.TooOldToRequeueError, match="TombstoneRetentionDays is 35"):
        requeue_batch.requeue(s3, ARTIFACTS, old, 35, now=now)
    requeue_batch.requeue(s3, ARTIFACTS, young, 35, now=now)

    assert keys(s3, "manifests/failed/") == [old.key]
    assert keys(s3, "manifests/pending/") == [young.key.replace("/failed/", "/pending/")]


# ------------------------------------------------------------------------------ changes ignored as older
def test_changes_skipped_as_older_are_published_and_their_tables_logged(s3, load_handler, capsys, caplog):
    """Given a CDC run report in which sales.item skipped 7 changes as older and sales.store none, When the
    batch is acknowledged, Then ChangesIgnoredAsOlder=7 is published (alarmed) and the log names sales.item
    with its count."""
    run_id = "20261122T101010123456Z-3f2a9c1d"
    s3.put_object(
        Bucket=ARTIFACTS,
        Key=f"manifests/pending/{run_id}.json",
        Body=json.dumps({"version": 1, "run_id": run_id, "files": []}),
    )
    tables = [
        {"table": "sales.item", "error": None, "ignored_older": 7, "inserted_or_updated": 3},
        {"table": "sales.store", "error": None, "ignored_older": 0, "inserted_or_updated": 1},
    ]
    report = {"run_id": run_id, "job": "cdc", "error": None, "tables": tables}
    report["totals"] = {"ignored_older": 7, "inserted_or_updated": 4}
    s3.put_object(Bucket=ARTIFACTS, Key=f"manifests/reports/{run_id}.json", Body=json.dumps(report))
    hold_pipeline_lease(ARTIFACTS, event("acknowledge.json")["execution_arn"])
    app = load_handler("acknowledge", ARTIFACTS_BUCKET=ARTIFACTS)

    result = app.handler(event("acknowledge.json"), FakeContext())

    assert result["published"]["ChangesIgnoredAsOlder"] == 7
    assert emitted(capsys)["ChangesIgnoredAsOlder"] == [7.0]
    (warning,) = [r for r in caplog.records if r.getMessage().startswith("changes skipped as older")]
    assert warning.tables == {"sales.item": 7}


class DrainWritesFirst:
    """S3 where the drain records a new LOAD file of the table just before the reloads function's write."""

    def __init__(self, s3, key: str, before: str) -> None:
        self.s3, self.key, self.before = s3, key, before

    def _drain_records(self) -> None:
        newer = {"version": 1, "table": "sales.item", "files": ["s3://raw/new/LOAD2.csv"]}
        newer |= {"last_seen": "2026-11-22T12:00:00.000000Z", "attempts": 0}
        self.s3.put_object(Bucket=ARTIFACTS, Key=self.key, Body=json.dumps(newer).encode())

    def delete_object(self, **request):
        if self.before == "delete":
            self.before = ""
            self._drain_records()
        return self.s3.delete_object(**request)

    def put_object(self, **request):
        if self.before == "put":
            self.before = ""
            self._drain_records()
        return self.s3.put_object(**request)

    def __getattr__(self, name):
        return getattr(self.s3, name)


def test_a_reload_recorded_while_the_last_one_is_retired_is_kept_and_a_failure_counts_on_it(s3, load_handler):
    """Given a checked request of sales.item, When the drain records a newer LOAD file of it between the
    reloads function's read and its delete (done), Then the request is kept (not deleted with the new file);
    When a failed run is recorded while the drain writes, Then the attempt is counted on the newer request
    (its file kept), not written over it."""
    load_handler("reloads", ARTIFACTS_BUCKET=ARTIFACTS, DMS_TASK_ARN=TASK)
    import reloads

    store, key = ReloadRequestStore(ARTIFACTS), "manifests/reloads/sales.item.json"
    checked = {"version": 1, "table": "sales.item", "files": ["s3://raw/LOAD1.csv"], "attempts": 0}
    put_request(s3, "sales.item", json.dumps(checked | {"last_seen": "2026-11-22T10:31:00.000000Z"}).encode())

    done = retire_requests(
        DrainWritesFirst(s3, key, "delete"), store, {"sales.item": "2026-11-22T10:31:00.000000Z"}
    )
    assert (done["retired"], done["kept"]) == ([], ["sales.item"])

    failed = reloads.failed(DrainWritesFirst(s3, key, "put"), store, ["sales.item"], "boom")
    assert [r["attempts"] for r in failed["recorded"]] == [1]
    stored = json.loads(s3.get_object(Bucket=ARTIFACTS, Key=key)["Body"].read())
    assert (stored["files"], stored["attempts"], stored["last_error"]) == (
        ["s3://raw/new/LOAD2.csv"],
        1,
        "boom",
    )

"""The drain's and the acknowledge's writes are fenced without reserved concurrency (moto).

A drain writes only while its execution holds the lease, while it is the newest drain of that execution, and
only onto the manifest version it wrote last; the acknowledge retires only the version the drain handed out,
only for the lease holder, and never a run its own input says failed."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from lake_contracts.s3 import LeaseLostError

from tests.unit.functions.conftest import FakeContext, event, hold_pipeline_lease

ARTIFACTS = "dev-artifacts"
RAW = "dev-raw-123456789012-us-east-1"
GROUP = "dms-cdc-files"
LEASE = "locks/pipeline-lease.json"
EXECUTION = event("queue_drain.json")["execution_arn"]
OTHER = "arn:aws:states:us-east-1:123456789012:execution:dev-pipeline:other"


@pytest.fixture
def setup(aws, load_handler):
    sqs = boto3.client("sqs")
    fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    dlq = sqs.create_queue(QueueName="dlq.fifo", Attributes=fifo)["QueueUrl"]
    queue = sqs.create_queue(QueueName="cdc.fifo", Attributes=fifo)["QueueUrl"]
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=ARTIFACTS)
    s3.create_bucket(Bucket=RAW)
    hold_pipeline_lease(ARTIFACTS, EXECUTION)
    load_handler("queue_drain", ARTIFACTS_BUCKET=ARTIFACTS)  # puts functions/queue_drain on the path
    import drain
    from drain_config import Locations

    where = Locations(queue, dlq, ARTIFACTS, raw_bucket=RAW, raw_prefix="dms")
    return drain, where, s3, sqs


def send_files(sqs, s3, queue_url: str, count: int) -> list[str]:
    keys = []
    for i in range(count):
        key = f"dms/sales/item/20261122-1010{i:02d}000.csv"
        s3.put_object(Bucket=RAW, Key=key, Body=b"x")
        body = copy.deepcopy(event("s3_object_created_message.json"))
        body["detail"]["object"] |= {"key": key, "size": 10}
        body["detail"]["bucket"]["name"] = RAW
        sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(body), MessageGroupId=GROUP)
        keys.append(key)
    return keys


class InterruptedSqs:
    """The real (moto) SQS client, but `before(n)` runs just before the n-th ReceiveMessage: what another
    Lambda does while this drain is between two pages."""

    def __init__(self, sqs: Any, before: dict[int, Callable[[], None]]) -> None:
        self.sqs, self.before, self.receives = sqs, before, 0

    def receive_message(self, **request: Any) -> dict[str, Any]:
        self.receives += 1
        if self.receives in self.before:
            self.before[self.receives]()
        return self.sqs.receive_message(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sqs, name)


def limits() -> Any:
    from drain_config import DrainLimits  # on the path once `setup` loaded the drain

    return DrainLimits(wait_seconds=0, visibility_timeout_seconds=60)


def pending(s3) -> dict[str, dict]:
    listed = s3.list_objects_v2(Bucket=ARTIFACTS, Prefix="manifests/pending/").get("Contents", [])
    return {
        o["Key"]: json.loads(s3.get_object(Bucket=ARTIFACTS, Key=o["Key"])["Body"].read()) for o in listed
    }


def depth(sqs, url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def visible(sqs, url: str) -> int:
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def fence(s3, where, execution: str = EXECUTION) -> Any:
    from drain_fence import DrainFence  # on the path once `setup` loaded the drain

    return DrainFence(s3, ARTIFACTS, LEASE, execution, where.claim_key)


def test_a_drain_that_loses_the_lease_mid_run_writes_nothing_more(setup):
    """Given 15 queued files (two pages), When the lease passes to another execution while the drain is
    between its pages, Then the drain fails with LeaseLostError: its manifest holds only the first page, and
    the second page's messages are back in the queue at once (not deleted, not written anywhere, visible to
    the lease holder's drain without waiting out their visibility timeout)."""
    drain, where, s3, sqs = setup
    keys = send_files(sqs, s3, where.queue_url, 15)
    interrupted = InterruptedSqs(sqs, {2: lambda: hold_pipeline_lease(ARTIFACTS, OTHER)})

    with pytest.raises(LeaseLostError, match=r"held by .*other"):
        drain.drain(s3, interrupted, where, limits(), fence=fence(s3, where))

    ((_, manifest),) = pending(s3).items()
    assert [f["uri"] for f in manifest["files"]] == [f"s3://{RAW}/{k}" for k in keys[:10]]
    assert visible(sqs, where.queue_url) == 5


def test_a_retried_drain_racing_the_original_takes_over_and_the_original_stops(setup):
    """Given a drain of the lease holder that wrote its first page, When a retry of that drain (same
    execution) runs before the original's second page, Then the retry hands out the original's manifest
    (resumed), and the original fails with LeaseLostError without writing a second manifest: one batch."""
    drain, where, s3, sqs = setup
    keys = send_files(sqs, s3, where.queue_url, 15)
    retried: dict[str, Any] = {}

    def retry() -> None:
        retried.update(drain.drain(s3, sqs, where, limits(), fence=fence(s3, where)))

    interrupted = InterruptedSqs(sqs, {2: retry})
    with pytest.raises(LeaseLostError, match="another drain took over"):
        drain.drain(s3, interrupted, where, limits(), fence=fence(s3, where))

    ((key, manifest),) = pending(s3).items()
    assert (retried["manifest_key"], retried["resumed"], retried["file_count"]) == (key, True, 10)
    assert [f["uri"] for f in manifest["files"]] == [f"s3://{RAW}/{k}" for k in keys[:10]]
    assert retried["manifest_etag"] == s3.head_object(Bucket=ARTIFACTS, Key=key)["ETag"]


def test_a_manifest_changed_under_a_drain_is_not_overwritten(setup):
    """Given a drain without the lease fence (the manifest's version alone), When another writer rewrites its
    manifest between two pages, Then the drain's next write is refused (If-Match): LeaseLostError, and the
    other writer's manifest stands."""
    drain, where, s3, sqs = setup
    send_files(sqs, s3, where.queue_url, 15)

    def rewrite() -> None:
        ((key, manifest),) = pending(s3).items()
        s3.put_object(Bucket=ARTIFACTS, Key=key, Body=json.dumps(manifest | {"attempts": 2}).encode())

    with pytest.raises(LeaseLostError, match="changed or removed by another drain"):
        drain.drain(s3, InterruptedSqs(sqs, {2: rewrite}), where, limits())

    ((_, manifest),) = pending(s3).items()
    assert (manifest["attempts"], len(manifest["files"])) == (2, 10)


@pytest.mark.parametrize("body", [b"", b"not json", b"[1, 2]", b"null", b'{"holder": 7}'])
def test_a_corrupt_lease_object_is_a_lease_lost_error_naming_it(setup, load_handler, body):
    """Given the lease object is empty, not JSON, a list, null or names no holder, When the drain or the
    acknowledge runs, Then each fails with LeaseLostError naming the object (not a JSONDecodeError or
    AttributeError from deep inside), having written nothing."""
    drain, where, s3, sqs = setup
    send_files(sqs, s3, where.queue_url, 1)
    s3.put_object(Bucket=ARTIFACTS, Key=LEASE, Body=body)

    with pytest.raises(LeaseLostError, match=f"s3://{ARTIFACTS}/{LEASE}"):
        drain.drain(s3, sqs, where, limits(), fence=fence(s3, where))
    assert pending(s3) == {} and depth(sqs, where.queue_url) == 1

    s3.put_object(Bucket=ARTIFACTS, Key="manifests/pending/20261122T101010123456Z-3f2a9c1d.json", Body=b"{}")
    ack = load_handler("acknowledge", ARTIFACTS_BUCKET=ARTIFACTS)
    import ack as ack_module

    with pytest.raises(ack_module.LeaseLostError, match=f"s3://{ARTIFACTS}/{LEASE}"):
        ack.handler(event("acknowledge.json"), FakeContext())


# ------------------------------------------------------------------------------------------ acknowledge
RUN_ID = "20261122T101010123456Z-3f2a9c1d"
PENDING = f"manifests/pending/{RUN_ID}.json"
DONE = f"manifests/done/{RUN_ID}.json"


@pytest.fixture
def ack_app(aws, load_handler):
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=ARTIFACTS)
    handed_out = s3.put_object(
        Bucket=ARTIFACTS, Key=PENDING, Body=json.dumps({"version": 1, "run_id": RUN_ID, "files": []})
    )
    assert handed_out["ETag"] == event("acknowledge.json")["manifest_etag"]
    hold_pipeline_lease(ARTIFACTS, EXECUTION)
    app = load_handler("acknowledge", ARTIFACTS_BUCKET=ARTIFACTS)
    import ack

    return app, ack, s3


def keys(s3, prefix: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=ARTIFACTS, Prefix=prefix).get("Contents", [])]


def test_a_manifest_changed_since_it_was_handed_out_is_not_retired(ack_app):
    """Given the CDC run read the manifest as handed out, When a drain that lost the lease wrote 30 more
    files into it afterwards, Then the acknowledge refuses with LeaseLostError: the manifest stays pending
    (its files are applied by a later run), nothing is in done/."""
    app, ack, s3 = ack_app
    more = {"version": 1, "run_id": RUN_ID, "files": [{"uri": f"s3://raw/{i}.csv"} for i in range(30)]}
    s3.put_object(Bucket=ARTIFACTS, Key=PENDING, Body=json.dumps(more).encode())

    with pytest.raises(ack.LeaseLostError, match="changed since the drain handed it out"):
        app.handler(event("acknowledge.json"), FakeContext())

    assert (keys(s3, "manifests/pending/"), keys(s3, "manifests/done/")) == ([PENDING], [])


def test_only_the_lease_holder_retires_a_batch(ack_app):
    """Given the lease passed to another execution, When the old execution acknowledges, Then LeaseLostError:
    nothing is retired."""
    app, ack, s3 = ack_app
    hold_pipeline_lease(ARTIFACTS, OTHER)

    with pytest.raises(ack.LeaseLostError, match="held by"):
        app.handler(event("acknowledge.json"), FakeContext())

    assert (keys(s3, "manifests/pending/"), keys(s3, "manifests/done/")) == ([PENDING], [])


def report(**changes: Any) -> dict[str, Any]:
    table = {"table": "sales.item", "error": None, "inserted_or_updated": 1, "deleted": 0}
    return {"run_id": RUN_ID, "job": "cdc", "error": None, "tables": [table], "totals": {}} | changes


REFUSED = {
    "a FAILED job run": ({"JobRunState": "FAILED"}, None, "ended FAILED"),
    "a TIMEOUT job run": ({"JobRunState": "TIMEOUT"}, None, "ended TIMEOUT"),
    "a run report with an error": (None, report(error="Py4JJavaError: boom"), "has an error"),
    "a run report with a failed table": (
        None,
        report(tables=[{"table": "sales.item", "error": None}, {"table": "sales.store", "error": "Schema"}]),
        "failed tables: sales.store",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_batch_its_input_says_was_not_applied_is_not_retired(ack_app, case):
    """Given the acknowledge's input says the run did not apply the batch (the Glue run's state, the run
    report's error or a failed table), When it runs, Then RunNotAppliedError with the reason: the manifest
    stays pending, nothing is in done/."""
    app, ack, s3 = ack_app
    glue_run, run_report, reason = REFUSED[case]
    if run_report is not None:
        s3.put_object(Bucket=ARTIFACTS, Key=f"manifests/reports/{RUN_ID}.json", Body=json.dumps(run_report))
    request = event("acknowledge.json") | ({"glue_run": glue_run} if glue_run else {})

    with pytest.raises(ack.RunNotAppliedError, match=reason):
        app.handler(request, FakeContext())

    assert (keys(s3, "manifests/pending/"), keys(s3, "manifests/done/")) == ([PENDING], [])


def test_a_succeeded_run_is_retired_once_and_a_retry_finds_it_done(ack_app):
    """Given a run that succeeded (state and report), When acknowledged twice, Then retired once."""
    app, _, s3 = ack_app
    s3.put_object(Bucket=ARTIFACTS, Key=f"manifests/reports/{RUN_ID}.json", Body=json.dumps(report()))
    request = event("acknowledge.json") | {"glue_run": {"JobRunState": "SUCCEEDED", "ExecutionTime": 3}}

    assert app.handler(request, FakeContext())["already"] is False
    assert app.handler(request, FakeContext())["already"] is True
    assert (keys(s3, "manifests/pending/"), keys(s3, "manifests/done/")) == ([], [DONE])


@pytest.mark.parametrize("missing", ["manifest_etag", "execution_arn"])
def test_a_batch_acknowledge_without_the_handed_out_version_or_the_execution_is_refused(ack_app, missing):
    from pydantic import ValidationError

    app, _, s3 = ack_app
    request = {k: v for k, v in event("acknowledge.json").items() if k != missing}

    with pytest.raises(ValidationError):
        app.handler(request, FakeContext())
    assert keys(s3, "manifests/pending/") == [PENDING]


class NoConditionalDelete:
    """S3 where DeleteObject If-Match is not implemented (LocalStack 2026.3 answers 501)."""

    def __init__(self, s3: Any) -> None:
        self.s3 = s3

    def delete_object(self, **request: Any) -> Any:
        if "IfMatch" in request:
            raise ClientError({"Error": {"Code": "NotImplemented", "Message": "x"}}, "DeleteObject")
        return self.s3.delete_object(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.s3, name)


def test_without_conditional_deletes_a_changed_manifest_is_still_not_deleted(ack_app):
    """Given S3 without conditional deletes, When the manifest is unchanged, Then it is deleted; When it
    changed since its ETag was read, Then it is not deleted (False) and stays. (The conditional delete every
    function uses: lake_contracts.s3, imported by the acknowledge.)"""
    _, ack, s3 = ack_app
    etag = s3.head_object(Bucket=ARTIFACTS, Key=PENDING)["ETag"]
    s3.put_object(Bucket=ARTIFACTS, Key=PENDING, Body=b'{"changed": true}')
    assert ack.delete_if_unchanged(NoConditionalDelete(s3), ARTIFACTS, PENDING, etag) is False
    assert keys(s3, "manifests/pending/") == [PENDING]

    current = s3.head_object(Bucket=ARTIFACTS, Key=PENDING)["ETag"]
    assert ack.delete_if_unchanged(NoConditionalDelete(s3), ARTIFACTS, PENDING, current) is True
    assert keys(s3, "manifests/pending/") == []

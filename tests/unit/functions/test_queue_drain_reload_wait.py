"""Batches of a table DMS reloads wait for the reload (moto): no failed attempt, never moved aside, and
OnStuckBatch=stop cannot keep the reload from running."""

from __future__ import annotations

import json

import boto3

from tests.unit.functions.conftest import FakeContext, drain_request
from tests.unit.functions.test_queue_drain_hardening import (  # noqa: F401 - fixtures
    ARTIFACTS,
    RAW,
    RUN_ID,
    body_for,
    drain_app,
    keys_under,
    manifest_at,
    mark_full_load,
    queue_depth,
    queues,
    send,
)

ITEM_CDC = "dms/sales/item/20261122-090000000.csv"
ITEM_LOAD = "dms/sales/item/LOAD00000001.csv"
OTHER_CDC = "dms/sales/customer/20261122-111111000.csv"


def pending(run_id: str, keys: list[str], attempts: int) -> str:
    key = f"manifests/pending/{run_id}.json"
    document = {"version": 1, "run_id": run_id, "created_at": "2026-11-22T09:00:00Z", "attempts": attempts}
    document["files"] = [{"uri": f"s3://{RAW}/{k}", "size": 1} for k in keys]
    boto3.client("s3").put_object(Bucket=ARTIFACTS, Key=key, Body=json.dumps(document).encode())
    return key


def request_reload(table: str) -> str:
    key = f"manifests/reloads/{table}.json"
    document = {"version": 1, "table": table, "files": [f"s3://{RAW}/{ITEM_LOAD}"], "attempts": 0}
    boto3.client("s3").put_object(Bucket=ARTIFACTS, Key=key, Body=json.dumps(document).encode())
    return key


def stop_policy_app(queues, load_handler):  # noqa: F811 - the fixture's value
    _, queue_url, dlq_url = queues
    return load_handler(
        "queue_drain",
        QUEUE_URL=queue_url,
        DEAD_LETTER_QUEUE_URL=dlq_url,
        ARTIFACTS_BUCKET=ARTIFACTS,
        RAW_BUCKET=RAW,
        RAW_PREFIX="dms",
        MAX_MANIFEST_ATTEMPTS="3",
        ON_STUCK_BATCH="stop",
    )


def test_a_batch_of_a_table_with_a_reload_request_waits_for_it_without_counting_attempts(
    queues,  # noqa: F811
    load_handler,
):
    """Given OnStuckBatch=stop, a pending batch of sales.item that failed 3 times (the maximum) and a
    reload request of sales.item, When drained, Then the batch is held (not handed out, not moved aside,
    no StuckBatchError), its attempts reset; once the reload ran (request retired), it is handed out again
    as attempt 1."""
    app = stop_policy_app(queues, load_handler)
    key = pending(RUN_ID, [ITEM_CDC], attempts=3)
    request = request_reload("sales.item")

    held = app.handler(drain_request(), FakeContext())

    assert (held["has_work"], held["held_for_reload"], held["reloads_pending"]) == (
        False,
        [key],
        ["sales.item"],
    )
    assert keys_under("manifests/pending/") == [key] and keys_under("manifests/failed/") == []
    assert manifest_at(key)["attempts"] == 0
    boto3.client("s3").delete_object(Bucket=ARTIFACTS, Key=request)  # the reload ran: RetireReloads
    after = app.handler(drain_request(), FakeContext())
    assert (after["manifest_key"], after["resumed"], after["attempt"]) == (key, True, 1)


def test_a_batch_whose_files_a_reload_removed_waits_while_its_load_files_are_still_queued(
    queues,  # noqa: F811
    load_handler,
):
    """Given OnStuckBatch=stop and a batch of sales.item (created 09:00) that failed 3 times because DMS
    reloaded the table: its CDC file is gone, a LOAD file was written since, and that file's event is still
    in the queue behind the batch,
    When drained, Then the batch is held (no StuckBatchError, attempts reset), the queue is read and the
    reload request recorded, so the state machine's CheckReloads can run the reload."""
    sqs, queue_url, _ = queues
    app = stop_policy_app(queues, load_handler)
    mark_full_load()
    key = pending(RUN_ID, [ITEM_CDC], attempts=3)  # its file never written: removed by the reload
    send(sqs, queue_url, body_for(ITEM_LOAD, time="2026-11-22T10:30:00Z"))

    result = app.handler(drain_request(), FakeContext())

    assert (result["has_work"], result["held_for_reload"], result["reloads_pending"]) == (
        False,
        [key],
        ["sales.item"],
    )
    assert manifest_at(key)["attempts"] == 0 and manifest_at(key)["waited_for_reload"] == ["sales.item"]
    assert keys_under("manifests/failed/") == [] and queue_depth(sqs, queue_url) == 0


def test_a_batch_whose_file_is_lost_without_a_reload_is_still_stuck(queues, load_handler):  # noqa: F811
    """Given OnStuckBatch=stop and a batch that failed 3 times whose file is gone with no LOAD file written
    since (lost, not reloaded), When drained, Then the drain stops on it as before (StuckBatchError)."""
    import pytest

    app = stop_policy_app(queues, load_handler)
    import pending_manifests  # the module the handler loaded

    pending(RUN_ID, [ITEM_CDC], attempts=3)
    with pytest.raises(pending_manifests.StuckBatchError, match="failed 3 times"):
        app.handler(drain_request(), FakeContext())


def test_a_new_batch_with_files_of_a_reloading_table_is_kept_pending_until_the_reload_ran(
    queues,  # noqa: F811
    drain_app,  # noqa: F811
):
    """Given a reload request of sales.item and CDC files of sales.item and sales.customer in the queue,
    When drained, Then they are recorded in a pending batch that is not handed out (attempts 0) and the
    messages leave the queue; after the reload, the next drain hands the batch out as attempt 1."""
    sqs, queue_url, _ = queues
    request = request_reload("sales.item")
    send(sqs, queue_url, body_for("dms/sales/item/20261122-111111000.csv"))
    send(sqs, queue_url, body_for(OTHER_CDC))

    first = drain_app.handler(drain_request(), FakeContext())

    [key] = keys_under("manifests/pending/")
    assert (first["has_work"], first["held_for_reload"]) == (False, [key])
    assert manifest_at(key)["attempts"] == 0 and len(manifest_at(key)["files"]) == 2
    assert queue_depth(sqs, queue_url) == 0
    boto3.client("s3").delete_object(Bucket=ARTIFACTS, Key=request)
    second = drain_app.handler(drain_request(), FakeContext())
    assert (second["manifest_key"], second["resumed"], second["attempt"], second["file_count"]) == (
        key,
        True,
        1,
        2,
    )

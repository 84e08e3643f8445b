"""The moved-aside batches' aging metric counts from what the requeue judges a batch by: its oldest file's
time (the name DMS gave it), not when the batch was drained (moto)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from lake_contracts.dms_files import cdc_file_name

ARTIFACTS = "dev-artifacts"
NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def put_failed(s3: Any, run_id: str, uris: list[str]) -> None:
    body = {"version": 1, "run_id": run_id, "created_at": "x", "attempts": 3}
    body["files"] = [{"uri": uri, "size": 1} for uri in uris]
    s3.put_object(Bucket=ARTIFACTS, Key=f"manifests/failed/{run_id}.json", Body=json.dumps(body).encode())


def test_the_oldest_moved_aside_batch_is_as_old_as_its_oldest_file(aws, load_handler) -> None:
    """Given two batches moved aside, both drained an hour ago: one of files written 2 days ago, one holding a
    file written 20 days ago (an outage, a re-send), and then a corrupt one drained 30 days ago,
    When the drain measures the oldest moved-aside batch,
    Then it is 20 days old (the aging alarm fires at half TombstoneRetentionDays of that, before the requeue
    would refuse it), not an hour; a batch without a readable file counts from its drain."""
    load_handler("queue_drain", QUEUE_URL="q", DEAD_LETTER_QUEUE_URL="d", ARTIFACTS_BUCKET=ARTIFACTS)
    from drain_config import Locations  # the drain's folder is on the path once its handler is loaded
    from pending_manifests import oldest_moved_aside_days

    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=ARTIFACTS)
    drained = (NOW - timedelta(hours=1)).strftime("%Y%m%dT%H%M%S%fZ")

    def cdc_uri(age: timedelta) -> str:
        return f"s3://raw/dms/sales/orders/{cdc_file_name((NOW - age).replace(tzinfo=None))}"

    put_failed(s3, f"{drained}-0000000a", [cdc_uri(timedelta(days=2))])
    put_failed(s3, f"{drained}-0000000b", [cdc_uri(timedelta(minutes=9)), cdc_uri(timedelta(days=20))])
    where = Locations(queue_url="q", dead_letter_queue_url="d", artifacts_bucket=ARTIFACTS)
    assert round(oldest_moved_aside_days(s3, where, NOW), 3) == 20.0

    corrupt = (NOW - timedelta(days=30)).strftime("%Y%m%dT%H%M%S%fZ")
    s3.put_object(Bucket=ARTIFACTS, Key=f"manifests/failed/{corrupt}-0000000c.json", Body=b"{not json")
    assert round(oldest_moved_aside_days(s3, where, NOW), 3) == 30.0

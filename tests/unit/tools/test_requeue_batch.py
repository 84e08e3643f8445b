"""tools.requeue_batch: a batch moved aside goes back in line with its attempts reset (moto, no network)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import boto3
import pytest

from tests.offline_aws import offline_aws
from tools import requeue_batch

BUCKET = "dev-artifacts"
RUN_ID = "20261124T101500000000Z-1a2b3c4d"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch):
    with offline_aws(monkeypatch):
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client


def test_a_failed_batch_goes_back_to_pending_with_its_attempts_reset_and_a_corrupt_one_is_refused(s3) -> None:
    """Given a batch the drain moved aside after 3 failed runs (its reason in the object's metadata) and a
    corrupt one, When the operator lists and requeues, Then the list names both with their reasons, the good
    batch is pending again with attempts 0 and its files unchanged, and the corrupt one is refused and stays."""
    manifest = {
        "version": 1,
        "run_id": RUN_ID,
        "created_at": "x",
        "attempts": 3,
        "files": [{"uri": "s3://raw/a.csv"}],
    }
    s3.put_object(
        Bucket=BUCKET,
        Key=f"manifests/failed/{RUN_ID}.json",
        Body=json.dumps(manifest).encode(),
        Metadata={"reason": "its CDC run failed 3 times"},
    )
    s3.put_object(
        Bucket=BUCKET, Key="manifests/failed/broken.json", Body=b"{not json", Metadata={"reason": "corrupt"}
    )

    batches = requeue_batch.failed_batches(s3, BUCKET)
    assert [(b.run_id, b.files, b.reason) for b in batches] == [
        (RUN_ID, 1, "its CDC run failed 3 times"),
        ("", -1, "corrupt"),
    ]
    target = requeue_batch.requeue(s3, BUCKET, batches[0], 35, now=datetime(2026, 11, 25, tzinfo=UTC))
    with pytest.raises(ValueError, match="corrupt"):
        requeue_batch.requeue(s3, BUCKET, batches[1])

    assert target == f"manifests/pending/{RUN_ID}.json"
    pending = json.loads(s3.get_object(Bucket=BUCKET, Key=target)["Body"].read())
    assert pending == manifest | {"attempts": 0}
    left = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="manifests/failed/")["Contents"]]
    assert left == ["manifests/failed/broken.json"]

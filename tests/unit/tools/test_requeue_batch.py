"""tools.requeue_batch: a batch moved aside goes back in line with its attempts reset (moto, no network)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from lake_contracts.dms_files import cdc_file_name

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


NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
RETENTION_DAYS = 35


def cdc_uri(age: timedelta, table: str = "customer") -> str:
    """A CDC file of `sales.<table>` named (by DMS, at its writing) `age` before NOW."""
    return f"s3://raw/dms/sales/{table}/{cdc_file_name((NOW - age).replace(tzinfo=None))}"


def put_failed(s3, run_id: str, uris: list[str]) -> None:
    manifest = {"version": 1, "run_id": run_id, "created_at": "x", "attempts": 3}
    body = manifest | {"files": [{"uri": uri, "size": 1} for uri in uris]}
    s3.put_object(Bucket=BUCKET, Key=f"manifests/failed/{run_id}.json", Body=json.dumps(body).encode())


def test_a_batch_is_judged_by_its_oldest_file_not_by_when_it_was_drained(s3) -> None:
    """Given batches all drained an hour before now (TombstoneRetentionDays 35): one whose files were all
    written just inside the retention (34 days 23 hours ago), one mixing recent files with one written 35 days
    and an hour ago, one whose oldest file was written exactly 35 days ago, and one of a LOAD file only (no
    file time: judged by its drain),
    When the operator requeues each,
    Then the batches with a file at or past the horizon are refused with an error naming that file and the
    horizon and stay moved aside; the others go back to pending. The listing shows each batch's oldest file."""
    drained = (NOW - timedelta(hours=1)).strftime("%Y%m%dT%H%M%S%fZ")
    inside = [cdc_uri(timedelta(days=34, hours=23)), cdc_uri(timedelta(days=1))]
    too_old = cdc_uri(timedelta(days=35, hours=1), "orders")
    mixed = [cdc_uri(timedelta(days=2)), too_old, cdc_uri(timedelta(minutes=5))]
    at_horizon = cdc_uri(timedelta(days=35))
    load_only = ["s3://raw/dms/sales/customer/LOAD00000001.csv"]
    batches = {"inside": inside, "mixed": mixed, "at-horizon": [at_horizon], "load-only": load_only}
    run_ids = {f"{drained}-{n:08x}": name for n, name in enumerate(batches)}
    for run_id, name in run_ids.items():
        put_failed(s3, run_id, batches[name])

    listed = {run_ids[b.run_id]: b for b in requeue_batch.failed_batches(s3, BUCKET)}
    assert {name: b.oldest_file for name, b in listed.items()} == {
        "inside": inside[0],
        "mixed": too_old,
        "at-horizon": at_horizon,
        "load-only": f"(drained as {listed['load-only'].run_id})",
    }
    outcomes = {}
    for name, batch in listed.items():
        try:
            requeue_batch.requeue(s3, BUCKET, batch, RETENTION_DAYS, now=NOW)
            outcomes[name] = "requeued"
        except requeue_batch.TooOldToRequeueError as error:
            outcomes[name] = str(error)

    horizon = "re-send horizon 2026-10-21 12:00:00 (TombstoneRetentionDays is 35)"
    assert outcomes["inside"] == outcomes["load-only"] == "requeued"
    assert too_old in outcomes["mixed"] and horizon in outcomes["mixed"]
    assert at_horizon in outcomes["at-horizon"] and horizon in outcomes["at-horizon"]
    left = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="manifests/failed/")["Contents"])
    assert left == sorted(listed[name].key for name in ("mixed", "at-horizon"))

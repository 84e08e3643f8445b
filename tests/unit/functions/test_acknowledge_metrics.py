"""The acknowledge step (moto): what it publishes from the CDC run's report, and what it refuses."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from tests.unit.functions.conftest import FakeContext, event, hold_pipeline_lease

ARTIFACTS = "dev-artifacts"
RUN_ID = "20261122T101010123456Z-3f2a9c1d"
PENDING = f"manifests/pending/{RUN_ID}.json"


@pytest.fixture
def ack_app(aws, load_handler):
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=ARTIFACTS)
    s3.put_object(
        Bucket=ARTIFACTS, Key=PENDING, Body=json.dumps({"version": 1, "run_id": RUN_ID, "files": []})
    )  # its ETag is the manifest_etag of events/acknowledge.json
    hold_pipeline_lease(ARTIFACTS, event("acknowledge.json")["execution_arn"])
    return load_handler("acknowledge", ARTIFACTS_BUCKET=ARTIFACTS)


def report(newest: str | None) -> dict:
    table = {"table": "sales.item", "error": None, "quarantined_records": 2, "quarantined_files": 1}
    table |= {"inserted_or_updated": 40, "deleted": 2, "records": 45}
    totals = {
        "files": 3,
        "records": 45,
        "inserted_or_updated": 40,
        "deleted": 2,
        "skipped_already_applied": 0,
    }
    totals |= {"quarantined_records": 2, "quarantined_files": 1}
    return {"run_id": RUN_ID, "job": "cdc", "tables": [table], "totals": totals, "newest_commit_ts": newest}


def put_report(document: dict | bytes) -> None:
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    boto3.client("s3").put_object(Bucket=ARTIFACTS, Key=f"manifests/reports/{RUN_ID}.json", Body=body)


def emitted(capsys) -> dict:
    """The EMF metrics document Powertools printed (CloudWatch reads it from the log)."""
    for line in capsys.readouterr().out.splitlines():
        if '"_aws"' in line:
            return json.loads(line)
    raise AssertionError("no metrics were emitted")


def test_the_run_report_becomes_metrics(ack_app, capsys):
    """Given the CDC run's report (42 changes, 2 quarantined records in 1 file, newest commit 90 s ago)
    and the Glue run's result, When the batch is acknowledged, Then ChangesApplied=42,
    QuarantinedRecords=2, QuarantinedFiles=1, LagSeconds≈90, CdcRunSeconds and CdcDpuSeconds are emitted."""
    newest = (datetime.now(UTC) - timedelta(seconds=90)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    put_report(report(newest))
    glue_run = {"Id": "jr_1", "ExecutionTime": 75, "DPUSeconds": 120.5, "Arguments": {"--manifest": "s3://x"}}

    result = ack_app.handler(event("acknowledge.json") | {"glue_run": glue_run}, FakeContext())

    metrics = emitted(capsys)
    assert (metrics["ChangesApplied"], metrics["QuarantinedRecords"], metrics["QuarantinedFiles"]) == (
        [42.0],
        [2.0],
        [1.0],
    )
    assert 89 <= metrics["LagSeconds"][0] < 120
    assert (metrics["CdcRunSeconds"], metrics["CdcDpuSeconds"], metrics["FilesApplied"]) == (
        [75.0],
        [120.5],
        [42.0],
    )
    assert result["already"] is False and result["published"]["ChangesApplied"] == 42


def test_without_newest_commit_no_lag_is_published(ack_app, capsys):
    put_report(report(None))
    ack_app.handler(event("acknowledge.json"), FakeContext())
    metrics = emitted(capsys)
    assert "LagSeconds" not in metrics and metrics["ChangesApplied"] == [42.0]


def test_what_a_failed_attempt_quarantined_is_published_by_the_retry_that_succeeds(ack_app, capsys):
    """Given a run whose first attempt quarantined 3 records and 1 file in one table and then failed on
    another, and whose retry skipped the first table (applied) so that its own totals count nothing,
    When the retried batch is acknowledged,
    Then QuarantinedRecords=3 and QuarantinedFiles=1 are published (the run-wide counts), not 0."""
    retried = report(None)
    retried["totals"] |= {"quarantined_records": 0, "quarantined_files": 0}
    retried |= {"run_quarantined_records": 3, "run_quarantined_files": 1}
    put_report(retried)

    ack_app.handler(event("acknowledge.json"), FakeContext())

    metrics = emitted(capsys)
    assert (metrics["QuarantinedRecords"], metrics["QuarantinedFiles"]) == ([3.0], [1.0])


@pytest.mark.parametrize("load_run_id", ["full-load-first-run", "reload-20261124T101010-3f2a9c1d"])
def test_what_a_full_load_or_reload_quarantined_is_published_and_no_batch_moves(ack_app, capsys, load_run_id):
    """Given the report of a full load (or a table reload) that quarantined 4 records in 2 files,
    When the step after the job publishes it (`load_run_id`),
    Then QuarantinedRecords=4 and QuarantinedFiles=2 are emitted for the quarantine alarm, nothing else,
    and no manifest is touched."""
    loaded = {"run_id": load_run_id, "job": "full-load", "tables": [], "newest_commit_ts": None}
    loaded["totals"] = {
        "inserted_or_updated": 1000,
        "deleted": 0,
        "quarantined_records": 4,
        "quarantined_files": 2,
    }
    boto3.client("s3").put_object(
        Bucket=ARTIFACTS, Key=f"manifests/reports/{load_run_id}.json", Body=json.dumps(loaded).encode()
    )

    result = ack_app.handler({"load_run_id": load_run_id}, FakeContext())

    metrics = emitted(capsys)
    assert (metrics["QuarantinedRecords"], metrics["QuarantinedFiles"]) == ([4.0], [2.0])
    assert "ChangesApplied" not in metrics and "FilesApplied" not in metrics
    assert result == {"run_id": load_run_id, "published": {"QuarantinedRecords": 4, "QuarantinedFiles": 2}}
    assert boto3.client("s3").list_objects_v2(Bucket=ARTIFACTS, Prefix="manifests/pending/")["KeyCount"] == 1


@pytest.mark.parametrize(
    "bad",
    [
        {"load_run_id": "../pending/x"},
        {"load_run_id": "full-load-a/b"},
        {"load_run_id": "full-load-x", "run_id": RUN_ID, "manifest_key": PENDING},
        {},
    ],
    ids=["path", "slash", "both kinds", "neither"],
)
def test_a_load_report_request_that_names_no_load_report_is_refused(ack_app, bad):
    """Given a request whose load run id is not a full load's or a reload's, or that mixes a batch and a
    load, or names neither, When handled, Then it is refused before any work."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        ack_app.handler(bad, FakeContext())


@pytest.mark.parametrize("broken", [None, b"{not json", b"[1]"], ids=["missing", "not JSON", "not an object"])
def test_a_missing_or_broken_report_never_fails_the_acknowledge(ack_app, capsys, caplog, broken):
    """Given no report (or an unreadable one), When acknowledged, Then the batch is retired, a warning is
    logged and no report metric is published."""
    if broken is not None:
        put_report(broken)

    result = ack_app.handler(event("acknowledge.json"), FakeContext())

    assert result["acknowledged"].startswith("manifests/done/") and result["published"] == {}
    assert "ChangesApplied" not in capsys.readouterr().out
    assert any(r.levelname == "WARNING" and "run report not published" in r.message for r in caplog.records)


@pytest.mark.parametrize(
    "bad",
    [
        {"run_id": "../../x"},
        {"run_id": "20261122T101010123456Z-3f2a9c1d", "manifest_key": "manifests/done/x.json"},
        {"manifest_key": "manifests/pending/20261122T101010123456Z-00000000.json"},
    ],
    ids=["run_id not a run id", "key of another folder", "key of another run"],
)
def test_an_acknowledge_of_something_else_than_the_runs_pending_manifest_is_refused(ack_app, bad):
    """Given a request whose run_id is not a drain's run id, or whose manifest key is not that run's pending
    manifest, When acknowledged, Then it is refused (validation or ManifestNotPendingError), nothing moves."""
    import ack
    from pydantic import ValidationError

    with pytest.raises((ValidationError, ack.ManifestNotPendingError)):
        ack_app.handler(event("acknowledge.json") | bad, FakeContext())
    assert "Contents" in boto3.client("s3").list_objects_v2(Bucket=ARTIFACTS, Prefix="manifests/pending/")


def test_dpu_seconds_without_auto_scaling_come_from_the_workers():
    import sys

    sys.path.insert(0, "functions/acknowledge")
    from ack import run_cost

    assert (
        run_cost({"ExecutionTime": 100, "NumberOfWorkers": 2, "WorkerType": "G.1X"})["CdcDpuSeconds"] == 200
    )
    assert run_cost({"ExecutionTime": 100, "MaxCapacity": 4.0})["CdcDpuSeconds"] == 400

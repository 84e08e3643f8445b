"""The DMS progress Lambda: full load done, still loading, or failed (an error, not an endless wait)."""

from __future__ import annotations

import boto3
import pytest

from tests.unit.functions.conftest import FakeContext, event


def task(status: str, percent: int, loading: int = 0, queued: int = 0, **extra: str) -> dict:
    return {
        "ReplicationTaskIdentifier": "devtoraw",
        "ReplicationTaskArn": "arn:aws:dms:us-east-1:123456789012:task:DEVTORAW",
        "Status": status,
        "ReplicationTaskStats": {
            "FullLoadProgressPercent": percent,
            "TablesLoading": loading,
            "TablesQueued": queued,
            "TablesLoaded": 3,
        },
        **extra,
    }


@pytest.fixture
def progress(load_handler):
    load_handler("dms_progress", DMS_TASK_ARN="arn:aws:dms:us-east-1:123456789012:task:DEVTORAW")
    import progress as module

    return module


def test_loading_then_complete(aws, progress):
    """Given a running task at 40% with tables loading, then at 100% with none, Then only the second is complete."""
    assert not progress.task_progress(task("running", 40, loading=2)).full_load_complete
    done = progress.task_progress(task("running", 100))
    assert done.full_load_complete and done.full_load_percent == 100


def test_a_full_load_only_task_that_stopped_after_finishing_is_complete(aws, progress):
    finished = task("stopped", 100, StopReason="Stop Reason FULL_LOAD_ONLY_FINISHED")
    assert progress.task_progress(finished).full_load_complete


@pytest.mark.parametrize(
    "broken",
    [
        task("failed", 35, LastFailureMessage="Last Error Table 'sales.customer' not found"),
        task("stopped", 60, StopReason="Stop Reason NORMAL"),
    ],
)
def test_failed_or_stopped_task_is_an_error_with_dms_reason(aws, progress, broken):
    with pytest.raises(progress.DmsTaskFailedError, match=r"devtoraw is (failed|stopped)"):
        progress.task_progress(broken)


def test_handler_reads_the_task_named_in_the_event(aws, load_handler):
    """Given a DMS task (moto), When the handler runs with events/dms_progress.json naming it,
    Then it returns the task's status and progress as a plain dict."""
    dms = boto3.client("dms")
    for kind in ("source", "target"):
        dms.create_endpoint(EndpointIdentifier=kind, EndpointType=kind, EngineName="s3")
    endpoints = {e["EndpointType"].lower(): e["EndpointArn"] for e in dms.describe_endpoints()["Endpoints"]}
    created = dms.create_replication_task(
        ReplicationTaskIdentifier="devtoraw",
        SourceEndpointArn=endpoints["source"],
        TargetEndpointArn=endpoints["target"],
        ReplicationInstanceArn="arn:aws:dms:us-east-1:123456789012:rep:INSTANCE",
        MigrationType="full-load-and-cdc",
        TableMappings='{"rules": []}',
    )["ReplicationTask"]
    app = load_handler("dms_progress", DMS_TASK_ARN="")
    request = event("dms_progress.json") | {"task_arn": created["ReplicationTaskArn"]}

    result = app.handler(request, FakeContext())

    assert result["task_arn"] == created["ReplicationTaskArn"]
    assert result["status"] == created["Status"]
    assert set(result) == {
        "task_arn",
        "status",
        "full_load_percent",
        "full_load_complete",
        "tables_loaded",
        "tables_loading",
        "tables_queued",
        "tables_errored",
    }


def test_handler_without_any_task_is_a_clear_error(aws, load_handler):
    app = load_handler("dms_progress", DMS_TASK_ARN="")
    with pytest.raises(ValueError, match="no DMS task"):
        app.handler(event("dms_progress_default_task.json"), FakeContext())

"""The DMS progress Lambda during CDC (action `health`) and a full load DMS errored on (TablesErrored).

A task that stops or fails during CDC writes no file, so nothing downstream notices; a table DMS
errored on during the full load has no LOAD file and was marked loaded and empty.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from tests.unit.functions.conftest import FakeContext

TASK_ARN = "arn:aws:dms:us-east-1:123456789012:task:DEVTORAW"


def task(status: str, migration: str = "full-load-and-cdc", errored: int = 0, **extra: Any) -> dict:
    return {
        "ReplicationTaskIdentifier": "devtoraw",
        "ReplicationTaskArn": TASK_ARN,
        "MigrationType": migration,
        "Status": status,
        "ReplicationTaskStats": {
            "FullLoadProgressPercent": 100,
            "TablesLoading": 0,
            "TablesQueued": 0,
            "TablesLoaded": 3 - errored,
            "TablesErrored": errored,
        },
        **extra,
    }


def statistics(schema: str, table: str, state: str) -> dict[str, Any]:
    return {
        "SchemaName": schema,
        "TableName": table,
        "TableState": state,
        "LastUpdateTime": datetime.now(UTC),
    }


@pytest.fixture
def progress(load_handler):
    load_handler("dms_progress", DMS_TASK_ARN=TASK_ARN)
    import progress as module

    return module


# ---------------------------------------------------------------- health during CDC
@pytest.mark.parametrize("status", ["running", "starting", "modifying", "stopping"])
def test_a_task_that_runs_or_is_on_its_way_is_healthy(aws, progress, status):
    health = progress.task_health(task(status))
    assert health.as_dict() == {"task_arn": TASK_ARN, "status": status, "tables_errored": 0}


@pytest.mark.parametrize(
    ("broken", "reason"),
    [
        (
            task(
                "failed", LastFailureMessage="Last Error Replication slot is full", StopReason="FATAL_ERROR"
            ),
            "devtoraw is failed during CDC: Last Error Replication slot is full; FATAL_ERROR",
        ),
        (
            task("stopped", StopReason="Stop Reason NORMAL"),
            "devtoraw is stopped during CDC: Stop Reason NORMAL",
        ),
        (task("deleting"), "devtoraw is deleting during CDC: no reason given"),
        # a full-load-and-cdc task never ends its CDC on its own: FULL_LOAD_ONLY_FINISHED is not an end here
        (
            task("stopped", StopReason="Stop Reason FULL_LOAD_ONLY_FINISHED"),
            "devtoraw is stopped during CDC: Stop Reason FULL_LOAD_ONLY_FINISHED",
        ),
    ],
)
def test_a_stopped_or_failed_task_is_an_error_with_dms_reason(aws, progress, broken, reason):
    with pytest.raises(progress.DmsTaskStoppedError) as raised:
        progress.task_health(broken)
    assert str(raised.value).startswith(f"DMS task {reason}. ")
    assert "skip_full_load" in str(raised.value)


def test_a_full_load_only_task_that_finished_is_its_normal_end(aws, progress):
    finished = task("stopped", migration="full-load", StopReason="Stop Reason FULL_LOAD_ONLY_FINISHED")
    assert progress.task_health(finished).status == "stopped"


def _moto_task() -> str:
    dms = boto3.client("dms")
    for kind in ("source", "target"):
        dms.create_endpoint(EndpointIdentifier=kind, EndpointType=kind, EngineName="s3")
    endpoints = {e["EndpointType"].lower(): e["EndpointArn"] for e in dms.describe_endpoints()["Endpoints"]}
    return dms.create_replication_task(
        ReplicationTaskIdentifier="devtoraw",
        SourceEndpointArn=endpoints["source"],
        TargetEndpointArn=endpoints["target"],
        ReplicationInstanceArn="arn:aws:dms:us-east-1:123456789012:rep:INSTANCE",
        MigrationType="full-load-and-cdc",
        TableMappings='{"rules": []}',
    )["ReplicationTask"]["ReplicationTaskArn"]


def test_the_handler_checks_health_then_fails_once_the_task_is_stopped(aws, load_handler):
    """Given a running task (moto), When the state machine asks for its health, Then it answers running;
    When the task is stopped, Then the same call raises DmsTaskStoppedError (the state machine's Fail state
    DmsTaskStopped carries its message)."""
    arn = _moto_task()
    boto3.client("dms").start_replication_task(
        ReplicationTaskArn=arn, StartReplicationTaskType="start-replication"
    )
    app = load_handler("dms_progress", DMS_TASK_ARN=arn)

    assert app.handler({"action": "health"}, FakeContext()) == {
        "task_arn": arn,
        "status": "running",
        "tables_errored": 0,
    }
    boto3.client("dms").stop_replication_task(ReplicationTaskArn=arn)
    with pytest.raises(sys.modules["progress"].DmsTaskStoppedError, match="devtoraw is stopped during CDC"):
        app.handler({"action": "health"}, FakeContext())


def test_an_unknown_action_is_refused_before_any_call(aws, load_handler):
    from aws_lambda_powertools.utilities.parser import ValidationError

    app = load_handler("dms_progress", DMS_TASK_ARN=TASK_ARN)
    with pytest.raises(ValidationError):
        app.handler({"action": "restart"}, FakeContext())


# ---------------------------------------------------------------- TablesErrored in the full load
def _stubbed(describe: dict[str, Any], pages: list[list[dict[str, Any]]]) -> tuple[Any, Stubber]:
    client = boto3.client("dms", region_name="us-east-1")
    stubber = Stubber(client)
    stubber.add_response(
        "describe_replication_tasks",
        {"ReplicationTasks": [describe]},
        {"Filters": [{"Name": "replication-task-arn", "Values": [TASK_ARN]}], "WithoutSettings": True},
    )
    for number, page in enumerate(pages):
        request: dict[str, Any] = {"ReplicationTaskArn": TASK_ARN, "MaxRecords": 500}
        if number:
            request["Marker"] = f"page-{number}"
        response: dict[str, Any] = {"ReplicationTaskArn": TASK_ARN, "TableStatistics": page}
        if number < len(pages) - 1:
            response["Marker"] = f"page-{number + 1}"
        stubber.add_response("describe_table_statistics", response, request)
    return client, stubber


def test_a_full_load_with_errored_tables_fails_the_wait_naming_them(aws, load_handler):
    """Given DMS reports 100% with TablesErrored=2 (the errored tables wrote no LOAD file), When the state
    machine asks for the full-load progress, Then it fails (not 'complete': those tables would be loaded
    empty) naming both tables, read over two pages of DescribeTableStatistics."""
    app = load_handler("dms_progress", DMS_TASK_ARN=TASK_ARN)
    client, stubber = _stubbed(
        task("running", errored=2),
        [
            [
                statistics("public", "customer", "Table completed"),
                statistics("public", "item", "Table error"),
            ],
            [statistics("public", "web_sales", "Table error")],
        ],
    )
    app.dms = client
    with stubber, pytest.raises(sys.modules["progress"].DmsTaskFailedError) as raised:
        app.handler({}, FakeContext())
    assert "errored on public.item, public.web_sales during its full load (TablesErrored=2)" in str(
        raised.value
    )
    stubber.assert_no_pending_responses()


def test_a_full_load_without_errored_tables_asks_no_table_statistics(aws, load_handler):
    app = load_handler("dms_progress", DMS_TASK_ARN=TASK_ARN)
    client, stubber = _stubbed(task("running"), [])
    app.dms = client
    with stubber:
        result = app.handler({}, FakeContext())
    assert (result["full_load_complete"], result["tables_errored"]) == (True, 0)


def test_errored_tables_dms_does_not_name_are_counted(aws, load_handler):
    app = load_handler("dms_progress", DMS_TASK_ARN=TASK_ARN)
    client, stubber = _stubbed(
        task("running", errored=1), [[statistics("public", "item", "Table completed")]]
    )
    app.dms = client
    with (
        stubber,
        pytest.raises(
            sys.modules["progress"].DmsTaskFailedError, match=r"errored on 1 table\(s\), not named by DMS"
        ),
    ):
        app.handler({}, FakeContext())

"""Table reloads during CDC (moto S3, a fake DMS): wait for DMS, run, retire; a failure backs off, never drops."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from lake_contracts.reload_requests import ReloadRequestStore

from tests.unit.functions.conftest import FakeContext, event

ARTIFACTS = "dev-artifacts"
TASK = "arn:aws:dms:us-east-1:123456789012:task:DEVTORAW"


class FakeDms:
    """DescribeTableStatistics / DescribeReplicationTasks answers, as DMS gives them."""

    def __init__(self, tables: dict[str, tuple[str, datetime | None]], failure: str = "") -> None:
        self.tables = tables
        self.failure = failure

    def describe_table_statistics(self, **request):
        assert request["ReplicationTaskArn"] == TASK
        statistics = []
        for name, (state, ended) in self.tables.items():
            schema, table = name.split(".")
            row = {"SchemaName": schema, "TableName": table, "TableState": state}
            if ended:
                row["FullLoadEndTime"] = ended
            statistics.append(row)
        return {"ReplicationTaskArn": TASK, "TableStatistics": statistics}

    def describe_replication_tasks(self, **request):
        return {"ReplicationTasks": [{"ReplicationTaskArn": TASK, "LastFailureMessage": self.failure}]}


@pytest.fixture
def reloads_app(aws, load_handler):
    boto3.client("s3").create_bucket(Bucket=ARTIFACTS)
    return load_handler("reloads", ARTIFACTS_BUCKET=ARTIFACTS, DMS_TASK_ARN=TASK)


def request_for(table: str, last_seen: str = "2026-11-22T10:31:00.000000Z", **extra) -> None:
    body = {
        "version": 1,
        "table": table,
        "files": [f"s3://raw/dms/{table.replace('.', '/')}/LOAD00000001.csv"],
    }
    body |= {"first_seen": "2026-11-22T10:30:00.000000Z", "last_seen": last_seen, "attempts": 0} | extra
    boto3.client("s3").put_object(
        Bucket=ARTIFACTS, Key=f"manifests/reloads/{table}.json", Body=json.dumps(body)
    )


def stored(table: str) -> dict | None:
    try:
        body = boto3.client("s3").get_object(Bucket=ARTIFACTS, Key=f"manifests/reloads/{table}.json")["Body"]
    except boto3.client("s3").exceptions.NoSuchKey:
        return None
    return json.loads(body.read())


AFTER = datetime(2026, 11, 22, 10, 31, 5, tzinfo=UTC)
BEFORE = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)


def test_only_tables_dms_finished_reloading_after_their_load_files_are_ready(reloads_app):
    """Given requests of four tables: one DMS completed after its newest LOAD file, one still loading, one
    completed only before (the previous load), one in error, When checked, Then only the first is ready
    (with the full-load job's --tables argument and a unique run id), the error carries DMS's reason."""
    for table in ("sales.item", "sales.customer", "sales.store", "sales.web_sales"):
        request_for(table)
    reloads_app.dms = FakeDms(
        {
            "sales.item": ("Table completed", AFTER),
            "sales.customer": ("Full load", None),
            "sales.store": ("Table completed", BEFORE),
            "sales.web_sales": ("Table error", None),
        },
        failure="Last Error ORA-00942: table or view does not exist",
    )

    result = reloads_app.handler(event("reloads_check.json"), FakeContext())
    again = reloads_app.handler(event("reloads_check.json"), FakeContext())

    assert (
        result["ready"] == ["sales.item"]
        and result["tables_argument"] == '["sales.item"]'  # JSON: the full-load job keeps names exactly
        and result["has_ready"]
    )
    assert result["checked"] == {"sales.item": "2026-11-22T10:31:00.000000Z"}
    assert {w["table"] for w in result["waiting"]} == {"sales.customer", "sales.store"}
    assert result["errored"][0]["table"] == "sales.web_sales"
    assert "ORA-00942" in result["errored"][0]["reason"]
    assert result["run_id"].startswith("reload-") and result["run_id"] != again["run_id"]
    assert result["report_uri"] == f"s3://{ARTIFACTS}/manifests/reports/{result['run_id']}.json"


def test_done_retires_the_checked_requests_idempotently_but_keeps_a_newer_reload(reloads_app):
    """Given two checked requests, one of which DMS reloaded again after the check (newer LOAD files),
    When the run is done (twice: a retried step), Then the first is retired and the newer one stays."""
    request_for("sales.item")
    request_for("sales.customer", last_seen="2026-11-22T10:45:00.000000Z")
    checked = {"sales.item": "2026-11-22T10:31:00.000000Z", "sales.customer": "2026-11-22T10:31:00.000000Z"}

    first = reloads_app.handler({"action": "done", "checked": checked}, FakeContext())
    second = reloads_app.handler({"action": "done", "checked": checked}, FakeContext())

    assert first == {"retired": ["sales.item"], "kept": ["sales.customer"], "set_aside": []}
    assert second == first
    assert stored("sales.item") is None and stored("sales.customer") is not None


def test_a_failed_reload_run_is_kept_and_retried_after_a_growing_backoff(reloads_app):
    """Given a ready table whose full-load run failed, When the failure is recorded, Then the request stays
    with the attempt and error, the next checks hold it back for 5 minutes, then it is ready again; after a
    second failure the wait doubles. Never dropped."""
    import reloads

    request_for("sales.item")
    dms = FakeDms({"sales.item": ("Table completed", AFTER)})
    store = ReloadRequestStore(ARTIFACTS)
    failed_at = datetime(2026, 11, 22, 11, 0, tzinfo=UTC)

    reloads.failed(boto3.client("s3"), store, ["sales.item"], "Glue: OutOfMemoryError", now=failed_at)
    held = reloads.check(boto3.client("s3"), dms, store, TASK, now=failed_at + timedelta(minutes=4))
    ready = reloads.check(boto3.client("s3"), dms, store, TASK, now=failed_at + timedelta(minutes=6))
    reloads.failed(boto3.client("s3"), store, ["sales.item"], "again", now=failed_at + timedelta(minutes=6))
    held_longer = reloads.check(boto3.client("s3"), dms, store, TASK, now=failed_at + timedelta(minutes=14))

    assert held["ready"] == [] and "retried at" in held["waiting"][0]["reason"]
    assert ready["ready"] == ["sales.item"]
    assert held_longer["ready"] == []
    assert stored("sales.item")["attempts"] == 2 and stored("sales.item")["last_error"] == "again"


def test_the_failed_event_file_records_an_attempt(reloads_app):
    request_for("sales.item")
    result = reloads_app.handler(event("reloads_failed.json"), FakeContext())
    assert result["recorded"][0]["table"] == "sales.item" and stored("sales.item")["attempts"] == 1


def test_the_done_event_file_retires_its_table(reloads_app):
    request_for("sales.item")
    assert reloads_app.handler(event("reloads_done.json"), FakeContext())["retired"] == ["sales.item"]


def test_no_request_means_nothing_ready_and_no_dms_call(reloads_app):
    class NoDms:
        def __getattr__(self, name):
            raise AssertionError("DMS was called")

    reloads_app.dms = NoDms()
    assert reloads_app.handler(event("reloads_check.json"), FakeContext())["has_ready"] is False


def test_a_table_name_that_is_not_schema_dot_table_is_refused(reloads_app):
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        reloads_app.handler({"action": "failed", "tables": ["../../etc"], "error": "x"}, FakeContext())

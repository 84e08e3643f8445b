"""The full-load marker (manifests/full-load.json) in the shapes its writers really produce, and the drain's
rule that a LOAD file created before the full-load job started was read by it (moto).

The state machine writes the marker with aws-sdk:s3:putObject, `"Body.$": "States.JsonToString($.full_load)"`,
`started_at` being `$$.State.EnteredTime`. AWS writes that string as is; LocalStack 2026.3 JSON-encodes it once
more (any non-bytes blob parameter, state_task_service.py `_to_boto_request_value`). The bytes below are the
ones a live LocalStack wrote (a Pass state with `$$.State.EnteredTime`, then that putObject): read as JSON they
are a string, not an object, and the drain took the marker for unreadable, so every LOAD file of the initial
full load became a table reload (the end-to-end reload test timed out reloading all six tables)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from tests.unit.functions.conftest import FakeContext, drain_request
from tests.unit.functions.test_lambda_names_and_keys import ARTIFACTS, drain_app, put_raw, queues, send

__all__ = ["drain_app", "queues"]  # fixtures, imported to be used here

MARKER = "manifests/full-load.json"
# What LocalStack 2026.3 stored for {"started_at": $$.State.EnteredTime} (probe against a live local stack)
LOCALSTACK_MARKER = b'"{\\"started_at\\":\\"2026-11-26T03:45:22.177403+00:00\\"}"'
LOCALSTACK_STARTED = datetime(2026, 11, 26, 3, 45, 22, 177403, tzinfo=UTC)


def entered_time(moment: datetime) -> str:
    """`$$.State.EnteredTime` as LocalStack renders it: isoformat with microseconds and +00:00."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def marker_body(started: datetime, writer: str) -> bytes:
    """The marker's bytes as `writer` stores them for the state machine's putObject."""
    text = json.dumps({"started_at": entered_time(started)}, separators=(",", ":"))  # States.JsonToString
    return {"aws": text, "localstack": json.dumps(text)}[writer].encode()


def event_time(moment: datetime) -> str:
    """An EventBridge event's `time`: whole seconds, Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def written(key: str) -> datetime:
    """The object's LastModified as a HEAD answers it (whole seconds)."""
    return boto3.client("s3").head_object(Bucket="dev-raw-123456789012-us-east-1", Key=key)["LastModified"]


def load_marker_module(drain_app):
    """functions/queue_drain/full_load_marker.py as the `drain_app` fixture imported it."""
    return sys.modules["full_load_marker"]


def test_the_marker_as_localstack_writes_it_is_read(drain_app):
    """Given the exact bytes LocalStack's Step Functions wrote for the marker, When read, Then the drain gets
    the full-load job's start (not None, which makes every LOAD file a reload)."""
    marker = load_marker_module(drain_app)

    assert marker.read_full_load_marker(LOCALSTACK_MARKER) == LOCALSTACK_STARTED


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (b'{"started_at":"2026-11-26T03:45:22.177403+00:00"}', LOCALSTACK_STARTED),  # AWS: the string as is
        (b'{"started_at": "2026-11-26T03:45:22.177403Z"}', LOCALSTACK_STARTED),
        (b'{"started_at": "2026-11-26T03:45:22.177403"}', LOCALSTACK_STARTED),  # naive: UTC
        (b"", None),
        (b"not json", None),
        (b"[]", None),
        (b'"not a marker"', None),
        (b'{"started": "2026-11-26T03:45:22Z"}', None),
        (b'{"started_at": 5}', None),
        (json.dumps(LOCALSTACK_MARKER.decode()).encode(), None),  # encoded twice over: not a writer's shape
    ],
)
def test_other_marker_shapes_are_read_or_unreadable(drain_app, document, expected):
    marker = load_marker_module(drain_app)

    assert marker.read_full_load_marker(document) == expected


@pytest.mark.parametrize("writer", ["aws", "localstack"])
def test_initial_load_files_are_skipped_and_a_later_one_is_a_reload_with_either_writers_marker(
    queues, drain_app, writer
):
    """Given the six tables' LOAD files written a few seconds before the full-load job started (the marker
    as `writer` stores it), When drained, Then all six count as read by the full-load job and none is a
    reload. Given then the marker of a full-load job that started a minute earlier than a new LOAD file,
    Then that file is its table's reload request."""
    sqs, queue_url, _ = queues
    tables = ["customer", "customer_address", "date_dim", "item", "time_dim", "web_sales"]
    keys = [f"dms/public/{table}/LOAD00000001.csv" for table in tables]
    for key in keys:
        put_raw(key)
        send(sqs, queue_url, key, time=event_time(written(key) + timedelta(seconds=1)))
    started = max(written(key) for key in keys) + timedelta(seconds=4, microseconds=177403)
    boto3.client("s3").put_object(Bucket=ARTIFACTS, Key=MARKER, Body=marker_body(started, writer))

    first = drain_app.handler(drain_request(), FakeContext())

    assert (first["skipped_full_load"], first["reload_files"], first["reloads_pending"]) == (6, 0, [])

    reloaded = "dms/public/item/LOAD00000002.csv"
    put_raw(reloaded)
    send(sqs, queue_url, reloaded, time=event_time(written(reloaded)))
    earlier = written(reloaded) - timedelta(minutes=1)
    boto3.client("s3").put_object(Bucket=ARTIFACTS, Key=MARKER, Body=marker_body(earlier, writer))

    second = drain_app.handler(drain_request(), FakeContext())

    assert (second["skipped_full_load"], second["reload_files"]) == (0, 1)
    assert second["reloads_pending"] == ["public.item"]


@pytest.mark.parametrize(
    ("started_after_written", "skipped", "reloads"),
    [
        # LastModified's second is the marker's: written before or after the start within that second,
        # S3 cannot tell; it is a reload (may cost one, never loses a reload's rows)
        (timedelta(microseconds=0), 0, 1),
        (timedelta(microseconds=999_999), 0, 1),
        # LastModified a whole second before the marker's second: written before the job started
        (timedelta(seconds=1), 1, 0),
        # the marker before the file: a reload, also when its event is stamped seconds later
        (-timedelta(microseconds=1), 0, 1),
    ],
)
def test_a_load_file_in_the_markers_second_is_a_reload_one_a_second_earlier_is_skipped(
    queues, drain_app, started_after_written, skipped, reloads
):
    """Given a LOAD file whose HEAD says it was written in second S and whose event is stamped S+3, and the
    full-load job's start at S + `started_after_written`, When drained, Then it is skipped only when the
    start is in a later second than S."""
    sqs, queue_url, _ = queues
    key = "dms/public/item/LOAD00000001.csv"
    put_raw(key)
    send(sqs, queue_url, key, time=event_time(written(key) + timedelta(seconds=3)))
    started = written(key) + started_after_written
    boto3.client("s3").put_object(Bucket=ARTIFACTS, Key=MARKER, Body=marker_body(started, "localstack"))

    result = drain_app.handler(drain_request(), FakeContext())

    assert (result["skipped_full_load"], result["reload_files"]) == (skipped, reloads)

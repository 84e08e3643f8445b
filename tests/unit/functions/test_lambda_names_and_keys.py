"""Object keys of EventBridge events and table names in reload requests, end to end (moto).

An EventBridge "Object Created" event does not encode its key as S3 notifications do (docs/CONTRACTS.md,
"Object keys in events"): the drain percent-decodes it with `+` kept literal, and takes the reading of the key
that exists in the raw bucket; a key that exists under no reading is dead-lettered, never batched. A table
name the drain records a reload for (commas, spaces, a no-break space, unicode) is accepted by the reloads
function at every step, and the full-load job gets it exactly (a JSON array)."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import boto3
import pytest
from lake_contracts.names import decode_key, decode_name
from lake_contracts.reload_requests import ReloadRequestStore

from tests.unit.functions.conftest import FakeContext, drain_request, event, hold_pipeline_lease

ARTIFACTS = "dev-artifacts"
RAW = "dev-raw-123456789012-us-east-1"
GROUP = "dms-cdc-files"
TASK = "arn:aws:dms:us-east-1:123456789012:task:DEVTORAW"
FUNCTIONS = Path(__file__).resolve().parents[3] / "functions"

# How each source writes `detail.object.key` (lake_contracts/names.py, the comment above decode_key):
ENCODINGS = {
    # AWS (a recorded event): percent-encoding of a URL path; `+` and `:` are left as they are
    "aws path encoding": lambda key: quote(key, safe="/+:"),
    # LocalStack 2026.3 EventBridgeNotifier: urllib.parse.quote(key) (a `+` is %2B)
    "localstack quote": lambda key: quote(key),
    # moto 5.2: the key as is
    "moto unencoded": lambda key: key,
}
TABLES = ["plus+sign", "per%2Bcent", "with space", "ünïcödé", "colon:x"]


@pytest.fixture
def queues(aws):
    sqs = boto3.client("sqs")
    fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    dlq = sqs.create_queue(QueueName="dlq.fifo", Attributes=fifo)
    queue = sqs.create_queue(QueueName="cdc.fifo", Attributes=fifo)
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=ARTIFACTS)
    s3.create_bucket(Bucket=RAW)
    hold_pipeline_lease(ARTIFACTS, drain_request()["execution_arn"])
    return sqs, queue["QueueUrl"], dlq["QueueUrl"]


@pytest.fixture
def drain_app(queues, load_handler):
    _, queue_url, dlq_url = queues
    return load_handler(
        "queue_drain",
        QUEUE_URL=queue_url,
        DEAD_LETTER_QUEUE_URL=dlq_url,
        ARTIFACTS_BUCKET=ARTIFACTS,
        RAW_BUCKET=RAW,
        RAW_PREFIX="dms",
    )


def send(sqs, queue_url: str, encoded_key: str, time: str = "2026-11-22T10:10:10Z") -> None:
    body = copy.deepcopy(event("s3_object_created_message.json"))
    body["detail"]["object"] |= {"key": encoded_key, "size": 100}
    body["detail"]["bucket"]["name"] = RAW
    body["time"] = time
    sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(body), MessageGroupId=GROUP)


def put_raw(key: str) -> None:
    boto3.client("s3").put_object(Bucket=RAW, Key=key, Body=b"x")


def manifest_uris(key: str) -> list[str]:
    document = json.loads(boto3.client("s3").get_object(Bucket=ARTIFACTS, Key=key)["Body"].read())
    return [f["uri"] for f in document["files"]]


def dead_reasons(sqs, dlq_url: str) -> list[str]:
    found = sqs.receive_message(QueueUrl=dlq_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
    return [m["MessageAttributes"]["reason"]["StringValue"] for m in found.get("Messages", [])]


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_keys_with_plus_percent_space_colon_and_unicode_are_batched_by_their_real_key(
    queues, drain_app, encoding
):
    """Given CDC files of tables named `plus+sign`, `per%2Bcent`, `with space`, `ünïcödé` and `colon:x`
    in the raw bucket, and their events with the key encoded as AWS, LocalStack or moto encode it,
    When drained, Then the manifest names each file by its real key (nothing dead-lettered)."""
    sqs, queue_url, dlq_url = queues
    keys = [f"dms/sales/{table}/20261122-10101{i}000.csv" for i, table in enumerate(TABLES)]
    for key in keys:
        put_raw(key)
        send(sqs, queue_url, ENCODINGS[encoding](key))

    result = drain_app.handler(drain_request(), FakeContext())

    assert dead_reasons(sqs, dlq_url) == []
    assert manifest_uris(result["manifest_key"]) == [f"s3://{RAW}/{key}" for key in keys]


def test_the_decoding_rule_keeps_a_plus_and_decodes_percent_escapes():
    """Given keys as AWS encodes them in EventBridge events (space `%20`, `+` as is), When decoded by the
    rule alone, Then `+` stays a plus (the notification rule would make it a space)."""
    assert decode_key("dms/sales/plus+sign/a%20b.csv") == "dms/sales/plus+sign/a b.csv"
    assert decode_key("dms/sales/per%252Bcent/%C3%BC.csv") == "dms/sales/per%2Bcent/ü.csv"


def test_powertools_reading_of_the_key_is_not_the_eventbridge_rule_so_the_drain_decodes_it_itself():
    """Whether Powertools' S3 EventBridge model can replace `decode_key`. Given an event whose
    key AWS encoded as a URL path (`plus+sign`, a space as `%20`), When Powertools' data class reads the key,
    Then it applies the notification rule (`+` becomes a space), while its parser model
    (which the drain validates the event with) carries the key as sent, and the drain's parse gives the real
    key. So the drain keeps Powertools for the event and the shared rule (lake_contracts.names) for the key."""
    from aws_lambda_powertools.utilities.data_classes import S3EventBridgeNotificationEvent
    from aws_lambda_powertools.utilities.parser.models import S3EventNotificationEventBridgeModel

    file_events = _load("queue_drain", "file_events")
    body = copy.deepcopy(event("s3_object_created_message.json"))
    body["detail"]["object"] |= {"key": "dms/plus+sign/a%20b/20261122-101010000.csv", "size": 1}
    body["detail"]["bucket"]["name"] = RAW

    assert (
        S3EventBridgeNotificationEvent(body).detail.object.key == "dms/plus sign/a b/20261122-101010000.csv"
    )
    assert (
        S3EventNotificationEventBridgeModel.model_validate(body).detail.object.key
        == body["detail"]["object"]["key"]
    )
    assert (
        file_events.parse_file_event(json.dumps(body), RAW).key == "dms/plus+sign/a b/20261122-101010000.csv"
    )


def test_an_event_whose_object_exists_under_no_reading_of_its_key_is_dead_lettered(queues, drain_app):
    """Given an event naming a file that is not in the raw bucket (under any reading of its key) and one
    whose file is, When drained, Then the first goes to the DLQ with a reason naming the missing object,
    and the batch holds only the file that exists: no batch entry names a missing file."""
    sqs, queue_url, dlq_url = queues
    send(sqs, queue_url, "dms/sales/item/20261122-101010000.csv")  # never written
    put_raw("dms/sales/item/20261122-101011000.csv")
    send(sqs, queue_url, "dms/sales/item/20261122-101011000.csv")

    result = drain_app.handler(drain_request(), FakeContext())

    assert manifest_uris(result["manifest_key"]) == [f"s3://{RAW}/dms/sales/item/20261122-101011000.csv"]
    (reason,) = dead_reasons(sqs, dlq_url)
    assert reason.startswith(f"no object s3://{RAW}/dms/sales/item/20261122-101010000.csv")
    assert result["poison_messages"] == 1


def test_a_table_name_with_a_control_character_is_dead_lettered_not_recorded(queues, drain_app):
    """Given a LOAD file of a table whose name holds a tab (the jobs refuse control characters in names),
    When drained, Then it is dead-lettered with the reason and no reload request is written (one the
    reloads function could never retire)."""
    sqs, queue_url, dlq_url = queues
    put_raw("dms/sales/tab\tname/LOAD00000001.csv")
    send(sqs, queue_url, quote("dms/sales/tab\tname/LOAD00000001.csv"))

    result = drain_app.handler(drain_request(), FakeContext())

    assert result["reloads_pending"] == [] and result["poison_messages"] == 1
    assert "control characters" in dead_reasons(sqs, dlq_url)[0]


class FakeDms:
    """DMS reports every table completed after the LOAD files."""

    def __init__(self, tables: list[str]) -> None:
        self.tables = tables

    def describe_table_statistics(self, **request):
        ended = datetime(2026, 11, 22, 11, 0, tzinfo=UTC)
        rows = []
        for qualified in self.tables:
            schema, table = qualified.split(".", 1)
            rows.append({"SchemaName": schema, "TableName": table, "TableState": "Table completed"})
            rows[-1]["FullLoadEndTime"] = ended
        return {"TableStatistics": rows}

    def describe_replication_tasks(self, **request):
        return {"ReplicationTasks": []}


HOSTILE_TABLES = ["a,b", " x ", "no\u00a0break", "ünï code", "p+q%2B"]


def test_reload_requests_for_hostile_names_are_checked_run_and_retired_exactly(
    queues, drain_app, load_handler
):
    """Given LOAD files during CDC for tables named `a,b`, ` x ` (spaces at both ends), `no<NBSP>break`,
    `ünï code` and `p+q%2B`, When the drain records them, the reloads function checks them, the full-load
    job gets its --tables and the run is done, Then each request's key gives its name back, the --tables
    argument is a JSON array of the exact names, and every request is retired: none reloads forever."""
    sqs, queue_url, _ = queues
    for table in HOSTILE_TABLES:
        key = f"dms/sales/{table}/LOAD00000001.csv"
        put_raw(key)
        send(sqs, queue_url, quote(key))
    drained = drain_app.handler(drain_request(), FakeContext())
    qualified = sorted(f"sales.{t}" for t in HOSTILE_TABLES)
    assert drained["reloads_pending"] == qualified and drained["reload_files"] == len(HOSTILE_TABLES)

    reloads = load_handler("reloads", ARTIFACTS_BUCKET=ARTIFACTS, DMS_TASK_ARN=TASK)
    reloads.dms = FakeDms(qualified)
    checked = reloads.handler(event("reloads_check.json"), FakeContext())
    assert checked["ready"] == qualified and checked["set_aside"] == []
    assert json.loads(checked["tables_argument"]) == qualified  # what the full-load job parses

    done = reloads.handler({"action": "done", "checked": checked["checked"]}, FakeContext())
    assert done["retired"] == qualified
    left = boto3.client("s3").list_objects_v2(Bucket=ARTIFACTS, Prefix="manifests/reloads/")
    assert left.get("KeyCount", 0) == 0


def test_a_failed_reload_run_of_hostile_names_is_recorded_not_refused(queues, drain_app, load_handler):
    """Given reload requests of `sales.a,b` and `sales. x `, When their full-load run fails, Then the
    reloads function accepts the names and records the attempt on each (its backoff), refusing none."""
    sqs, queue_url, _ = queues
    for table in ("a,b", " x "):
        put_raw(f"dms/sales/{table}/LOAD00000001.csv")
        send(sqs, queue_url, quote(f"dms/sales/{table}/LOAD00000001.csv"))
    drain_app.handler(drain_request(), FakeContext())
    reloads = load_handler("reloads", ARTIFACTS_BUCKET=ARTIFACTS, DMS_TASK_ARN=TASK)

    failed = reloads.handler(
        {"action": "failed", "tables": ["sales.a,b", "sales. x "], "error": "x"}, FakeContext()
    )

    assert [(r["table"], r["attempts"]) for r in failed["recorded"]] == [("sales.a,b", 1), ("sales. x ", 1)]


def _load(function: str, module: str):
    spec = importlib.util.spec_from_file_location(
        f"_{function}_{module}", FUNCTIONS / function / f"{module}.py"
    )
    assert spec and spec.loader
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded
    spec.loader.exec_module(loaded)
    return loaded


@pytest.mark.parametrize("name", ["sales.item", "sales.a,b", "sales. x ", "s.no\u00a0b", "s.ü~%+/"])
def test_a_reload_request_is_keyed_by_its_table_in_ascii_and_reversibly(name):
    """The one store of reload requests (the drain writes them, the reloads function reads them) keys a table
    by an ASCII segment that decodes back to the exact name."""
    key = ReloadRequestStore(ARTIFACTS).key(name)
    segment = key.removeprefix("manifests/reloads/").removesuffix(".json")
    assert all(c.isascii() and (c.isalnum() or c in "._-%") for c in segment)
    assert decode_name(segment) == name


def test_a_request_an_older_drain_wrote_under_the_unencoded_name_is_moved_and_retired(aws, load_handler):
    """Given a reload request of `sales. x` written by the drain before names were encoded in keys
    (`manifests/reloads/sales. x.json`), When checked and done, Then it is ready under its name, moved to the
    encoded key, and retired: not reloaded on every loop."""
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=ARTIFACTS)
    legacy = {"version": 1, "table": "sales. x", "files": [], "last_seen": "2026-11-22T10:31:00.000000Z"}
    s3.put_object(Bucket=ARTIFACTS, Key="manifests/reloads/sales. x.json", Body=json.dumps(legacy).encode())
    reloads = load_handler("reloads", ARTIFACTS_BUCKET=ARTIFACTS, DMS_TASK_ARN=TASK)
    reloads.dms = FakeDms(["sales. x"])

    checked = reloads.handler(event("reloads_check.json"), FakeContext())
    listed = s3.list_objects_v2(Bucket=ARTIFACTS, Prefix="manifests/reloads/")["Contents"]
    assert checked["ready"] == ["sales. x"] and [o["Key"] for o in listed] == [
        "manifests/reloads/sales.%20x.json"
    ]

    done = reloads.handler({"action": "done", "checked": checked["checked"]}, FakeContext())
    assert done["retired"] == ["sales. x"]
    assert s3.list_objects_v2(Bucket=ARTIFACTS, Prefix="manifests/reloads/").get("KeyCount", 0) == 0


def test_a_load_file_written_before_the_full_load_started_is_skipped_even_if_its_event_is_stamped_later(
    queues, drain_app
):
    """Given the full-load job started a minute from now, and a LOAD file S3 wrote now whose EventBridge
    event is stamped two minutes from now (a busy emulator stamps an event when it sends it), When drained,
    Then the file counts as read by the full-load job (its LastModified), not as a reload of its table."""
    from datetime import timedelta

    sqs, queue_url, _ = queues
    key = "dms/sales/item/LOAD00000001.csv"
    put_raw(key)
    now = datetime.now(UTC)
    marker = {"started_at": (now + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
    boto3.client("s3").put_object(Bucket=ARTIFACTS, Key="manifests/full-load.json", Body=json.dumps(marker))
    send(sqs, queue_url, key, time=(now + timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ"))

    result = drain_app.handler(drain_request(), FakeContext())

    assert (result["skipped_full_load"], result["reload_files"], result["reloads_pending"]) == (1, 0, [])

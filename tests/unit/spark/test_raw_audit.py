"""Raw zone <-> ledger: a CDC file whose event never reached the queue is found, re-enqueued as
the event EventBridge would have delivered, counted and applied; nothing else is re-sent.

S3, SQS and CloudWatch are moto's; the storage layer's S3 client is moto's too (`storage._s3_client`), so
the Spark jobs read the raw zone through it as they read the local emulator's S3. The queue drain and
the acknowledge step are the Lambdas' own code (functions/queue_drain/, functions/acknowledge/ack.py)."""

from __future__ import annotations

import copy
import importlib
import importlib.util
import json
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType, SimpleNamespace

import boto3
import pytest
from lake_contracts.dms_files import cdc_file_name, change_seq
from lake_contracts.documents import Manifest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.apply.ledger import LedgerEntry, StateTables
from lakehouse.apply.quarantine import FileProblem, file_rejections, write_quarantine
from lakehouse.audit.consistent import Commit, complete_before, exact_intervals, latest_common_moment
from lakehouse.audit.raw_files import RawFile, unapplied_files
from lakehouse.audit.raw_listing import unapplied_by_table
from lakehouse.audit.raw_zone import applied_everything_before, audit_raw_zone
from lakehouse.audit.resend_event import MESSAGE_GROUP_ID, encode_key, file_event, recovery_message
from lakehouse.io import storage
from lakehouse.io.iceberg import LOAD_ENDED, create_table
from lakehouse.reconcile.bisect import raw_caught_up
from pyspark.sql import types as T

from tests.offline_aws import offline_aws
from tests.support import rows_of, schema_of
from tools.dms_csv import write_dms_csv

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[3]
RAW = "dev-raw-123456789012-us-east-1"
ARTIFACTS = "dev-artifacts"
MANIFESTS = f"s3://{ARTIFACTS}/manifests"
COLUMNS = ["id", "name"]
SCHEMA = schema_of(
    {
        "sales.customer": (["id"], [("id", "int"), ("name", "varchar(40)")]),
        "sales.orders": (["id"], [("id", "int"), ("name", "varchar(40)")]),
        "sales.order items+%é": (["id"], [("id", "int"), ("name", "varchar(40)")]),
    }
)
# Keys S3 encodes in its events: a space, a plus, a percent sign, non-ASCII letters, an escape-like text.
AWKWARD_KEYS = [
    "dms/sales/order items+%é/20261122-100006000.csv",
    "dms/sales/a+b%20c d/20261122-100007000.csv",
    "dms/sal es/ünï+cødé%2B/2026/11/22/20261122-100008000.csv.gz",
    "dms/sales/customer/20261122-100009000.parquet",
]


def _module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def drain_code() -> SimpleNamespace:
    """The drain's own modules, imported by their names from its folder (as on Lambda): its event parser, its
    locations and limits, and the drain."""
    folder = str(REPO / "functions" / "queue_drain")
    sys.path.insert(0, folder)
    try:
        drain, drain_config, file_events = (
            importlib.import_module(name) for name in ("drain", "drain_config", "file_events")
        )
    finally:
        sys.path.remove(folder)
    return SimpleNamespace(
        drain=drain.drain,
        Locations=drain_config.Locations,
        DrainLimits=drain_config.DrainLimits,
        parse_file_event=file_events.parse_file_event,
    )


@pytest.fixture(scope="module")
def ack_code() -> ModuleType:
    return _module(REPO / "functions" / "acknowledge" / "ack.py", "acknowledge_ack_for_raw_audit")


@pytest.fixture
def aws(monkeypatch, tmp_path):
    with offline_aws(monkeypatch):
        s3 = boto3.client("s3")
        for bucket in (RAW, ARTIFACTS):
            s3.create_bucket(Bucket=bucket)
        sqs = boto3.client("sqs")
        fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
        queue = sqs.create_queue(QueueName="cdc-files.fifo", Attributes=fifo)["QueueUrl"]
        dlq = sqs.create_queue(QueueName="cdc-files-dlq.fifo", Attributes=fifo)["QueueUrl"]
        # The jobs' S3 client (storage.py) is moto's: inputs are staged through it as from the local emulator.
        monkeypatch.setattr(storage, "_s3_client", lambda endpoint_url: s3)
        yield s3, sqs, queue, dlq


@pytest.fixture
def config(lake_config, aws, tmp_path):
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA.to_dict()))
    return replace(
        lake_config,
        schema_file=str(schema_file),
        s3_endpoint_url="http://moto.invalid",  # stage S3 inputs for the local Spark (through moto)
        staging_dir=str(tmp_path / "staging"),
    )


def put(s3, key: str, text: str = "Op,id\nI,1\n") -> str:
    s3.put_object(Bucket=RAW, Key=key, Body=text.encode())
    return f"s3://{RAW}/{key}"


def put_manifest(s3, folder: str, run_id: str, uris: list[str]) -> None:
    document = {
        "version": 1,
        "run_id": run_id,
        "created_at": "",
        "attempts": 1,
        "files": [{"uri": u} for u in uris],
    }
    s3.put_object(
        Bucket=ARTIFACTS, Key=f"manifests/{folder}/{run_id}.json", Body=json.dumps(document).encode()
    )


def queued(sqs, queue: str) -> list[dict]:
    messages = []
    while page := sqs.receive_message(
        QueueUrl=queue, MaxNumberOfMessages=10, AttributeNames=["MessageGroupId"], VisibilityTimeout=0
    ).get("Messages", []):
        messages += page
        for message in page:
            sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
    return messages


def audit(
    spark, config, queue: str, sqs, grace: timedelta, now: datetime, tombstone_retention_days: float = 36500
):
    """The audit of the raw zone, its SQS and CloudWatch clients moto's (the config's endpoint is not AWS); a
    retention of a century unless a test is about it (the files' names are fixed days)."""
    return audit_raw_zone(
        spark,
        config,
        f"s3://{RAW}/dms",
        MANIFESTS,
        queue,
        grace,
        sqs,
        now,
        cloudwatch_client=boto3.client("cloudwatch"),
        tombstone_retention_days=tombstone_retention_days,
    )


def metric_sum(name: str) -> float:
    points = boto3.client("cloudwatch").get_metric_statistics(
        Namespace="DmsIcebergLake",
        MetricName=name,
        Dimensions=[{"Name": "service", "Value": "raw-audit"}],
        StartTime=datetime.now(UTC) - timedelta(hours=1),
        EndTime=datetime.now(UTC) + timedelta(hours=1),
        Period=3600,
        Statistics=["Sum"],
    )["Datapoints"]
    return sum(p["Sum"] for p in points)


def test_only_the_lost_files_are_re_enqueued_as_the_events_the_drain_reads(spark, config, aws, drain_code):
    """Given CDC files in the raw zone that are applied (ledger), pending in a manifest, in a moved-aside
    manifest, quarantined as a whole file, superseded by a reload of their table, younger than the grace
    period, plus four whose events were lost (keys S3 must escape) and a LOAD file and a non-DMS key,
    When the raw zone is audited,
    Then exactly the four lost files are re-enqueued, in one FIFO group, as events the drain's own parser
    turns back into the same keys, the drain puts exactly them in its next manifest, FilesRecovered is 4,
    and each other file is counted where it belongs."""
    s3, sqs, queue, dlq = aws
    now = datetime.now(UTC) + timedelta(hours=2)  # every object below landed well over the grace ago
    young_name = (now - timedelta(minutes=5)).strftime("%Y%m%d-%H%M%S") + "000.csv"
    applied = put(s3, "dms/sales/customer/20261122-100001000.csv")
    pending = put(s3, "dms/sales/customer/20261122-100002000.csv")
    moved_aside = put(s3, "dms/sales/customer/20261122-100003000.csv")
    quarantined = put(s3, "dms/sales/customer/20261122-100004000.csv")
    superseded = put(s3, "dms/sales/orders/20261122-090000000.csv")
    after_reload = put(s3, "dms/sales/orders/20261122-100000000.csv")  # written after the reload: lost
    young = put(s3, f"dms/sales/customer/{young_name}")
    lost = [after_reload] + [put(s3, key) for key in AWKWARD_KEYS]
    put(s3, "dms/sales/customer/LOAD00000001.csv")
    put(s3, "dms/README.txt")
    state = StateTables(spark, config)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {config.catalog_name}.{config.clean_database}")
    state.ensure()
    state.record([LedgerEntry("sales.customer", applied.rsplit("/", 1)[1], applied, "run-1", 1)])
    write_quarantine(
        spark,
        config.quarantine,
        "run-2",
        "cdc",
        [file_rejections(spark, [FileProblem("sales.customer", quarantined, "not gzip")])],
    )
    create_table(
        spark,
        config.clean_table("sales_orders"),
        T.StructType([T.StructField("id", T.IntegerType())]),
        extra_properties={LOAD_ENDED: "2026-11-22T09:30:00"},
    )
    put_manifest(s3, "pending", "20261122T100000000000Z-0000000a", [pending])
    put_manifest(s3, "failed", "20261122T090000000000Z-0000000b", [moved_aside])

    report = audit(spark, config, queue, sqs, timedelta(minutes=30), now)

    assert report.to_dict() | {"seconds": 0} == {
        "listed": 11,
        "applied": 1,
        "quarantined": 1,
        "superseded": 1,
        "pending": 1,
        "moved_aside": 1,
        "young": 1,
        "recovered": 5,
        "beyond_retention": 0,
        "recovered_keys": sorted(lost, key=lambda u: (u.rsplit("/", 1)[1], u)),
        "moved_aside_keys": [moved_aside],
        "beyond_retention_keys": [],
        "resend_horizon": report.resend_horizon,
        "recovery_round": report.recovery_round,
        "seconds": 0,
    }
    assert young not in report.recovered_keys and superseded not in report.recovered_keys
    messages = queued(sqs, queue)
    assert {m["Attributes"]["MessageGroupId"] for m in messages} == {MESSAGE_GROUP_ID}
    parsed = [drain_code.parse_file_event(m["Body"], RAW, "dms") for m in messages]
    assert sorted((f.uri, f.kind) for f in parsed) == sorted((uri, "cdc") for uri in lost)
    assert metric_sum("FilesRecovered") == 5
    assert metric_sum("FilesPendingInFailedManifests") == 1

    # The drain's next batch is exactly the lost files (the messages above were taken: send them again).
    for message in messages:
        sqs.send_message(QueueUrl=queue, MessageBody=message["Body"], MessageGroupId=MESSAGE_GROUP_ID)
    where = drain_code.Locations(queue, dlq, ARTIFACTS, raw_bucket=RAW, raw_prefix="dms")
    s3.delete_object(Bucket=ARTIFACTS, Key="manifests/pending/20261122T100000000000Z-0000000a.json")
    result = drain_code.drain(s3, sqs, where, drain_code.DrainLimits(wait_seconds=0))
    manifest = json.loads(s3.get_object(Bucket=ARTIFACTS, Key=result["manifest_key"])["Body"].read())
    assert sorted(f["uri"] for f in manifest["files"]) == sorted(lost)
    assert result["poison_messages"] == 0


def test_a_retried_audit_sends_a_lost_file_once_per_round(spark, config, aws):
    """Given a lost file, When the audit runs twice in one recovery round (a retried job),
    Then the queue holds its event once (deterministic deduplication id); the next round sends it again."""
    s3, sqs, queue, _ = aws
    lost = put(s3, "dms/sales/customer/20261122-100001000.csv")
    now = datetime.now(UTC) + timedelta(hours=2)
    grace = timedelta(minutes=30)

    first = audit(spark, config, queue, sqs, grace, now)
    again = audit(spark, config, queue, sqs, grace, now + timedelta(seconds=1))

    assert first.recovered_keys == again.recovered_keys == [lost]
    assert len(queued(sqs, queue)) == 1
    later = audit(spark, config, queue, sqs, grace, now + grace)
    assert later.recovery_round == first.recovery_round + 1
    assert len(queued(sqs, queue)) == 1


def test_recovery_messages_decode_to_their_keys_through_the_drains_parser(drain_code):
    """Given keys with a space, `+`, `%`, an escape-looking `%2B`, non-ASCII letters and date folders,
    When each is sent as the recovery message, Then the drain's parser reads back exactly that key."""
    keys = [*AWKWARD_KEYS, "dms/s/t/20261122-100001000.csv", "dms/%41/100%/20261122-100001000.csv"]
    for key in keys:
        file = RawFile(f"s3://{RAW}/{key}", "x.y", key.rsplit("/", 1)[1], datetime(2026, 11, 22), 7)
        message = recovery_message(file, "https://sqs.us-east-1.amazonaws.com/123456789012/q.fifo", 3)

        found = drain_code.parse_file_event(message["MessageBody"], RAW, "dms")

        assert (found.bucket, found.key, found.size, found.kind) == (RAW, key, 7, "cdc")
        assert "+" not in json.loads(message["MessageBody"])["detail"]["object"]["key"]
        assert message["MessageGroupId"] == MESSAGE_GROUP_ID
    assert encode_key("a b+c%/é") == "a%20b%2Bc%25/%C3%A9"
    assert file_event(RAW, "k", 1, datetime(2026, 11, 22, 10, tzinfo=UTC))["time"] == "2026-11-22T10:00:00Z"


def test_unapplied_files_is_the_lost_files_only():
    """Given files known in each way and two unknown (one older, one younger than the grace period),
    Then only the older unknown one is unapplied; the ledger matches tables without regard to case."""
    at = datetime(2026, 11, 22, 10)

    def file(name: str, table: str = "Sales.Customer", minutes: int = 0) -> RawFile:
        return RawFile(
            f"s3://{RAW}/dms/{table.replace('.', '/')}/{name}", table, name, at + timedelta(minutes=minutes)
        )

    files = [
        file("a.csv"),
        file("b.csv"),
        file("c.csv"),
        file("d.csv", minutes=50),
        file("e.csv"),
        file("f.csv"),
    ]

    lost = unapplied_files(
        files,
        applied={("sales.customer", "a.csv")},
        pending={files[1].uri},
        now=at + timedelta(hours=1),
        grace=timedelta(minutes=30),
        moved_aside={files[2].uri},
        quarantined={files[4].uri},
    )

    assert lost == [files[5]]


def test_applied_everything_before_a_moment(spark, config, aws):
    """Given CDC files written before a moment: one applied, one superseded by a reload, one quarantined,
    one pending; and one written after the moment,
    Then not everything before the moment is applied until the pending one is in the ledger; the file after
    the moment never counts."""
    s3, _, _, _ = aws
    applied = put(s3, "dms/sales/customer/20261122-100001000.csv")
    pending = put(s3, "dms/sales/customer/20261122-100002000.csv")
    quarantined = put(s3, "dms/sales/customer/20261122-100003000.csv")
    put(s3, "dms/sales/orders/20261122-090000000.csv")  # superseded
    put(s3, "dms/sales/customer/20261122-110000000.csv")  # after the moment, applied never
    moment = datetime(2026, 11, 22, 10, 30, tzinfo=UTC)
    state = StateTables(spark, config)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {config.catalog_name}.{config.clean_database}")
    state.ensure()
    state.record([LedgerEntry("sales.customer", "20261122-100001000.csv", applied, "run-1", 1)])
    write_quarantine(
        spark,
        config.quarantine,
        "r",
        "cdc",
        [file_rejections(spark, [FileProblem("sales.customer", quarantined, "bad")])],
    )
    create_table(
        spark,
        config.clean_table("sales_orders"),
        T.StructType([T.StructField("id", T.IntegerType())]),
        extra_properties={LOAD_ENDED: "2026-11-22T09:30:00+00:00"},
    )

    assert not applied_everything_before(spark, config, f"s3://{RAW}/dms", moment)

    state.record([LedgerEntry("sales.customer", "20261122-100002000.csv", pending, "run-2", 2)])
    assert applied_everything_before(spark, config, f"s3://{RAW}/dms", moment)
    assert not applied_everything_before(spark, config, f"s3://{RAW}/dms", moment + timedelta(hours=1))


def dms_csv(rows: list[tuple[str, int, int, str | None]], moment: datetime) -> str:
    return write_dms_csv(COLUMNS, [(op, change_seq(seq), moment, (key, name)) for op, key, seq, name in rows])


def test_a_file_whose_event_was_deleted_is_applied_after_the_audit(spark, config, aws, drain_code, ack_code):
    """The issue's test, with Spark and moto (no local stack): Given a loaded table and three CDC files
    whose events were queued, When the second file's event is deleted from the queue before the drain reads
    it, Then the CDC run applies the other two and the table differs from the source; When the raw zone
    is audited, Then exactly that file is re-enqueued and the next drain and CDC run apply it: the table
    equals the source, and a later audit finds nothing to recover."""
    s3, sqs, queue, dlq = aws
    base = datetime(2026, 11, 22, 10, 0, 0)
    put(
        s3,
        "dms/sales/customer/LOAD00000001.csv",
        write_dms_csv(COLUMNS, [("I", "", base, (k, f"c{k}")) for k in (1, 2, 3)]),
    )
    assert full_load(spark, config, SCHEMA, f"s3://{RAW}/dms", ["sales.customer"]).ok
    files = [
        ("20261122-100100000.csv", [("U", 1, 10, "c1-one"), ("I", 4, 11, "c4")]),
        ("20261122-100200000.csv", [("U", 2, 20, "c2-two"), ("I", 5, 21, "c5"), ("D", 3, 22, None)]),
        ("20261122-100300000.csv", [("U", 2, 30, "c2-three"), ("U", 4, 31, "c4-three")]),
    ]
    uris = [
        put(s3, f"dms/sales/customer/{name}", dms_csv(rows, base + timedelta(minutes=n + 1)))
        for n, (name, rows) in enumerate(files)
    ]
    template = json.loads((REPO / "events" / "s3_object_created_message.json").read_text())
    for uri in uris:  # what EventBridge delivers, as the drain tests send it
        event = copy.deepcopy(template)
        event["detail"]["object"] |= {"key": uri.split("/", 3)[3], "size": 100}
        sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(event), MessageGroupId=MESSAGE_GROUP_ID)
    page = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, VisibilityTimeout=30)["Messages"]
    second = next(m for m in page if files[1][0] in m["Body"])
    sqs.delete_message(QueueUrl=queue, ReceiptHandle=second["ReceiptHandle"])
    sqs.change_message_visibility_batch(
        QueueUrl=queue,
        Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
            for i, m in enumerate(page)
            if m is not second
        ],
    )
    where = drain_code.Locations(queue, dlq, ARTIFACTS, raw_bucket=RAW, raw_prefix="dms")
    limits = drain_code.DrainLimits(wait_seconds=0)
    table = config.clean_table("sales_customer")
    source = [(1, "c1-one"), (2, "c2-three"), (4, "c4-three"), (5, "c5")]

    def drain_and_apply() -> list[str]:
        batch = drain_code.drain(s3, sqs, where, limits)
        document = json.loads(s3.get_object(Bucket=ARTIFACTS, Key=batch["manifest_key"])["Body"].read())
        assert apply_cdc(spark, config, SCHEMA, Manifest.from_dict(document)).ok
        # the acknowledge step, given the manifest version the drain handed out (when it reports one)
        version = {"manifest_etag": batch["manifest_etag"]} if "manifest_etag" in batch else {}
        ack_code.acknowledge(s3, ARTIFACTS, batch["manifest_key"], **version)
        return [f["uri"] for f in document["files"]]

    assert drain_and_apply() == [uris[0], uris[2]]
    assert rows_of(spark, table) != source
    assert drain_code.drain(s3, sqs, where, limits)["has_work"] is False

    now = datetime.now(UTC) + timedelta(minutes=1)
    report = audit(spark, config, queue, sqs, timedelta(0), now)

    assert (report.recovered, report.recovered_keys, report.applied) == (1, [uris[1]], 2)
    assert drain_and_apply() == [uris[1]]
    assert rows_of(spark, table) == source
    assert audit(spark, config, queue, sqs, timedelta(0), now).to_dict()["applied"] == 3
    assert queued(sqs, queue) == []


def test_the_job_re_enqueues_reports_and_publishes(spark, config, aws, monkeypatch, tmp_path):
    """Given a lost file, When `raw_audit_job.py` runs with the deployed job's arguments (grace 0),
    Then it exits 0, its report names the file, the file's event is queued and FilesRecovered is 1."""
    import raw_audit_job
    from lakehouse.audit import raw_zone as raw_audit

    s3, sqs, queue, _ = aws
    lost = put(s3, "dms/sales/customer/20261122-100001000.csv")
    monkeypatch.setattr(raw_audit, "_client", lambda service, config: boto3.client(service))  # moto's
    report_file = tmp_path / "audit.json"

    code = raw_audit_job.main(
        [
            *("--warehouse", config.warehouse, "--clean_database", config.clean_database),
            *("--schema_file", config.schema_file, "--s3_endpoint_url", "http://moto.invalid"),
            *("--raw_path", f"s3://{RAW}/dms", "--manifest_prefix", MANIFESTS, "--queue_url", queue),
            *("--grace_minutes", "0", "--report_uri", str(report_file), "--JOB_ID", "j_1"),
            *("--tombstone_retention_days", "36500"),
        ]
    )

    assert code == 0
    report = json.loads(report_file.read_text())
    assert (report["listed"], report["recovered"], report["recovered_keys"]) == (1, 1, [lost])
    assert [json.loads(m["Body"])["detail"]["object"]["key"] for m in queued(sqs, queue)] == [
        lost.split("/", 3)[3]
    ]
    assert metric_sum("FilesRecovered") == 1


# Tables named like DMS date folders (each in the schema file), with and without date folders below them; a
# known table with a date-shaped date folder; and a date-shaped table the schema file does not know.
DATE_NAMED = schema_of(
    {
        name: (["id"], [("id", "int"), ("name", "varchar(40)")])
        for name in ("sales.2024_01", "sales.2024", "sales.01", "sales.2024_01_31", "2024.01", "sales.orders")
    }
)
DATE_NAMED_KEYS = {  # key below the raw path -> the table the CDC run reads it as (its ledger's name)
    "sales/2024_01/20261122-100001000.csv": "sales.2024_01",
    "sales/2024/2026/11/22/20261122-100002000.csv": "sales.2024",
    "sales/01/20261122-100003000.csv": "sales.01",
    "sales/2024_01_31/2026-11-22/20261122-100004000.csv": "sales.2024_01_31",
    "2024/01/20261122-100005000.csv": "2024.01",
    "sales/orders/2024_01/20261122-100006000.csv": "sales.orders",
}
UNKNOWN_DATE_NAMED = "sales/2025_02/20261122-100007000.csv"  # not in the schema file


@pytest.fixture
def date_named(config, tmp_path):
    schema_file = tmp_path / "date_named_schema.json"
    schema_file.write_text(json.dumps(DATE_NAMED.to_dict()))
    return replace(config, schema_file=str(schema_file))


def record_applied(spark, config, uris_by_table: dict[str, str]) -> None:
    state = StateTables(spark, config)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {config.catalog_name}.{config.clean_database}")
    state.ensure()
    state.record(
        [
            LedgerEntry(table, uri.rsplit("/", 1)[1], uri, "run-1", n)
            for n, (uri, table) in enumerate(sorted(uris_by_table.items()), 1)
        ]
    )


def test_a_table_named_like_a_date_folder_is_never_lost_and_is_caught_up(spark, date_named, aws):
    """Given tables named like date folders (`2024_01`, `2024` with date folders below it, `01`, `2024_01_31`,
    a schema `2024` with a table `01`) and a known table with a date-shaped date folder, every file applied
    (the ledger names each as the CDC run reads it, by the schema file), and a file of a date-shaped table the
    schema file does not know,
    When the raw zone is audited and the reconcile asks whether each table has caught up,
    Then no applied file counts as lost or is re-sent (only the unknown table's file is, as any file of a table
    the schema file lacks: its CDC run stops that table), and every known table is caught up."""
    s3, sqs, queue, _ = aws
    applied = {put(s3, f"dms/{key}"): table for key, table in DATE_NAMED_KEYS.items()}
    unknown = put(s3, f"dms/{UNKNOWN_DATE_NAMED}")
    record_applied(spark, date_named, applied)
    now = datetime.now(UTC) + timedelta(hours=2)  # every object landed well over the grace ago

    report = audit(spark, date_named, queue, sqs, timedelta(minutes=30), now)

    assert (report.listed, report.applied, report.recovered, report.recovered_keys) == (7, 6, 1, [unknown])
    caught_up = raw_caught_up(spark, date_named, f"s3://{RAW}/dms")
    assert {
        spec.qualified_name: caught_up(spec, now) for spec in DATE_NAMED.tables.values()
    } == dict.fromkeys(sorted(DATE_NAMED.tables), True)


def test_a_consistent_point_waits_for_a_table_named_like_a_date_folder(spark, date_named, aws):
    """Given a source transaction at 10:00:30 writing `sales.orders` and `sales.2024_01` (a table named like a
    date folder): the orders file applied, the `2024_01` file (named 10:01) not yet, both tables loaded at 09:59,
    When the consistent point is computed from the raw zone's listing (settle 60 s, listed at 11:00),
    Then the `2024_01` table waits for its file, so the point is before the transaction: it never holds half
    of it."""
    s3, _, _, _ = aws
    orders = put(s3, "dms/sales/orders/2026/11/22/20261122-100100000.csv")
    put(s3, "dms/sales/2024_01/20261122-100100000.csv")
    record_applied(spark, date_named, {orders: "sales.orders"})
    listed_at, settle = datetime(2026, 11, 22, 11), timedelta(seconds=60)
    loaded, transaction = datetime(2026, 11, 22, 9, 59), datetime(2026, 11, 22, 10, 0, 30)

    waiting = unapplied_by_table(spark, date_named, DATE_NAMED, f"s3://{RAW}/dms", listed_at)

    assert waiting == {"sales.2024_01": [datetime(2026, 11, 22, 10, 1)]}
    lineages = {
        "sales.orders": [Commit(1, loaded, datetime.min), Commit(2, transaction, transaction)],
        "sales.2024_01": [Commit(3, loaded, datetime.min)],  # its half of the transaction is not applied
    }
    point = latest_common_moment(
        {
            table: exact_intervals(lineage, complete_before(waiting.get(table, []), listed_at, settle))
            for table, lineage in lineages.items()
        }
    )
    assert point is not None and point.at < transaction
    assert point.snapshots == {"sales.orders": 1, "sales.2024_01": 3}


def test_a_lost_file_older_than_the_tombstones_is_reported_never_re_sent(spark, config, aws):
    """Given lost CDC files (nothing knows them) that all landed in the raw zone just now, named (by DMS, when
    it wrote them) 34 days 23 hours ago, exactly 35 days ago, 35 days and a minute ago and 90 days ago, and one
    of yesterday,
    When the raw zone is audited with TombstoneRetentionDays 35,
    Then only the two named after the horizon are re-sent; the three at or before it are counted and named as
    beyond the retention (FilesBeyondTombstoneRetention 3), judged by their names' time, not their landing;
    the report says the horizon."""
    s3, sqs, queue, _ = aws
    now = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    named = now.replace(tzinfo=None)

    def lost_file(age: timedelta) -> str:
        return put(s3, f"dms/sales/customer/{cdc_file_name(named - age)}")

    inside = [lost_file(timedelta(days=34, hours=23)), lost_file(timedelta(days=1))]
    outside = [lost_file(timedelta(days=d)) for d in (90, 35)] + [lost_file(timedelta(days=35, minutes=1))]

    report = audit(spark, config, queue, sqs, timedelta(minutes=30), now, tombstone_retention_days=35)

    assert (report.recovered, report.beyond_retention) == (2, 3)
    assert report.recovered_keys == inside
    assert report.beyond_retention_keys == sorted(outside, key=lambda uri: uri.rsplit("/", 1)[1])
    assert report.to_dict()["resend_horizon"] == (named - timedelta(days=35)).isoformat()
    sent = [json.loads(m["Body"])["detail"]["object"]["key"] for m in queued(sqs, queue)]
    assert sorted(sent) == sorted(uri.split("/", 3)[3] for uri in inside)
    assert metric_sum("FilesBeyondTombstoneRetention") == 3
    assert metric_sum("FilesRecovered") == 2

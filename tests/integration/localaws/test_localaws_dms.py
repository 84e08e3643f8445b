"""The local DMS replicates an SQLite source into the raw bucket: full load, then CDC, as DMS writes them."""

import csv
import io
import json
import sqlite3
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

TABLE_MAPPINGS = {
    "rules": [
        {
            "rule-type": "selection",
            "rule-id": "1",
            "rule-name": "sales",
            "rule-action": "include",
            "object-locator": {"schema-name": "sales", "table-name": "%"},
        },
        {
            "rule-type": "transformation",
            "rule-id": "2",
            "rule-name": "seq",
            "rule-action": "add-column",
            "rule-target": "column",
            "object-locator": {"schema-name": "%", "table-name": "%"},
            "value": "AR_H_CHANGE_SEQ",
            "expression": "$AR_H_CHANGE_SEQ",
            "data-type": {"type": "string", "length": 50},
        },
    ]
}


def wait_until(predicate, timeout: float = 30, message: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.25)
    raise AssertionError(f"{message} not met within {timeout}s")


def read_csv(s3, bucket: str, key: str) -> list[dict[str, str]]:
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    return list(csv.DictReader(io.StringIO(body)))


def keys(s3, bucket: str, prefix: str) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []))


def make_task(aws, source_path: Path, bucket: str, migration_type: str = "full-load-and-cdc") -> str:
    dms = aws("dms")
    suffix = uuid.uuid4().hex[:8]
    source = dms.create_endpoint(
        EndpointIdentifier=f"src-{suffix}",
        EndpointType="source",
        EngineName="sqlite",
        DatabaseName=str(source_path),
        ExtraConnectionAttributes="schemaName=sales",
    )["Endpoint"]["EndpointArn"]
    target = dms.create_endpoint(
        EndpointIdentifier=f"raw-{suffix}",
        EndpointType="target",
        EngineName="s3",
        S3Settings={
            "BucketName": bucket,
            "BucketFolder": "dms",
            "AddColumnName": True,
            "IncludeOpForFullLoad": True,
            "TimestampColumnName": "dms_timestamp",
            "CsvNullValue": "NULL",
            "CdcMaxBatchInterval": 1,
            "CdcMinFileSize": 32000,
            "ServiceAccessRoleArn": "arn:aws:iam::000000000000:role/dms",
        },
    )["Endpoint"]["EndpointArn"]
    task = dms.create_replication_task(
        ReplicationTaskIdentifier=f"task-{suffix}",
        SourceEndpointArn=source,
        TargetEndpointArn=target,
        ReplicationInstanceArn="arn:aws:dms:us-east-1:000000000000:rep:local",
        MigrationType=migration_type,
        TableMappings=json.dumps(TABLE_MAPPINGS),
        ReplicationTaskSettings=json.dumps({"LocalAws": {"MaxRowsPerLoadFile": 4, "PollSeconds": 0.2}}),
    )["ReplicationTask"]
    assert task["Status"] == "creating"
    return task["ReplicationTaskArn"]


def describe(aws, arn: str) -> dict:
    tasks = aws("dms").describe_replication_tasks(Filters=[{"Name": "replication-task-arn", "Values": [arn]}])
    return tasks["ReplicationTasks"][0]


@pytest.fixture
def raw_bucket(aws) -> str:
    bucket = f"raw-{uuid.uuid4().hex[:8]}"
    aws("s3").create_bucket(Bucket=bucket)
    return bucket


@pytest.fixture
def source_db(tmp_path: Path) -> Path:
    path = tmp_path / "sales.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE customer (id INTEGER PRIMARY KEY, name TEXT, balance REAL)")
        db.executemany(
            "INSERT INTO customer VALUES (?, ?, ?)", [(i, f"name {i}", i * 1.5) for i in range(1, 11)]
        )
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, note TEXT)")
        db.execute("INSERT INTO orders VALUES (1, 1, 'first, \"rush\"\norder'), (2, 2, '')")
    return path


def test_full_load_then_cdc_into_the_raw_bucket(aws, raw_bucket: str, source_db: Path) -> None:
    s3, dms = aws("s3"), aws("dms")
    # EventBridge notifications of the bucket reach a rule's queue: the files go through LocalStack's S3.
    s3.put_bucket_notification_configuration(
        Bucket=raw_bucket, NotificationConfiguration={"EventBridgeConfiguration": {}}
    )
    sqs, events = aws("sqs"), aws("events")
    queue_url = sqs.create_queue(QueueName=f"q-{raw_bucket}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_rule(
        Name=f"r-{raw_bucket}",
        EventPattern=json.dumps({"source": ["aws.s3"], "detail": {"bucket": {"name": [raw_bucket]}}}),
    )
    events.put_targets(Rule=f"r-{raw_bucket}", Targets=[{"Id": "q", "Arn": queue_arn}])

    arn = make_task(aws, source_db, raw_bucket)
    wait_until(lambda: describe(aws, arn)["Status"] == "ready", 10, "task ready")
    dms.start_replication_task(ReplicationTaskArn=arn, StartReplicationTaskType="start-replication")
    task = wait_until(
        lambda: (t := describe(aws, arn))["ReplicationTaskStats"]["FullLoadProgressPercent"] == 100 and t,
        30,
        "full load",
    )
    assert task["Status"] == "running"
    assert task["ReplicationTaskStats"]["TablesLoaded"] == 2

    load_keys = keys(s3, raw_bucket, "dms/sales/customer/LOAD")
    assert load_keys == [f"dms/sales/customer/LOAD0000000{i}.csv" for i in (1, 2, 3)]
    loaded = [row for key in load_keys for row in read_csv(s3, raw_bucket, key)]
    assert [r["id"] for r in loaded] == [str(i) for i in range(1, 11)]
    assert list(loaded[0]) == ["Op", "dms_timestamp", "id", "name", "balance", "AR_H_CHANGE_SEQ"]
    orders = read_csv(s3, raw_bucket, "dms/sales/orders/LOAD00000001.csv")
    assert orders[0]["note"] == 'first, "rush"\norder' and orders[1]["note"] == ""

    with sqlite3.connect(source_db) as db:
        db.execute("INSERT INTO customer VALUES (11, 'eleven', NULL)")
        db.execute("UPDATE customer SET name = 'renamed' WHERE id = 1")
        db.execute("DELETE FROM customer WHERE id = 2")
    first_cdc = wait_until(
        lambda: [k for k in keys(s3, raw_bucket, "dms/sales/customer/") if "LOAD" not in k],
        15,
        "first CDC file",
    )
    with sqlite3.connect(source_db) as db:
        db.execute("ALTER TABLE customer ADD COLUMN tier TEXT")
    time.sleep(0.6)  # a capture cycle notices the new column
    with sqlite3.connect(source_db) as db:
        db.execute("INSERT INTO customer (id, name, balance, tier) VALUES (12, 'twelve', 3.0, 'gold')")
    cdc_keys = wait_until(
        lambda: (
            (ks := [k for k in keys(s3, raw_bucket, "dms/sales/customer/") if "LOAD" not in k])
            and len(ks) > len(first_cdc)
            and ks
        ),
        15,
        "CDC file with the new column",
    )
    changes = [row for key in cdc_keys for row in read_csv(s3, raw_bucket, key)]
    assert [(r["Op"], r["id"]) for r in changes] == [("I", "11"), ("U", "1"), ("D", "2"), ("I", "12")]
    assert changes[0]["balance"] == "NULL"
    assert changes[1]["name"] == "renamed"
    assert "tier" not in changes[0] and changes[3]["tier"] == "gold"
    sequences = [r["AR_H_CHANGE_SEQ"] for r in changes]
    assert sequences == sorted(sequences) and all(len(s) == 35 for s in sequences)
    assert all(k.split("/")[-1][:8].isdigit() and k.endswith(".csv") for k in cdc_keys)

    statistics = {
        s["TableName"]: s for s in dms.describe_table_statistics(ReplicationTaskArn=arn)["TableStatistics"]
    }
    assert statistics["customer"]["FullLoadRows"] == 10
    assert (statistics["customer"]["Inserts"], statistics["customer"]["Updates"]) == (2, 1)

    dms.stop_replication_task(ReplicationTaskArn=arn)
    stopped = wait_until(lambda: (t := describe(aws, arn))["Status"] == "stopped" and t, 15, "stopped")
    assert stopped["StopReason"] == "Stop Reason NORMAL"

    messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=2).get(
        "Messages", []
    )
    assert messages and json.loads(messages[0]["Body"])["detail-type"] == "Object Created"


def test_missing_source_fails_the_task(aws, raw_bucket: str, tmp_path: Path) -> None:
    arn = make_task(aws, tmp_path / "missing.db", raw_bucket)
    wait_until(lambda: describe(aws, arn)["Status"] == "ready", 10, "task ready")
    aws("dms").start_replication_task(ReplicationTaskArn=arn, StartReplicationTaskType="start-replication")
    task = wait_until(lambda: (t := describe(aws, arn))["Status"] == "failed" and t, 15, "task failed")
    assert "source database file not found" in task["LastFailureMessage"]
    assert task["StopReason"] == "Stop Reason FATAL_ERROR"

"""The local DMS replication loop against an SQLite file, files collected in a dict (no LocalStack)."""

import csv
import io
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from localaws_plugin.dms_format import S3TargetSettings, TableMapping
from localaws_plugin.dms_replication import ReplicationRun, SourceSettings, TaskOptions

MAPPING = {
    "rules": [
        {
            "rule-type": "selection",
            "rule-id": "1",
            "rule-name": "all",
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


class Bucket:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.lock = threading.Lock()

    def put(self, bucket: str, key: str, body: bytes) -> None:
        assert bucket == "raw"
        with self.lock:
            self.objects[key] = body

    def delete_prefix(self, bucket: str, prefix: str) -> None:
        assert bucket == "raw"
        with self.lock:
            for key in [k for k in self.objects if k.startswith(prefix)]:
                del self.objects[key]

    def rows(self, prefix: str) -> list[list[dict[str, str]]]:
        with self.lock:
            keys = sorted(k for k in self.objects if k.startswith(prefix))
            return [list(csv.DictReader(io.StringIO(self.objects[k].decode()))) for k in keys]


def s3_target() -> S3TargetSettings:
    """The raw bucket's target settings of these tests: CSV with a header, `NULL` for null, small batches."""
    return S3TargetSettings(
        bucket_name="raw",
        bucket_folder="dms",
        include_op_for_full_load=True,
        timestamp_column_name="dms_timestamp",
        csv_null_value="NULL",
        cdc_max_batch_interval_seconds=0.3,
    )


def make_run(
    db: Path, bucket: Bucket, migration_type: str = "full-load-and-cdc", **options
) -> ReplicationRun:
    return ReplicationRun(
        migration_type,
        SourceSettings(str(db), "sales"),
        s3_target(),
        TableMapping.parse(MAPPING),
        TaskOptions(poll_seconds=0.1, **options),
        bucket.put,
        bucket.delete_prefix,
    )


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


@pytest.fixture
def source(tmp_path: Path) -> Path:
    db = tmp_path / "source.db"
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE customer (id INTEGER PRIMARY KEY, name TEXT, note TEXT)")
        connection.executemany(
            "INSERT INTO customer VALUES (?, ?, ?)",
            [(i, f"c{i}", None if i % 2 else "") for i in range(1, 6)],
        )
    return db


def test_full_load_writes_hex_numbered_files_with_header_op_and_seq(source: Path) -> None:
    bucket = Bucket()
    run = make_run(source, bucket, "full-load", max_rows_per_load_file=2)
    run.start()
    run.wait(10)
    assert run.status == "stopped"
    assert run.stop_reason == "Stop Reason FULL_LOAD_ONLY_FINISHED"
    assert run.full_load_percent == 100
    assert sorted(bucket.objects) == [f"dms/sales/customer/LOAD0000000{i}.csv" for i in (1, 2, 3)]
    first = bucket.objects["dms/sales/customer/LOAD00000001.csv"].decode().splitlines()
    assert first[0] == "Op,dms_timestamp,id,name,note,AR_H_CHANGE_SEQ"
    rows = [r for f in bucket.rows("dms/sales/customer/LOAD") for r in f]
    assert [r["id"] for r in rows] == ["1", "2", "3", "4", "5"]
    assert {r["Op"] for r in rows} == {"I"}
    assert rows[0]["note"] == "NULL" and rows[1]["note"] == ""
    assert all(len(r["AR_H_CHANGE_SEQ"]) == 35 for r in rows)


def test_cdc_captures_inserts_updates_deletes_and_added_columns(source: Path) -> None:
    bucket = Bucket()
    run = make_run(source, bucket)
    run.start()
    wait_for(lambda: run.full_load_done and run.status == "running")
    with sqlite3.connect(source) as connection:
        connection.execute("INSERT INTO customer VALUES (6, 'new, \"quoted\"\nline', 'x')")
        connection.execute("UPDATE customer SET name = 'renamed' WHERE id = 1")
        connection.execute("DELETE FROM customer WHERE id = 2")
    wait_for(lambda: len([k for k in bucket.objects if "LOAD" not in k]) >= 1)
    with sqlite3.connect(source) as connection:
        connection.execute("ALTER TABLE customer ADD COLUMN tier TEXT")
    time.sleep(0.3)  # one capture cycle notices the new column and rebuilds the triggers
    with sqlite3.connect(source) as connection:
        connection.execute("INSERT INTO customer (id, name, note, tier) VALUES (7, 'g', NULL, 'gold')")
    wait_for(lambda: any("tier" in f[0] for f in bucket.rows("dms/sales/customer/2") if f))
    run.stop()
    assert run.status == "stopped"
    cdc_files = bucket.rows("dms/sales/customer/2")
    changes = [r for f in cdc_files for r in f]
    assert [(r["Op"], r["id"]) for r in changes] == [("I", "6"), ("U", "1"), ("D", "2"), ("I", "7")]
    assert changes[0]["name"] == 'new, "quoted"\nline'
    assert changes[1]["name"] == "renamed"
    assert changes[3]["tier"] == "gold" and changes[3]["note"] == "NULL"
    assert "tier" not in cdc_files[0][0]
    seqs = [r["AR_H_CHANGE_SEQ"] for r in changes]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4
    load_seq = bucket.rows("dms/sales/customer/LOAD")[0][0]["AR_H_CHANGE_SEQ"]
    assert load_seq < seqs[0]


def test_missing_source_file_fails_the_task_with_a_message(tmp_path: Path) -> None:
    run = make_run(tmp_path / "nope.db", Bucket())
    run.start()
    run.wait(10)
    assert run.status == "failed"
    assert "not found" in (run.last_failure_message or "")
    assert run.stop_reason == "Stop Reason FATAL_ERROR"


def test_a_table_reload_during_cdc_empties_its_folder_and_writes_load_files_of_the_current_rows(
    source: Path,
) -> None:
    """Given a full-load-and-cdc task that wrote LOAD and CDC files of `customer`,
    When the table is reloaded while CDC runs (ReloadTables),
    Then the changes captured before the reload are written first, the table's folder is emptied, LOAD
    files numbered from 1 hold exactly the current rows with the snapshot's change sequence, the statistics
    say "Table completed" with a FullLoadEndTime after the reload began, and later changes go on as CDC
    files with higher sequences."""
    bucket = Bucket()
    run = make_run(source, bucket)
    run.start()
    wait_for(lambda: run.full_load_done and run.status == "running")
    with sqlite3.connect(source) as connection:
        connection.execute("UPDATE customer SET name = 'changed' WHERE id = 1")
    wait_for(lambda: any("/2" in k for k in bucket.objects))  # a CDC file (named by time)
    before_reload = time.time()
    with sqlite3.connect(source) as connection:
        connection.execute("DELETE FROM customer WHERE id = 2")
    run.request_reload(["customer"])
    wait_for(
        lambda: (
            (s := run.table_statistics["customer"]).state == "Table completed"
            and s.full_load_end is not None
            and s.full_load_end.timestamp() >= before_reload
        )
    )
    with bucket.lock:
        keys = sorted(k for k in bucket.objects if k.startswith("dms/sales/customer/"))
    assert keys == ["dms/sales/customer/LOAD00000001.csv"]
    loaded = bucket.rows("dms/sales/customer/LOAD")[0]
    assert sorted((r["id"], r["name"]) for r in loaded) == [
        ("1", "changed"),
        ("3", "c3"),
        ("4", "c4"),
        ("5", "c5"),
    ]
    snapshot_seq = int(loaded[0]["AR_H_CHANGE_SEQ"])
    assert (
        run.table_statistics["customer"].as_api()["FullLoadEndTime"]
        >= run.table_statistics["customer"].full_load_start
    )
    with sqlite3.connect(source) as connection:
        connection.execute("UPDATE customer SET name = 'after' WHERE id = 3")
    wait_for(lambda: len(bucket.rows("dms/sales/customer/2")) >= 1)
    later = bucket.rows("dms/sales/customer/2")[0]
    assert [(r["Op"], r["id"], r["name"]) for r in later] == [("U", "3", "after")]
    assert int(later[0]["AR_H_CHANGE_SEQ"]) > snapshot_seq
    run.stop()


def test_a_reload_is_refused_when_the_task_is_not_running(source: Path) -> None:
    run = make_run(source, Bucket())
    with pytest.raises(RuntimeError, match="only while the task is running"):
        run.request_reload(["customer"])


def test_with_data_format_parquet_the_task_writes_typed_parquet_load_and_cdc_files(source: Path) -> None:
    """Given an S3 endpoint with DataFormat=parquet, When the task loads and captures changes, Then its files
    are LOAD00000001.parquet and <time>.parquet, typed from the source's DDL, nulls as nulls."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    bucket = Bucket()
    run = make_run(source, bucket)
    run.target = S3TargetSettings.from_endpoint(
        {
            "BucketName": "raw",
            "BucketFolder": "dms",
            "DataFormat": "parquet",
            "IncludeOpForFullLoad": True,
            "TimestampColumnName": "dms_timestamp",
            "CdcMaxBatchInterval": 0,
        },
        None,
    )
    run.start()
    wait_for(lambda: run.full_load_done and run.status == "running")
    with sqlite3.connect(source) as connection:
        connection.execute("UPDATE customer SET note = NULL, name = '' WHERE id = 2")
    wait_for(lambda: any(k.endswith(".parquet") and "/2" in k for k in bucket.objects))
    run.stop()
    with bucket.lock:
        keys = sorted(bucket.objects)
        loaded = pq.read_table(io.BytesIO(bucket.objects["dms/sales/customer/LOAD00000001.parquet"]))
        changed = pq.read_table(io.BytesIO(bucket.objects[keys[0]]))
    assert all(k.endswith(".parquet") for k in keys)
    assert loaded.schema.field("id").type == pa.int32() and loaded.num_rows == 5
    assert [(r["Op"], r["id"], r["name"], r["note"]) for r in changed.to_pylist()] == [("U", 2, "", None)]

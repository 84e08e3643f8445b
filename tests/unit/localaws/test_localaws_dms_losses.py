"""The local DMS loses what AWS DMS loses: TRUNCATE on a PostgreSQL source is never written, and an
UPDATE or DELETE of a table without a primary key (and without REPLICA IDENTITY FULL) is dropped with a warning
naming table and position; `LOCALAWS_DMS_LENIENT=1` writes those UPDATEs and DELETEs as before.

Each test asserts the whole CDC output of its tables: (Op, id, note) in file order."""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from localaws_plugin.dms_postgres import parse_lsn

from tests.unit.localaws.test_localaws_dms_postgres import SCHEMA, connect
from tests.unit.localaws.test_localaws_dms_postgres import make_run as make_postgres_run
from tests.unit.localaws.test_localaws_dms_replication import Bucket, wait_for
from tests.unit.localaws.test_localaws_dms_replication import make_run as make_sqlite_run

LENIENCY = [pytest.param("", id="harsh"), pytest.param("1", id="lenient")]


@pytest.fixture(params=LENIENCY)
def lenient(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """The emulator's setting, as LocalStack's environment would carry it (read when the task is made)."""
    monkeypatch.setenv("LOCALAWS_DMS_LENIENT", request.param)
    return request.param == "1"


@pytest.fixture
def slot(postgres_socket_dir: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh `sales` schema: `customer` with a primary key, `keyless` without one (default identity),
    `indexed` without one but REPLICA IDENTITY USING a unique index, `full_row` without one but REPLICA
    IDENTITY FULL; one row each. Yields the slot name for this test."""
    name = "l_" + re.sub(r"\W", "_", request.node.name.lower())[:40]
    with connect(postgres_socket_dir) as db:
        db.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE NOT active")
        db.execute(f"DROP PUBLICATION IF EXISTS {name}_publication")
        db.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        db.execute(f"CREATE SCHEMA {SCHEMA}")
        db.execute(f"CREATE TABLE {SCHEMA}.customer (id integer PRIMARY KEY, name varchar(40), note text)")
        db.execute(f"CREATE TABLE {SCHEMA}.keyless (id integer, note text)")
        db.execute(f"CREATE TABLE {SCHEMA}.indexed (id integer NOT NULL, note text)")
        db.execute(f"CREATE UNIQUE INDEX indexed_id ON {SCHEMA}.indexed (id)")
        db.execute(f"ALTER TABLE {SCHEMA}.indexed REPLICA IDENTITY USING INDEX indexed_id")
        db.execute(f"CREATE TABLE {SCHEMA}.full_row (id integer, note text)")
        db.execute(f"ALTER TABLE {SCHEMA}.full_row REPLICA IDENTITY FULL")
        for table in ("customer", "keyless", "indexed", "full_row"):
            db.execute(f"INSERT INTO {SCHEMA}.{table} (id, note) VALUES (1, 'loaded')")
    yield name


def cdc_output(bucket: Bucket, table: str, schema: str = SCHEMA) -> list[tuple[str, str, str]]:
    """Every CDC record of the table, in file order: (Op, id, note)."""
    return [
        (r["Op"], r["id"], r["note"])
        for f in bucket.rows(f"dms/{schema}/{table}/2")  # CDC files are named by time: 2026…
        for r in f
    ]


def warnings_about(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


def current_lsn(socket_dir: str) -> int:
    with connect(socket_dir) as db:
        return parse_lsn(db.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])


def logged_lsns(messages: list[str]) -> list[int]:
    return [parse_lsn(m) for text in messages for m in re.findall(r"LSN ([0-9A-F]+/[0-9A-F]+)", text)]


def test_a_truncate_on_postgresql_writes_no_change_and_is_reported_once_with_table_and_lsn(
    postgres_socket_dir: str, slot: str, lenient: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Given a running task over four tables (one row each loaded),
    When the source truncates them (two TRUNCATEs in one transaction, then one of two tables), then inserts a
    row into one,
    Then the CDC files hold that insert alone (AWS DMS does not capture TRUNCATE from PostgreSQL: the lake keeps
    the truncated rows), lenient or not, and each TRUNCATE gets one warning naming its tables and its LSN."""
    caplog.set_level(logging.WARNING)
    bucket = Bucket()
    run = make_postgres_run(postgres_socket_dir, slot, bucket)
    run.start()
    wait_for(lambda: run.full_load_done and run.status == "running")
    before = current_lsn(postgres_socket_dir)
    with connect(postgres_socket_dir) as db:
        with db.transaction():
            db.execute(f"TRUNCATE {SCHEMA}.customer")
            db.execute(f"TRUNCATE {SCHEMA}.full_row")
        db.execute(f"TRUNCATE {SCHEMA}.indexed, {SCHEMA}.keyless")
    after = current_lsn(postgres_socket_dir)
    with connect(postgres_socket_dir) as db:
        db.execute(f"INSERT INTO {SCHEMA}.customer (id, note) VALUES (9, 'after')")
    wait_for(lambda: cdc_output(bucket, "customer"))
    run.stop()
    assert run.status == "stopped", run.last_failure_message
    assert cdc_output(bucket, "customer") == [("I", "9", "after")]
    for table in ("keyless", "indexed", "full_row"):
        assert cdc_output(bucket, table) == []
    reported = warnings_about(caplog, "TRUNCATE")
    assert [re.sub(r"^DMS capture: TRUNCATE of (.*) at LSN .*", r"\1", m) for m in reported] == [
        f"{SCHEMA}.customer",
        f"{SCHEMA}.full_row",
        f"{SCHEMA}.indexed, {SCHEMA}.keyless",
    ]
    first, second, third = logged_lsns(reported)
    assert before <= first == second < third <= after


def test_update_and_delete_of_a_table_without_a_primary_key_are_dropped_while_inserts_flow(
    postgres_socket_dir: str, slot: str, lenient: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Given tables without a primary key: `keyless` (default identity), `indexed` (REPLICA IDENTITY USING a
    unique index), `full_row` (REPLICA IDENTITY FULL, DMS's documented workaround), and `customer` with one,
    When each gets an insert, an update and a delete,
    Then PostgreSQL itself refuses the update and delete of `keyless` (it is in the task's publication);
    `indexed`'s update and delete are dropped, with a warning naming table and LSN, and only its insert is
    written (lenient: all three, as before); `full_row` and `customer` have all three written."""
    caplog.set_level(logging.WARNING)
    bucket = Bucket()
    run = make_postgres_run(postgres_socket_dir, slot, bucket)
    run.start()
    wait_for(lambda: run.full_load_done and run.status == "running")
    before = current_lsn(postgres_socket_dir)
    with connect(postgres_socket_dir) as db:
        for table in ("keyless", "indexed", "full_row", "customer"):
            db.execute(f"INSERT INTO {SCHEMA}.{table} (id, note) VALUES (2, 'new')")
            if table == "keyless":
                for statement in (f"UPDATE {SCHEMA}.keyless SET note = 'x'", f"DELETE FROM {SCHEMA}.keyless"):
                    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="replica identity"):
                        db.execute(statement)
                continue
            db.execute(f"UPDATE {SCHEMA}.{table} SET note = 'changed' WHERE id = 1")
            db.execute(f"DELETE FROM {SCHEMA}.{table} WHERE id = 2")
    after = current_lsn(postgres_socket_dir)
    with connect(postgres_socket_dir) as db:  # a last change, so every earlier one is written once it is
        db.execute(f"INSERT INTO {SCHEMA}.customer (id, note) VALUES (3, 'last')")
    wait_for(lambda: ("I", "3", "last") in cdc_output(bucket, "customer"))
    run.stop()
    assert run.status == "stopped", run.last_failure_message
    every_op = [("I", "2", "new"), ("U", "1", "changed"), ("D", "2", "NULL")]
    assert cdc_output(bucket, "keyless") == [("I", "2", "new")]
    assert cdc_output(bucket, "indexed") == (every_op if lenient else [("I", "2", "new")])
    assert cdc_output(bucket, "full_row") == [("I", "2", "new"), ("U", "1", "changed"), ("D", "2", "new")]
    assert cdc_output(bucket, "customer") == [*every_op, ("I", "3", "last")]
    dropped = warnings_about(caplog, "dropped, as AWS DMS drops it")
    if lenient:
        assert dropped == []
    else:
        assert [m.split(" at ")[0] for m in dropped] == [
            f"DMS capture: UPDATE of {SCHEMA}.indexed",
            f"DMS capture: DELETE of {SCHEMA}.indexed",
        ]
        assert all("no primary key" in m and "REPLICA IDENTITY USING INDEX" in m for m in dropped)
        assert all(before <= lsn <= after for lsn in logged_lsns(dropped)) and len(logged_lsns(dropped)) == 2
    assert run.table_statistics["indexed"].updates == (1 if lenient else 0)


def test_the_sqlite_source_drops_update_and_delete_of_a_table_without_a_primary_key(
    tmp_path: Path, lenient: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Given an SQLite source (it stands in for PostgreSQL in the unit tests and `--source sqlite`) with a table
    without a primary key and one with,
    When each gets an insert, an update and a delete,
    Then the keyless table's update and delete are dropped with a warning naming table and change-log seq, and
    only its insert is written (lenient: all three); the keyed table has all three written."""
    caplog.set_level(logging.WARNING)
    db = tmp_path / "source.db"
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE keyed (id INTEGER PRIMARY KEY, note TEXT)")
        connection.execute("CREATE TABLE keyless (id INTEGER, note TEXT)")
        connection.executemany("INSERT INTO keyed VALUES (?, ?)", [(1, "loaded")])
        connection.executemany("INSERT INTO keyless VALUES (?, ?)", [(1, "loaded")])
    bucket = Bucket()
    run = make_sqlite_run(db, bucket)
    run.start()
    wait_for(lambda: run.full_load_done and run.status == "running")
    with sqlite3.connect(db) as connection:
        for table in ("keyless", "keyed"):
            connection.execute(f"INSERT INTO {table} VALUES (2, 'new')")
            connection.execute(f"UPDATE {table} SET note = 'changed' WHERE id = 1")
            connection.execute(f"DELETE FROM {table} WHERE id = 2")
    wait_for(lambda: len(cdc_output(bucket, "keyed", "sales")) == 3)
    run.stop()
    assert run.status == "stopped", run.last_failure_message
    every_op = [("I", "2", "new"), ("U", "1", "changed"), ("D", "2", "new")]
    assert cdc_output(bucket, "keyed", "sales") == every_op
    assert cdc_output(bucket, "keyless", "sales") == (every_op if lenient else [("I", "2", "new")])
    dropped = warnings_about(caplog, "dropped, as AWS DMS drops it")
    assert [re.sub(r"^DMS capture: (.*?) dropped.*", r"\1", m) for m in dropped] == (
        []
        if lenient
        else ["UPDATE of sales.keyless at change-log seq 2", "DELETE of sales.keyless at change-log seq 3"]
    )


def test_a_primary_key_update_is_written_with_the_old_key_as_before_image_lenient_or_not(
    postgres_socket_dir: str, slot: str, lenient: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Not a loss, and pinned so it does not become one: "AWS DMS ignores an attempt to update a primary key
    segment" (its PostgreSQL limits) is about applying to a database target; to an S3 target DMS writes the
    update, the new key in the row and the old one in the pk-only before-image column (an AWS answer on
    re:Post shows `U,30004,66,11,30004,1`), which the CDC job needs to delete the old key.
    Given a running task with the BI_ rule, When a row's key is updated, Then one U record carries the new key
    and BI_id the old one, and nothing is reported dropped."""
    caplog.set_level(logging.WARNING)
    bucket = Bucket()
    run = make_postgres_run(postgres_socket_dir, slot, bucket)
    run.start()
    wait_for(lambda: run.full_load_done and run.status == "running")
    with connect(postgres_socket_dir) as db:
        db.execute(f"UPDATE {SCHEMA}.customer SET id = 50, note = 'moved' WHERE id = 1")
    wait_for(lambda: cdc_output(bucket, "customer"))
    run.stop()
    assert run.status == "stopped", run.last_failure_message
    records = [r for f in bucket.rows(f"dms/{SCHEMA}/customer/2") for r in f]
    assert [(r["Op"], r["id"], r["note"], r["BI_id"]) for r in records] == [("U", "50", "moved", "1")]
    assert warnings_about(caplog, "dropped") == []

"""The local DMS against a real MariaDB server (Debian's mariadb-server, `make mariadb`; no LocalStack): the
binlog read as DMS reads a MySQL source, MySQL's types spelled as DMS spells them, what DMS drops dropped.
Files are collected in a dict; the type test applies them to the clean zone with the Spark library.

The oracle: the files applied in change-sequence order per key (LOAD rows carry the snapshot's position) must
give exactly the source's rows, whatever was committed while the full load ran or while the binlog connection
was down; in the clean zone, each MySQL type lands in the Iceberg type docs/CONTRACTS.md names."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql
import pytest
from localaws_plugin.dms_format import S3TargetSettings, TableMapping
from localaws_plugin.dms_mysql import ColumnKind, dms_text, position_of
from localaws_plugin.dms_replication import ReplicationRun, SourceSettings, TaskOptions

from localaws.mariadb import LocalMariaDb, MariaDbAddress, installed
from tests.unit.localaws.test_localaws_dms_replication import MAPPING, Bucket, wait_for

DATABASE = "sales"  # MAPPING selects schema `sales`: on MySQL the database is DMS's schema


# spelling (no server) ----------------------------------------------------------------------------------


def test_values_are_spelled_alike_from_the_full_load_and_from_the_binlog():
    """Given each MySQL type's value as pymysql reads it (full load) and as the binlog decoder reads it (CDC),
    When the local DMS spells them,
    Then both paths give the same text, zero dates are NULL, and nothing is rounded or cut (a FLOAT in the
    fewest digits that read back as the same single, a BINARY(n) in its n bytes, YEAR in 4 digits)."""
    cases = [
        # (kind, full-load value, binlog value, text)
        (ColumnKind("bit"), b"\x02\xaa", "1010101010", "682"),
        (ColumnKind("bit"), b"\x01", "1", "1"),
        (ColumnKind("tinyint"), 1, 1, "1"),
        (ColumnKind("bigint"), 2**64 - 1, 2**64 - 1, "18446744073709551615"),
        (ColumnKind("set", members=("red", "green", "blue")), "red,blue", {"blue", "red"}, "red,blue"),
        (ColumnKind("set", members=("red", "green", "blue")), "", set(), ""),
        (
            ColumnKind("decimal"),
            Decimal("-0.000000000000000000000000000001"),
            Decimal("-0.000000000000000000000000000001"),
            "-0.000000000000000000000000000001",
        ),
        (ColumnKind("decimal"), Decimal("1.50"), Decimal("1.50"), "1.50"),
        (
            ColumnKind("datetime", 6),
            datetime(2026, 1, 2, 3, 4, 5, 123456),
            datetime(2026, 1, 2, 3, 4, 5, 123456),
            "2026-01-02 03:04:05.123456",
        ),
        (
            ColumnKind("datetime", 0),
            datetime(2026, 1, 2, 3, 4, 5),
            datetime(2026, 1, 2, 3, 4, 5),
            "2026-01-02 03:04:05",
        ),
        (
            ColumnKind("timestamp", 3),
            datetime(2026, 1, 1, 5, 0, 0, 500000),
            datetime(2026, 1, 1, 5, 0, 0, 500000),
            "2026-01-01 05:00:00.500",
        ),
        (ColumnKind("datetime", 6), "0000-00-00 00:00:00.000000", None, None),
        (ColumnKind("timestamp", 0), "0000-00-00 00:00:00", datetime(1970, 1, 1), None),
        (ColumnKind("date"), "0000-00-00", None, None),
        (ColumnKind("date"), date(2026, 2, 28), date(2026, 2, 28), "2026-02-28"),
        (ColumnKind("blob"), b"\x00\xff", b"\x00\xff", "00FF"),
        (
            ColumnKind("binary", length=4),
            b"\x01\x00\x00\x00",
            b"\x01",
            "01000000",
        ),  # the binlog drops the padding
        (ColumnKind("binary", length=4), b"\x00\x00\x00\x00", b"", "00000000"),
        (ColumnKind("year"), 0, 1900, "0000"),  # the binlog decoder reads YEAR 0000 as 1900
        (ColumnKind("year"), 2026, 2026, "2026"),
        (ColumnKind("float"), 1.0000001192092896, 1.0000001192092896, "1.0000001"),  # 6 digits: 1
        (ColumnKind("float"), 16777216.0, 16777216.0, "16777216"),  # 6 digits: 16777200
        (ColumnKind("float"), 1.401298464324817e-45, 1.401298464324817e-45, "1.4013e-45"),
        (ColumnKind("double"), 1.7976931348623157e308, 1.7976931348623157e308, "1.7976931348623157e+308"),
        (ColumnKind("longtext"), '{"a": [1, 2]}', '{"a": [1, 2]}', '{"a": [1, 2]}'),
    ]
    for kind, loaded, streamed, text in cases:
        assert (dms_text(loaded, kind), dms_text(streamed, kind)) == (text, text), (kind, loaded, streamed)


def test_the_reconcile_reads_mysql_with_the_jdbc_driver_the_jvm_has():
    """Given a JVM with MariaDB's driver (local), with only MySQL Connector/J (AWS Glue 5.x), or with neither,
    When the MySQL source picks its driver,
    Then it takes MariaDB's, else Connector/J, else fails saying how to add one (not a ClassNotFoundException
    in the middle of the first table)."""
    from lakehouse.reconcile.mysql import pick_driver

    assert pick_driver({"org.mariadb.jdbc.Driver", "com.mysql.cj.jdbc.Driver"}.__contains__) == (
        "org.mariadb.jdbc.Driver"
    )
    assert pick_driver({"com.mysql.cj.jdbc.Driver", "org.postgresql.Driver"}.__contains__) == (
        "com.mysql.cj.jdbc.Driver"
    )
    with pytest.raises(RuntimeError, match=r"no MySQL JDBC driver .*--extra-jars"):
        pick_driver({"org.postgresql.Driver"}.__contains__)


def test_a_negative_time_with_a_fraction_is_decoded_from_the_binlog_as_the_server_stores_it():
    """Given TIME2 binlog values as MySQL packs them (a negative time's fraction stored as its complement),
    When the local DMS decodes them,
    Then each is the time written (mysql-replication's own decoder reads -838:59:59.99 as -838:59:59.01)."""
    from datetime import timedelta
    from types import SimpleNamespace

    from localaws_plugin.dms_mysql_binlog import _time2

    def packed(hours: int, minutes: int, seconds: int, fraction: int, fsp: int, negative: bool) -> bytes:
        hms = (hours << 12) | (minutes << 6) | seconds
        frac_bytes = (fsp + 1) // 2
        if fsp >= 5:
            value = (hms << 24) + fraction
            return ((-value if negative else value) + 0x800000000000).to_bytes(6, "big")
        intpart, frac = (-hms, -fraction) if negative else (hms, fraction)
        if frac < 0:
            intpart, frac = intpart - 1, frac + (1 << (8 * frac_bytes))
        return (intpart + 0x800000).to_bytes(3, "big") + (frac.to_bytes(frac_bytes, "big") if fsp else b"")

    class Packet:
        def __init__(self, data: bytes) -> None:
            self.data = data

        def read(self, size: int) -> bytes:
            taken, self.data = self.data[:size], self.data[size:]
            return taken

    def decoded(data: bytes, fsp: int) -> timedelta:
        return _time2(SimpleNamespace(packet=Packet(data)), SimpleNamespace(fsp=fsp))

    hms = timedelta(hours=838, minutes=59, seconds=59)
    assert decoded(packed(838, 59, 59, 99, 2, True), 2) == -(hms + timedelta(milliseconds=990))
    assert decoded(packed(838, 59, 59, 99, 2, False), 2) == hms + timedelta(milliseconds=990)
    assert decoded(packed(1, 2, 3, 5, 4, True), 4) == -timedelta(
        hours=1, minutes=2, seconds=3, microseconds=500
    )
    assert decoded(packed(1, 2, 3, 7, 6, True), 6) == -timedelta(
        hours=1, minutes=2, seconds=3, microseconds=7
    )
    assert decoded(packed(25, 0, 0, 0, 0, True), 0) == -timedelta(hours=25)
    assert decoded(packed(0, 0, 0, 0, 2, False), 2) == timedelta(0)


def test_a_transaction_half_read_when_the_connection_breaks_is_read_again_whole_from_the_last_commit():
    """Given a binlog stream that breaks in the middle of a transaction (the library's own reconnect shows as
    a second fake rotate, resuming mid-transaction),
    When the reader goes on,
    Then the half-read transaction is dropped, the stream is opened again at the end of the last whole
    transaction, and each transaction comes out once, whole, with sequences from its commit position."""
    from types import SimpleNamespace

    from localaws_plugin.dms_mysql_binlog import BinlogReader, change_seq
    from pymysqlreplication.event import QueryEvent, RotateEvent, XidEvent
    from pymysqlreplication.row_event import WriteRowsEvent

    def event(cls: type, end: int = 0, **attributes: Any) -> Any:
        made = object.__new__(cls)
        made.packet, made.timestamp = SimpleNamespace(log_pos=end), attributes.pop("timestamp", 1_767_225_600)
        for name, value in attributes.items():
            setattr(made, name, value)
        return made

    def rotate(position: int) -> Any:
        return event(RotateEvent, timestamp=0, next_binlog="binlog.000003", position=position)

    def write(end: int, key: int) -> Any:
        made = event(WriteRowsEvent, end, schema=DATABASE, table="scratch")
        made._RowsEvent__rows = [{"values": {"id": key, "v": f"v{key}"}, "none_sources": {}}]
        return made

    def begin(end: int) -> Any:
        return event(QueryEvent, end, query="BEGIN", schema=DATABASE)

    streams = [
        [rotate(4), begin(100), write(150, 1), write(170, 2), event(XidEvent, 200), begin(230), write(260, 3),
         rotate(260)],  # the library reconnected at 260, mid-transaction
        [rotate(200), begin(230), write(260, 3), write(280, 4), event(XidEvent, 300)],
    ]  # fmt: skip
    opened: list[tuple[str, int]] = []
    source = SimpleNamespace(
        settings=SimpleNamespace(database=DATABASE, server_id=7),
        kinds=lambda table, refresh=False: {"id": ColumnKind("int"), "v": ColumnKind("varchar")},
    )
    reader = BinlogReader(source, "binlog.000003", 4)  # type: ignore[arg-type]

    class Stream:
        def __init__(self, events: list[Any]) -> None:
            self.events = events

        def __iter__(self) -> Iterator[Any]:
            yield from self.events
            reader._stop.wait(10)  # then idle, as a blocking stream, until the reader stops

        def close(self) -> None:
            pass

    def open_stream() -> Stream:
        opened.append((reader.log_file, reader.position))
        return Stream(streams[len(opened) - 1] if len(opened) <= len(streams) else [])

    reader._open = open_stream  # type: ignore[method-assign]
    reader.start()
    wait_for(lambda: reader.queue.qsize() == 2)
    reader.stop()

    changes = [reader.queue.get_nowait(), reader.queue.get_nowait()]
    assert opened == [("binlog.000003", 4), ("binlog.000003", 200)]
    assert [[(c.seq, c.op, c.values) for c in transaction] for transaction in changes] == [
        [
            (change_seq(3, 200, 1), "I", {"id": "1", "v": "v1"}),
            (change_seq(3, 200, 2), "I", {"id": "2", "v": "v2"}),
        ],
        [
            (change_seq(3, 300, 1), "I", {"id": "3", "v": "v3"}),
            (change_seq(3, 300, 2), "I", {"id": "4", "v": "v4"}),
        ],
    ]
    assert reader.reconnects == 1


# the server ---------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def mariadb() -> Iterator[MariaDbAddress]:
    """One MariaDB server (binlog ROW, full images) for the run, in a directory the `mysql` user can reach."""
    if not installed():
        pytest.fail("Debian's mariadb-server is not installed: run `make mariadb`")
    base = Path(tempfile.mkdtemp(prefix="localaws-mariadb-"))
    os.chmod(base, 0o755)
    server = LocalMariaDb(base)
    address = server.start(_free_port())
    yield address
    server.stop()
    shutil.rmtree(base, ignore_errors=True)


def connect(address: MariaDbAddress, time_zone: str = "+00:00") -> pymysql.Connection:
    db = pymysql.connect(**address.connect_kwargs())
    run(db, f"SET time_zone = '{time_zone}'")
    return db


def run(db: pymysql.Connection, *statements: str, args: Any = None) -> None:
    with db.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement, args)


ORDER_LINE = (
    "CREATE TABLE sales.`OrderLine` (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, flag TINYINT(1), bits BIT(10),"
    " one_bit BIT(1), size ENUM('S','M','L'), tags SET('red','green','blue'), doc JSON, amount DECIMAL(65,30),"
    " price DECIMAL(9,2), made DATETIME(6), seen TIMESTAMP(3) NULL DEFAULT NULL, day DATE, note VARCHAR(40),"
    " dur TIME(2), raw VARBINARY(8), qty INT UNSIGNED)"
)
ORDER_LINE_INSERT = "INSERT INTO sales.`OrderLine` VALUES (" + ", ".join(["%s"] * 16) + ")"
TOP = 2**64 - 1


@pytest.fixture
def source(mariadb: MariaDbAddress) -> Iterator[MariaDbAddress]:
    """A fresh `sales` database: `OrderLine` (every type, 3 rows, one of zero dates, written from a +05:00
    session) and `scratch` (2 rows)."""
    with connect(mariadb, "+05:00") as db:
        run(
            db,
            "DROP DATABASE IF EXISTS sales",
            "CREATE DATABASE sales",
            ORDER_LINE,
            "SET SESSION sql_mode = ''",
        )
        rows = [
            (TOP, 1, b"\x02\xaa", b"\x01", "M", "green,red", '{"a": [1, 2]}',
             "12345678901234567890123456789012345.123456789012345678901234567890", "1.50",
             "2026-01-02 03:04:05.123456", "2026-01-01 10:00:00.5", "2026-02-28", "Grüße", "-838:59:59.99",
             b"\x00\xff\x80", 4294967295),
            (2**63, 0, b"\x00\x00", b"\x00", "S", "", "[]", "-0.000000000000000000000000000001", "-2.25",
             "0000-00-00 00:00:00", "0000-00-00 00:00:00", "0000-00-00", "zero dates", "00:00:00", b"", 0),
            (1, *[None] * 15),
        ]  # fmt: skip
        with db.cursor() as cursor:
            cursor.executemany(ORDER_LINE_INSERT, rows)
        run(
            db,
            "CREATE TABLE sales.scratch (id INT PRIMARY KEY, v VARCHAR(10))",
            "INSERT INTO sales.scratch VALUES (1, 'a'), (2, 'b')",
        )
    yield mariadb


def target() -> S3TargetSettings:
    return S3TargetSettings(
        bucket_name="raw",
        bucket_folder="dms",
        include_op_for_full_load=True,
        timestamp_column_name="dms_timestamp",
        csv_null_value="NULL",
        cdc_max_batch_interval_seconds=0.3,
    )


def make_run(address: MariaDbAddress, bucket: Bucket, **options: Any) -> ReplicationRun:
    settings = SourceSettings.from_endpoint(DATABASE, address.socket, None, engine="mysql", username="root")
    return ReplicationRun(
        "full-load-and-cdc",
        settings,
        target(),
        TableMapping.parse(MAPPING),
        TaskOptions(poll_seconds=0.1, **options),
        bucket.put,
        bucket.delete_prefix,
    )


def started_run(address: MariaDbAddress, **options: Any) -> tuple[Bucket, ReplicationRun]:
    bucket = Bucket()
    replication = make_run(address, bucket, **options)
    replication.start()
    wait_for(lambda: replication.full_load_done and replication.status == "running", timeout=30)
    return bucket, replication


def binlog_end(address: MariaDbAddress) -> int:
    """The change sequence at the server's current binlog end (ordinal 0)."""
    from localaws_plugin.dms_mysql import change_seq, file_number

    with connect(address) as db, db.cursor() as cursor:
        cursor.execute("SHOW MASTER STATUS")
        log_file, position, *_ = cursor.fetchone()
    return change_seq(file_number(log_file), int(position), 0)


def caught_up(replication: ReplicationRun, address: MariaDbAddress, timeout: float = 30) -> None:
    """Wait until the run has written every change up to the binlog's end now (the last statement before
    this call must be a row change of a replicated table)."""
    end = position_of(binlog_end(address))
    wait_for(
        lambda: replication.flushed_seq is not None and position_of(replication.flushed_seq) >= end,
        timeout=timeout,
    )
    assert replication.status == "running", replication.last_failure_message


def replay(bucket: Bucket, table: str) -> dict[str, dict[str, str]]:
    """The table the files describe: per key, the record with the highest change sequence; a delete removes it."""
    latest: dict[str, dict[str, str]] = {}
    for records in bucket.rows(f"dms/{DATABASE}/{table}/"):
        for record in records:
            key = record["id"]
            if key not in latest or record["AR_H_CHANGE_SEQ"] > latest[key]["AR_H_CHANGE_SEQ"]:
                latest[key] = record
    return {key: record for key, record in latest.items() if record["Op"] != "D"}


AS_TEXT = ("amount", "dur")  # held as text in the lake: MySQL's own spelling is the oracle


def source_values(address: MariaDbAddress, table: str, columns: list[str]) -> dict[str, tuple]:
    select = ", ".join(f"CAST(`{c}` AS CHAR)" if c in AS_TEXT else f"`{c}`" for c in columns)
    with connect(address) as db, db.cursor() as cursor:
        cursor.execute(f"SELECT {select} FROM sales.`{table}`")
        return {str(row[0]): row for row in cursor.fetchall()}


# capture (no Spark) ---------------------------------------------------------------------------------------


def test_changes_committed_during_the_full_load_are_in_the_files_once(source: MariaDbAddress):
    """Given a writer inserting and updating `scratch` rows while the full load reads it in 1-row LOAD files,
    When the writer stops and the capture catches up,
    Then the files replayed by sequence are exactly the source's rows (nothing in neither, and a row in both
    the snapshot and the stream carries a higher sequence in the stream)."""
    stop = threading.Event()

    def write() -> None:
        with connect(source) as db:
            key = 100
            while not stop.is_set():
                run(db, "BEGIN", f"INSERT INTO sales.scratch VALUES ({key}, 'w')",
                    f"UPDATE sales.scratch SET v = 'u{key}' WHERE id = {key - 1}", "COMMIT")  # fmt: skip
                key += 1

    writer = threading.Thread(target=write)
    writer.start()
    try:
        bucket, replication = started_run(source, max_rows_per_load_file=1)
        time.sleep(0.5)
    finally:
        stop.set()
        writer.join()
    with connect(source) as db:
        run(db, "INSERT INTO sales.scratch VALUES (1000000, 'end')")
    caught_up(replication, source)
    replication.stop()

    expected = {key: (key, row[1]) for key, row in source_values(source, "scratch", ["id", "v"]).items()}
    written = {key: (record["id"], record["v"]) for key, record in replay(bucket, "scratch").items()}
    assert len(expected) > 10
    assert dict(sorted(written.items())) == dict(sorted(expected.items()))


def test_a_stopped_task_resumes_from_its_binlog_position(source: MariaDbAddress):
    """Given a running task stopped after a change,
    When rows change while it is stopped and it is started again (resume),
    Then the files hold every change exactly as the source has it, none read twice into a new LOAD."""
    bucket, replication = started_run(source)
    with connect(source) as db:
        run(db, "UPDATE sales.scratch SET v = 'before' WHERE id = 1")
    caught_up(replication, source)
    replication.stop()
    loads = sorted(k for k in bucket.objects if "/LOAD" in k)
    with connect(source) as db:
        run(db, "INSERT INTO sales.scratch VALUES (3, 'stopped')", "DELETE FROM sales.scratch WHERE id = 2",
            "UPDATE sales.scratch SET v = 'after' WHERE id = 1")  # fmt: skip

    replication.start()
    wait_for(lambda: replication.status == "running")
    caught_up(replication, source)
    replication.stop()

    assert sorted(k for k in bucket.objects if "/LOAD" in k) == loads
    changes = [r for k in sorted(bucket.objects) if "/LOAD" not in k for r in bucket.rows(k)[0]]
    assert sorted((r["Op"], r["id"], r["v"]) for r in changes) == [
        ("D", "2", "b"),
        ("I", "3", "stopped"),
        ("U", "1", "after"),
        ("U", "1", "before"),
    ]  # each change once: the restart read from its position, not from the binlog's start
    written = {key: record["v"] for key, record in replay(bucket, "scratch").items()}
    assert written == {"1": "after", "3": "stopped"}


def test_what_dms_does_not_replicate_from_mysql_is_not_in_the_files(
    source: MariaDbAddress, caplog: pytest.LogCaptureFixture
):
    """Given a running task over a partitioned table and a parent/child pair with ON DELETE CASCADE,
    When a partition is truncated and another dropped, a table truncated, and a parent deleted,
    Then the files keep every row those statements removed (no row events: DMS does not replicate them), the
    parent's delete is written, and each statement is named in a warning."""
    caplog.set_level(logging.WARNING, logger="localaws_plugin.dms_mysql_binlog")
    with connect(source) as db:
        run(
            db,
            "CREATE TABLE sales.events (id INT PRIMARY KEY, v VARCHAR(10)) PARTITION BY RANGE (id)"
            " (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20),"
            " PARTITION p2 VALUES LESS THAN MAXVALUE)",
            "INSERT INTO sales.events VALUES (1, 'a'), (11, 'b'), (21, 'c')",
            "CREATE TABLE sales.parent (id INT PRIMARY KEY) ENGINE=InnoDB",
            "CREATE TABLE sales.child (id INT PRIMARY KEY, parent_id INT,"
            " FOREIGN KEY (parent_id) REFERENCES sales.parent (id) ON DELETE CASCADE) ENGINE=InnoDB",
            "INSERT INTO sales.parent VALUES (1), (2)",
            "INSERT INTO sales.child VALUES (10, 1), (20, 2)",
        )
    bucket, replication = started_run(source)
    with connect(source) as db:
        run(
            db,
            "ALTER TABLE sales.events TRUNCATE PARTITION p0",
            "ALTER TABLE sales.events DROP PARTITION p1",
            "TRUNCATE TABLE sales.scratch",
            "DELETE FROM sales.parent WHERE id = 1",
        )
    caught_up(replication, source)
    replication.stop()

    assert source_values(source, "events", ["id"]).keys() == {"21"}
    assert source_values(source, "child", ["id"]).keys() == {"20"}
    assert sorted(replay(bucket, "events")) == ["1", "11", "21"]
    assert sorted(replay(bucket, "scratch")) == ["1", "2"]
    assert sorted(replay(bucket, "parent")) == ["2"]
    assert sorted(replay(bucket, "child")) == ["10", "20"]  # the cascade is not in the binlog
    warnings = [r.getMessage() for r in caplog.records if "dropped, as AWS DMS drops it" in r.getMessage()]
    assert [w.split(" at binlog")[0] for w in warnings] == [
        "DMS capture: ALTER PARTITION",
        "DMS capture: ALTER PARTITION",
        "DMS capture: TRUNCATE",
    ]
    assert all(
        w.endswith(t)
        for w, t in zip(warnings, ("sales.events", "sales.events", "sales.scratch"), strict=True)
    )


def test_table_names_differing_only_in_case_are_two_tables(source: MariaDbAddress):
    """Given `Item` and `item` in one database (case-sensitive table names, as MySQL on Linux),
    When a task loads them and each changes,
    Then each has its own folder with its own rows."""
    with connect(source) as db:
        run(
            db,
            "CREATE TABLE sales.`Item` (id INT PRIMARY KEY, v VARCHAR(10))",
            "CREATE TABLE sales.item (id INT PRIMARY KEY, v VARCHAR(10))",
            "INSERT INTO sales.`Item` VALUES (1, 'upper')",
            "INSERT INTO sales.item VALUES (1, 'lower')",
        )
    bucket, replication = started_run(source)
    with connect(source) as db:
        run(
            db,
            "INSERT INTO sales.`Item` VALUES (2, 'UPPER')",
            "UPDATE sales.item SET v = 'LOWER' WHERE id = 1",
        )
    caught_up(replication, source)
    replication.stop()

    assert {k: r["v"] for k, r in replay(bucket, "Item").items()} == {"1": "upper", "2": "UPPER"}
    assert {k: r["v"] for k, r in replay(bucket, "item").items()} == {"1": "LOWER"}


@pytest.mark.parametrize(
    ("setting", "value", "named"),
    [
        ("binlog_row_image", "MINIMAL", "binlog_row_image=MINIMAL (DMS needs FULL)"),
        ("binlog_format", "MIXED", "binlog_format=MIXED (DMS needs ROW)"),
        ("binlog_row_metadata", "MINIMAL", "binlog_row_metadata=MINIMAL (the local DMS decodes"),
    ],
)
def test_a_server_whose_binlog_dms_cannot_read_is_refused(
    source: MariaDbAddress, setting: str, value: str, named: str
):
    """Given a server whose binlog lacks what the capture needs (full row images, row events, row metadata),
    When a task starts,
    Then it fails and names the setting (no files written)."""
    with connect(source) as db, db.cursor() as cursor:
        cursor.execute(f"SELECT @@GLOBAL.{setting}")
        (before,) = cursor.fetchone()
        run(db, f"SET GLOBAL {setting} = '{value}'")
    try:
        bucket = Bucket()
        replication = make_run(source, bucket)
        replication.start()
        wait_for(lambda: replication.status == "failed")
    finally:
        with connect(source) as db:
            run(db, f"SET GLOBAL {setting} = '{before}'")
    assert named in (replication.last_failure_message or "")
    assert bucket.objects == {}


# every type into the clean zone ---------------------------------------------------------------------------

LAKE_TYPES = {
    "id": "decimal(20,0)",
    "flag": "boolean",
    "bits": "bigint",
    "one_bit": "boolean",
    "size": "string",
    "tags": "string",
    "doc": "string",
    "amount": "string",
    "price": "decimal(9,2)",
    "made": "timestamp_ntz",
    "seen": "timestamp",
    "day": "date",
    "note": "string",
    "dur": "string",
    "raw": "binary",
    "qty": "bigint",
    "rank_no": "int",
}


def schema_document(address: MariaDbAddress) -> dict[str, Any]:
    """The schema file of the `sales` database as the catalog has it now (COLUMN_TYPE spelled as MySQL does)."""
    with connect(address) as db, db.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name, column_type, column_key FROM information_schema.columns"
            " WHERE table_schema = 'sales' ORDER BY table_name, ordinal_position"
        )
        tables: dict[str, Any] = {}
        for table, column, column_type, key in cursor.fetchall():
            spec = tables.setdefault(f"sales.{table}", {"primary_key": [], "columns": []})
            spec["columns"].append({"name": column, "type": column_type})
            if key == "PRI":
                spec["primary_key"].append(column)
    return {"dialect": "mysql", "tables": tables}


def as_lake(row: tuple, columns: list[str]) -> tuple:
    """A source row (pymysql, UTC session) as the clean zone holds it."""
    converted = []
    for column, value in zip(columns, row, strict=True):
        if value is None or (isinstance(value, str) and value.startswith("0000-00-00")):
            converted.append(None)
        elif column == "id":
            converted.append(Decimal(value))
        elif column in ("flag", "one_bit"):
            converted.append(bool(int.from_bytes(value, "big")) if isinstance(value, bytes) else bool(value))
        elif column == "bits":
            converted.append(int.from_bytes(value, "big"))
        elif column == "raw":
            converted.append(bytearray(value))
        elif column == "tags":
            converted.append(
                ",".join(sorted(value, key=("red", "green", "blue").index))
                if isinstance(value, set)
                else value
            )
        else:
            converted.append(value)
    return tuple(converted)


@pytest.mark.spark
def test_every_mysql_type_through_full_load_and_cdc_lands_in_the_clean_zone_as_the_source_has_it(
    source: MariaDbAddress, spark, lake_config, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """Given `OrderLine` with every MySQL type DMS treats specially (unsigned BIGINT keys above 2^63 - 1,
    TINYINT(1), BIT, ENUM, SET, JSON, DECIMAL(65,30), DATETIME(6), TIMESTAMP(3) written from other time
    zones, DATE, zero dates) loaded by a running task,
    When CDC inserts, updates and deletes rows of every type, a column is added mid-stream, the binlog
    connection is killed between transactions and rows change while it is down, and `scratch` is truncated,
    Then the clean zone (full-load job, then the CDC job over every CDC file) has exactly the source's
    `OrderLine` rows by key in the Iceberg types docs/CONTRACTS.md lists, and `scratch` keeps its rows, as
    DMS drops TRUNCATE from a MySQL source (with a warning naming it);
    and the reconcile job reading MariaDB over JDBC finds `OrderLine` equal and `scratch`'s 3 rows extra,
    then, after changes made on the source only, exactly one differing row and one missing key."""
    from lakehouse.apply.cdc import apply_cdc
    from lakehouse.apply.full_load import full_load
    from lakehouse.apply.run import ApplyOptions
    from lakehouse.base.schema import SchemaFile
    from lakehouse.dms.reader import ReaderOptions

    from tests.support import manifest, rows_of

    caplog.set_level(logging.WARNING, logger="localaws_plugin.dms_mysql_binlog")
    bucket, replication = started_run(source)
    load_schema = SchemaFile.from_dict(schema_document(source))
    with connect(source, "-08:00") as db:
        run(db, ORDER_LINE_INSERT, args=(
            TOP - 1, 0, b"\x03\xff", b"\x01", "L", "blue,green,red", '{"k": "v", "n": null}',
            "-99999999999999999999999999999999999.999999999999999999999999999999", "9999999.99",
            "9999-12-31 23:59:59.999999", "2038-01-18 19:14:07.999", "1000-01-01", "新しい", "25:00:00.5",
            b"'\\,\n", 7))  # fmt: skip
        run(
            db,
            "BEGIN",
            f"UPDATE sales.`OrderLine` SET flag = 0, tags = 'red,blue', amount = amount * 2,"
            f" seen = '2026-06-30 16:00:00.25', size = 'S' WHERE id = {TOP}",
            "UPDATE sales.`OrderLine` SET made = '2026-03-29 02:30:00', day = '2026-03-29', bits = b'1'"
            f" WHERE id = {2**63}",
            "DELETE FROM sales.`OrderLine` WHERE id = 1",
            "COMMIT",
        )
        run(db, "ALTER TABLE sales.`OrderLine` ADD COLUMN rank_no INT")
        run(db, f"UPDATE sales.`OrderLine` SET rank_no = 3 WHERE id = {TOP}")
        run(db, ORDER_LINE_INSERT.replace("%s)", "%s, %s)"), args=(
            7, 1, b"\x00\x01", b"\x00", "M", "green", '{"ddl": true}', "0.5", "0.01",
            "2026-01-01 00:00:00", "2026-01-01 00:00:00", "2026-01-01", "after DDL", None, b"\x01", 1, 7))  # fmt: skip
    caught_up(replication, source)

    with connect(source) as db, db.cursor() as cursor:
        cursor.execute("SELECT id FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'")
        (dump_thread,) = cursor.fetchone()
        cursor.execute(f"KILL {dump_thread}")
        run(db, f"UPDATE sales.`OrderLine` SET note = 'while down', rank_no = 9 WHERE id = {2**63}")
        run(db, "INSERT INTO sales.scratch VALUES (3, 'c')", "TRUNCATE TABLE sales.scratch")
        run(db, f"DELETE FROM sales.`OrderLine` WHERE id = {TOP - 1}")
    wait_for(lambda: dump_threads(source) not in ([], [dump_thread]), timeout=20)
    caught_up(replication, source)
    replication.stop()

    raw = tmp_path / "raw"
    for key, body in bucket.objects.items():
        (raw / key).parent.mkdir(parents=True, exist_ok=True)
        (raw / key).write_bytes(body)
    options = ApplyOptions(reader=ReaderOptions(csv_null_value="NULL"))
    loaded = full_load(spark, lake_config, load_schema, str(raw / "dms"), options=options)
    assert [t.error for t in loaded.tables if t.error] == []
    cdc_files = sorted(str(raw / k) for k in bucket.objects if "/LOAD" not in k)
    applied = apply_cdc(
        spark, lake_config, SchemaFile.from_dict(schema_document(source)), manifest(*cdc_files), options
    )
    assert [t.error for t in applied.tables if t.error] == []

    table = lake_config.clean_table("sales_orderline")
    columns = list(LAKE_TYPES)
    assert {
        f.name: f.dataType.simpleString() for f in spark.table(table).schema if f.name in LAKE_TYPES
    } == LAKE_TYPES
    expected = sorted(as_lake(row, columns) for row in source_values(source, "OrderLine", columns).values())
    assert rows_of(spark, table, columns) == expected
    assert {row[0]: row[10] for row in expected} == {
        Decimal(2**63): None,  # zero TIMESTAMP
        Decimal(TOP): datetime(2026, 7, 1, 0, 0, 0, 250000),  # written at -08:00, held in UTC
        Decimal(7): datetime(2026, 1, 1, 8, 0),  # the same
    }
    assert rows_of(spark, lake_config.clean_table("sales_scratch"), ["id", "v"]) == [
        (1, "a"),
        (2, "b"),
        (3, "c"),
    ]
    assert any("TRUNCATE" in r.getMessage() and "sales.scratch" in r.getMessage() for r in caplog.records)

    # the reconcile job's MySQL side finds the lake equal but for the TRUNCATE, then exactly what drifts
    from lakehouse.reconcile.mysql import MysqlJdbcSource
    from lakehouse.reconcile.plan import ReconcileOptions, plan_table
    from lakehouse.reconcile.run import reconcile

    options = ReconcileOptions(segment_rows=2, leaf_rows=1, bisect_factor=2)
    jdbc = MysqlJdbcSource(spark, f"jdbc:mysql://127.0.0.1:{source.port}/sales", {"user": "root"})
    schema = SchemaFile.from_dict(schema_document(source))
    first = reconcile(spark, lake_config, schema, jdbc, options, run_id="my1")
    # the second signal a repair needs: MySQL's own row count (TABLE_ROWS), 0 after the TRUNCATE, no view
    scratch = jdbc.statistics(plan_table(spark, lake_config, schema.tables["sales.scratch"]))
    assert (scratch.estimated_rows, scratch.hidden_by) == (0, None)
    assert [(t.table, t.missing, t.extra, t.differing, t.source_empty, t.error) for t in first.tables] == [
        ("sales.OrderLine", 0, 0, 0, False, None),
        ("sales.scratch", 0, 3, 0, True, None),
    ]
    with connect(source) as db:  # the task is stopped: these reach the source only
        run(db, f"UPDATE sales.`OrderLine` SET dur = '-00:00:00.01' WHERE id = {TOP}")
        run(db, "INSERT INTO sales.scratch VALUES (1, 'a'), (9, 'z')")
    second = reconcile(
        spark, lake_config, schema, MysqlJdbcSource(spark, jdbc.url, {"user": "root"}), options
    )
    assert [(t.table, t.missing, t.extra, t.differing, t.key_mode) for t in second.tables] == [
        ("sales.OrderLine", 0, 0, 1, "hash"),
        ("sales.scratch", 1, 2, 0, "range"),
    ]


def dump_threads(address: MariaDbAddress) -> list[int]:
    with connect(address) as db, db.cursor() as cursor:
        cursor.execute("SELECT id FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'")
        return [thread for (thread,) in cursor.fetchall()]


# the reconcile's canonical text of the types the lake holds as float, double or text ----------------------


def test_mysql_sql_gives_a_double_the_bits_java_gives_it(source: MariaDbAddress):
    """Given doubles at every edge of the format (±0, the subnormals, each power of two and its neighbours,
    the smallest normal, the largest double) and 3,000 random bit patterns,
    When MariaDB computes the reconcile's canonical text of each (lakehouse.reconcile.mysql.my_double_bits),
    Then it is Java's Double.doubleToLongBits of the value (the lake side's), for every one."""
    import math
    import random
    import struct

    from lakehouse.reconcile.mysql import my_double_bits

    def java_bits(value: float) -> int:  # doubleToLongBits: the IEEE bits, as a signed long (no NaN here)
        return struct.unpack(">q", struct.pack(">d", value))[0]

    rng = random.Random(31)
    values = [0.0, 5e-324, 1e-310, 2.225073858507201e-308, 2.2250738585072014e-308, 0.1, 1.0, 1.5]
    values += [1.2345678901234568e20, 8.98846567431158e307, 1.7976931348623157e308]
    values += [math.ldexp(1.0, k) for k in range(-1074, 1024)]
    values += [math.nextafter(math.ldexp(1.0, k), 0.0) for k in range(-1073, 1024)]
    values += [math.nextafter(math.ldexp(1.0, k), math.inf) for k in range(-1074, 1023)]
    values += [struct.unpack(">d", rng.getrandbits(64).to_bytes(8, "big"))[0] for _ in range(3000)]
    values = [v for v in values if math.isfinite(v)]  # MySQL holds no NaN or infinity
    values += [-v for v in values if v]  # -0.0: a column holds +0 (MariaDB); the expression below
    with connect(source) as db, db.cursor() as cursor:
        run(db, "CREATE TEMPORARY TABLE sales.doubles (k INT PRIMARY KEY, d DOUBLE)")
        cursor.executemany("INSERT INTO sales.doubles VALUES (%s, %s)", list(enumerate(values)))
        cursor.execute(f"SELECT k, {my_double_bits('d')} FROM sales.doubles")
        found = dict(cursor.fetchall())
        cursor.execute(f"SELECT {my_double_bits('NULL')}, {my_double_bits('-0e0')}, {my_double_bits('0e0')}")
        nulls_and_zeros = cursor.fetchone()

    assert len(values) > 12_000
    assert {repr(v): found[k] for k, v in enumerate(values)} == {repr(v): java_bits(v) for v in values}
    assert nulls_and_zeros == (None, java_bits(-0.0), 0)


TYPED = (
    "CREATE TABLE sales.`{}` (id INT PRIMARY KEY, f FLOAT, d DOUBLE, y YEAR, ch CHAR(5), bi BINARY(4),"
    " tm TIME(6))"
)
TYPED_ROWS = (
    "(1, 1.0000001, 0.1, 2026, 'ab  ', x'01', '-12:34:56.000001')",
    "(2, 16777217, 1.7976931348623157e308, 0, '', x'0000ff00', '838:59:59')",
    "(3, -1.17549435e-38, -5e-324, 1901, ' y', x'', '00:00:00.5')",
    "(4, 3.4028234e38, -2.2250738585072014e-308, 2155, '12345', x'ffffffff', '-838:59:59')",
    "(5, 1.4e-45, -0e0, NULL, NULL, NULL, NULL)",
    "(6, 0, 1.2345678901234568e20, 1999, 'z', x'00', '00:00:00')",
)
TYPED_COLUMNS = ["id", "f", "d", "y", "ch", "bi", "tm"]


@pytest.mark.spark
def test_float_double_year_char_binary_and_time_hash_alike_on_both_sides_of_the_mysql_reconcile(
    source: MariaDbAddress, spark, lake_config, tmp_path: Path
):
    """Given `Typed` (FLOAT, DOUBLE, YEAR, CHAR(5), BINARY(4), TIME(6): float extremes and subnormals, a FLOAT
    that prints as 1.67772e+07, the largest double, double subnormals, -0.0, YEAR 0000, CHAR trailing spaces,
    zero-padded BINARY, TIME fractions) and `typed`, another table differing only in case (MySQL on Linux),
    both loaded by a running task, then copied row by row through the binlog (CDC) and updated,
    When the lake applies the files of `Typed` (the schema file's table; `typed` is not in it),
    Then each column's canonical text is byte for byte the same computed in MariaDB's SQL and in Spark, the
    reconcile reads `Typed` (not `typed`) and finds it equal, and after one value per row is changed on the
    source alone (each type, by one step of its precision), exactly those rows differ."""
    from lakehouse.apply.cdc import apply_cdc
    from lakehouse.apply.full_load import full_load
    from lakehouse.apply.run import ApplyOptions
    from lakehouse.base.schema import SchemaFile
    from lakehouse.dms.reader import ReaderOptions
    from lakehouse.reconcile.mysql import MysqlJdbcSource, jvm_has_class, my_text
    from lakehouse.reconcile.plan import ReconcileOptions, lake_text
    from lakehouse.reconcile.run import reconcile
    from pyspark.sql import functions as F

    from tests.support import manifest

    with connect(source) as db:
        run(db, TYPED.format("Typed"), TYPED.format("typed"))
        run(db, "INSERT INTO sales.`Typed` VALUES " + ", ".join(TYPED_ROWS))
        run(db, "INSERT INTO sales.typed VALUES " + ", ".join(
            f"({k}, 9, 9, 2000, 'other', x'09', '09:09:09')" for k in (1, 2, 3, 4, 5, 6, 11, 12, 13)))  # fmt: skip
    bucket, replication = started_run(source)
    with connect(source) as db:
        run(
            db,
            "INSERT INTO sales.`Typed` SELECT id + 10, f, d, y, ch, bi, tm FROM sales.`Typed`",
            "UPDATE sales.`Typed` SET d = 2.5e-300, tm = '-00:00:00.000001', y = 2000 WHERE id = 16",
            "UPDATE sales.typed SET ch = 'cdc'",
        )
    caught_up(replication, source)
    replication.stop()
    assert {k: r["ch"] for k, r in replay(bucket, "typed").items()} == dict.fromkeys(
        ["1", "2", "3", "4", "5", "6", "11", "12", "13"], "cdc"
    )

    raw = tmp_path / "raw"
    for key, body in bucket.objects.items():
        (raw / key).parent.mkdir(parents=True, exist_ok=True)
        (raw / key).write_bytes(body)
    document = schema_document(source)
    document["tables"] = {"sales.Typed": document["tables"]["sales.Typed"]}  # the task maps `Typed` only
    schema = SchemaFile.from_dict(document)
    options = ApplyOptions(reader=ReaderOptions(csv_null_value="NULL"))
    loaded = full_load(spark, lake_config, schema, str(raw / "dms"), options=options)
    assert [t.error for t in loaded.tables if t.error] == []
    cdc_files = sorted(str(raw / k) for k in bucket.objects if "/LOAD" not in k and "/Typed/" in k)
    applied = apply_cdc(spark, lake_config, schema, manifest(*cdc_files), options)
    assert [t.error for t in applied.tables if t.error] == []

    table = lake_config.clean_table("sales_typed")
    types = {f.name: f.dataType for f in spark.table(table).schema if f.name in TYPED_COLUMNS}
    assert {n: t.simpleString() for n, t in types.items()} == {
        "id": "int", "f": "float", "d": "double", "y": "string", "ch": "string", "bi": "binary",
        "tm": "string",
    }  # fmt: skip
    spec = schema.tables["sales.Typed"]
    with connect(source) as db, db.cursor() as cursor:
        cursor.execute(
            "SELECT id, "
            + ", ".join(my_text(c, types[c], spec.column(c).source_type) for c in TYPED_COLUMNS[1:])
            + " FROM sales.`Typed`"
        )
        source_texts = {row[0]: row[1:] for row in cursor.fetchall()}
    lake_texts = {
        row[0]: tuple(row[1:])
        for row in spark.table(table)
        .select("id", *[lake_text(F.col(c), types[c]) for c in TYPED_COLUMNS[1:]])
        .collect()
    }
    assert sorted(lake_texts) == sorted(source_texts) == [1, 2, 3, 4, 5, 6, 11, 12, 13, 14, 15, 16]
    differing = {
        key: (lake_texts[key], texts) for key, texts in source_texts.items() if lake_texts[key] != texts
    }
    assert differing == {}, differing  # (lake, source) canonical texts of a row, by key
    assert source_texts[2][:3] == ("4715268809856909312", "9218868437227405311", "0000")  # 16777216f, max
    assert source_texts[3][4] == "00000000" and source_texts[5][1] == "0"  # x'' padded; -0e0 stored as 0

    jdbc_url = f"jdbc:mysql://127.0.0.1:{source.port}/sales"
    # the local DMS writes a FLOAT as the shortest text that reads back as the same single: compared exactly
    settings = ReconcileOptions(segment_rows=2, leaf_rows=1, bisect_factor=2, compare_mysql_float=True)
    assert MysqlJdbcSource(spark, jdbc_url, {}).properties["driver"] == "org.mariadb.jdbc.Driver"
    assert not jvm_has_class(spark, "com.mysql.cj.jdbc.Driver")  # Glue's: not here, nor needed
    first = reconcile(
        spark, lake_config, schema, MysqlJdbcSource(spark, jdbc_url, {"user": "root"}), settings
    )
    assert [(t.table, t.missing, t.extra, t.differing, t.error) for t in first.tables] == [
        ("sales.Typed", 0, 0, 0, None)
    ]
    with connect(source) as db:  # the task is stopped: these reach the source only
        run(
            db,
            "UPDATE sales.`Typed` SET f = 1.0000002 WHERE id = 1",  # the next float up
            "UPDATE sales.`Typed` SET d = 1.7976931348623155e308 WHERE id = 2",  # the next double down
            "UPDATE sales.`Typed` SET y = 1902 WHERE id = 3",
            "UPDATE sales.`Typed` SET ch = '12346' WHERE id = 4",
            "UPDATE sales.`Typed` SET bi = x'00000001' WHERE id = 6",
            "UPDATE sales.`Typed` SET tm = '-12:34:56.000002' WHERE id = 11",
            "UPDATE sales.`Typed` SET d = -1e-323 WHERE id = 13",  # the next subnormal
            "UPDATE sales.`Typed` SET f = 3.4028232e38 WHERE id = 14",  # the next float down from the largest
            "UPDATE sales.`Typed` SET d = 5e-324 WHERE id = 15",  # 0 to the smallest double
            "UPDATE sales.`Typed` SET ch = 'ab   ' WHERE id = 1",  # trailing spaces: MySQL stores 'ab'
        )
    second = reconcile(
        spark, lake_config, schema, MysqlJdbcSource(spark, jdbc_url, {"user": "root"}), settings
    )
    assert [(t.table, t.missing, t.extra, t.differing, t.error) for t in second.tables] == [
        ("sales.Typed", 0, 0, 9, None)
    ]
    assert second.tables[0].samples["differing"] == [{"id": k} for k in (1, 2, 3, 4, 6, 11, 13, 14, 15)]

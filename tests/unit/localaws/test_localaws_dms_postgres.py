"""The local DMS against a real PostgreSQL 16 server (pgserver, a Unix socket; no LocalStack): the logical
replication slot, pgoutput decoding, and what a DBA does mid-stream. Files are collected in a dict.

The oracle: every file applied in change-sequence order per key (LOAD rows carry the snapshot's sequence)
must give exactly the source's rows, whatever was committed while the full load ran."""

from __future__ import annotations

import random
import struct
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from localaws_plugin.dms_format import TableMapping
from localaws_plugin.dms_postgres import (
    Begin,
    Commit,
    Relation,
    RowChange,
    decode_message,
    parse_lsn,
    standard_type,
)
from localaws_plugin.dms_replication import ReplicationRun, SourceSettings, TaskOptions

from tests.unit.localaws.test_localaws_dms_replication import MAPPING, Bucket, s3_target, wait_for

SCHEMA = "sales"
BEFORE_IMAGES = {
    "rule-type": "transformation",
    "rule-id": "3",
    "rule-name": "before-images",
    "rule-action": "add-before-image-columns",
    "rule-target": "column",
    "object-locator": {"schema-name": "%", "table-name": "%"},
    "before-image-def": {"column-prefix": "BI_", "column-filter": "pk-only"},
}


@pytest.fixture
def server(postgres_socket_dir: str) -> str:
    return postgres_socket_dir


@pytest.fixture
def source(server: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh `sales` schema with `customer` (5 rows); yields the slot name for this test."""
    slot = "t_" + request.node.name[:40].lower().replace("[", "_").replace("]", "_")
    with connect(server) as db:
        db.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE NOT active")
        db.execute(f"DROP PUBLICATION IF EXISTS {slot}_publication")
        db.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        db.execute(f"CREATE SCHEMA {SCHEMA}")
        db.execute(
            f"CREATE TABLE {SCHEMA}.customer (id integer PRIMARY KEY, name varchar(40), balance numeric(9,2),"
            " seen timestamptz, note text, zip char(6) DEFAULT '123', photo bytea DEFAULT '\\x00ff')"
        )
        db.execute(
            f"INSERT INTO {SCHEMA}.customer SELECT i, 'c' || i, i * 1.5, timestamptz '2026-01-01 08:00:00+02',"
            " CASE WHEN i % 2 = 0 THEN '' END FROM generate_series(1, 5) i"
        )
    yield slot


def connect(socket_dir: str) -> psycopg.Connection:
    return psycopg.connect(host=socket_dir, dbname="postgres", user="postgres", autocommit=True)


def make_run(
    socket_dir: str, slot: str, bucket: Bucket, migration_type: str = "full-load-and-cdc"
) -> ReplicationRun:
    settings = SourceSettings.from_endpoint(
        "postgres", socket_dir, f"schemaName={SCHEMA};PluginName=pgoutput;slotName={slot}", engine="postgres"
    )
    return ReplicationRun(
        migration_type,
        settings,
        s3_target(),
        TableMapping.parse({"rules": [*MAPPING["rules"], BEFORE_IMAGES]}),
        TaskOptions(poll_seconds=0.1),
        bucket.put,
        bucket.delete_prefix,
    )


def started_run(server: str, slot: str) -> tuple[Bucket, ReplicationRun]:
    """A full-load-and-cdc task over the source, once its full load is done and CDC runs."""
    bucket = Bucket()
    run = make_run(server, slot, bucket)
    run.start()
    wait_for(lambda: run.full_load_done and run.status == "running")
    return bucket, run


def replay(bucket: Bucket, table: str = "customer") -> dict[str, dict[str, str]]:
    """The table the files describe: per key, the record with the highest change sequence; a delete removes
    the key, and an update that changed the key deletes the old one (its before-image)."""
    latest: dict[str, dict[str, str]] = {}

    def offer(key: str, record: dict[str, str]) -> None:
        if key not in latest or record["AR_H_CHANGE_SEQ"] > latest[key]["AR_H_CHANGE_SEQ"]:
            latest[key] = record

    for records in bucket.rows(f"dms/{SCHEMA}/{table}/"):
        for record in records:
            offer(record["id"], record)
            if record["Op"] == "U" and record.get("BI_id") not in (None, "NULL", record["id"]):
                offer(record["BI_id"], record | {"Op": "D"})
    return {key: record for key, record in latest.items() if record["Op"] != "D"}


def source_rows(socket_dir: str, table: str = "customer") -> dict[str, dict[str, str | None]]:
    with connect(socket_dir) as db:
        db.execute("SET TimeZone = 'UTC'")
        cursor = db.execute(f"SELECT * FROM {SCHEMA}.{table}")
        columns = [d.name for d in cursor.description]
        rows = [
            dict(zip(columns, (None if v is None else str(v) for v in row), strict=True)) for row in cursor
        ]
    return {row["id"]: row for row in rows}


def assert_files_equal_source(bucket: Bucket, socket_dir: str) -> None:
    expected = source_rows(socket_dir)
    files = replay(bucket)
    assert sorted(files) == sorted(expected)
    for key, row in expected.items():
        record = files[key]
        written = {c: None if record.get(c) == "NULL" else record.get(c) for c in ("name", "balance")}
        assert written["name"] == row["name"], key
        assert (written["balance"] and Decimal(written["balance"])) == (
            row["balance"] and Decimal(row["balance"])
        )


# pgoutput, decoded -------------------------------------------------------------------------------------


def test_pgoutput_messages_decode_to_relations_transactions_and_row_images() -> None:
    relation = (
        b"R" + struct.pack("!I", 16385) + b"sales\0customer\0d" + struct.pack("!H", 2)
        + b"\x01id\0" + struct.pack("!Ii", 23, -1) + b"\x00name\0" + struct.pack("!Ii", 1043, 44)
    )  # fmt: skip
    assert decode_message(relation) == Relation(
        16385, "sales", "customer", "d", ("id", "name"), ("id",), (23, 1043)
    )
    begin = decode_message(b"B" + struct.pack("!QqI", 0x14A3F10, 0, 732))
    assert isinstance(begin, Begin) and begin.final_lsn == 0x14A3F10 and begin.xid == 732
    commit = decode_message(b"C" + struct.pack("!BQQq", 0, 0x14A3F10, 0x14A3F40, 0))
    assert commit == Commit(0x14A3F10, 0x14A3F40)
    update = (
        b"U" + struct.pack("!I", 16385) + b"K" + struct.pack("!H", 2) + b"t" + struct.pack("!I", 1) + b"1n"
        + b"N" + struct.pack("!H", 2) + b"t" + struct.pack("!I", 1) + b"2u"
    )  # fmt: skip
    assert decode_message(update) == RowChange(
        "U", 16385, ("2", decode_message_unchanged()), ("1", None), True
    )
    assert parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert standard_type("numeric(7,2)") == "NUMERIC(7,2)"
    assert standard_type("timestamp with time zone") == "TIMESTAMP"
    assert standard_type("character varying(60)") == "VARCHAR(60)"
    assert standard_type("character(16)") == "CHAR(16)"
    assert standard_type("integer") == "INTEGER"


def decode_message_unchanged() -> object:
    from localaws_plugin.dms_pgoutput import UNCHANGED

    return UNCHANGED


# the replication slot ----------------------------------------------------------------------------------


def test_the_full_load_and_the_stream_meet_at_the_slots_consistent_point_under_concurrent_writes(
    server: str, source: str
) -> None:
    """Given a writer updating, inserting and deleting rows while the task starts and loads,
    When the full load reads its snapshot and CDC streams the slot,
    Then replaying LOAD then CDC by change sequence gives exactly the source: nothing committed during the
    full load is missing, and what the snapshot already holds is only ever re-applied in commit order."""
    bucket = Bucket()
    stop = threading.Event()

    def writer() -> None:
        with connect(server) as db:
            i = 100
            while not stop.is_set():
                i += 1
                with db.transaction():
                    db.execute(
                        f"INSERT INTO {SCHEMA}.customer (id, name, balance) VALUES (%s, %s, 1)", (i, f"n{i}")
                    )
                    db.execute(
                        f"UPDATE {SCHEMA}.customer SET balance = balance + 1 WHERE id = %s", (i % 5 + 1,)
                    )
                    if i % 3 == 0:
                        db.execute(f"DELETE FROM {SCHEMA}.customer WHERE id = %s", (i - 1,))
                time.sleep(0.002)

    thread = threading.Thread(target=writer)
    thread.start()
    run = make_run(server, source, bucket)
    try:
        time.sleep(0.2)
        run.start()
        wait_for(lambda: run.full_load_done and run.status == "running")
        time.sleep(0.5)
    finally:
        stop.set()
        thread.join()
    time.sleep(0.8)
    run.stop()
    assert run.status == "stopped", run.last_failure_message
    load = [r for f in bucket.rows(f"dms/{SCHEMA}/customer/LOAD") for r in f]
    cdc = [r for f in bucket.rows(f"dms/{SCHEMA}/customer/2") for r in f]
    assert load and cdc
    assert len({r["AR_H_CHANGE_SEQ"] for r in load}) == 1  # one snapshot
    seqs = [r["AR_H_CHANGE_SEQ"] for r in cdc]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)  # commit order, each change once
    assert_files_equal_source(bucket, server)


def test_deletes_carry_the_key_updates_the_before_image_and_timestamptz_is_written_in_utc(
    server: str, source: str
) -> None:
    bucket, run = started_run(server, source)
    with connect(server) as db:
        db.execute(f"UPDATE {SCHEMA}.customer SET id = 50, name = 'moved' WHERE id = 1")
        db.execute(f"DELETE FROM {SCHEMA}.customer WHERE id = 2")
        db.execute(
            f"INSERT INTO {SCHEMA}.customer VALUES (9, 'x,\"y\"', 3.25, '2026-03-01 12:00:00.5+00', NULL)"
        )
    wait_for(lambda: len(replay(bucket)) == 5 and "50" in replay(bucket))
    run.stop()
    load = [r for f in bucket.rows(f"dms/{SCHEMA}/customer/LOAD") for r in f]
    assert load[0]["seen"] == "2026-01-01 06:00:00.000000"
    assert load[0]["zip"] == "123   "  # char(n) padded in LOAD as in CDC (a ::text cast would trim it)
    cdc = [r for f in bucket.rows(f"dms/{SCHEMA}/customer/2") for r in f]
    assert [(r["Op"], r["id"]) for r in cdc] == [("U", "50"), ("D", "2"), ("I", "9")]
    assert cdc[1]["name"] == "NULL" and cdc[1]["balance"] == "NULL"  # REPLICA IDENTITY DEFAULT: the key only
    assert cdc[2]["name"] == 'x,"y"' and cdc[2]["seen"] == "2026-03-01 12:00:00.500000"
    assert cdc[0]["zip"] == "123   "
    assert load[0]["photo"] == cdc[0]["photo"] == "00FF"  # bytea as DMS writes a BLOB: hex digits
    assert_files_equal_source(bucket, server)


def test_columns_added_and_widened_mid_stream_start_new_files_with_the_new_header(
    server: str, source: str
) -> None:
    bucket, run = started_run(server, source)
    with connect(server) as db:
        db.execute(f"UPDATE {SCHEMA}.customer SET name = 'before' WHERE id = 1")
        db.execute(f"ALTER TABLE {SCHEMA}.customer ADD COLUMN tier varchar(10)")
        db.execute(f"ALTER TABLE {SCHEMA}.customer ALTER COLUMN balance TYPE numeric(12,3)")
        db.execute(f"UPDATE {SCHEMA}.customer SET tier = 'gold', balance = 123456.789 WHERE id = 3")
    wait_for(lambda: replay(bucket).get("3", {}).get("tier") == "gold")
    run.stop()
    files = bucket.rows(f"dms/{SCHEMA}/customer/2")
    assert "tier" not in files[0][0] and files[-1][-1]["tier"] == "gold"
    assert files[-1][-1]["balance"] == "123456.789"
    assert_files_equal_source(bucket, server)


def test_a_reload_reads_the_table_at_a_fresh_consistent_point_and_the_stream_goes_on(
    server: str, source: str
) -> None:
    bucket, run = started_run(server, source)
    with connect(server) as db:
        db.execute(f"UPDATE {SCHEMA}.customer SET name = 'changed' WHERE id = 1")
        db.execute(f"DELETE FROM {SCHEMA}.customer WHERE id = 2")
    run.request_reload(["customer"])
    wait_for(lambda: run.table_statistics["customer"].state == "Table completed" and not run._reloads)
    with connect(server) as db:
        db.execute(f"INSERT INTO {SCHEMA}.customer (id, name) VALUES (7, 'after')")
    wait_for(lambda: "7" in replay(bucket))
    run.stop()
    loaded = [r for f in bucket.rows(f"dms/{SCHEMA}/customer/LOAD") for r in f]
    assert sorted(r["id"] for r in loaded) == ["1", "3", "4", "5"]
    assert_files_equal_source(bucket, server)
    with connect(server) as db:  # the reload's temporary slot is gone with its connection
        slots = [s for (s,) in db.execute("SELECT slot_name FROM pg_replication_slots")]
    assert f"{source}_reload" not in slots


def test_a_task_that_failed_before_writing_its_files_replays_them_when_resumed(
    server: str, source: str
) -> None:
    """Given a running task whose S3 writes start failing (the task stops with FATAL_ERROR, as DMS does),
    When changes are committed meanwhile and the task is resumed,
    Then the slot still holds every change after the last one written, and the files again equal the source."""
    bucket = Bucket()
    failing = threading.Event()

    def put(bucket_name: str, key: str, body: bytes) -> None:
        if failing.is_set():
            raise OSError("S3 unreachable")
        bucket.put(bucket_name, key, body)

    run = make_run(server, source, bucket)
    run.put_object = put
    run.start()
    wait_for(lambda: run.full_load_done and run.status == "running")
    failing.set()
    with connect(server) as db:
        db.execute(f"UPDATE {SCHEMA}.customer SET name = 'lost?' WHERE id = 4")
        db.execute(f"DELETE FROM {SCHEMA}.customer WHERE id = 5")
    wait_for(lambda: run.status == "failed")
    assert "S3 unreachable" in (run.last_failure_message or "")
    failing.clear()
    with connect(server) as db:
        db.execute(f"INSERT INTO {SCHEMA}.customer (id, name) VALUES (8, 'later')")
    run.start("resume-processing")
    wait_for(lambda: "8" in replay(bucket) and "5" not in replay(bucket))
    run.stop()
    assert replay(bucket)["4"]["name"] == "lost?"
    assert_files_equal_source(bucket, server)


def test_a_resume_after_the_slot_was_dropped_fails_with_the_reason_and_bad_endpoints_are_refused(
    server: str, source: str
) -> None:
    """A slot dropped while its task was stopped has lost the changes since: the resume fails and says so
    (the operator reloads the target), rather than resume from wherever a new slot would start."""
    _bucket, run = started_run(server, source)
    run.stop()
    with connect(server) as db:
        db.execute("SELECT pg_drop_replication_slot(%s)", (source,))
    run.start("resume-processing")
    run.wait(10)
    assert run.status == "failed"
    assert f"replication slot {source!r} does not exist" in (run.last_failure_message or "")
    with pytest.raises(ValueError, match="pgoutput"):
        SourceSettings.from_endpoint("postgres", server, "PluginName=pglogical", engine="postgres")
    with pytest.raises(ValueError, match="ServerName"):
        SourceSettings.from_endpoint("postgres", None, "", engine="postgres")


def test_the_local_server_runs_with_logical_decoding(server: str, tmp_path: Path) -> None:
    with connect(server) as db:
        assert db.execute("SHOW wal_level").fetchone()[0] == "logical"


def test_an_unchanged_toasted_value_is_taken_from_replica_identity_full_and_never_made_up(
    server: str, source: str
) -> None:
    """Given a text value too large to stay inline (TOASTed, out of the WAL when an UPDATE leaves it alone),
    When another column of its row is updated under REPLICA IDENTITY FULL, Then the file carries the value
    from the old row image; and under the default identity the task fails naming table, column and the fix,
    rather than write a null the source never had."""
    big = random.Random(7).randbytes(30_000).hex()  # 60 kB that compress badly: stored out of line
    with connect(server) as db:
        db.execute(f"UPDATE {SCHEMA}.customer SET note = %s WHERE id = 1", (big,))
        db.execute(f"ALTER TABLE {SCHEMA}.customer REPLICA IDENTITY FULL")
    bucket, run = started_run(server, source)
    with connect(server) as db:
        db.execute(f"UPDATE {SCHEMA}.customer SET name = 'full' WHERE id = 1")
    wait_for(lambda: replay(bucket).get("1", {}).get("name") == "full")
    assert replay(bucket)["1"]["note"] == big
    with connect(server) as db:
        db.execute(f"ALTER TABLE {SCHEMA}.customer REPLICA IDENTITY DEFAULT")
        db.execute(f"UPDATE {SCHEMA}.customer SET name = 'default' WHERE id = 1")
    wait_for(lambda: run.status == "failed")
    assert "customer.note" in (run.last_failure_message or "")
    assert "REPLICA IDENTITY FULL" in (run.last_failure_message or "")


def test_postgresql_types_reach_iceberg_through_the_dms_files_equal_to_the_source(
    server: str, source: str, spark, lake_config, tmp_path: Path
) -> None:
    """Given a table of the types a PostgreSQL schema really holds (bytea, json/jsonb, an array, boolean,
    uuid, timestamptz, unconstrained numeric, char(n), an enum),
    When the local DMS replicates a full load and inserts, updates and deletes, and the jobs apply its files
    with the schema file reflected from the live catalog,
    Then the clean table equals the source by the verifier's row checksums: every type round-trips."""
    from lakehouse.apply.cdc import apply_cdc
    from lakehouse.apply.full_load import full_load
    from lakehouse.apply.run import ApplyOptions
    from lakehouse.base.schema import SchemaFile
    from lakehouse.dms.reader import ReaderOptions

    from tests.support import manifest
    from tools.schema_gen import reflect_schema
    from tools.source_db import SourceDatabase
    from tools.verify import check_table

    with connect(server) as db:
        db.execute(f"CREATE TYPE {SCHEMA}.mood AS ENUM ('ok', 'sad')")
        db.execute(
            f"CREATE TABLE {SCHEMA}.kinds (id integer PRIMARY KEY, photo bytea, doc jsonb, raw json, tags int[],"
            f" flag boolean, ref uuid, at timestamptz(3), amount numeric, code char(4), mood {SCHEMA}.mood)"
        )
        db.execute(
            f"INSERT INTO {SCHEMA}.kinds VALUES (1, '\\x00ff10', '{{\"a\": [1, 2]}}', '{{\"b\" : \"x,y\"}}',"
            " '{1,2,3}', true, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2026-05-01 10:00:00.125+02', 1.5, 'ab',"
            " 'ok'), (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
        )
    bucket, run = started_run(server, source)
    with connect(server) as db:
        db.execute(
            f"INSERT INTO {SCHEMA}.kinds VALUES (3, '\\xcafe', '[]', 'null', '{{}}', false, NULL,"
            " '1999-12-31 23:59:59.999+00', 123456789.123456, 'x', 'sad')"
        )
        db.execute(
            f"UPDATE {SCHEMA}.kinds SET photo = '\\xbeef', flag = false, amount = 0.000001 WHERE id = 1"
        )
        db.execute(f"DELETE FROM {SCHEMA}.kinds WHERE id = 2")
    wait_for(lambda: any(k.startswith(f"dms/{SCHEMA}/kinds/2") for k in bucket.objects))
    run.stop()
    for key, body in bucket.objects.items():
        path = tmp_path / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    url = f"postgresql+psycopg://postgres@/postgres?host={server}"
    schema = SchemaFile.from_dict(reflect_schema(url, [SCHEMA], [f"{SCHEMA}.kinds"]))
    options = ApplyOptions(reader=ReaderOptions(csv_null_value="NULL"))
    assert full_load(spark, lake_config, schema, str(tmp_path / "dms"), options=options).ok
    cdc = sorted(str(p) for p in (tmp_path / "dms" / SCHEMA / "kinds").glob("2*.csv"))
    assert apply_cdc(spark, lake_config, schema, manifest(*cdc), options).ok
    check = check_table(
        spark,
        lake_config,
        schema.find(SCHEMA, "kinds"),
        SourceDatabase.postgresql(f"postgresql://postgres@/postgres?host={server}"),
    )
    if not check.matches:
        from tools.verify import canonical

        frame = spark.table(lake_config.clean_table(schema.find(SCHEMA, "kinds").iceberg_name))
        types = {f.name: f.dataType for f in frame.schema.fields}
        with connect(server) as db:
            cursor = db.execute(f"SELECT * FROM {SCHEMA}.kinds ORDER BY id")
            names = [d.name for d in cursor.description]
            expected = [[canonical(v, types[n]) for v, n in zip(row, names, strict=True)] for row in cursor]
        got = [
            [canonical(v, types[n]) for v, n in zip(row, names, strict=True)]
            for row in frame.select(*names).orderBy("id").collect()
        ]
        raise AssertionError(f"{check.line()}\nsource {expected}\nclean  {got}")
    assert check.source_rows == 2

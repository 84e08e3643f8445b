"""HeartbeatEnable on the local DMS's PostgreSQL source, on a real PostgreSQL 16 server: a quiet
replicated schema while the server writes WAL elsewhere. Without the heartbeat the task's slot confirms
nothing and retains that WAL for ever (AWS DMS does the same: its documented fix is HeartbeatEnable); with it,
the slot moves on, and never past a change of the task's."""

from __future__ import annotations

import json

import psycopg
from localaws_plugin.dms_format import TableMapping
from localaws_plugin.dms_postgres import parse_lsn
from localaws_plugin.dms_replication import ReplicationRun, SourceSettings, TaskOptions

from tests.unit.localaws import test_localaws_dms_postgres as on_postgres
from tests.unit.localaws.test_localaws_dms_postgres import SCHEMA, assert_files_equal_source, connect, replay
from tests.unit.localaws.test_localaws_dms_replication import MAPPING, Bucket, s3_target, wait_for

server, source = on_postgres.server, on_postgres.source  # the real server and a fresh `sales` schema
NOISE = "noise_elsewhere"  # a schema the task does not replicate (the publication does not hold it)


def run_with(server: str, slot: str, bucket: Bucket, heartbeat: dict | None) -> ReplicationRun:
    settings = SourceSettings.from_endpoint(
        "postgres",
        server,
        f"schemaName={SCHEMA};PluginName=pgoutput;slotName={slot}",
        engine="postgres",
        postgres_settings=heartbeat,
    )
    task_settings = {"LocalAws": {"PollSeconds": 0.1, "HeartbeatSeconds": 0.3}}
    return ReplicationRun(
        "full-load-and-cdc",
        settings,
        s3_target(),
        TableMapping.parse(MAPPING),
        TaskOptions.from_task_settings(json.loads(json.dumps(task_settings))),
        bucket.put,
        bucket.delete_prefix,
    )


def slot_position(db: psycopg.Connection, slot: str) -> tuple[int, int]:
    restart, confirmed = db.execute(
        "SELECT restart_lsn::text, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    return parse_lsn(restart), parse_lsn(confirmed)


def write_elsewhere(db: psycopg.Connection, rows: int = 3000) -> int:
    """WAL the task has no business with; returns the server's WAL position after it. A running-xacts record
    follows (pg_log_standby_snapshot), so a slot confirmed past the rows may also release them (restart_lsn)."""
    db.execute(f"CREATE SCHEMA IF NOT EXISTS {NOISE}")
    db.execute(f"CREATE TABLE IF NOT EXISTS {NOISE}.events (id bigserial PRIMARY KEY, payload text)")
    for _ in range(3):
        db.execute(
            f"INSERT INTO {NOISE}.events (payload) SELECT repeat('x', 200) FROM generate_series(1, %s)",
            (rows,),
        )
    (lsn,) = db.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    db.execute("SELECT pg_log_standby_snapshot()")
    return parse_lsn(lsn)


def test_without_heartbeat_a_quiet_slot_retains_the_wal_written_elsewhere(server: str, source: str) -> None:
    """Given a task in CDC over a quiet schema, When the server writes WAL in another schema, Then the slot's
    confirmed_flush_lsn and restart_lsn stay where they were: that WAL is retained (what HeartbeatEnable is
    for)."""
    bucket = Bucket()
    run = run_with(server, source, bucket, heartbeat=None)
    run.start()
    try:
        wait_for(lambda: run.full_load_done and run.status == "running")
        with connect(server) as db:
            before = slot_position(db, source)
            written = write_elsewhere(db)
            run.wait(1.5)  # five heartbeat intervals, were it on
            restart, confirmed = slot_position(db, source)
        assert (restart, confirmed) == before
        assert written - restart > 3 * 3000 * 200  # at least the rows' bytes are held back
    finally:
        run.stop()


def test_with_heartbeat_the_slot_moves_past_the_wal_written_elsewhere_and_loses_no_change(
    server: str, source: str
) -> None:
    """Given HeartbeatEnable (PostgreSQLSettings, HeartbeatSchema outside the replicated schema), When the
    server writes WAL elsewhere and the task's tables change too, Then the slot's confirmed_flush_lsn and
    restart_lsn pass the WAL written elsewhere, the heartbeat table is neither loaded nor replicated, and the
    files still hold every change of the task's tables (the slot never moved past one unwritten)."""
    bucket = Bucket()
    heartbeat = {"HeartbeatEnable": True, "HeartbeatSchema": NOISE, "HeartbeatFrequency": 5}
    with connect(server) as db:
        db.execute(f"CREATE SCHEMA IF NOT EXISTS {NOISE}")
    run = run_with(server, source, bucket, heartbeat=heartbeat)
    run.start()
    try:
        wait_for(lambda: run.full_load_done and run.status == "running")
        with connect(server) as db:
            write_elsewhere(db)
            db.execute(f"UPDATE {SCHEMA}.customer SET name = 'moved on' WHERE id = 2")
            written = write_elsewhere(db, rows=500)
            wait_for(lambda: slot_position(db, source)[1] >= written, timeout=20)
            wait_for(lambda: slot_position(db, source)[0] >= written, timeout=20)
            (beats,) = db.execute(f"SELECT count(*) FROM {NOISE}.awsdms_heartbeat").fetchone()
        wait_for(lambda: replay(bucket).get("2", {}).get("name") == "moved on")
        assert beats == 1
        assert_files_equal_source(bucket, server)
    finally:
        run.stop()
    assert not [k for k in bucket.objects if "awsdms_heartbeat" in k]


def test_heartbeat_settings_come_from_the_endpoint_or_its_extra_connection_attributes() -> None:
    by_settings = SourceSettings.from_endpoint(
        "db",
        "/tmp",
        "",
        engine="postgres",
        postgres_settings={"HeartbeatEnable": True, "HeartbeatFrequency": 2},
    )
    by_attributes = SourceSettings.from_endpoint(
        "db", "/tmp", "heartbeatEnable=Y;heartbeatSchema=awsdms;heartbeatFrequency=1", engine="postgres"
    )
    off = SourceSettings.from_endpoint("db", "/tmp", "", engine="postgres")
    assert (by_settings.heartbeat_schema, by_settings.heartbeat_seconds) == ("public", 120.0)
    assert (by_attributes.heartbeat_schema, by_attributes.heartbeat_seconds) == ("awsdms", 60.0)
    assert off.heartbeat_schema is None

"""Source ↔ lake reconciliation against a real PostgreSQL server read through Spark's JDBC source.

The lake side is built by the pipeline itself: the source's rows as DMS writes them (LOAD files) go through
the full load, so the canonical texts of both sides are checked against what the pipeline really stores."""

from __future__ import annotations

import json
import shutil
import socket
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.apply.run import ApplyOptions
from lakehouse.base.schema import SchemaFile
from lakehouse.dms.reader import ReaderOptions
from lakehouse.reconcile.bisect import raw_caught_up
from lakehouse.reconcile.plan import ReconcileOptions, split_ranges, x_ranges
from lakehouse.reconcile.report import ReconcileReport, TableResult
from lakehouse.reconcile.run import dms_reloader, publish_metrics, reconcile, rotation
from lakehouse.reconcile.sources import PostgresJdbcSource, SqliteReconcileSource

from tests.support import DmsWriter, manifest
from tools.dms_csv import CsvFormat
from tools.schema_gen import reflect_schema

NULL_MARKER = "<NULL>"
FMT = CsvFormat(csv_null_value=NULL_MARKER)
OPTIONS = ApplyOptions(reader=ReaderOptions(csv_null_value=NULL_MARKER))
# Small segments so that a few thousand rows already bisect over several levels.
SMALL = ReconcileOptions(segment_rows=64, bisect_factor=4, leaf_rows=8, parallelism=3, sample_keys=1000)

KINDS_DDL = (
    "CREATE TABLE {s}.kinds (id integer PRIMARY KEY, i2 smallint, i8 bigint, n numeric(12,3), nu numeric,"
    " r real, d double precision, b boolean, dt date, ts timestamp(6), tz timestamptz(3), photo bytea,"
    " doc jsonb, raw json, tags int[], ref uuid, code char(5), name varchar(20), note text, at time,"
    " mood {s}.mood)"
)
KINDS_ROWS = (
    "INSERT INTO {s}.kinds VALUES"
    " (1, -7, 9007199254740993, 123456789.125, 1.5, 0.1, 0.1, true, '2024-02-29', '2024-02-29 10:11:12.000001',"
    "  '2026-05-01 10:00:00.125+02', '\\x00ff10', '{{\"a\": [1, 2]}}', '{{\"b\" : \"x,y\"}}', '{{1,2,3}}',"
    "  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'ab', 'Zoë \"q\", x', 'line1\nline2', '23:59:59.5', 'ok'),"
    " (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    "  NULL, NULL, NULL, NULL),"
    " (3, 0, -1, -0.001, 0.000001, -1.5e-10, 1e300, false, '1999-12-31', '1999-12-31 23:59:59',"
    "  '1999-12-31 23:59:59.999+00', '\\x', '[]', 'null', '{{}}', NULL, 'abcde', '', '', '00:00', 'sad')"
)


@pytest.fixture(scope="module")
def pg():
    """A PostgreSQL server of this module's own that also listens on 127.0.0.1 (the JDBC driver needs TCP)."""
    from localaws.postgres import LocalPostgres

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="reconcile-pg-"))
    server = LocalPostgres(base / "data")
    address = server.start(tcp_port=port)
    yield address
    server.stop()
    shutil.rmtree(base, ignore_errors=True)


def connect(pg) -> psycopg.Connection:
    return psycopg.connect(pg.uri, autocommit=True)


def jdbc_source(spark, pg, options: ReconcileOptions = SMALL) -> PostgresJdbcSource:
    return PostgresJdbcSource(
        spark, f"jdbc:postgresql://127.0.0.1:{pg.port}/postgres", {"user": "postgres"}, options.parallelism
    )


def load_lake(spark, lake_config, pg, schema_name: str, tables: list[str], raw: Path) -> SchemaFile:
    """The schema file from the live catalog, the tables' rows as DMS writes them, and our full load."""
    from tools.source_db import SourceDatabase

    url = "postgresql+psycopg://" + pg.uri.split("://", 1)[1]
    schema = SchemaFile.from_dict(reflect_schema(url, [schema_name], [f"{schema_name}.{t}" for t in tables]))
    writer = DmsWriter(raw, FMT)
    with SourceDatabase.postgresql(pg.uri).connect() as db:
        from psycopg.types.string import TextLoader

        db.raw.adapters.register_loader("time", TextLoader)  # PostgreSQL's text, as the local DMS sends it
        for table in tables:
            cursor = db.execute(f'SELECT * FROM {schema_name}."{table}"')
            columns = [d[0] for d in cursor.description]
            rows = [[_as_dms(v) for v in row] for row in cursor.fetchall()]
            writer.load(f"{schema_name}.{table}", columns, rows)
    report = full_load(spark, lake_config, schema, str(raw), options=OPTIONS)
    assert report.ok, report
    return schema


def _as_dms(value):
    """A value as DMS writes it from PostgreSQL: a timestamptz in UTC, a uuid and a time as their text."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, memoryview):
        return bytes(value)
    return value


def divergence_rows(spark, lake_config) -> list[tuple]:
    return [
        (r["run_id"], r["source_table"], r["key"], r["kind"])
        for r in spark.table(lake_config.divergence)
        .orderBy("run_id", "source_table", "kind", "key")
        .collect()
    ]


class FakeCloudWatch:
    def __init__(self) -> None:
        self.calls: list[dict] = []

    def put_metric_data(self, **kwargs) -> None:
        self.calls.append(kwargs)


def test_the_run_publishes_its_divergence_as_metrics_zero_included():
    """Given a run where one table diverged (2 missing, 1 differing, 1 in flight), one matched and one
    failed, When its metrics are published, Then the namespace holds every figure under service=reconcile,
    DivergedRows the sum of the three kinds; a matching run publishes zeros (not nothing)."""
    report = ReconcileReport(
        "r",
        tables=[
            TableResult("s.a", missing=2, differing=1, in_flight=1, source_rows_hashed=10, source_bytes=300),
            TableResult("s.b", source_rows_hashed=5, source_bytes=40),
            TableResult("s.c", error="boom"),
        ],
        repairs=1,
    )
    cloudwatch = FakeCloudWatch()
    publish_metrics(report, cloudwatch, "ns")
    (call,) = cloudwatch.calls
    assert call["Namespace"] == "ns"
    assert {m["MetricName"]: (m["Value"], m["Unit"]) for m in call["MetricData"]} == {
        "DivergedTables": (1.0, "Count"),
        "DivergedRows": (3.0, "Count"),
        "RowsInFlight": (1.0, "Count"),
        "Repairs": (1.0, "Count"),
        "SourceRowsHashed": (15.0, "Count"),
        "SourceBytes": (340.0, "Bytes"),
        "ReconcileFailedTables": (1.0, "Count"),
    }
    assert all(m["Dimensions"] == [{"Name": "service", "Value": "reconcile"}] for m in call["MetricData"])
    publish_metrics(ReconcileReport("quiet", tables=[TableResult("s.b")]), cloudwatch, "ns")
    assert {m["MetricName"]: m["Value"] for m in cloudwatch.calls[1]["MetricData"]}["DivergedRows"] == 0.0


def test_ranges_merge_and_split_without_gaps():
    assert x_ranges([5, 1, 2, 3, 9], 2) == [(4, 15), (20, 23), (36, 39)]
    groups = split_ranges([(0, 9), (20, 29)], 3)
    covered = sorted(x for g in groups for a, b in g for x in range(a, b + 1))
    assert covered == [*range(0, 10), *range(20, 30)] and len(groups) == 3
    assert rotation(["a", "b", "c"], "b") == ["c", "a", "b"]
    assert rotation(["a", "b", "c"], "gone") == ["a", "b", "c"]


def test_equal_tables_move_only_sums_and_every_divergence_is_found_exactly(spark, lake_config, pg, tmp_path):
    """Given a table of every PostgreSQL type the pipeline maps, a 3,000-row integer-keyed table and a table
    with a composite text key, loaded into the lake by the full load,
    When they are reconciled, Then nothing differs and no source row is moved (only segment sums).
    Given then, on the source only: 500 rows deleted, a key updated, a value changed, NULL where the lake
    has ''; in a typed table a timestamp moved by a microsecond; in the lake only an extra row,
    When reconciled again, Then exactly those keys are missing / extra / differing, and dms_divergence
    holds exactly them."""
    s = "rc_equal"
    with connect(pg) as db:
        db.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
        db.execute(f"CREATE SCHEMA {s}")
        db.execute(f"CREATE TYPE {s}.mood AS ENUM ('ok', 'sad')")
        db.execute(KINDS_DDL.format(s=s))
        db.execute(KINDS_ROWS.format(s=s))
        db.execute(
            f"CREATE TABLE {s}.items (id bigint PRIMARY KEY, name text, note varchar(10), price numeric(9,2))"
        )
        db.execute(
            f"INSERT INTO {s}.items SELECT i * 3, 'item ' || i, CASE WHEN i % 10 = 0 THEN '' END, i / 7.0"
            " FROM generate_series(1, 3000) i"
        )
        db.execute(f"CREATE TABLE {s}.stock (region text, sku int, qty int, PRIMARY KEY (region, sku))")
        db.execute(
            f"INSERT INTO {s}.stock SELECT r, i, i * 2 FROM unnest(ARRAY['north', 'south', 'öst']) r,"
            " generate_series(1, 200) i"
        )
    raw = tmp_path / "raw"
    schema = load_lake(spark, lake_config, pg, s, ["kinds", "items", "stock"], raw)
    source = jdbc_source(spark, pg)
    caught_up = raw_caught_up(spark, lake_config, str(raw))

    equal = reconcile(spark, lake_config, schema, source, SMALL, run_id="r1", caught_up=caught_up)

    assert equal.ok, equal.to_dict()
    by_table = {t.table: t for t in equal.tables}
    assert [(t.table, t.missing, t.extra, t.differing, t.in_flight) for t in equal.tables] == [
        (f"{s}.items", 0, 0, 0, 0),
        (f"{s}.kinds", 0, 0, 0, 0),
        (f"{s}.stock", 0, 0, 0, 0),
    ]
    assert equal.totals()["source_rows_fetched"] == 0
    assert by_table[f"{s}.items"].source_rows_hashed == 3000
    # 3,000 rows in segments of 256 keys (the power of two nearest 64 rows): 36 sums moved, not 3,000 rows
    assert by_table[f"{s}.items"].segments == 36
    assert by_table[f"{s}.items"].source_bytes < 36 * 40
    assert by_table[f"{s}.stock"].key_mode == "hash" and by_table[f"{s}.items"].key_mode == "range"
    assert equal.divergence_rows_added == 0

    with connect(pg) as db:
        db.execute(f"DELETE FROM {s}.items WHERE id BETWEEN 3000 AND 4497")  # 500 rows (ids 3000, 3003, …)
        db.execute(f"UPDATE {s}.items SET id = 100042 WHERE id = 42")
        db.execute(f"UPDATE {s}.items SET price = price + 0.01 WHERE id = 21")
        db.execute(f"UPDATE {s}.items SET note = NULL WHERE id = 30")  # the lake holds ''
        db.execute(f"UPDATE {s}.kinds SET tz = tz + interval '1 millisecond' WHERE id = 1")
        db.execute(f"UPDATE {s}.kinds SET r = 0.1000001 WHERE id = 3")
        db.execute(f"UPDATE {s}.stock SET qty = 0 WHERE region = 'öst' AND sku = 7")
        db.execute(f"DELETE FROM {s}.stock WHERE region = 'north' AND sku = 9")
    spark.sql(
        f"INSERT INTO {lake_config.clean_table(f'{s}_items')} (id, name, note, price, dms_commit_ts, dms_change_seq)"
        " VALUES (999999, 'ghost', 'x', 1.00, NULL, NULL)"
    )

    diverged = reconcile(spark, lake_config, schema, source, SMALL, run_id="r2", caught_up=caught_up)

    assert diverged.ok, diverged.to_dict()
    items = next(t for t in diverged.tables if t.table == f"{s}.items")
    deleted = list(range(3000, 4498, 3))
    assert len(deleted) == 500
    assert (items.missing, items.extra, items.differing, items.in_flight) == (1, 502, 2, 0)
    assert items.samples == {
        "missing": [{"id": 100042}],
        "extra": [{"id": 42}, *({"id": i} for i in deleted), {"id": 999999}],
        "differing": [{"id": 21}, {"id": 30}],
    }
    assert items.recheck == "confirmed" and items.levels > 1
    assert items.source_rows_fetched < 3000  # the differing leaves' keys, not the table
    expected = [("r2", f"{s}.items", json.dumps({"id": 100042}, separators=(",", ":")), "missing")]
    expected += [("r2", f"{s}.items", f'{{"id":{i}}}', "extra") for i in [42, *deleted, 999999]]
    expected += [
        ("r2", f"{s}.items", '{"id":21}', "differing"),
        ("r2", f"{s}.items", '{"id":30}', "differing"),
    ]
    expected += [("r2", f"{s}.kinds", '{"id":1}', "differing"), ("r2", f"{s}.kinds", '{"id":3}', "differing")]
    expected += [
        ("r2", f"{s}.stock", '{"region":"öst","sku":7}', "differing"),
        ("r2", f"{s}.stock", '{"region":"north","sku":9}', "extra"),
    ]
    assert divergence_rows(spark, lake_config) == sorted(expected, key=lambda r: (r[0], r[1], r[3], r[2]))
    assert diverged.totals() | {"source_bytes": 0, "source_rows_hashed": 0, "source_rows_fetched": 0} == {
        "missing": 1,
        "extra": 503,
        "differing": 5,
        "in_flight": 0,
        "source_bytes": 0,
        "source_rows_hashed": 0,
        "source_rows_fetched": 0,
        "diverged_tables": 3,
        "repairs": 0,
    }


def test_a_change_in_flight_is_not_divergence_until_the_lake_has_applied_it(spark, lake_config, pg, tmp_path):
    """Given a table in the lake, a source row updated and DMS's CDC file of that update written (before the
    check) but not applied yet,
    When reconciled, Then the key is in flight, not divergence (dms_divergence stays empty).
    When the file is applied and reconciled again, Then everything is equal.
    Given a source update DMS never wrote (nothing pending), Then the same kind of difference IS divergence."""
    s = "rc_flight"
    with connect(pg) as db:
        db.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
        db.execute(f"CREATE SCHEMA {s}")
        db.execute(f"CREATE TABLE {s}.items (id int PRIMARY KEY, name text)")
        db.execute(f"INSERT INTO {s}.items SELECT i, 'n' || i FROM generate_series(1, 100) i")
    raw = tmp_path / "raw"
    schema = load_lake(spark, lake_config, pg, s, ["items"], raw)
    with connect(pg) as db:
        db.execute(f"UPDATE {s}.items SET name = 'changed' WHERE id = 5")
    cdc = DmsWriter(raw, FMT).cdc(f"{s}.items", ["id", "name"], [("U", [5, "changed"])])
    source = jdbc_source(spark, pg)
    caught_up = raw_caught_up(spark, lake_config, str(raw))

    pending = reconcile(spark, lake_config, schema, source, SMALL, run_id="f1", caught_up=caught_up)

    (table,) = pending.tables
    assert (table.missing, table.extra, table.differing, table.in_flight, table.recheck) == (
        0,
        0,
        0,
        1,
        "lake behind",
    )
    assert pending.divergence_rows_added == 0

    assert apply_cdc(spark, lake_config, schema, manifest(cdc), OPTIONS).ok
    applied = reconcile(spark, lake_config, schema, source, SMALL, run_id="f2", caught_up=caught_up)
    (table,) = applied.tables
    assert (table.missing, table.extra, table.differing, table.in_flight, table.recheck) == (
        0,
        0,
        0,
        0,
        "not needed",
    )

    with connect(pg) as db:
        db.execute(f"UPDATE {s}.items SET name = 'lost' WHERE id IN (6, 95)")  # DMS never sends it
    lost = reconcile(spark, lake_config, schema, source, SMALL, run_id="f3", caught_up=caught_up)
    (table,) = lost.tables
    assert (table.differing, table.in_flight, table.recheck) == (2, 0, "confirmed")
    assert divergence_rows(spark, lake_config) == [
        ("f3", f"{s}.items", '{"id":6}', "differing"),
        ("f3", f"{s}.items", '{"id":95}', "differing"),
    ]
    # 64-key segments (2), then 16-key (the 2 differing: 100 rows), 4-key (32 rows), leaves (8 rows), and
    # the recheck reads the 2 leaves again (8 rows), not the keys between them
    assert (table.lake_rows_hashed, table.source_rows_fetched) == (100 + 100 + 32 + 8 + 8, 8 + 8)


class FakeDms:
    def __init__(self) -> None:
        self.calls: list[dict] = []

    def reload_tables(self, **kwargs) -> dict:
        self.calls.append(kwargs)
        return {"ReplicationTaskArn": kwargs["ReplicationTaskArn"]}


def test_reload_repair_asks_dms_to_reload_exactly_the_diverged_tables(spark, lake_config, pg, tmp_path):
    """Given two tables of which only one diverged,
    When reconciled with repair_mode alarm, Then DMS is not asked anything;
    with repair_mode reload, Then DMS reloads exactly the diverged table, and the repair is counted."""
    s = "rc_repair"
    with connect(pg) as db:
        db.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
        db.execute(f"CREATE SCHEMA {s}")
        for table in ("good", "bad"):
            db.execute(f"CREATE TABLE {s}.{table} (id int PRIMARY KEY, v text)")
            db.execute(f"INSERT INTO {s}.{table} SELECT i, 'v' || i FROM generate_series(1, 50) i")
    schema = load_lake(spark, lake_config, pg, s, ["good", "bad"], tmp_path / "raw")
    with connect(pg) as db:
        # deletes DMS never sent (a table left EMPTY is emptied by the reconcile itself: test_reconcile_empty_table)
        db.execute(f"DELETE FROM {s}.bad WHERE id > 10")
    source = jdbc_source(spark, pg)
    dms = FakeDms()
    reloader = dms_reloader(dms, "arn:aws:dms:task:1")

    alarmed = reconcile(spark, lake_config, schema, source, SMALL, run_id="a", reload_tables=reloader)
    assert dms.calls == [] and alarmed.repairs == 0
    assert [(t.table, t.extra, t.repaired) for t in alarmed.tables] == [
        (f"{s}.bad", 40, False),
        (f"{s}.good", 0, False),
    ]

    reload = ReconcileOptions(**{**SMALL.__dict__, "repair_mode": "reload"})
    repaired = reconcile(spark, lake_config, schema, source, reload, run_id="b", reload_tables=reloader)

    assert dms.calls == [
        {
            "ReplicationTaskArn": "arn:aws:dms:task:1",
            "TablesToReload": [{"SchemaName": s, "TableName": "bad"}],
            "ReloadOption": "data-reload",
        }
    ]
    assert repaired.repairs == 1 and repaired.totals()["repairs"] == 1
    assert [(t.table, t.repaired) for t in repaired.tables] == [(f"{s}.bad", True), (f"{s}.good", False)]


def test_the_row_budget_rotates_tables_over_runs(spark, lake_config, pg, tmp_path):
    """Given three tables of 40 rows and a budget of 50 source rows per run,
    When runs follow each other, each starting after the table the last one checked,
    Then each run checks one table and the three runs cover all three."""
    s = "rc_budget"
    with connect(pg) as db:
        db.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
        db.execute(f"CREATE SCHEMA {s}")
        for table in ("a", "b", "c"):
            db.execute(f"CREATE TABLE {s}.{table} (id int PRIMARY KEY)")
            db.execute(f"INSERT INTO {s}.{table} SELECT generate_series(1, 40)")
    schema = load_lake(spark, lake_config, pg, s, ["a", "b", "c"], tmp_path / "raw")
    source = jdbc_source(spark, pg)
    budget = ReconcileOptions(**{**SMALL.__dict__, "max_source_rows": 50})
    checked, last = [], None
    for run in range(3):
        report = reconcile(spark, lake_config, schema, source, budget, run_id=f"b{run}", start_after=last)
        checked.append([t.table for t in report.tables])
        last = report.next_table
        assert report.tables[0].source_rows_hashed == 40
    assert checked == [[f"{s}.a"], [f"{s}.b"], [f"{s}.c"]]


def test_an_sqlite_source_is_compared_with_the_same_canonical_text(spark, lake_config, tmp_path):
    """Given an SQLite source (the demo's other source) loaded into the lake,
    When reconciled, Then it is equal; after a value changes in the source, Then that key differs."""
    import sqlite3

    db_path = tmp_path / "source.db"
    with sqlite3.connect(db_path) as db:
        db.execute(
            "CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT, price DECIMAL(7,2), at DATETIME, w REAL)"
        )
        db.executemany(
            "INSERT INTO item VALUES (?, ?, ?, ?, ?)",
            [
                (i, f"n{i}" if i % 4 else None, f"{i}.25", f"2026-01-0{1 + i % 9} 10:00:00", i / 3)
                for i in range(1, 301)
            ],
        )
    schema = SchemaFile.from_dict(
        {
            "dialect": "sqlite",
            "tables": {
                "main.item": {
                    "primary_key": ["id"],
                    "columns": [
                        {"name": "id", "type": "INTEGER"},
                        {"name": "name", "type": "TEXT"},
                        {"name": "price", "type": "DECIMAL(7,2)"},
                        {"name": "at", "type": "DATETIME"},
                        {"name": "w", "type": "REAL"},
                    ],
                }
            },
        }
    )
    with sqlite3.connect(db_path) as db:
        rows = db.execute("SELECT * FROM item").fetchall()
    raw = tmp_path / "raw"
    DmsWriter(raw, FMT).load("main.item", ["id", "name", "price", "at", "w"], rows)
    assert full_load(spark, lake_config, schema, str(raw), options=OPTIONS).ok
    source = SqliteReconcileSource(spark, str(db_path))

    equal = reconcile(spark, lake_config, schema, source, SMALL, run_id="s1")
    assert [(t.missing, t.extra, t.differing) for t in equal.tables] == [(0, 0, 0)]

    with sqlite3.connect(db_path) as db:
        db.execute("UPDATE item SET price = '7.26' WHERE id = 7")
    changed = reconcile(spark, lake_config, schema, source, SMALL, run_id="s2")
    assert [(t.missing, t.extra, t.differing, t.samples) for t in changed.tables] == [
        (0, 0, 1, {"differing": [{"id": 7}]})
    ]

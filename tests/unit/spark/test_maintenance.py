"""Table maintenance: it compacts and expires, and exactly-once survives it (the ledger learns every applied
file before a summary is expired), tombstones expire after their retention, rollbacks stay rollbacks."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.maintenance.run import MaintenanceOptions, maintain

from tests.support import DmsWriter, manifest, rows_of, schema_of, snapshot_count

pytestmark = pytest.mark.spark

ITEMS = "shop.items"
COLUMNS = ["id", "name", "price"]
SCHEMA = schema_of({ITEMS: (["id"], [("id", "int"), ("name", "varchar(20)"), ("price", "decimal(7,2)")])})
# Everything older than now goes: the harshest expiry, to prove nothing depends on old snapshots.
EXPIRE_ALL = MaintenanceOptions(
    snapshot_retention_hours=0,
    retain_last=1,
    expire_every_hours=0,
    orphan_file_age_hours=0,
    remove_orphans=False,
    min_input_files=2,
)


@pytest.fixture
def dms(tmp_path) -> DmsWriter:
    return DmsWriter(tmp_path / "raw" / "dms")


def items(config) -> str:
    return config.clean_table("shop_items")


def applied(spark, config, *paths, run_id):
    report = apply_cdc(spark, config, SCHEMA, manifest(*paths, run_id=run_id))
    assert report.ok, report.failed
    return report


def live_files(spark, table) -> tuple[int, int]:
    row = spark.sql(
        f"SELECT count_if(content = 0) AS data, count_if(content <> 0) AS deletes FROM {table}.files"
    ).first()
    return row["data"], row["deletes"]


def test_maintenance_compacts_expires_and_a_replay_and_a_late_file_still_behave(spark, lake_config, dms):
    """Given a loaded table and five CDC batches (each a merge-on-read commit with delete files),
    When maintenance compacts it and expires every snapshot but the current one,
    Then the table has one data file and no delete files, its rows are unchanged; and afterwards a replay
    of an old batch changes nothing while a late file never applied before is applied."""
    dms.load(ITEMS, COLUMNS, [(i, f"item {i}", i) for i in range(1, 6)])
    full_load(spark, lake_config, SCHEMA, str(dms.root))
    batches = [
        dms.cdc(ITEMS, COLUMNS, [("U", (i, f"item {i} v{i}", i * 10)), ("D", (6 - i, None, None))])
        for i in range(1, 3)
    ]
    late = dms.cdc(
        ITEMS, COLUMNS, [("I", (7, "late", 7)), ("U", (1, "older than its update", 0))], seqs=[0, 0]
    )
    batches += [dms.cdc(ITEMS, COLUMNS, [("I", (10 + i, "new", i))]) for i in range(3)]
    for number, batch in enumerate(batches):
        applied(spark, lake_config, batch, run_id=f"b{number}")
    table = items(lake_config)
    expected = rows_of(spark, table)
    assert live_files(spark, table)[1] > 0

    report = maintain(spark, lake_config, EXPIRE_ALL, now=datetime.utcnow() + timedelta(minutes=1))

    assert not report.failed, report.failed
    assert snapshot_count(spark, table) == 1
    assert live_files(spark, table) == (1, 0)
    assert rows_of(spark, table) == expected
    replay = applied(spark, lake_config, batches[0], late, run_id="replay")
    assert replay.tables[0].skipped_already_applied == 1
    assert rows_of(spark, table) == sorted([*expected, (7, "late", Decimal("7.00"))])


def test_a_lost_ledger_copy_is_made_by_maintenance_before_the_summary_expires(spark, lake_config, dms):
    """Given a batch whose commit named its file but whose ledger copy was lost (a crash between the two),
    When maintenance expires that commit, Then the ledger learned the file first: a replay is skipped."""
    dms.load(ITEMS, COLUMNS, [(1, "a", 1)])
    full_load(spark, lake_config, SCHEMA, str(dms.root))
    batch = dms.cdc(ITEMS, COLUMNS, [("I", (2, "b", 2))])
    applied(spark, lake_config, batch, run_id="b1")
    ledger = lake_config.ledger
    spark.sql(f"DELETE FROM {ledger}")
    applied(spark, lake_config, dms.cdc(ITEMS, COLUMNS, [("U", (2, "b2", 20))]), run_id="b2")
    spark.sql(f"DELETE FROM {ledger}")

    report = maintain(spark, lake_config, EXPIRE_ALL, now=datetime.utcnow() + timedelta(minutes=1))

    assert {t.table: t.ledger_entries_copied for t in report.tables}[items(lake_config)] == 2
    assert snapshot_count(spark, items(lake_config)) == 1
    replay = applied(spark, lake_config, batch, run_id="replay")
    assert replay.tables[0].skipped_already_applied == 1
    assert rows_of(spark, items(lake_config)) == [(1, "a", Decimal("1.00")), (2, "b2", Decimal("20.00"))]


def test_a_rolled_back_commit_stays_rolled_back_after_maintenance(spark, lake_config, dms):
    """Given a batch applied, the table rolled back before it, and maintenance expiring everything,
    When the batch is re-driven, Then it applies again (its ledger rows were dropped, not kept)."""
    dms.load(ITEMS, COLUMNS, [(1, "a", 1)])
    full_load(spark, lake_config, SCHEMA, str(dms.root))
    table = items(lake_config)
    before = spark.sql(
        f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).first()[0]
    batch = dms.cdc(ITEMS, COLUMNS, [("U", (1, "a2", 2))])
    applied(spark, lake_config, batch, run_id="b1")
    spark.sql(
        f"CALL {lake_config.catalog_name}.system.rollback_to_snapshot('{table.split('.', 1)[1]}', {before})"
    )

    maintain(spark, lake_config, EXPIRE_ALL, now=datetime.utcnow() + timedelta(minutes=1))
    applied(spark, lake_config, batch, run_id="redrive")

    assert rows_of(spark, table) == [(1, "a2", Decimal("2.00"))]


def test_tombstones_expire_after_their_retention_only(spark, lake_config, dms):
    """Given deletes recorded now, When maintenance runs with a 35-day retention today and 36 days later,
    Then the tombstones stay the first time and are gone the second."""
    dms.load(ITEMS, COLUMNS, [(1, "a", 1), (2, "b", 2)])
    full_load(spark, lake_config, SCHEMA, str(dms.root))
    applied(
        spark,
        lake_config,
        dms.cdc(ITEMS, COLUMNS, [("D", (1, None, None)), ("D", (2, None, None))]),
        run_id="b1",
    )
    tombstones = lake_config.tombstones
    keep = MaintenanceOptions(tombstone_retention_days=35, remove_orphans=False)

    maintain(spark, lake_config, keep)
    assert spark.table(tombstones).count() == 2
    report = maintain(spark, lake_config, keep, now=datetime.utcnow() + timedelta(days=36))

    assert spark.table(tombstones).count() == 0
    assert {t.table: t.tombstones_expired for t in report.tables}[tombstones] == 2


def test_the_newest_consistent_point_keeps_its_snapshots_through_expiry(spark, lake_config, dms):
    """Given a table loaded, a consistent point recorded at its snapshot after the first batch, and two more
    batches after it,
    When maintenance expires everything it may (retention 0, one snapshot kept),
    Then the point's snapshot is still there and reads as the table was at the point (a refine --read_at
    consistent and a reader's time travel need it), while the snapshots committed before it are gone."""
    from lakehouse.audit.consistent import Point, record_point

    dms.load(ITEMS, COLUMNS, [(1, "a", 1), (2, "b", 2)])
    full_load(spark, lake_config, SCHEMA, str(dms.root))
    table = items(lake_config)
    applied(spark, lake_config, dms.cdc(ITEMS, COLUMNS, [("U", (1, "a1", 3))]), run_id="b1")
    snapshots = f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at"
    *before_point, at_point = [r[0] for r in spark.sql(snapshots).collect()]
    point = Point(datetime(2026, 1, 1), {"shop_items": at_point})
    assert record_point(spark, lake_config, point, {"shop_items": ITEMS}, "p1", datetime.utcnow())
    applied(spark, lake_config, dms.cdc(ITEMS, COLUMNS, [("D", (2, "b", 2))]), run_id="b2")
    applied(spark, lake_config, dms.cdc(ITEMS, COLUMNS, [("I", (3, "c", 4))]), run_id="b3")

    maintain(spark, lake_config, EXPIRE_ALL, now=datetime.utcnow() + timedelta(minutes=1))

    kept = [r[0] for r in spark.sql(snapshots).collect()]
    assert at_point in kept and before_point and not set(before_point) & set(kept)
    as_it_was = spark.sql(f"SELECT id, name, price FROM {table} VERSION AS OF {at_point} ORDER BY id")
    assert [tuple(r) for r in as_it_was.collect()] == [(1, "a1", Decimal("3.00")), (2, "b", Decimal("2.00"))]
    assert rows_of(spark, table) == [(1, "a1", Decimal("3.00")), (3, "c", Decimal("4.00"))]

"""A clean table rolled back to an earlier snapshot: sure before it commits (a reload or a file past the
tombstones among the commits undone is refused, a dry run commits nothing), and the files it names to
re-drive then apply exactly once, by their change sequences."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from lakehouse.apply import rollback
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.clean_table import sequence_at
from lakehouse.apply.full_load import full_load
from lakehouse.apply.rollback import rollback_table
from lakehouse.jobs.reapply import main as reapply_main

from tests.support import BASE_TIME, DmsWriter, manifest, rows_of, schema_of

pytestmark = pytest.mark.spark

ITEMS = "shop.items"
COLUMNS = ["id", "name", "price"]
SCHEMA = schema_of({ITEMS: (["id"], [("id", "int"), ("name", "varchar(20)"), ("price", "decimal(7,2)")])})


@pytest.fixture
def dms(tmp_path) -> DmsWriter:
    return DmsWriter(tmp_path / "raw" / "dms")


def applied(spark, config, *paths, run_id):
    report = apply_cdc(spark, config, SCHEMA, manifest(*paths, run_id=run_id))
    assert report.ok, report.failed
    return report


def newest_snapshot(spark, table) -> int:
    return spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[
        0
    ]


def test_a_table_rolled_back_after_its_first_batch_gets_the_later_batches_again_exactly_once(
    spark, lake_config, dms
):
    """Given a table full-loaded and three CDC batches (updates, a delete, an insert deleted again),
    When it is rolled back to its snapshot after the first batch (after a dry run, and a try whose files are
    past the tombstones' horizon),
    Then the dry run and the refused try change nothing; the rollback leaves the table as it was after batch 1
    and names exactly batches 2 and 3's files; applied again, they bring the table to its state after batch 3,
    and applied a second time they change nothing."""
    dms.load(ITEMS, COLUMNS, [(1, "a", 1), (2, "b", 2), (3, "c", 3)])
    full_load(spark, lake_config, SCHEMA, str(dms.root))
    table = lake_config.clean_table("shop_items")
    first = dms.cdc(ITEMS, COLUMNS, [("U", (1, "a1", 10)), ("I", (4, "d", 4))])
    applied(spark, lake_config, first, run_id="b1")
    after_first, target = rows_of(spark, table), newest_snapshot(spark, table)
    second = dms.cdc(ITEMS, COLUMNS, [("D", (2, None, None)), ("I", (5, "e", 5)), ("U", (1, "a2", 20))])
    applied(spark, lake_config, second, run_id="b2")
    third = dms.cdc(ITEMS, COLUMNS, [("D", (5, None, None)), ("U", (3, "c3", 30))])
    applied(spark, lake_config, third, run_id="b3")
    after_third, current = rows_of(spark, table), newest_snapshot(spark, table)
    assert after_third == [
        (1, "a2", Decimal("20.00")),
        (3, "c3", Decimal("30.00")),
        (4, "d", Decimal("4.00")),
    ]

    dry = rollback_table(spark, lake_config, SCHEMA, ITEMS, snapshot_id=target, dry_run=True)
    late = BASE_TIME + timedelta(days=36)
    too_old = rollback_table(spark, lake_config, SCHEMA, ITEMS, snapshot_id=target, now=late)
    assert rows_of(spark, table) == after_third and newest_snapshot(spark, table) == current
    report = rollback_table(spark, lake_config, SCHEMA, ITEMS, snapshot_id=target)

    assert dry.ok and dry.dry_run and not dry.rolled_back
    assert dry.files_to_redrive == [second, third]
    assert not too_old.ok and not too_old.rolled_back
    assert second in too_old.refused and "re-send horizon" in too_old.refused
    assert report.ok and report.rolled_back and report.target_snapshot_id == target
    assert report.files_to_redrive == [second, third] and len(report.rolled_back_snapshot_ids) == 2
    assert report.rolled_back_snapshot_ids[0] == current
    assert rows_of(spark, table) == after_first

    redriven = applied(spark, lake_config, second, third, run_id="redrive")
    assert redriven.tables[0].skipped_already_applied == 0
    assert rows_of(spark, table) == after_third
    again = applied(spark, lake_config, second, third, run_id="redrive-again")
    assert again.tables[0].skipped_already_applied == 2
    assert rows_of(spark, table) == after_third


def test_a_rollback_over_a_reload_is_refused_and_changes_nothing(spark, lake_config, dms, tmp_path):
    """Given a table loaded, a batch applied and then the table reloaded,
    When the reapply job rolls it back to the snapshot after the batch (or the library to the current one),
    Then the job exits 1, its report refusing naming the reload and `lakectl reload`, and the table is
    unchanged (the current snapshot: nothing to do, ok)."""
    dms.load(ITEMS, COLUMNS, [(1, "a", 1), (2, "b", 2)])
    full_load(spark, lake_config, SCHEMA, str(dms.root))
    table = lake_config.clean_table("shop_items")
    at_ten = int(sequence_at(BASE_TIME))  # DMS's sequences: a reload is ordered against them
    applied(spark, lake_config, dms.cdc(ITEMS, COLUMNS, [("U", (1, "a1", 10))], seqs=[at_ten]), run_id="b1")
    target = newest_snapshot(spark, table)
    dms.load(ITEMS, COLUMNS, [(1, "a1", 10), (3, "c", 3)], moment=BASE_TIME + timedelta(minutes=5))
    full_load(spark, lake_config, SCHEMA, str(dms.root), reload=True, run_id="reload")
    reloaded, current = rows_of(spark, table), newest_snapshot(spark, table)

    schema_file, report_file = tmp_path / "schema.json", tmp_path / "rollback.json"
    schema_file.write_text(json.dumps(SCHEMA.to_dict()))
    job = [
        *("--catalog_type", "hadoop", "--warehouse", lake_config.warehouse),
        *("--clean_database", lake_config.clean_database, "--schema_file", str(schema_file)),
        *(
            "--report_uri",
            str(report_file),
            "--rollback_json",
            json.dumps({"table": ITEMS, "snapshot_id": target}),
        ),
    ]

    code = reapply_main(job)
    refused = json.loads(report_file.read_text())
    nothing = rollback_table(spark, lake_config, SCHEMA, ITEMS, snapshot_id=current)

    assert code == 1 and not refused["ok"] and not refused["rolled_back"]
    assert "reload" in refused["refused"] and f"lakectl reload {ITEMS}" in refused["refused"]
    assert nothing.ok and not nothing.rolled_back and nothing.note and nothing.files_to_redrive == []
    assert rows_of(spark, table) == reloaded and newest_snapshot(spark, table) == current


def test_a_commit_racing_the_rollback_or_not_from_cdc_refuses_it_and_stays(
    spark, lake_config, dms, monkeypatch
):
    """Given a table loaded and two batches, When a third batch commits right before the rollback to the
    first batch's snapshot commits (after it was planned), Then the rollback is refused as raced and the
    table keeps all three batches: a commit the report does not name is never undone. And When a row is
    deleted by hand (a commit naming no DMS file), Then a rollback over it is refused: it can't be re-driven."""
    dms.load(ITEMS, COLUMNS, [(1, "a", 1)])
    full_load(spark, lake_config, SCHEMA, str(dms.root))
    table = lake_config.clean_table("shop_items")
    applied(spark, lake_config, dms.cdc(ITEMS, COLUMNS, [("U", (1, "a1", 10))]), run_id="b1")
    target = newest_snapshot(spark, table)
    applied(spark, lake_config, dms.cdc(ITEMS, COLUMNS, [("I", (2, "b", 2))]), run_id="b2")
    racing = dms.cdc(ITEMS, COLUMNS, [("I", (3, "c", 3))])
    monkeypatch.setattr(
        rollback, "check_before_commit", lambda: applied(spark, lake_config, racing, run_id="b3")
    )

    report = rollback_table(spark, lake_config, SCHEMA, ITEMS, snapshot_id=target)

    assert not report.ok and not report.rolled_back and "raced" in report.refused
    monkeypatch.undo()
    spark.sql(f"DELETE FROM {table} WHERE id = 2")
    by_hand = rollback_table(spark, lake_config, SCHEMA, ITEMS, snapshot_id=target)
    assert not by_hand.ok and not by_hand.rolled_back and "not a CDC commit" in by_hand.refused
    assert rows_of(spark, table) == [(1, "a1", Decimal("10.00")), (3, "c", Decimal("3.00"))]

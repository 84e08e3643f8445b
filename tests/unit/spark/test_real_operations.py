"""What a DBA and an operator really do, each proven on whole tables ordered by key: DDL in the middle of a
batch, a stale schema file, late, duplicated and replayed files (also after compaction and snapshot
expiry), a table reload while CDC runs, a rollback, a missing file, odd names and real DMS file names."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.apply.run import ApplyOptions
from lakehouse.dms.reader import ReaderOptions

from tests.support import DmsWriter, manifest, rows_of, schema_of, snapshot_count
from tools.dms_csv import CsvFormat

pytestmark = pytest.mark.spark

ORDERS = "shop.orders"
COLUMNS = ["id", "note", "amount"]
SCHEMA = schema_of({ORDERS: (["id"], [("id", "int"), ("note", "varchar(40)"), ("amount", "decimal(10,2)")])})
NULL_MARKED = ApplyOptions(reader=ReaderOptions(csv_null_value="NULL"))


@pytest.fixture
def dms(tmp_path) -> DmsWriter:
    return DmsWriter(tmp_path / "raw" / "dms")


def orders(config) -> str:
    return config.clean_table("shop_orders")


DEFAULTS = ApplyOptions()


def loaded(spark, config, dms, rows, schema=SCHEMA, options=DEFAULTS, snapshot_seq=None):
    dms.load(ORDERS, COLUMNS, rows, snapshot_seq=snapshot_seq)
    report = full_load(spark, config, schema, str(dms.root), options=options)
    assert report.ok, report.failed


def applied(spark, config, schema, *paths, options=DEFAULTS, run_id="run"):
    report = apply_cdc(spark, config, schema, manifest(*paths, run_id=run_id), options)
    assert report.ok, (report.failed, report.error)
    return report


def d(value) -> Decimal:
    return Decimal(str(value)).quantize(Decimal("0.01"))


# ------------------------------------------------------------------------------------------------ DDL


def test_a_column_added_mid_batch_is_null_for_the_older_files_records(spark, lake_config, tmp_path):
    """Given CsvNullValue=NULL and a batch whose first file predates `ALTER TABLE ADD COLUMN gift_wrap
    boolean, label varchar` and whose second file has both columns,
    When the batch is applied,
    Then the first file's updates and deletes apply with gift_wrap and label NULL (never '' nor a
    rejected record), the second file's values land, and nothing is quarantined."""
    dms = DmsWriter(tmp_path / "raw" / "dms", CsvFormat(csv_null_value="NULL"))
    evolved = schema_of(
        {
            ORDERS: (
                ["id"],
                [
                    ("id", "int"),
                    ("note", "varchar(40)"),
                    ("amount", "decimal(10,2)"),
                    ("gift_wrap", "boolean"),
                    ("label", "varchar(20)"),
                ],
            )
        }
    )
    loaded(spark, lake_config, dms, [(1, "a", 1), (2, "b", 2), (3, "c", 3)], evolved, NULL_MARKED)
    before = dms.cdc(ORDERS, COLUMNS, [("U", (1, "a2", 10)), ("D", (2, "b", 2)), ("I", (4, "", 4))])
    after = dms.cdc(
        ORDERS,
        [*COLUMNS, "gift_wrap", "label"],
        [("I", (5, "e", 5, True, "")), ("U", (3, "c2", 30, None, "x"))],
    )

    report = applied(spark, lake_config, evolved, before, after, options=NULL_MARKED)

    assert rows_of(spark, orders(lake_config), ["id", "note", "amount", "gift_wrap", "label"]) == [
        (1, "a2", d(10), None, None),
        (3, "c2", d(30), None, "x"),
        (4, "", d(4), None, None),
        (5, "e", d(5), True, ""),
    ]
    assert report.totals()["quarantined_records"] == 0
    assert not spark.catalog.tableExists(lake_config.quarantine)


def test_a_column_dropped_on_the_source_stays_and_is_null_for_changes_without_it(spark, lake_config, dms):
    """Given a table with `note`, and `ALTER TABLE DROP COLUMN note` on the source between two files of one
    batch and again in a later batch,
    When both batches are applied,
    Then `note` stays in the table; rows whose last change came without it hold NULL; others keep theirs."""
    loaded(spark, lake_config, dms, [(1, "a", 1), (2, "b", 2), (3, "c", 3)])
    with_note = dms.cdc(ORDERS, COLUMNS, [("U", (1, "a2", 10)), ("U", (2, "b2", 20))])
    without = dms.cdc(ORDERS, ["id", "amount"], [("U", (2, 21)), ("I", (4, 4))])
    applied(spark, lake_config, SCHEMA, with_note, without)
    later = dms.cdc(ORDERS, ["id", "amount"], [("U", (3, 33))])

    applied(spark, lake_config, SCHEMA, later)

    assert rows_of(spark, orders(lake_config), ["id", "note", "amount"]) == [
        (1, "a2", d(10)),
        (2, None, d(21)),
        (3, None, d(33)),
        (4, None, d(4)),
    ]


# ------------------------------------------------------------------------------------ stale schema file


def test_a_full_load_with_values_beyond_a_stale_type_widens_and_keeps_nothing_cached(spark, lake_config, dms):
    """Given a schema file still saying `id int, amount decimal(10,2)` and LOAD files holding a bigint id
    and a wider amount,
    When the table is fully loaded (its first pass is kept in Spark's cache, and typed twice),
    Then the columns are widened, every row is loaded exactly, and no cached data outlives the load."""
    stale = schema_of(
        {ORDERS: (["id"], [("id", "int"), ("note", "varchar(40)"), ("amount", "decimal(10,2)")])}
    )
    dms.load(ORDERS, COLUMNS, [(1, "a", "1.50"), (5_000_000_000, "big id", "123456789012345.67")])

    report = full_load(spark, lake_config, stale, str(dms.root))

    assert not report.failed, report.failed
    fields = {f.name: f.dataType.simpleString() for f in spark.table(orders(lake_config)).schema.fields}
    assert (fields["id"], fields["amount"]) == ("bigint", "decimal(17,2)")
    assert rows_of(spark, orders(lake_config)) == [
        (1, "a", d("1.50")),
        (5_000_000_000, "big id", Decimal("123456789012345.67")),
    ]
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty()


def test_values_beyond_their_stale_declared_type_widen_the_column_instead_of_being_lost(
    spark, lake_config, dms
):
    """Given a schema file still saying `id int`, `amount decimal(10,2)`, `score float` after the source
    widened them (bigint, decimal(20,2), double),
    When a batch brings values only the wider types hold,
    Then the table's columns are widened (as Iceberg promotes), every row is applied exactly, nothing is
    quarantined, and the report names the widenings."""
    stale = schema_of(
        {
            ORDERS: (
                ["id"],
                [("id", "int"), ("note", "varchar(40)"), ("amount", "decimal(10,2)"), ("score", "float")],
            )
        }
    )
    dms.load(ORDERS, [*COLUMNS, "score"], [(1, "a", 1, 1.5)])
    full_load(spark, lake_config, stale, str(dms.root))
    change = dms.cdc(
        ORDERS,
        [*COLUMNS, "score"],
        [("I", (5_000_000_000, "big id", "123456789012345.67", 1e300)), ("U", (1, "a2", "9.50", 2.5))],
    )

    report = applied(spark, lake_config, stale, change)

    fields = {f.name: f.dataType.simpleString() for f in spark.table(orders(lake_config)).schema.fields}
    assert (fields["id"], fields["amount"], fields["score"]) == ("bigint", "decimal(17,2)", "double")
    assert rows_of(spark, orders(lake_config), ["id", "note", "amount", "score"]) == [
        (1, "a2", d("9.50"), 2.5),
        (5_000_000_000, "big id", Decimal("123456789012345.67"), 1e300),
    ]
    assert report.totals()["quarantined_records"] == 0
    assert sorted(report.tables[0].schema_changes) == [
        "widened amount decimal(10,2) -> decimal(17,2)",
        "widened id int -> bigint",
        "widened score float -> double",
    ]


def test_a_value_no_type_of_its_column_holds_stops_the_table_and_names_it(spark, lake_config, dms):
    """Given `amount decimal(10,2)` in the schema file while the source now has 4 decimal places
    (a scale Iceberg can't change), and an int column receiving `1.5`,
    When the batch is applied,
    Then the table fails with an error naming the column, the value and what to do; no row changes and
    nothing is quarantined (the batch stays pending); with --type_mismatch quarantine the records go to
    quarantine instead and the rest applies."""
    loaded(spark, lake_config, dms, [(1, "a", 1)])
    change = dms.cdc(
        ORDERS,
        COLUMNS,
        [("U", (1, "rounded?", "1.2345")), ("I", ("1.5", "truncated?", 1)), ("I", (3, "ok", 3))],
    )

    report = apply_cdc(spark, lake_config, SCHEMA, manifest(change))

    (failed,) = report.failed
    assert failed.error.startswith("TypeMismatchError: shop.orders: 2 value(s) don't fit")
    assert "1.2345 is not a valid decimal(10,2) (more than 2 decimal places)" in failed.error or (
        "1.5 is not a valid int" in failed.error
    )
    assert "schema_gen" in failed.error and "--type_mismatch quarantine" in failed.error
    assert rows_of(spark, orders(lake_config)) == [(1, "a", d(1))]
    assert not spark.catalog.tableExists(lake_config.quarantine)

    retried = applied(spark, lake_config, SCHEMA, change, options=ApplyOptions(type_mismatch="quarantine"))

    assert rows_of(spark, orders(lake_config)) == [(1, "a", d(1)), (3, "ok", d(3))]
    assert retried.tables[0].quarantined_records == 2
    assert rows_of(spark, lake_config.quarantine, ["record_number", "reason"]) == [
        (1, "amount: 1.2345 is not a valid decimal(10,2) (more than 2 decimal places)"),
        (2, "id: 1.5 is not a valid int"),
    ]


def test_a_delete_whose_before_image_no_longer_fits_the_types_still_deletes(spark, lake_config, dms):
    """Given a row, When DMS writes its delete with a before image whose amount no longer fits
    decimal(10,2), Then the delete applies (a delete needs its key only)."""
    loaded(spark, lake_config, dms, [(1, "a", 1), (2, "b", 2)])
    change = dms.cdc(ORDERS, COLUMNS, [("D", (1, "a", "1.23456"))])

    applied(spark, lake_config, SCHEMA, change)

    assert rows_of(spark, orders(lake_config)) == [(2, "b", d(2))]


def test_a_column_the_schema_file_lacks_stops_the_table_until_the_file_is_regenerated(
    spark, lake_config, dms
):
    """Given the source added `channel smallint` but the schema file was not regenerated,
    When a batch with the column is applied, Then the table fails with an error naming the column and the
    command to run, and nothing changes;
    When the schema file is regenerated and the same batch runs again, Then it applies with the real type."""
    loaded(spark, lake_config, dms, [(1, "a", 1)])
    change = dms.cdc(ORDERS, [*COLUMNS, "channel"], [("U", (1, "a2", 2, 7)), ("I", (2, "b", 2, 8))])

    report = apply_cdc(spark, lake_config, SCHEMA, manifest(change))

    (failed,) = report.failed
    assert (
        "SchemaOutOfDateError" in failed.error and "channel" in failed.error and "schema_gen" in failed.error
    )
    assert rows_of(spark, orders(lake_config)) == [(1, "a", d(1))]

    regenerated = schema_of(
        {
            ORDERS: (
                ["id"],
                [
                    ("id", "int"),
                    ("note", "varchar(40)"),
                    ("amount", "decimal(10,2)"),
                    ("channel", "smallint"),
                ],
            )
        }
    )
    applied(spark, lake_config, regenerated, change)

    assert spark.table(orders(lake_config)).schema["channel"].dataType.simpleString() == "int"
    assert rows_of(spark, orders(lake_config), ["id", "note", "amount", "channel"]) == [
        (1, "a2", d(2), 7),
        (2, "b", d(2), 8),
    ]


def test_a_type_change_iceberg_cannot_follow_is_a_clear_error(spark, lake_config, dms):
    """Given a table whose `amount` is decimal(10,2), When the regenerated schema file says varchar (the
    source changed the type), Then the CDC run fails naming the column and the reload to run."""
    loaded(spark, lake_config, dms, [(1, "a", 1)])
    changed = schema_of(
        {ORDERS: (["id"], [("id", "int"), ("note", "varchar(40)"), ("amount", "varchar(20)")])}
    )
    change = dms.cdc(ORDERS, COLUMNS, [("U", (1, "a", "about 2"))])

    report = apply_cdc(spark, lake_config, changed, manifest(change))

    (failed,) = report.failed
    assert "SchemaChangeError" in failed.error and "--reload true" in failed.error
    assert rows_of(spark, orders(lake_config)) == [(1, "a", d(1))]


# ---------------------------------------------------------------------- late, duplicated, replayed files


def test_a_deleted_row_stays_deleted_when_an_older_change_of_it_arrives_late(spark, lake_config, dms):
    """Given rows 1 and 2, and files written in this order: F1 updates 1 and inserts 3, F2 deletes 1 and 3,
    When F2 is delivered and applied before F1 (out of order across batches),
    Then F1's changes of 1 and 3 are older than their deletes and change nothing: 1 and 3 stay deleted."""
    loaded(spark, lake_config, dms, [(1, "a", 1), (2, "b", 2)])
    first = dms.cdc(ORDERS, COLUMNS, [("U", (1, "a2", 10)), ("I", (3, "c", 3))], seqs=[100, 101])
    second = dms.cdc(ORDERS, COLUMNS, [("D", (1, None, None)), ("D", (3, None, None))], seqs=[200, 201])

    applied(spark, lake_config, SCHEMA, second, run_id="b1")
    late = applied(spark, lake_config, SCHEMA, first, run_id="b2")

    assert rows_of(spark, orders(lake_config)) == [(2, "b", d(2))]
    assert late.tables[0].ignored_older == 2


def test_a_replayed_file_changes_nothing_even_after_compaction_and_snapshot_expiry(spark, lake_config, dms):
    """Given batches applied (an insert, then its update), the table compacted and every snapshot but the
    current expired,
    When the first batch is replayed (an operator re-drives the dead-letter queue) together with a file
    never applied before (a late file),
    Then the replayed file is skipped (the ledger still names it), the late file applies, and the table
    equals what the source holds."""
    loaded(spark, lake_config, dms, [(1, "a", 1)])
    insert = dms.cdc(ORDERS, COLUMNS, [("I", (2, "b", 2))], seqs=[100])
    late = dms.cdc(ORDERS, COLUMNS, [("I", (3, "c", 3))], seqs=[150])
    update = dms.cdc(ORDERS, COLUMNS, [("U", (2, "b2", 20))], seqs=[200])
    applied(spark, lake_config, SCHEMA, insert, run_id="b1")
    applied(spark, lake_config, SCHEMA, update, run_id="b2")
    table = orders(lake_config)
    spark.sql(
        f"CALL {lake_config.catalog_name}.system.rewrite_data_files(table => '{table.split('.', 1)[1]}', options => map('min-input-files','1'))"
    )
    newest = spark.sql(f"SELECT max(committed_at) AS t FROM {table}.snapshots").first()["t"]
    spark.sql(
        f"CALL {lake_config.catalog_name}.system.expire_snapshots(table => '{table.split('.', 1)[1]}', "
        f"older_than => TIMESTAMP '{newest}', retain_last => 1)"
    )
    assert snapshot_count(spark, table) == 1

    replay = applied(spark, lake_config, SCHEMA, insert, late, run_id="replay")

    assert rows_of(spark, table) == [(1, "a", d(1)), (2, "b2", d(20)), (3, "c", d(3))]
    assert replay.tables[0].skipped_already_applied == 1


def test_a_keyless_table_gets_each_file_once_whatever_the_order_duplicates_and_replays(
    spark, lake_config, dms
):
    """Given a table without a primary key (append-only),
    When files arrive out of order, one is listed twice in a manifest, a batch is retried and one is
    replayed after its snapshot was expired,
    Then every insert is in the table exactly once."""
    events = "shop.events"
    schema = schema_of({events: ([], [("what", "varchar(20)"), ("n", "int")])})
    one = dms.cdc(events, ["what", "n"], [("I", ("one", 1))])
    two = dms.cdc(events, ["what", "n"], [("I", ("two", 2)), ("I", ("two", 2))])
    three = dms.cdc(events, ["what", "n"], [("I", ("three", 3))])
    table = lake_config.clean_table("shop_events")

    applied(spark, lake_config, schema, three, three, run_id="b1")
    applied(spark, lake_config, schema, one, run_id="b2")
    applied(spark, lake_config, schema, one, run_id="b2-retry")
    newest = spark.sql(f"SELECT max(committed_at) AS t FROM {table}.snapshots").first()["t"]
    spark.sql(
        f"CALL {lake_config.catalog_name}.system.expire_snapshots(table => '{table.split('.', 1)[1]}', "
        f"older_than => TIMESTAMP '{newest}', retain_last => 1)"
    )
    applied(spark, lake_config, schema, two, three, one, run_id="b3")

    assert rows_of(spark, table) == [("one", 1), ("three", 3), ("two", 2), ("two", 2)]


def test_the_files_of_a_rolled_back_commit_apply_again(spark, lake_config, dms):
    """Given a batch applied, then the clean table rolled back to before it (docs/TIME_TRAVEL.md),
    When the batch's files are re-driven, Then they apply again."""
    loaded(spark, lake_config, dms, [(1, "a", 1)])
    table = orders(lake_config)
    before = spark.sql(
        f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).first()[0]
    change = dms.cdc(ORDERS, COLUMNS, [("U", (1, "a2", 2))])
    applied(spark, lake_config, SCHEMA, change, run_id="b1")
    spark.sql(
        f"CALL {lake_config.catalog_name}.system.rollback_to_snapshot('{table.split('.', 1)[1]}', {before})"
    )
    assert rows_of(spark, table) == [(1, "a", d(1))]

    again = applied(spark, lake_config, SCHEMA, change, run_id="redrive")

    assert rows_of(spark, table) == [(1, "a2", d(2))]
    assert again.tables[0].skipped_already_applied == 0


def test_a_primary_key_change_leaves_a_tombstone_for_the_old_key(spark, lake_config, dms):
    """Given row 1, When an update moves it to key 10 (before image BI_id) and afterwards a late, older
    update of key 1 arrives, Then key 1 stays gone and key 10 holds the row."""
    loaded(spark, lake_config, dms, [(1, "a", 1)])
    moved = dms.cdc(ORDERS, ["BI_id", *COLUMNS], [("U", (1, 10, "moved", 1))], seqs=[200])
    older = dms.cdc(ORDERS, COLUMNS, [("U", (1, "older", 5))], seqs=[150])
    applied(spark, lake_config, SCHEMA, moved, run_id="b1")

    applied(spark, lake_config, SCHEMA, older, run_id="b2")

    assert rows_of(spark, orders(lake_config)) == [(10, "moved", d(1))]


# ---------------------------------------------------------------------------------------------- reload


def test_a_reload_during_cdc_is_order_independent(spark, lake_config, dms):
    """Given a table loaded at change 10, CDC applied up to change 35, and DMS reloading the table at
    change 30 (new LOAD files: 1 changed, 2 deleted before the reload, 4 inserted before it),
    When the reload is applied, then a late file with changes 25-28 and a newer one with change 40,
    Then: 1 is the reload's value; 2 is gone; 3 keeps its change 35 (newer than the reload); 4 is there;
    the late changes (older than the reload) change nothing; change 40 applies."""
    dms.load(ORDERS, COLUMNS, [(1, "a", 1), (2, "b", 2), (3, "c", 3)], snapshot_seq=10)
    full_load(spark, lake_config, SCHEMA, str(dms.root))
    applied(
        spark, lake_config, SCHEMA, dms.cdc(ORDERS, COLUMNS, [("U", (3, "c35", 35))], seqs=[35]), run_id="b1"
    )
    dms.load(ORDERS, COLUMNS, [(1, "a30", 100), (3, "c30", 300), (4, "d30", 4)], snapshot_seq=30)

    report = full_load(spark, lake_config, SCHEMA, str(dms.root), reload=True, run_id="reload")
    assert report.ok, report.failed
    late = dms.cdc(
        ORDERS,
        COLUMNS,
        [("U", (1, "late", 0)), ("I", (2, "late", 0)), ("D", (4, None, None))],
        seqs=[25, 26, 28],
    )
    newer = dms.cdc(ORDERS, COLUMNS, [("U", (4, "d40", 40))], seqs=[40])
    applied(spark, lake_config, SCHEMA, late, newer, run_id="b2")

    assert rows_of(spark, orders(lake_config)) == [
        (1, "a30", d(100)),
        (3, "c35", d(35)),
        (4, "d40", d(40)),
    ]


def test_a_reload_places_itself_by_time_when_its_load_files_carry_no_sequence(spark, lake_config, tmp_path):
    """Given DMS-shaped change sequences (time + counter) and a reload whose LOAD rows carry none,
    When the reload is applied, Then changes from before the time DMS started it (less the margin) lose
    to the reload and changes after it survive it."""
    from datetime import datetime

    from lakehouse.apply.clean_table import sequence_at

    dms = DmsWriter(tmp_path / "raw" / "dms")
    dms.load(ORDERS, COLUMNS, [(1, "a", 1), (2, "b", 2)])
    full_load(spark, lake_config, SCHEMA, str(dms.root))
    at = lambda moment: int(sequence_at(moment))  # noqa: E731
    early = dms.cdc(ORDERS, COLUMNS, [("U", (1, "early", 5))], seqs=[at(datetime(2026, 11, 22, 9, 0))])
    late_change = dms.cdc(ORDERS, COLUMNS, [("U", (2, "after", 7))], seqs=[at(datetime(2026, 11, 22, 11, 0))])
    applied(spark, lake_config, SCHEMA, early, late_change, run_id="b1")
    dms.load(ORDERS, COLUMNS, [(1, "reloaded", 10), (2, "reloaded", 20)])  # dms_timestamp 10:00:00.123456

    report = full_load(spark, lake_config, SCHEMA, str(dms.root), reload=True, run_id="reload")

    assert report.ok, report.failed
    assert rows_of(spark, orders(lake_config)) == [(1, "reloaded", d(10)), (2, "after", d(7))]


def test_a_missing_file_that_a_reload_superseded_is_skipped(spark, lake_config, dms):
    """Given a CDC file written, then the table reloaded an hour later and DMS removing the table's old
    files, When a manifest still names the removed file, Then it is skipped as superseded (no error)."""
    from datetime import timedelta
    from pathlib import Path

    from tests.support import BASE_TIME

    dms.load(ORDERS, COLUMNS, [(1, "a", 1)], snapshot_seq=10)
    full_load(spark, lake_config, SCHEMA, str(dms.root))
    removed = dms.cdc(ORDERS, COLUMNS, [("U", (1, "gone", 2))], seqs=[20])
    Path(removed).unlink()
    dms.load(ORDERS, COLUMNS, [(1, "reloaded", 3)], snapshot_seq=30, moment=BASE_TIME + timedelta(hours=1))
    full_load(spark, lake_config, SCHEMA, str(dms.root), reload=True, run_id="reload")

    report = applied(spark, lake_config, SCHEMA, removed, run_id="b1")

    assert report.tables[0].superseded_files == 1
    assert rows_of(spark, orders(lake_config)) == [(1, "reloaded", d(3))]


# ---------------------------------------------------------------------------------------- names, files


def test_columns_with_spaces_backticks_and_capitals_go_through_end_to_end(spark, lake_config, dms):
    """Given source columns named `Unit Price` and `odd``name` (quoted everywhere they reach SQL),
    When loaded and changed, Then the table holds them."""
    odd = "shop.odd"
    columns = ["Id", "Unit Price", "odd`name"]
    schema = schema_of(
        {odd: (["Id"], [("Id", "int"), ("Unit Price", "decimal(7,2)"), ("odd`name", "varchar(9)")])}
    )
    dms.load(odd, columns, [(1, 1.5, "x")])
    full_load(spark, lake_config, schema, str(dms.root))
    applied(spark, lake_config, schema, dms.cdc(odd, columns, [("U", (1, 2.5, "y")), ("I", (2, 3, "z"))]))

    assert rows_of(spark, lake_config.clean_table("shop_odd"), ["id", "unit price", "odd`name"]) == [
        (1, d(2.5), "y"),
        (2, d(3), "z"),
    ]


def test_a_column_named_like_the_clean_tables_metadata_is_a_clear_error(spark, lake_config, dms):
    """Given DMS files carrying a `dms_commit_ts` column (TimestampColumnName not passed to the job),
    When applied, Then the table fails with an error saying which argument to pass."""
    change = dms.cdc(ORDERS, [*COLUMNS, "dms_commit_ts"], [("I", (1, "a", 1, "2026-11-22 10:00:00"))])

    report = apply_cdc(spark, lake_config, SCHEMA, manifest(change))

    assert "--timestamp_column dms_commit_ts" in report.failed[0].error


def test_real_dms_file_names_and_date_partition_folders_apply_in_time_order(spark, lake_config, dms):
    """Given CDC files named as the AWS documentation shows (`20141029-1134010000.csv`, ten time digits)
    below DatePartitionEnabled folders, without AR_H_CHANGE_SEQ,
    When applied in one batch listed newest first, Then the later file's change wins."""
    plain = DmsWriter(dms.root, CsvFormat(add_change_seq=False))
    loaded(spark, lake_config, plain, [(1, "a", 1)])
    early = plain.cdc(
        ORDERS, COLUMNS, [("U", (1, "early", 2))], name="20261122-1100010000.csv", folder="2026/11/22"
    )
    late = plain.cdc(
        ORDERS, COLUMNS, [("U", (1, "late", 3))], name="20261122-1100010001.csv", folder="2026/11/22"
    )

    applied(spark, lake_config, SCHEMA, late, early)

    assert rows_of(spark, orders(lake_config)) == [(1, "late", d(3))]
    summary = spark.sql(
        f"SELECT summary FROM {orders(lake_config)}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).first()[0]
    assert sorted(json.loads(summary["dms.applied-files"])) == [
        "20261122-1100010000.csv",
        "20261122-1100010001.csv",
    ]


def test_a_cdc_file_written_in_the_second_a_reload_began_and_removed_by_it_is_superseded(
    spark, lake_config, dms
):
    """Given DMS flushing a CDC file at 10:00:00.700, then reloading the table (its folder emptied, LOAD rows
    transferred at 10:00:00.900), and a CDC file written at 10:00:05 after the reload that someone removed,
    When a batch names both removed files, Then the first is superseded by the reload (whatever the
    precision of the LOAD files' own times), and the second is an error: its changes are lost otherwise."""
    import os
    from datetime import UTC, datetime
    from pathlib import Path

    from lakehouse.apply.run import MissingFileError

    dms.load(ORDERS, COLUMNS, [(1, "a", 1)], snapshot_seq=10)
    full_load(spark, lake_config, SCHEMA, str(dms.root))
    flushed = dms.cdc(ORDERS, COLUMNS, [("U", (1, "flushed", 2))], seqs=[20], name="20261124-100000700.csv")
    Path(flushed).unlink()
    reload_file = dms.load(
        ORDERS, COLUMNS, [(1, "flushed", 2)], snapshot_seq=25, moment=datetime(2026, 11, 24, 10, 0, 0, 900000)
    )
    whole_second = datetime(2026, 11, 24, 10, 0, 0, tzinfo=UTC).timestamp()  # S3 keeps whole seconds
    os.utime(reload_file, (whole_second, whole_second))
    full_load(spark, lake_config, SCHEMA, str(dms.root), reload=True, run_id="reload")
    after = dms.cdc(ORDERS, COLUMNS, [("U", (1, "after", 3))], seqs=[30], name="20261124-100005000.csv")
    Path(after).unlink()

    assert applied(spark, lake_config, SCHEMA, flushed, run_id="b1").tables[0].superseded_files == 1
    lost = apply_cdc(spark, lake_config, SCHEMA, manifest(after, run_id="b2"), DEFAULTS)
    assert not lost.ok and MissingFileError.__name__ in lost.failed[0].error
    assert "20261124-100005000.csv" in lost.failed[0].error
    assert rows_of(spark, orders(lake_config)) == [(1, "flushed", d(2))]


# ------------------------------------------------------------------------------------ endpoint settings


@pytest.mark.parametrize("spelled", ["|", "\\t"], ids=["pipe", "tab"])
def test_files_written_with_the_endpoints_csv_delimiter_apply_like_comma_separated_ones(
    spark, lake_config, tmp_path, spelled
):
    """Given DMS writing with CsvDelimiter '|' or a tab (values holding the delimiter, commas, quotes and
    a line break are quoted), and the jobs given the same delimiter as a job argument (a tab spelled `\\t`),
    When the full load and a CDC file are applied,
    Then the table holds every value exactly, and nothing is quarantined."""
    from lakehouse.jobs.arguments import apply_options
    from lakehouse.jobs.cdc import parser as cdc_parser

    options = apply_options(cdc_parser().parse_args(["--manifest", "m.json", "--csv_delimiter", spelled]))
    sep = options.reader.delimiter
    table = tmp_path / "raw" / "dms" / "shop" / "orders"
    table.mkdir(parents=True)

    def line(*fields: str) -> str:
        return (
            sep.join(
                f'"{f.replace(chr(34), 2 * chr(34))}"' if any(c in f for c in f'{sep},"\n') else f
                for f in fields
            )
            + "\n"
        )

    (table / "LOAD00000001.csv").write_text(
        line("Op", "dms_timestamp", "AR_H_CHANGE_SEQ", *COLUMNS)
        + line("I", "2026-11-22 10:00:00.000000", "", "1", f"a{sep}b, c", "1.50")
        + line("I", "2026-11-22 10:00:00.000000", "", "2", 'say "hi"\nbye', "2.00")
    )
    cdc = table / "20261122-100100000.csv"
    cdc.write_text(
        line("Op", "dms_timestamp", "AR_H_CHANGE_SEQ", *COLUMNS)
        + line(
            "U", "2026-11-22 10:01:00.000000", "20261122100100000000000000000000001", "1", f"x{sep}y", "3.25"
        )
        + line("I", "2026-11-22 10:01:00.000000", "20261122100100000000000000000000002", "3", "", "4.00")
    )

    assert full_load(spark, lake_config, SCHEMA, str(tmp_path / "raw" / "dms"), options=options).ok
    report = applied(spark, lake_config, SCHEMA, str(cdc), options=options)

    assert rows_of(spark, orders(lake_config)) == [
        (1, f"x{sep}y", d(3.25)),
        (2, 'say "hi"\nbye', d(2)),
        (3, None, d(4)),
    ]
    assert report.totals()["quarantined_records"] == report.totals()["quarantined_files"] == 0


def test_a_csv_delimiter_that_would_break_every_record_is_refused_up_front():
    """Given a --csv_delimiter of a quote, a line break or blanks, When the job parses its arguments,
    Then it exits with a usage error instead of quarantining every file."""
    from lakehouse.jobs.cdc import parser as cdc_parser

    for bad in ['"', "\n", " ", "  "]:
        with pytest.raises(SystemExit):
            cdc_parser().parse_args(["--manifest", "m.json", "--csv_delimiter", bad])


def test_mysql_zero_dates_are_null_and_never_stop_the_table(spark, lake_config, dms):
    """Given a MySQL table whose date and datetime columns hold MySQL's "zero" dates (legal without
    NO_ZERO_DATE; no date type holds them) in the full load and in a CDC update,
    When loaded and applied,
    Then those values are NULL (as MySQL's connectors read them), the other dates are exact, and the
    table never stops on them."""
    from datetime import date, datetime

    table, columns = "shop.events", ["id", "day", "at"]
    schema = schema_of({table: (["id"], [("id", "int"), ("day", "date"), ("at", "datetime(6)")])})
    dms.load(
        table, columns, [(1, "0000-00-00", "0000-00-00 00:00:00"), (2, "2026-11-22", "2026-11-22 10:00:00")]
    )
    assert full_load(spark, lake_config, schema, str(dms.root)).ok
    update = dms.cdc(
        table,
        columns,
        [
            ("U", (2, "0000-00-00", "2026-11-22 10:00:00.500000")),
            ("I", (3, "2026-01-31", "0000-00-00 00:00:00.000000")),
        ],
    )

    applied(spark, lake_config, schema, update)

    assert rows_of(spark, lake_config.clean_table("shop_events")) == [
        (1, None, None),
        (2, None, datetime(2026, 11, 22, 10, 0, 0, 500000)),
        (3, date(2026, 1, 31), None),
    ]

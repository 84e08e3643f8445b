"""The CDC correctness rules (docs/CONTRACTS.md, "Exactly once, in any order"), each proven on a whole table
ordered by key."""

from __future__ import annotations

import json
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.io.iceberg import ensure_namespace, key_upper_bound

from tests.support import DmsWriter, manifest, rows_of, schema_of, snapshot_count

pytestmark = pytest.mark.spark

CUSTOMER = "sales.customer"
COLUMNS = ["id", "name", "balance"]
SCHEMA = schema_of(
    {CUSTOMER: (["id"], [("id", "int"), ("name", "varchar(40)"), ("balance", "decimal(10,2)")])}
)


@pytest.fixture
def dms(tmp_path) -> DmsWriter:
    return DmsWriter(tmp_path / "raw" / "dms")


def table(config) -> str:
    return config.clean_table("sales_customer")


def load(spark, config, dms, rows, schema=SCHEMA):
    dms.load(CUSTOMER, COLUMNS, rows)
    report = full_load(spark, config, schema, str(dms.root))
    assert not report.failed, report.failed
    return report


def test_last_change_per_key_wins_by_change_sequence(spark, lake_config, dms):
    """Given many changes to one key spread over files, out of order within a file,
    When one manifest is applied,
    Then the change with the highest AR_H_CHANGE_SEQ is what the table holds."""
    load(spark, lake_config, dms, [(1, "a", 1)])
    first = dms.cdc(CUSTOMER, COLUMNS, [("U", (1, "seq 3", 3)), ("U", (1, "seq 2", 2))], seqs=[3, 2])
    second = dms.cdc(CUSTOMER, COLUMNS, [("U", (1, "seq 5", 5)), ("U", (1, "seq 4", 4))], seqs=[5, 4])

    apply_cdc(spark, lake_config, SCHEMA, manifest(first, second))

    assert rows_of(spark, table(lake_config)) == [(1, "seq 5", Decimal("5.00"))]


def test_equal_sequence_ties_go_to_the_later_file_then_the_later_record(spark, lake_config, dms):
    """Given changes to one key with the same change sequence in two files, two in the later file,
    When applied together,
    Then the later file wins, and within it the later record."""
    load(spark, lake_config, dms, [])
    early = dms.cdc(CUSTOMER, COLUMNS, [("U", (1, "early file", 1))], seqs=[7])
    late = dms.cdc(
        CUSTOMER, COLUMNS, [("U", (1, "late file, first", 2)), ("U", (1, "late file, last", 3))], seqs=[7, 7]
    )

    apply_cdc(spark, lake_config, SCHEMA, manifest(late, early))  # manifest order must not matter

    assert rows_of(spark, table(lake_config)) == [(1, "late file, last", Decimal("3.00"))]


def test_insert_update_delete_outcomes_for_present_and_missing_keys(spark, lake_config, dms):
    """Given keys 1..4 loaded,
    When a batch deletes 1 then re-inserts it, inserts 2 again (a DMS replay), updates missing key 7,
    deletes missing key 8, inserts 5 then deletes it, and deletes 3,
    Then 1 is back with its new values, 2 is upserted, 7 is inserted, 8 and 5 are absent, 3 is gone."""
    load(spark, lake_config, dms, [(1, "a", 1), (2, "b", 2), (3, "c", 3), (4, "d", 4)])
    batch = dms.cdc(
        CUSTOMER,
        COLUMNS,
        [
            ("D", (1, None, None)),
            ("I", (1, "a reborn", 10)),
            ("I", (2, "b replayed", 20)),
            ("U", (7, "g from update", 70)),
            ("D", (8, None, None)),
            ("I", (5, "e", 5)),
            ("D", (5, None, None)),
            ("D", (3, None, None)),
        ],
    )

    report = apply_cdc(spark, lake_config, SCHEMA, manifest(batch))

    assert rows_of(spark, table(lake_config)) == [
        (1, "a reborn", Decimal("10.00")),
        (2, "b replayed", Decimal("20.00")),
        (4, "d", Decimal("4.00")),
        (7, "g from update", Decimal("70.00")),
    ]
    assert report.tables[0].deleted == 3  # 3, 5 and 8 (a delete of a missing key is a no-op)


def test_a_table_switched_to_copy_on_write_takes_the_same_batch(spark, lake_config, dms):
    """Given a clean table its owner switched to copy-on-write (an Iceberg table property, ours or not),
    When a batch of deletes, updates and inserts is applied,
    Then the MERGE (an EXISTS subquery on the batch in that mode) runs and the table is as with merge-on-read."""
    load(spark, lake_config, dms, [(1, "a", 1), (2, "b", 2), (3, "c", 3)])
    modes = ", ".join(f"'write.{op}.mode'='copy-on-write'" for op in ("delete", "update", "merge"))
    spark.sql(f"ALTER TABLE {table(lake_config)} SET TBLPROPERTIES ({modes})")
    batch = dms.cdc(
        CUSTOMER,
        COLUMNS,
        [("D", (1, None, None)), ("U", (2, "b updated", 20)), ("I", (4, "d", 4)), ("U", (2, "b last", 21))],
    )

    report = apply_cdc(spark, lake_config, SCHEMA, manifest(batch))

    assert not report.failed, report.failed
    assert rows_of(spark, table(lake_config)) == [
        (2, "b last", Decimal("21.00")),
        (3, "c", Decimal("3.00")),
        (4, "d", Decimal("4.00")),
    ]


@pytest.fixture
def every_target_bloom_filtered(spark):
    """Spark's runtime Bloom filter for any target size (the session builds one from 256 MB of target
    scan up), with the apply jobs' own settings (APPLY_TUNING, without which a batch small enough to be
    broadcast never gets one): the small tables of a test then take the path a large table takes."""
    from lakehouse.io.session import APPLY_TUNING

    settings = {
        "spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold": "0"
    } | APPLY_TUNING
    before = {key: spark.conf.get(key) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    yield
    for key, value in before.items():
        spark.conf.set(key, value)


def sql_plans(spark, after: int = -1) -> dict[int, str]:
    """The physical plan of each SQL execution the session still keeps, by execution id, from `after` on
    (ids rise; the oldest executions are dropped past spark.sql.ui.retainedExecutions)."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(30_000)
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    found = (executions.apply(i) for i in range(executions.size()))
    return {e.executionId(): e.physicalPlanDescription() for e in found if e.executionId() > after}


def test_the_merge_filters_the_target_by_the_batch_keys_and_changes_nothing_else(
    spark, lake_config, dms, every_target_bloom_filtered
):
    """Given a clean table large enough for a runtime filter (forced here),
    When a batch of deletes, updates, inserts and a delete of a missing key is applied,
    Then the MERGE scans the target through a Bloom filter of the batch's keys, and the table is exactly
    what the rules give without it."""
    load(spark, lake_config, dms, [(i, f"row {i}", i) for i in range(1, 7)])
    batch = dms.cdc(
        CUSTOMER,
        COLUMNS,
        [
            ("D", (1, None, None)),
            ("U", (2, "b updated", 20)),
            ("I", (7, "g", 7)),
            ("D", (99, None, None)),
            ("I", (4, "d again", 40)),
        ],
    )
    last_before = max(sql_plans(spark), default=-1)

    report = apply_cdc(spark, lake_config, SCHEMA, manifest(batch))

    assert not report.failed, report.failed
    merges = [plan for plan in sql_plans(spark, after=last_before).values() if "WriteDelta" in plan]
    assert len(merges) == 1 and "might_contain" in merges[0], merges
    assert rows_of(spark, table(lake_config)) == [
        (2, "b updated", Decimal("20.00")),
        (3, "row 3", Decimal("3.00")),
        (4, "d again", Decimal("40.00")),
        (5, "row 5", Decimal("5.00")),
        (6, "row 6", Decimal("6.00")),
        (7, "g", Decimal("7.00")),
    ]


def last_operation(spark, name: str) -> str:
    return spark.sql(f"SELECT operation FROM {name}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]


def test_a_batch_whose_keys_are_all_new_is_appended_and_the_rules_still_hold(spark, lake_config, dms):
    """Given keys 1..3 loaded,
    When a batch inserts 4 and 5, updates missing key 6, and inserts then deletes 7 (all above the table's
    highest key), then a late file carries an insert of 7 older than its delete and an insert of 9, then a
    batch replays an older insert of 5 and inserts 8,
    Then the first two batches commit as appends (no MERGE), the third as a MERGE, and the table is what
    the rules give: 7 stays deleted, 5 keeps its newer values, 6, 8 and 9 are in, every file is recorded."""
    load(spark, lake_config, dms, [(1, "a", 1), (2, "b", 2), (3, "c", 3)])
    name = table(lake_config)
    new_keys = dms.cdc(
        CUSTOMER,
        COLUMNS,
        [
            ("I", (4, "d", 4)),
            ("I", (5, "e", 5)),
            ("U", (6, "f from update", 6)),
            ("I", (7, "g", 7)),
            ("D", (7, None, None)),
        ],
        seqs=[10, 11, 12, 13, 14],
    )
    operations = []
    late = dms.cdc(
        CUSTOMER, COLUMNS, [("I", (7, "g, older than its delete", 70)), ("I", (9, "i", 9))], seqs=[13, 16]
    )
    replay = dms.cdc(
        CUSTOMER, COLUMNS, [("I", (5, "e replayed, older", 50)), ("I", (8, "h", 8))], seqs=[9, 15]
    )
    for run_id, batch in (("new-keys", new_keys), ("late", late), ("replay", replay)):
        report = apply_cdc(spark, lake_config, SCHEMA, manifest(batch, run_id=run_id))
        assert not report.failed, report.failed
        operations.append(last_operation(spark, name))

    assert operations == ["append", "append", "overwrite"]
    assert rows_of(spark, name) == [
        (1, "a", Decimal("1.00")),
        (2, "b", Decimal("2.00")),
        (3, "c", Decimal("3.00")),
        (4, "d", Decimal("4.00")),
        (5, "e", Decimal("5.00")),
        (6, "f from update", Decimal("6.00")),
        (8, "h", Decimal("8.00")),
        (9, "i", Decimal("9.00")),
    ]
    recorded = spark.sql(f"SELECT summary['dms.applied-files'] AS files FROM {name}.snapshots").collect()
    assert sorted(f for r in recorded if r.files for f in json.loads(r.files)) == sorted(
        Path(p).name for p in (new_keys, late, replay)
    )


def test_a_bound_read_in_the_driver_is_the_bound_the_spark_query_reads(spark, lake_config):
    """Given a table without a snapshot, then with files holding keys 1..3 and 7, 10, then with a file written
    while the key's metrics were only counts,
    When the upper bounds of its integer key and of its timestamp and date columns are read from its manifests
    in the driver and by the Spark query of `data_files`,
    Then both read the same values at every step: none yet, the highest, then unknown for the key."""
    ensure_namespace(spark, lake_config.catalog_name, lake_config.clean_database)
    name = lake_config.clean_table("bounds")
    spark.sql(f"CREATE TABLE {name} (id bigint, at timestamp, day date, label string) USING iceberg")

    def both() -> list[tuple[tuple[bool, object], tuple[bool, object]]]:
        return [
            (key_upper_bound(spark, name, column, driver_files=64), key_upper_bound(spark, name, column, 0))
            for column in ("ID", "at", "day")
        ]

    seen = [both()]
    row = "({}, TIMESTAMP '2026-11-{:02d} 10:00:00.123456', DATE '2026-10-{:02d}', 'x')"
    spark.sql(f"INSERT INTO {name} VALUES {', '.join(row.format(k, k, k) for k in (1, 2, 3))}")
    spark.sql(f"INSERT INTO {name} VALUES {', '.join(row.format(k, k, k) for k in (10, 7))}")
    seen.append(both())
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('write.metadata.metrics.column.id' = 'counts')")
    spark.sql(f"INSERT INTO {name} VALUES {row.format(5, 5, 5)}")
    seen.append(both())

    at_10 = datetime(2026, 11, 10, 10, 0, 0, 123456)
    nothing = ((True, None), (True, None))
    assert seen == [
        [nothing, nothing, nothing],
        [((True, 10),) * 2, ((True, at_10),) * 2, ((True, date(2026, 10, 10)),) * 2],
        [((False, None),) * 2, ((True, at_10),) * 2, ((True, date(2026, 10, 10)),) * 2],
    ]


def test_primary_key_change_through_before_image_moves_the_row(spark, lake_config, dms):
    """Given rows 1 and 2, and DMS writing pk-only before-image columns (BI_id),
    When an update changes row 1's key to 10 and a later update touches key 1 again as an insert,
    Then key 10 holds the moved row and key 1 holds only the later insert."""
    load(spark, lake_config, dms, [(1, "a", 1), (2, "b", 2)])
    columns = ["BI_id", *COLUMNS]
    moved = dms.cdc(CUSTOMER, columns, [("U", (1, 10, "a moved", 1)), ("U", (2, 2, "b updated", 2))])
    again = dms.cdc(CUSTOMER, columns, [("I", (None, 1, "new one", 9))])

    apply_cdc(spark, lake_config, SCHEMA, manifest(moved, again))

    assert rows_of(spark, table(lake_config)) == [
        (1, "new one", Decimal("9.00")),
        (2, "b updated", Decimal("2.00")),
        (10, "a moved", Decimal("1.00")),
    ]


def test_rerun_and_overlapping_manifest_apply_nothing_twice(spark, lake_config, dms):
    """Given a batch applied once,
    When the same manifest runs again, then an overlapping one with one new file,
    Then the retry commits nothing and the overlap applies only the new file."""
    load(spark, lake_config, dms, [(1, "a", 1)])
    first = dms.cdc(CUSTOMER, COLUMNS, [("U", (1, "once", 2)), ("I", (2, "b", 1))])
    apply_cdc(spark, lake_config, SCHEMA, manifest(first))
    snapshots = snapshot_count(spark, table(lake_config))

    retry = apply_cdc(spark, lake_config, SCHEMA, manifest(first))
    assert snapshot_count(spark, table(lake_config)) == snapshots
    assert retry.tables[0].skipped_already_applied == 1

    newer = dms.cdc(CUSTOMER, COLUMNS, [("D", (2, None, None))])
    overlap = apply_cdc(spark, lake_config, SCHEMA, manifest(first, newer))

    assert rows_of(spark, table(lake_config)) == [(1, "once", Decimal("2.00"))]
    assert overlap.tables[0].skipped_already_applied == 1
    assert overlap.tables[0].deleted == 1


def applied_files_of_newest_commit(spark, iceberg_table: str) -> list[str]:
    summary = spark.sql(
        f"SELECT summary FROM {iceberg_table}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).first()["summary"]
    return json.loads(summary["dms.applied-files"])


def test_a_late_older_file_is_applied_but_never_overwrites_a_newer_change(spark, lake_config, dms):
    """Given a newer change to key 1 applied, and a file with an older change to key 1 and a new key 2
    delivered after it (out of order across batches),
    When the late file is applied,
    Then key 1 keeps the newer change, key 2 is inserted, and the commit names the late file as applied."""
    load(spark, lake_config, dms, [(1, "a", 1)])
    older = dms.cdc(CUSTOMER, COLUMNS, [("U", (1, "older", 2)), ("I", (2, "b", 2))], seqs=[100, 101])
    newer = dms.cdc(CUSTOMER, COLUMNS, [("U", (1, "newer", 3))], seqs=[200])
    apply_cdc(spark, lake_config, SCHEMA, manifest(newer))

    report = apply_cdc(spark, lake_config, SCHEMA, manifest(older))

    assert rows_of(spark, table(lake_config)) == [(1, "newer", Decimal("3.00")), (2, "b", Decimal("2.00"))]
    assert applied_files_of_newest_commit(spark, table(lake_config)) == [older.rsplit("/", 1)[-1]]
    assert report.tables[0].skipped_already_applied == 0


def test_files_without_change_sequence_fall_back_to_file_then_record_order(spark, lake_config, dms):
    """Given DMS without the AR_H_CHANGE_SEQ column (the file's time, then the record's position give
    the order),
    When two files are applied, then the first again,
    Then the last record of the last file wins and the re-run of the earlier file changes nothing."""
    from tools.dms_csv import CsvFormat

    plain = DmsWriter(dms.root, CsvFormat(add_change_seq=False))
    load(spark, lake_config, plain, [(1, "a", 1)])
    first = plain.cdc(CUSTOMER, COLUMNS, [("U", (1, "first", 1)), ("U", (1, "second", 2))], seqs=[None, None])
    second = plain.cdc(CUSTOMER, COLUMNS, [("U", (1, "third", 3))], seqs=[None])
    apply_cdc(spark, lake_config, SCHEMA, manifest(first))
    assert rows_of(spark, table(lake_config)) == [(1, "second", Decimal("2.00"))]

    apply_cdc(spark, lake_config, SCHEMA, manifest(second))
    apply_cdc(spark, lake_config, SCHEMA, manifest(first))

    assert rows_of(spark, table(lake_config)) == [(1, "third", Decimal("3.00"))]


def test_schema_evolution_adds_widens_and_keeps_dropped_columns(spark, lake_config, dms):
    """Given a table with id int and a small decimal,
    When the source adds a column `email`, widens `balance`, and a later file no longer has `name`,
    Then the table gains `email`, `balance` is wider, and `name` stays with null for the new row."""
    load(spark, lake_config, dms, [(1, "a", 1)])
    evolved = schema_of(
        {
            CUSTOMER: (
                ["id"],
                [
                    ("id", "int"),
                    ("name", "varchar(40)"),
                    ("balance", "decimal(14,2)"),
                    ("email", "varchar(80)"),
                ],
            )
        }
    )
    added = dms.cdc(CUSTOMER, [*COLUMNS, "email"], [("I", (2, "b", 123456789012, "b@example.com"))])
    dropped = dms.cdc(CUSTOMER, ["id", "balance", "email"], [("I", (3, 3, "c@example.com"))])

    report = apply_cdc(spark, lake_config, evolved, manifest(added, dropped))

    fields = {f.name: f.dataType.simpleString() for f in spark.table(table(lake_config)).schema.fields}
    assert fields["balance"] == "decimal(14,2)"
    assert fields["email"] == "string"
    assert rows_of(spark, table(lake_config), ["id", "name", "balance", "email"]) == [
        (1, "a", Decimal("1.00"), None),
        (2, "b", Decimal("123456789012.00"), "b@example.com"),
        (3, None, Decimal("3.00"), "c@example.com"),
    ]
    assert "widened balance decimal(10,2) -> decimal(14,2)" in report.tables[0].schema_changes


def test_int_widens_to_bigint_when_the_schema_file_says_so(spark, lake_config, dms):
    """Given `id` int, When the schema file says bigint and a change brings a big key,
    Then the column is widened and the row is stored."""
    load(spark, lake_config, dms, [(1, "a", 1)])
    wide = schema_of(
        {CUSTOMER: (["id"], [("id", "bigint"), ("name", "varchar(40)"), ("balance", "decimal(10,2)")])}
    )
    change = dms.cdc(CUSTOMER, COLUMNS, [("I", (5_000_000_000, "big", 1))])

    apply_cdc(spark, lake_config, wide, manifest(change))

    assert spark.table(table(lake_config)).schema["id"].dataType.simpleString() == "bigint"
    assert rows_of(spark, table(lake_config)) == [
        (1, "a", Decimal("1.00")),
        (5_000_000_000, "big", Decimal("1.00")),
    ]


def test_table_without_primary_key_appends_inserts_and_quarantines_the_rest(spark, lake_config, dms):
    """Given a table with no primary key,
    When inserts, an update and a delete arrive (and the batch is retried),
    Then the inserts are appended once, and the update and delete are quarantined with the reason."""
    events = "sales.events"
    schema = schema_of({events: ([], [("what", "varchar(20)"), ("amount", "int")])})
    change = dms.cdc(
        events, ["what", "amount"], [("I", ("x", 1)), ("I", ("y", 2)), ("U", ("x", 3)), ("D", ("y", 2))]
    )

    apply_cdc(spark, lake_config, schema, manifest(change))
    apply_cdc(spark, lake_config, schema, manifest(change))

    assert rows_of(spark, lake_config.clean_table("sales_events")) == [("x", 1), ("y", 2)]
    reasons = rows_of(spark, lake_config.quarantine, ["record_number", "reason"])
    assert reasons == [
        (3, "table has no primary key: updates and deletes can't be applied (mode append)"),
        (4, "table has no primary key: updates and deletes can't be applied (mode append)"),
    ]


def test_many_tables_in_one_manifest_are_applied_in_parallel_each_naming_its_own_files(
    spark, lake_config, dms
):
    """Given one manifest with files of three tables interleaved in arrival order,
    When applied (tables in parallel, one MERGE each),
    Then every table holds its changes and each commit names its own table's files."""
    names = ["sales.a", "sales.b", "sales.c"]
    schema = schema_of({n: (["id"], [("id", "int"), ("v", "varchar(5)")]) for n in names})
    paths = []
    for round_ in range(2):
        for offset, name in enumerate(names):
            seq = 100 * (offset + 1) + round_
            paths.append(dms.cdc(name, ["id", "v"], [("I", (round_, f"{name[-1]}{round_}"))], seqs=[seq]))

    report = apply_cdc(spark, lake_config, schema, manifest(*paths))

    assert not report.failed
    for name in names:
        iceberg = lake_config.clean_table(name.replace(".", "_"))
        assert rows_of(spark, iceberg) == [(0, f"{name[-1]}0"), (1, f"{name[-1]}1")]
        own = [p.rsplit("/", 1)[-1] for p in paths if f"/{name.replace('.', '/')}/" in p]
        assert sorted(applied_files_of_newest_commit(spark, iceberg)) == sorted(own)


def test_changes_replayed_from_before_the_full_load_snapshot_never_regress_a_row(spark, lake_config, dms):
    """Given LOAD rows stamped with the snapshot's change sequence 50,
    When the first CDC file replays changes committed during the load (sequences 40 to 45) and one newer,
    Then the replayed older changes leave the rows as loaded and only the newer change applies."""
    dms.load(CUSTOMER, COLUMNS, [(1, "loaded", 1), (2, "loaded", 2)], snapshot_seq=50)
    full_load(spark, lake_config, SCHEMA, str(dms.root))
    replay = dms.cdc(
        CUSTOMER,
        COLUMNS,
        [("U", (1, "stale", 0)), ("D", (2, None, None)), ("U", (1, "stale again", 0)), ("I", (3, "new", 3))],
        seqs=[40, 41, 45, 60],
    )

    apply_cdc(spark, lake_config, SCHEMA, manifest(replay))

    assert rows_of(spark, table(lake_config)) == [
        (1, "loaded", Decimal("1.00")),
        (2, "loaded", Decimal("2.00")),
        (3, "new", Decimal("3.00")),
    ]

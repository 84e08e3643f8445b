"""A table's layout from the schema file (partition spec, target file size): the full load creates the
table with it, CDC and reloads keep it, an existing table is given it and maintenance rewrites its files
into it; and every CDC rule holds on a partitioned table as on an unpartitioned one (whole tables)."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.base.schema import SchemaFile
from lakehouse.io.iceberg import TARGET_FILE_SIZE, partition_spec, table_properties
from lakehouse.maintenance.run import MaintenanceOptions, maintain

from tests.support import DmsWriter, last_execution, manifest, rows_of

pytestmark = pytest.mark.spark

CUSTOMER = "sales.customer"
COLUMNS = ["id", "name", "balance"]


def schema(partition_by=None, target_file_size_mb=None, extra_columns=()) -> SchemaFile:
    body = {
        "primary_key": ["id"],
        "columns": [
            {"name": "id", "type": "int"},
            {"name": "name", "type": "varchar(40)"},
            {"name": "balance", "type": "decimal(10,2)"},
            *({"name": n, "type": t} for n, t in extra_columns),
        ],
    }
    if partition_by is not None:
        body["partition_by"] = partition_by
    if target_file_size_mb is not None:
        body["target_file_size_mb"] = target_file_size_mb
    return SchemaFile.from_dict({"dialect": "mysql", "tables": {CUSTOMER: body}})


BUCKETED = schema(["bucket(4, id)"], target_file_size_mb=8)


@pytest.fixture
def dms(tmp_path) -> DmsWriter:
    return DmsWriter(tmp_path / "raw" / "dms")


def table(config) -> str:
    return config.clean_table("sales_customer")


def d(value) -> Decimal:
    return Decimal(value).quantize(Decimal("0.01"))


def applied(spark, config, schema_file, *paths, run_id):
    report = apply_cdc(spark, config, schema_file, manifest(*paths, run_id=run_id))
    assert report.ok, report.failed
    return report


def partitions(spark, name) -> list[tuple]:
    """(partition, spec id) of every live data file, sorted."""
    rows = spark.sql(f"SELECT partition, spec_id FROM {name}.files WHERE content = 0").collect()
    return sorted((tuple(r["partition"]) if r["partition"] is not None else (), r["spec_id"]) for r in rows)


def test_the_full_load_creates_the_schema_files_layout_and_cdc_rules_hold_on_it(spark, lake_config, dms):
    """Given a schema file partitioning sales.customer by bucket(4, id) with 8 MB files, and keys 1..8 loaded,
    When a batch deletes 1 then re-inserts it, replays the insert of 2, updates missing key 9, deletes
    missing key 10, inserts 11 then deletes it, deletes 3; then a late file older than the delete of 3
    re-inserts 3; then the first batch is delivered again,
    Then the table is bucketed by id with the 8 MB target, its rows spread over the buckets, and it holds
    exactly what an unpartitioned table would: 1 reborn, 2 replayed, 3 gone (its tombstone outranks the
    late insert), 9 inserted, the replay skipped."""
    dms.load(CUSTOMER, COLUMNS, [(i, f"c{i}", i) for i in range(1, 9)], snapshot_seq=1)
    assert full_load(spark, lake_config, BUCKETED, str(dms.root)).ok
    batch = dms.cdc(
        CUSTOMER,
        COLUMNS,
        [
            ("D", (1, None, None)),
            ("I", (1, "c1 reborn", 10)),
            ("I", (2, "c2 replayed", 20)),
            ("U", (9, "c9 from update", 90)),
            ("D", (10, None, None)),
            ("I", (11, "c11", 11)),
            ("D", (11, None, None)),
            ("D", (3, None, None)),
        ],
        seqs=[10, 11, 12, 13, 14, 15, 16, 17],
    )
    late = dms.cdc(CUSTOMER, COLUMNS, [("I", (3, "c3 late", 30))], seqs=[16])

    first = applied(spark, lake_config, BUCKETED, batch, run_id="b1")
    applied(spark, lake_config, BUCKETED, late, run_id="b2")
    again = applied(spark, lake_config, BUCKETED, batch, run_id="b3")

    name = table(lake_config)
    assert rows_of(spark, name) == [
        (1, "c1 reborn", d(10)),
        (2, "c2 replayed", d(20)),
        (4, "c4", d(4)),
        (5, "c5", d(5)),
        (6, "c6", d(6)),
        (7, "c7", d(7)),
        (8, "c8", d(8)),
        (9, "c9 from update", d(90)),
    ]
    assert (first.tables[0].deleted, again.tables[0].skipped_already_applied) == (3, 1)
    assert partition_spec(spark, name) == ("bucket(4, id)",)
    assert table_properties(spark, name)[TARGET_FILE_SIZE] == str(8 * 1024 * 1024)
    assert len({p for p, _ in partitions(spark, name)}) > 1


def test_schema_evolution_on_a_bucketed_table_adds_the_column_and_keeps_the_spec(spark, lake_config, dms):
    """Given a bucketed table loaded with id, name, balance,
    When the source adds a column `email` (schema file regenerated) and a batch carries it,
    Then the column is added, NULL for rows the batch didn't touch, and the spec is unchanged."""
    dms.load(CUSTOMER, COLUMNS, [(1, "a", 1), (2, "b", 2), (3, "c", 3)])
    assert full_load(spark, lake_config, BUCKETED, str(dms.root)).ok
    evolved = schema(["bucket(4, id)"], 8, extra_columns=[("email", "varchar(60)")])
    batch = dms.cdc(CUSTOMER, [*COLUMNS, "email"], [("U", (2, "b2", 20, "b@x")), ("I", (4, "d", 4, "d@x"))])

    report = applied(spark, lake_config, evolved, batch, run_id="b1")

    name = table(lake_config)
    assert rows_of(spark, name) == [
        (1, "a", d(1), None),
        (2, "b2", d(20), "b@x"),
        (3, "c", d(3), None),
        (4, "d", d(4), "d@x"),
    ]
    assert report.tables[0].schema_changes == ["added email string"]
    assert partition_spec(spark, name) == ("bucket(4, id)",)


def test_a_reload_of_a_bucketed_table_is_order_independent_and_keeps_its_spec(spark, lake_config, dms):
    """Given a bucketed table loaded at change 10, CDC up to change 35, and a reload at change 30, run
    with a schema file that says nothing of the layout (partition_by absent: the table keeps its own),
    When the reload is applied, then a late file (changes 25-28) and a newer one (change 40),
    Then the rows are those of the reload rules and the table is still bucketed."""
    dms.load(CUSTOMER, COLUMNS, [(1, "a", 1), (2, "b", 2), (3, "c", 3)], snapshot_seq=10)
    assert full_load(spark, lake_config, BUCKETED, str(dms.root)).ok
    silent = schema()
    applied(
        spark,
        lake_config,
        silent,
        dms.cdc(CUSTOMER, COLUMNS, [("U", (3, "c35", 35))], seqs=[35]),
        run_id="b1",
    )
    dms.load(CUSTOMER, COLUMNS, [(1, "a30", 100), (3, "c30", 300), (4, "d30", 4)], snapshot_seq=30)

    assert full_load(spark, lake_config, silent, str(dms.root), reload=True, run_id="reload").ok
    late = dms.cdc(
        CUSTOMER,
        COLUMNS,
        [("U", (1, "late", 0)), ("I", (2, "late", 0)), ("D", (4, None, None))],
        seqs=[25, 26, 28],
    )
    newer = dms.cdc(CUSTOMER, COLUMNS, [("U", (4, "d40", 40))], seqs=[40])
    applied(spark, lake_config, silent, late, newer, run_id="b2")

    name = table(lake_config)
    assert rows_of(spark, name) == [(1, "a30", d(100)), (3, "c35", d(35)), (4, "d40", d(40))]
    assert partition_spec(spark, name) == ("bucket(4, id)",)
    assert table_properties(spark, name)[TARGET_FILE_SIZE] == str(8 * 1024 * 1024)


def test_an_update_moving_a_row_to_another_day_partition_moves_it(spark, lake_config, dms):
    """Given orders partitioned by days(placed_at), three orders on two days,
    When a batch moves order 1 to a third day, deletes order 2 and inserts order 4 on the first day,
    Then the table holds each order once, on its new day, and its files are on the days its rows are."""
    orders = "sales.orders"
    columns = ["id", "placed_at", "amount"]
    by_day = SchemaFile.from_dict(
        {
            "tables": {
                orders: {
                    "primary_key": ["id"],
                    "columns": [
                        {"name": "id", "type": "int"},
                        {"name": "placed_at", "type": "datetime"},
                        {"name": "amount", "type": "int"},
                    ],
                    "partition_by": ["days(placed_at)"],
                }
            }
        }
    )
    day = datetime(2026, 1, 1, 10, 0)
    dms.load(orders, columns, [(1, day, 10), (2, day, 20), (3, day + timedelta(days=1), 30)])
    assert full_load(spark, lake_config, by_day, str(dms.root)).ok
    batch = dms.cdc(
        orders,
        columns,
        [("U", (1, day + timedelta(days=5), 11)), ("D", (2, None, None)), ("I", (4, day, 40))],
    )

    applied(spark, lake_config, by_day, batch, run_id="b1")

    name = lake_config.clean_table("sales_orders")
    assert rows_of(spark, name) == [
        (1, day + timedelta(days=5), 11),
        (3, day + timedelta(days=1), 30),
        (4, day, 40),
    ]
    days = spark.sql(
        f"SELECT DISTINCT partition.placed_at_day AS day FROM {name}.files WHERE content = 0 "
        "AND record_count > 0"
    ).collect()
    live = spark.sql(f"SELECT DISTINCT to_date(placed_at) AS day FROM {name}").collect()
    assert {r["day"] for r in live} <= {r["day"] for r in days}
    assert partition_spec(spark, name) == ("days(placed_at)",)


def test_an_existing_table_is_given_the_spec_and_maintenance_rewrites_its_files_into_it(
    spark, lake_config, dms
):
    """Given an unpartitioned table with rows and CDC applied,
    When the schema file gives it bucket(4, id) and a batch is applied, then maintenance runs,
    Then the spec changed (the batch reports it), the rows are as the changes say, and after maintenance
    every live data file is in the new spec."""
    dms.load(CUSTOMER, COLUMNS, [(i, f"c{i}", i) for i in range(1, 21)])
    assert full_load(spark, lake_config, schema(), str(dms.root)).ok
    applied(spark, lake_config, schema(), dms.cdc(CUSTOMER, COLUMNS, [("U", (5, "c5 v2", 50))]), run_id="b1")
    name = table(lake_config)
    assert partition_spec(spark, name) == ()

    report = applied(
        spark, lake_config, BUCKETED, dms.cdc(CUSTOMER, COLUMNS, [("D", (6, None, None))]), run_id="b2"
    )
    maintained = maintain(
        spark,
        lake_config,
        MaintenanceOptions(remove_orphans=False),
        now=datetime.utcnow() + timedelta(minutes=1),
    )

    assert not maintained.failed, maintained.failed
    assert report.tables[0].schema_changes == [
        "partitioned by bucket(4, id) (was nothing)",
        "target file size 8 MB",
    ]
    assert partition_spec(spark, name) == ("bucket(4, id)",)
    current = spark.sql(f"SELECT max(spec_id) AS s FROM {name}.partitions").first()["s"]
    assert {spec for _, spec in partitions(spark, name)} == {current}
    expected = [(i, f"c{i}", d(i)) for i in range(1, 21) if i != 6]
    expected[4] = (5, "c5 v2", d(50))
    assert rows_of(spark, name) == expected


@pytest.mark.parametrize(
    ("partition_by", "target", "why"),
    [
        (["days(name)"], None, "days applies to a date or timestamp column, and name is string"),
        (["bucket(0, id)"], None, "between 1 and 65536 buckets"),
        (["bucket(4, nope)"], None, "expected bucket(N, column)"),
        ("bucket(4, id)", None, "must be a list of transforms"),
        (["id", "ID"], None, "names one transform twice"),
        (["bucket(4, id)"], 0, "target_file_size_mb must be a whole number of MB from 1 to 4096"),
        (["bucket(4, id)"], "128", "target_file_size_mb must be a whole number of MB from 1 to 4096"),
    ],
)
def test_a_layout_the_lake_cant_have_is_refused_naming_the_table(partition_by, target, why):
    """Given a schema file whose layout is wrong (a transform of a column it does not apply to, a column
    the table lacks, a bad bucket count or file size),
    When it is loaded, Then it is refused naming the table and what is wrong (per table: only that table)."""
    with pytest.raises(ValueError, match=r"'sales\.customer'") as refused:
        schema(partition_by, target)
    assert why in str(refused.value)
    document = schema().to_dict()
    document["tables"][CUSTOMER] |= {"partition_by": partition_by, "target_file_size_mb": target}
    assert why in SchemaFile.from_dict(document, per_table=True).refusal(CUSTOMER)


def test_the_layout_survives_the_schema_files_round_trip():
    """Given a schema file with a layout (spelled loosely), When it is read and written back,
    Then the layout is there, normalised (lower-case columns, one space)."""
    loose = schema(["BUCKET( 16 ,ID )", "Name"], target_file_size_mb=64)
    assert loose.tables[CUSTOMER].partition_by == ("bucket(16, id)", "name")
    again = SchemaFile.from_dict(loose.to_dict())
    assert (again.tables[CUSTOMER].partition_by, again.tables[CUSTOMER].target_file_size_mb) == (
        ("bucket(16, id)", "name"),
        64,
    )
    assert "partition_by" not in schema().to_dict()["tables"][CUSTOMER]


RESULT_FILES, SKIPPED_FILES = "number of result data files", "number of skipped data files"  # Iceberg's


def merge_scan_metrics(spark, after: int) -> dict[str, int]:
    """Iceberg's scan metrics of the MERGE executions (WriteDelta plans) after execution id `after`."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(30_000)
    store = spark._jsparkSession.sharedState().statusStore()
    executions = store.executionsList()
    totals: dict[str, int] = {}
    for i in range(executions.size()):
        execution = executions.apply(i)
        if execution.executionId() <= after or "WriteDelta" not in execution.physicalPlanDescription():
            continue
        values = store.executionMetrics(execution.executionId())
        metrics = execution.metrics()
        for j in range(metrics.size()):
            metric, value = metrics.apply(j), values.get(metrics.apply(j).accumulatorId())
            if metric.name() in (RESULT_FILES, SKIPPED_FILES) and value.isDefined():
                totals[metric.name()] = totals.get(metric.name(), 0) + int(str(value.get()).replace(",", ""))
    return totals


def test_a_batch_of_recent_serial_keys_reads_only_the_files_that_may_hold_them(spark, lake_config, dms):
    """Given a table of keys 1..10 (full load) to which batches of new keys 11..20 and 21..30 were
    appended (each its own data files),
    When a batch updates 25, deletes 27 and inserts 31,
    Then the MERGE reads only the data files whose key bounds meet 25..31 (the others are skipped by the
    batch's key range), and the table is exactly what the rules give."""
    silent = schema()
    dms.load(CUSTOMER, COLUMNS, [(i, f"c{i}", i) for i in range(1, 11)])
    assert full_load(spark, lake_config, silent, str(dms.root)).ok
    for start in (11, 21):
        rows = [("I", (i, f"c{i}", i)) for i in range(start, start + 10)]
        applied(spark, lake_config, silent, dms.cdc(CUSTOMER, COLUMNS, rows), run_id=f"new{start}")
    batch = dms.cdc(
        CUSTOMER, COLUMNS, [("U", (25, "c25 v2", 250)), ("D", (27, None, None)), ("I", (31, "c31", 31))]
    )
    before = last_execution(spark)

    applied(spark, lake_config, silent, batch, run_id="b1")

    scanned = merge_scan_metrics(spark, before)
    assert scanned.get(SKIPPED_FILES, 0) >= 2 and scanned.get(RESULT_FILES, 0) >= 1, scanned
    expected = [(i, f"c{i}", d(i)) for i in range(1, 32) if i != 27]
    expected[24] = (25, "c25 v2", d(250))
    assert rows_of(spark, table(lake_config)) == expected

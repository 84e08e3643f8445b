"""A table's tombstone lookup reads its own bucket of the tombstones, whatever the other tables deleted; a
tombstones table an older release wrote unpartitioned is bucketed by the next maintenance pass."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from lakehouse.apply.ledger import (
    STATE_TABLE_PROPERTIES,
    TOMBSTONE_SCHEMA,
    StateTables,
)
from lakehouse.io.iceberg import create_table, ensure_namespace
from lakehouse.maintenance.run import MaintenanceOptions, maintain
from pyspark.sql import functions as F

from tests.support import last_execution, rows_of, scan_metric

pytestmark = pytest.mark.spark

# Two source tables whose names fall in different buckets (the first test checks it).
ORDERS, ITEMS = "shop.orders", "shop.items"
RESULT_FILES = "number of result data files"  # Iceberg's scan metric
BUCKET = "partition.source_table_bucket"


def bury(spark, state: StateTables, run: int, keys: dict[str, list[int]]) -> None:
    """One run's tombstones: each table's keys deleted at change sequence `run`."""
    moment = datetime(2026, 3, 1) + timedelta(minutes=run)
    state.bury(
        [
            (
                table,
                spark.createDataFrame(
                    [(f'{{"id":{k}}}', Decimal(run), moment) for k in numbers],
                    "key string, change_seq decimal(38,0), commit_ts timestamp",
                ),
            )
            for table, numbers in keys.items()
        ],
        run_id=f"run{run}",
    )


def files_by_bucket(spark, table: str) -> dict[int, int]:
    rows = spark.sql(f"SELECT {BUCKET} AS b, count(*) AS n FROM {table}.files GROUP BY 1").collect()
    return {row["b"]: row["n"] for row in rows}


def test_a_tables_lookup_reads_only_its_own_bucket_of_the_tombstones(spark, lake_config):
    """Given three runs that each deleted keys of two tables (one append a run, as the CDC job writes them),
    then a maintenance pass that compacted their small files,
    When one table's tombstones are looked up,
    Then the scan reads only the files of that table's bucket, none of the other's (a compacted file of both
    tables would be read for either), and the lookup gives each of its keys its newest tombstone."""
    state = StateTables(spark, lake_config)
    state.ensure()
    for run, keys in enumerate(([1, 2], [2, 3], [4]), start=1):
        bury(spark, state, run, {ORDERS: keys, ITEMS: [10 + k for k in keys]})
    compacted = maintain(spark, lake_config, MaintenanceOptions(remove_orphans=False, min_input_files=2))
    assert [t.rewritten_data_files > 0 for t in compacted.tables if t.table == state.tombstones] == [True]
    buckets = {
        row["source_table"]: row["b"]
        for row in spark.sql(
            f"SELECT DISTINCT source_table, _partition.source_table_bucket AS b FROM {state.tombstones}"
        ).collect()
    }
    assert buckets[ORDERS] != buckets[ITEMS], buckets  # the premise: two buckets
    files = files_by_bucket(spark, state.tombstones)
    before = last_execution(spark)

    found = sorted(tuple(row) for row in state.tombstones_of(ORDERS).select("key", "tomb_seq").collect())

    scanned = scan_metric(spark, before, RESULT_FILES)
    assert scanned == files[buckets[ORDERS]] < sum(files.values()), (scanned, files)
    assert found == [('{"id":1}', 1), ('{"id":2}', 2), ('{"id":3}', 2), ('{"id":4}', 3)]


def test_an_older_releases_unpartitioned_tombstones_are_bucketed_by_maintenance(spark, lake_config):
    """Given a tombstones table as an older release created it (unpartitioned) holding two tables' deletes,
    When maintenance runs, then a run appends more,
    Then the table is bucketed by source table, every live file (old and new) is in that spec, and no
    tombstone was lost or changed."""
    state = StateTables(spark, lake_config)
    ensure_namespace(spark, *state.namespace)
    comment = "Deleted keys and the change sequence of their delete"
    create_table(spark, state.tombstones, TOMBSTONE_SCHEMA, comment, STATE_TABLE_PROPERTIES)
    state.ensure()  # the CDC run's own check leaves an existing table as it is
    bury(spark, state, 1, {ORDERS: [1, 2], ITEMS: [11]})
    bury(spark, state, 2, {ORDERS: [3]})
    expected = rows_of(spark, state.tombstones, ["source_table", "key", "change_seq", "run_id"])

    report = maintain(spark, lake_config, MaintenanceOptions(remove_orphans=False))
    bury(spark, state, 3, {ITEMS: [12]})

    assert not report.failed, report.failed
    fields = spark.sql(f"DESCRIBE TABLE EXTENDED {state.tombstones}").collect()
    partitioning = [row["data_type"] for row in fields if row["col_name"].startswith("Part ")]
    assert partitioning == ["bucket(64, source_table)"]
    current = spark.sql(f"SELECT max(spec_id) AS s FROM {state.tombstones}.files").first()["s"]
    assert {
        row["spec_id"] for row in spark.sql(f"SELECT spec_id FROM {state.tombstones}.files").collect()
    } == {current}
    after = rows_of(spark, state.tombstones, ["source_table", "key", "change_seq", "run_id"])
    assert after == sorted([*expected, (ITEMS, '{"id":12}', 3, "run3")])


def test_a_batch_is_grouped_sorted_and_joined_with_its_tombstones_by_its_keys_hash(spark, lake_config):
    """Given tombstones of keys 1 and 2 (run 2) and a batch of typed changes: key 1 updated before its delete,
    key 2 after it, key 3 twice,
    When the batch is reduced to one change per key with its tombstone (cdc.one_change_per_key),
    Then each key keeps its last change and its tombstone's sequence, and the plan sorts by the key's hash (a
    long; the key texts' common prefix made every sort compare whole strings) and shuffles the batch once:
    the tombstones' join reads it as its grouping left it. The batch is sorted once, after its shuffle (the
    aggregate's partial step sorted it before the shuffle too)."""
    from lakehouse.apply.cdc import one_change_per_key
    from lakehouse.apply.clean_table import KEY, TOMB_SEQ
    from lakehouse.dms import changes as C

    state = StateTables(spark, lake_config)
    state.ensure()
    bury(spark, state, 2, {ORDERS: [1, 2]})
    changes = spark.createDataFrame(
        [(1, "U", "a", 1, 0), (2, "U", "b", 3, 0), (3, "I", "c", 1, 0), (3, "U", "d", 1, 1)],
        f"id bigint, {C.OP} string, name string, seq int, pos long",
    ).select(
        "id",
        "name",
        C.OP,
        F.col("seq").cast(C.SEQ_TYPE).alias(C.SEQ),
        F.lit(None).cast("timestamp").alias(C.COMMIT_TS),
        F.lit(0).alias(C.FILE_ORDER),
        F.col("pos").alias(C.POSITION),
    )

    latest = one_change_per_key(changes, ["id"], state.tombstones_of(ORDERS))

    assert sorted((r["id"], r["name"], r[KEY], r[TOMB_SEQ]) for r in latest.collect()) == [
        (1, "a", '{"id":1}', Decimal(2)),
        (2, "b", '{"id":2}', Decimal(2)),
        (3, "d", '{"id":3}', None),
    ]
    plan = planned(spark, latest)
    sorts = [line for line in plan.splitlines() if "Sort [" in line]
    assert len(sorts) == 2 and all(f"Sort [{C.KEY_HASH}" in line for line in sorts), plan  # batch, tombstones
    assert plan.count("Exchange") == 2, plan  # the batch's and the tombstones', once each


def test_the_kept_batch_holds_the_tables_columns_and_the_op_and_its_deletes_tombstones_name_their_keys(
    spark, lake_config
):
    """Given a batch reduced to one change per key with its tombstones (key 1 deleted, key 2 updated),
    When it is cut to the rows the commit reads (cdc.commit_rows, what the first pass keeps) and the deletes'
    tombstones are made from those rows (cdc.tombstone_rows),
    Then the kept rows hold the table's columns, the Op and the two metadata columns only: not the key's text nor
    the sequence and time a second time under their change names (each of the kept batch's three reads read them:
    a quarter of its bytes at 1M changes); and the tombstone names its key as the first pass did, with the
    delete's sequence and time."""
    from lakehouse.apply.cdc import commit_rows, one_change_per_key, tombstone_rows
    from lakehouse.apply.clean_table import KEY
    from lakehouse.base.names import CHANGE_SEQ_COLUMN, COMMIT_TS_COLUMN
    from lakehouse.dms import changes as C

    state = StateTables(spark, lake_config)
    state.ensure()
    moment = datetime(2026, 3, 1, 12, 0, 0, 123456)
    changes = spark.createDataFrame(
        [(1, "D", "a", 7), (2, "U", "b", 8)], f"id bigint, {C.OP} string, name string, seq int"
    ).select(
        "id",
        "name",
        C.OP,
        F.col("seq").cast(C.SEQ_TYPE).alias(C.SEQ),
        F.lit(moment).alias(C.COMMIT_TS),
        F.lit(0).alias(C.FILE_ORDER),
        F.lit(0).cast("long").alias(C.POSITION),
    )
    latest = one_change_per_key(changes, ["id"], state.tombstones_of(ORDERS))
    keys_as_named = {r["id"]: r[KEY] for r in latest.collect()}

    kept = commit_rows(latest)

    assert sorted(kept.columns) == sorted(["id", "name", C.OP, COMMIT_TS_COLUMN, CHANGE_SEQ_COLUMN]), (
        kept.columns
    )
    tombstones = [tuple(r) for r in tombstone_rows(kept, ["id"]).collect()]
    assert tombstones == [(keys_as_named[1], Decimal(7), moment)] == [('{"id":1}', Decimal(7), moment)]


def planned(spark, frame) -> str:
    """The physical plan as Spark plans it (no adaptive re-planning, no broadcast: the apply's sessions)."""
    settings = {"spark.sql.adaptive.enabled": "false", "spark.sql.autoBroadcastJoinThreshold": "-1"}
    before = {key: spark.conf.get(key) for key in settings}
    try:
        for key, value in settings.items():
            spark.conf.set(key, value)
        return frame.select("*")._jdf.queryExecution().executedPlan().toString()
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)

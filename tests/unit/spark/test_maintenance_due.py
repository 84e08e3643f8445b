"""Maintenance sized to the changes: a pass rewrites the data files found due from metadata (their deleted
share), no more than its byte budget, and leaves a table with nothing due without starting a Spark job."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from lakehouse.maintenance.due import RewriteGroup, TableState, expiry_due, slices
from lakehouse.maintenance.run import MaintenanceOptions, maintain
from pyspark.sql import functions as F

from tests.support import rows_of

ROWS_PER_FILE = 1000


def state(table: str, *groups: tuple[int, ...], files_bytes: int = 1000) -> TableState:
    return TableState(
        table, 1, files_bytes=files_bytes, rewrite_groups=tuple(RewriteGroup(g) for g in groups)
    )


def test_the_budget_goes_to_the_most_degraded_table_first_group_by_group() -> None:
    """Given three tables with file groups due (a: 30 % of its bytes, b: 60 %, c: 10 %) and a budget of 70 bytes,
    When the pass shares its budget, Then b (the most degraded) gets all its groups, a none (its first group
    does not fit in what is left), c its group; a table's groups go whole, in order, and the first table gets
    at least one group however large."""
    tables = [
        state("a", (20, 20), (20,), files_bytes=200),
        state("b", (30,), (30,), files_bytes=100),
        state("c", (10,), files_bytes=100),
    ]

    shares = slices(tables, 70)

    assert {t: (s.max_files, s.bytes) for t, s in shares.items()} == {"b": (None, 60), "c": (None, 10)}
    assert {t: (s.max_files, s.bytes) for t, s in slices(tables, 50).items()} == {
        "b": (1, 30),
        "c": (None, 10),
    }
    assert {t: (s.max_files, s.bytes) for t, s in slices(tables, 110).items()} == {
        "b": (None, 60),
        "a": (2, 40),
        "c": (None, 10),
    }
    assert {t: (s.max_files, s.bytes) for t, s in slices([state("big", (500,), (5,))], 70).items()} == {
        "big": (1, 500)
    }


def test_expiry_is_due_once_the_oldest_snapshot_is_a_cadence_past_the_cutoff() -> None:
    """Given a table of 30 snapshots, a 24-hour cadence and a cutoff at noon,
    Then expiry is due when its oldest snapshot is older than noon the day before, and never with at most
    `retain_last` snapshots."""
    options = MaintenanceOptions(expire_every_hours=24, retain_last=20)
    noon = datetime(2026, 1, 2, 12)
    old = TableState("t", 1, snapshots=30, oldest_snapshot=noon - timedelta(hours=25))
    recent = TableState("t", 1, snapshots=30, oldest_snapshot=noon - timedelta(hours=23))
    few = TableState("t", 1, snapshots=20, oldest_snapshot=noon - timedelta(days=9))

    assert [expiry_due(s, options, noon) for s in (old, recent, few)] == [True, False, False]


def files_table(spark, config, name: str, files: int) -> str:
    """A merge-on-read table of `files` data files of ROWS_PER_FILE consecutive ids each, its target file size
    their size (so no file is small and only deletes make one due)."""
    table = config.clean_table(name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {config.catalog_name}.{config.clean_database}")
    spark.sql(
        f"CREATE TABLE {table} (id bigint, v string) USING iceberg TBLPROPERTIES ('format-version'='2', "
        "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
        "'write.merge.mode'='merge-on-read')"
    )
    rows = spark.range(0, files * ROWS_PER_FILE, numPartitions=files).select(
        "id", F.concat(F.lit("value "), F.col("id").cast("string")).alias("v")
    )
    rows.writeTo(table).append()
    sizes = sorted(r[0] for r in spark.sql(f"SELECT file_size_in_bytes FROM {table}.data_files").collect())
    spark.sql(
        f"ALTER TABLE {table} SET TBLPROPERTIES ('write.target-file-size-bytes'='{sizes[len(sizes) // 2]}')"
    )
    return table


def first_file_bytes(spark, table: str, first_id: int) -> int:
    return spark.sql(
        f"SELECT file_size_in_bytes FROM {table}.data_files "
        f"WHERE readable_metrics.id.lower_bound = {first_id}"
    ).first()[0]


@pytest.mark.spark
def test_the_same_deletes_into_a_ten_times_larger_table_rewrite_the_same_bytes(spark, lake_config) -> None:
    """Given a table of 4 files and one of 40, each with 40 % of its first file's rows deleted and one row of
    its second file,
    When maintenance runs (deleted-share threshold 20 %),
    Then in each table exactly the first file is rewritten, its bytes what was found due, the rows unchanged;
    and a second pass finds nothing due and starts no Spark job."""
    small, large = files_table(spark, lake_config, "small", 4), files_table(spark, lake_config, "large", 40)
    due = {}
    for table in (small, large):
        due[table] = first_file_bytes(spark, table, 0)
        spark.sql(f"DELETE FROM {table} WHERE id < {int(ROWS_PER_FILE * 0.4)} OR id = {ROWS_PER_FILE + 5}")
    expected = {table: rows_of(spark, table) for table in (small, large)}
    options = MaintenanceOptions(remove_orphans=False)

    report = maintain(spark, lake_config, options)

    assert not report.failed, report.failed
    done = {t.table: t for t in report.tables}
    for table in (small, large):
        assert (done[table].rewritten_data_files, done[table].rewritten_bytes) == (1, due[table])
        assert done[table].due_bytes == due[table] and done[table].deferred_bytes == 0
        assert done[table].delete_files_after == 1  # the second file's deletes stay: it is not due
        assert rows_of(spark, table) == expected[table]
    again = maintain(spark, lake_config, options)
    assert all(t.nothing_due for t in again.tables) and again.spark_jobs == 0


@pytest.mark.spark
def test_a_pass_rewrites_no_more_than_its_budget_and_the_next_pass_the_rest(spark, lake_config) -> None:
    """Given a table with two files due (40 % of their rows deleted),
    When maintenance runs with a budget smaller than one file, twice,
    Then the first pass rewrites one file and defers the other's bytes, the second pass rewrites that one,
    and the rows never change."""
    table = files_table(spark, lake_config, "items", 3)
    spark.sql(f"DELETE FROM {table} WHERE id % {ROWS_PER_FILE} < 400 AND id < {2 * ROWS_PER_FILE}")
    expected = rows_of(spark, table)
    options = MaintenanceOptions(remove_orphans=False, rewrite_mb_per_pass=0.001)

    first = {t.table: t for t in maintain(spark, lake_config, options).tables}[table]
    second = {t.table: t for t in maintain(spark, lake_config, options).tables}[table]

    assert (first.rewritten_data_files, second.rewritten_data_files) == (1, 1)
    assert first.deferred_bytes == second.rewritten_bytes > 0 and second.deferred_bytes == 0
    assert rows_of(spark, table) == expected


@pytest.mark.spark
def test_a_files_deletes_from_many_batches_add_up_to_its_deleted_share(spark, lake_config) -> None:
    """Given a table of 2 files whose first file lost 7 % of its rows in each of three batches (three
    merge-on-read deletes: Spark keeps one delete file for the data file, carrying the earlier ones),
    When maintenance looks after two batches (14 %) and after the third (21 %, threshold 20 %),
    Then the file is not due after two, and due after three: its batches' deletes are counted together, and
    it alone is rewritten."""
    table = files_table(spark, lake_config, "hot", 2)
    per_batch = int(ROWS_PER_FILE * 0.07)
    options = MaintenanceOptions(remove_orphans=False)
    hot_file = first_file_bytes(spark, table, 0)

    for batch in range(2):
        spark.sql(f"DELETE FROM {table} WHERE id >= {batch * per_batch} AND id < {(batch + 1) * per_batch}")
    early = {t.table: t for t in maintain(spark, lake_config, options).tables}[table]
    spark.sql(f"DELETE FROM {table} WHERE id >= {2 * per_batch} AND id < {3 * per_batch}")
    expected = rows_of(spark, table)
    late = {t.table: t for t in maintain(spark, lake_config, options).tables}[table]

    assert early.nothing_due and early.delete_files_before == 1
    assert (late.due_bytes, late.rewritten_data_files, late.rewritten_bytes) == (hot_file, 1, hot_file)
    assert rows_of(spark, table) == expected

"""A MERGE and a compaction committing at the same time: whichever loses Iceberg's validation gives way
harmlessly. The MERGE that loses is planned again from its batch and commits once; the compaction that loses
gives its group up. The concurrent commit is injected between the loser's plan and its commit, deterministically:
the winner commits through a second SparkSession (its own catalog, so the loser's cached table stays as
planned) right before the loser's statement runs."""

from __future__ import annotations

from decimal import Decimal

import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.io import commit_conflicts, iceberg
from lakehouse.io.iceberg import APPLIED_FILES
from lakehouse.io.session import catalog_conf
from lakehouse.maintenance import procedures
from lakehouse.maintenance.run import MaintenanceOptions, maintain

from tests.support import DmsWriter, manifest, rows_of, schema_of

pytestmark = pytest.mark.spark

ITEMS = "shop.items"
COLUMNS = ["id", "name", "price"]
SCHEMA = schema_of({ITEMS: (["id"], [("id", "int"), ("name", "varchar(20)"), ("price", "decimal(7,2)")])})
COMPACT = MaintenanceOptions(min_input_files=2, remove_orphans=False)


@pytest.fixture
def dms(tmp_path) -> DmsWriter:
    return DmsWriter(tmp_path / "raw" / "dms")


def loaded(spark, config, dms) -> str:
    """The items table loaded with five rows and one batch applied (two data files, a delete file)."""
    dms.load(ITEMS, COLUMNS, [(i, f"item {i}", i) for i in range(1, 6)])
    full_load(spark, config, SCHEMA, str(dms.root))
    applied(spark, config, dms.cdc(ITEMS, COLUMNS, [("U", (1, "one", 10)), ("I", (6, "six", 6))]), "b1")
    return config.clean_table("shop_items")


def applied(spark, config, path: str, run_id: str):
    report = apply_cdc(spark, config, SCHEMA, manifest(path, run_id=run_id))
    assert report.ok, (report.failed, report.error)
    return report


def second_session(spark, config):
    """Another SparkSession on the same JVM with its own catalog instance. The catalog's settings are given
    again: a session that existed before the `spark` fixture (a pipeline test's) holds them only as run-time
    settings, which newSession() does not copy."""
    other = spark.newSession()
    for key, value in catalog_conf(config).items():
        if key != "spark.sql.extensions":
            other.conf.set(key, value)
    return other


def operations(spark, table: str) -> list[str]:
    return [
        r[0] for r in spark.sql(f"SELECT operation FROM {table}.snapshots ORDER BY committed_at").collect()
    ]


def test_a_merge_that_loses_to_a_compaction_is_planned_again_and_commits_once(
    spark, lake_config, dms, monkeypatch
) -> None:
    """Given a table with files a batch's MERGE will add deletes to,
    When a compaction rewriting every file commits between the MERGE's plan and its commit,
    Then the CDC run does not fail: the MERGE is planned again and commits once, the table equals its oracle,
    and the ledger names the batch's file once."""
    table = loaded(spark, lake_config, dms)
    other = second_session(spark, lake_config)
    real = iceberg.with_commit_properties
    injected = []

    def compaction_first(session, properties, action):
        if APPLIED_FILES in properties and not injected:
            injected.append(
                other.sql(
                    f"CALL {lake_config.catalog_name}.system.rewrite_data_files(table => "
                    f"'{table.split('.', 1)[1]}', options => map('rewrite-all', 'true'))"
                ).first()
            )
        return real(session, properties, action)

    monkeypatch.setattr(iceberg, "with_commit_properties", compaction_first)
    replans = []
    monkeypatch.setattr(
        iceberg,
        "replanned_on_conflict",
        lambda *a, **k: replans.append(commit_conflicts.replanned_on_conflict(*a, **k)) or replans[-1],
    )
    batch = dms.cdc(ITEMS, COLUMNS, [("U", (2, "two", 20)), ("D", (3, None, None)), ("I", (7, "seven", 7))])

    report = applied(spark, lake_config, batch, "b2")

    assert injected and injected[0]["rewritten_data_files_count"] > 0
    assert replans == [1]
    assert operations(spark, table)[-2:] == ["replace", "overwrite"]
    assert report.tables[0].error is None
    assert rows_of(spark, table) == [
        (1, "one", Decimal("10.00")),
        (2, "two", Decimal("20.00")),
        (4, "item 4", Decimal("4.00")),
        (5, "item 5", Decimal("5.00")),
        (6, "six", Decimal("6.00")),
        (7, "seven", Decimal("7.00")),
    ]
    ledger = spark.table(lake_config.ledger).where("run_id = 'b2'").select("file_name").collect()
    assert [r[0] for r in ledger] == [batch.rsplit("/", 1)[-1]]


def test_a_compaction_that_loses_to_a_merge_gives_its_group_up_and_the_next_pass_compacts(
    spark, lake_config, dms, monkeypatch
) -> None:
    """Given a table whose small files maintenance will compact,
    When a CDC batch's MERGE (adding deletes to those files) commits between the compaction's plan and its commit,
    Then the pass does not fail: its group is given up and reported, the batch's changes stay, the table equals
    its oracle; and the next pass compacts it."""
    table = loaded(spark, lake_config, dms)
    other = second_session(spark, lake_config)
    real = procedures.check_before_commit
    batch = dms.cdc(ITEMS, COLUMNS, [("U", (4, "four", 40)), ("D", (5, None, None))])
    injected = []

    def merge_first():
        if not injected:
            injected.append(applied(other, lake_config, batch, "b2"))
        return real()

    monkeypatch.setattr(procedures, "check_before_commit", merge_first)

    report = maintain(spark, lake_config, COMPACT)

    monkeypatch.setattr(procedures, "check_before_commit", real)
    assert injected and not report.failed, report.failed
    entry = {t.table: t for t in report.tables}[table]
    assert entry.lost_data_files > 0 and entry.rewritten_data_files == 0
    expected = [
        (1, "one", Decimal("10.00")),
        (2, "item 2", Decimal("2.00")),
        (3, "item 3", Decimal("3.00")),
        (4, "four", Decimal("40.00")),
        (6, "six", Decimal("6.00")),
    ]
    assert rows_of(spark, table) == expected
    again = {t.table: t for t in maintain(spark, lake_config, COMPACT).tables}[table]
    assert again.rewritten_data_files > 0 and again.lost_data_files == 0
    assert rows_of(spark, table) == expected

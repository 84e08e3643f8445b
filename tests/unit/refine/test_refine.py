"""Incremental refine: after random source changes (facts and dimensions, updates and deletes), the
refined tables equal a straightforward recomputation from the clean tables; a re-run is a no-op."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.base.config import LakeConfig
from lakehouse.base.schema import SchemaFile
from lakehouse.refine import consumed, refresh
from lakehouse.refine.refresh import RefineReport, refine

from tests.support import manifest, rows_of, snapshot_count
from tests.unit.refine.conftest import (
    AGGREGATES,
    SALES_ENRICHED,
    SALES_KEY,
    enrich_sales,
    load_clean_zone_directly,
)
from tools import sample_data as S

pytestmark = pytest.mark.spark

MIXED_WITH_DIMENSION_CHANGES = S.DEFAULT_MIX | {"dimension_deleted": 0.08, "item_reclassified": 0.08}


@dataclass
class Lake:
    """A generated source database, its DMS files, and a clean + refined zone fed from them."""

    spark: object
    config: LakeConfig
    db: Path
    raw: Path
    schema: SchemaFile
    next_seq: int = 1

    def apply_workload(self, changes: int, seed: int, mix: dict[str, float] | None = None) -> None:
        result = S.run_workload(self.db, changes, seed, mix)
        files = S.write_cdc_files(self.db, result.changes, self.raw, first_change_seq=self.next_seq)
        self.next_seq += len(result.changes)
        report = apply_cdc(self.spark, self.config, self.schema, manifest(*files, run_id=f"cdc-{seed}"))
        assert not report.failed, report.failed

    def clean(self, table: str) -> str:
        return self.config.clean_table(f"main_{table}")

    def refined(self, table: str) -> str:
        return self.config.table(self.config.refined_database, table)


@pytest.fixture(scope="module")
def lake(spark, base_config, tmp_path_factory: pytest.TempPathFactory) -> Lake:
    """Given a generated source (scale 0.03: ~600 sales) loaded into a new clean zone (straight from the
    database: the full load itself is tested with the pipeline's tests and the demo)."""
    root = tmp_path_factory.mktemp("refine")
    config = replace(base_config, clean_database="refine_clean", refined_database="refine_refined")
    db, raw = root / "source.db", root / "raw"
    S.create_source_database(db, scale=0.03, seed=2024)
    schema = load_clean_zone_directly(spark, config, db)
    return Lake(spark, config, db, raw, schema)


def recomputed_sales(lake: Lake) -> list[tuple]:
    spark = lake.spark
    names = ("web_sales", "date_dim", "time_dim", "item", "customer", "customer_address")
    frame = enrich_sales(*[spark.table(lake.clean(n)) for n in names])
    return [tuple(r) for r in frame.orderBy(*SALES_KEY).collect()]


def refined_sales(lake: Lake) -> list[tuple]:
    frame = lake.spark.table(lake.refined(SALES_ENRICHED))
    return [tuple(r) for r in frame.orderBy(*SALES_KEY).collect()]


def recomputed_aggregate(lake: Lake, table: str) -> list[tuple]:
    """The aggregates in plain SQL straight from the clean tables (independent of lakehouse.refine.refresh)."""
    group = {
        "daily_revenue_by_category": "i.i_category",
        "daily_revenue_by_state": "a.ca_state",
    }[table]
    return [
        tuple(r)
        for r in lake.spark.sql(
            f"""
            SELECT d.d_date, {group}, sum(ws.ws_ext_sales_price), sum(ws.ws_net_profit), sum(ws.ws_net_paid),
                   sum(ws.ws_quantity), count(DISTINCT ws.ws_order_number), count(*)
            FROM {lake.clean("web_sales")} ws
            LEFT JOIN {lake.clean("date_dim")} d ON ws.ws_sold_date_sk = d.d_date_sk
            LEFT JOIN {lake.clean("item")} i ON ws.ws_item_sk = i.i_item_sk
            LEFT JOIN {lake.clean("customer")} c ON ws.ws_bill_customer_sk = c.c_customer_sk
            LEFT JOIN {lake.clean("customer_address")} a ON c.c_current_addr_sk = a.ca_address_sk
            GROUP BY 1, 2 ORDER BY 1, 2"""
        ).collect()
    ]


def refined_aggregate(lake: Lake, table: str) -> list[tuple]:
    columns = [
        "sold_date",
        *AGGREGATES[table],
        "revenue",
        "profit",
        "net_paid",
        "quantity",
        "orders",
        "lines",
    ]
    return rows_of(lake.spark, lake.refined(table), columns)


def assert_refined_equals_recomputation(lake: Lake) -> None:
    assert refined_sales(lake) == recomputed_sales(lake)
    for table in AGGREGATES:
        assert refined_aggregate(lake, table) == recomputed_aggregate(lake, table), table


def counted(load, loads: Counter):
    """`load` (a catalog load of a table's metadata) counting its calls by table name in `loads`."""

    def counting(spark, table):
        loads[table] += 1
        return load(spark, table)

    return counting


def modes(report: RefineReport) -> dict[str, str]:
    return {t.table: t.mode for t in report.tables}


def test_refine_builds_then_follows_changes_incrementally(lake: Lake, monkeypatch) -> None:
    """Given a loaded clean zone
    When the refine runs, then a random workload (new orders, returns, price updates, customer moves,
    item reclassifications, item and customer deletes, holiday fixes) is applied through CDC, and the
    refine runs again
    Then the first refine builds every refined table, the second is incremental and touches only the
    affected sales, loading each model's inputs from the catalog once for that model (its history, size and
    changed files all read from the one load), and after each the refined tables equal a recomputation
    from the clean tables."""
    spark = lake.spark

    first = refine(spark, lake.config, run_id="refine-1")
    assert modes(first) == {t: "built" for t in (SALES_ENRICHED, *AGGREGATES)}
    assert_refined_equals_recomputation(lake)
    total_sales = spark.table(lake.refined(SALES_ENRICHED)).count()

    lake.apply_workload(changes=40, seed=1, mix=MIXED_WITH_DIMENSION_CHANGES)
    loads: Counter = Counter()
    for module in (refresh, consumed):
        monkeypatch.setattr(module, "iceberg_table", counted(module.iceberg_table, loads))
    second = refine(spark, lake.config, run_id="refine-2")
    monkeypatch.undo()

    assert modes(second) == {t: "incremental" for t in (SALES_ENRICHED, *AGGREGATES)}
    sources = ("web_sales", "item", "customer", "customer_address", "date_dim", "time_dim")
    assert loads == {lake.clean(t): 1 for t in sources} | {lake.refined(SALES_ENRICHED): len(AGGREGATES)}
    assert 0 < second.tables[0].affected < total_sales
    changed = second.tables[0].changed_inputs
    assert all(
        changed.get(t, 0) > 0 for t in ("web_sales", "item", "customer", "customer_address", "date_dim")
    )
    assert spark.table(lake.refined(SALES_ENRICHED)).where("category IS NULL").count() > 0  # deleted items
    assert_refined_equals_recomputation(lake)


def test_rerun_without_clean_changes_commits_nothing(lake: Lake) -> None:
    """Given a refined zone that is up to date
    When the refine runs again with no clean-zone change
    Then every refined table is unchanged and has no new snapshot."""
    refine(lake.spark, lake.config, run_id="catch-up")
    tables = [lake.refined(t) for t in (SALES_ENRICHED, *AGGREGATES)]
    before = [snapshot_count(lake.spark, t) for t in tables]

    report = refine(lake.spark, lake.config, run_id="again")

    assert modes(report) == {t: "unchanged" for t in (SALES_ENRICHED, *AGGREGATES)}
    assert [snapshot_count(lake.spark, t) for t in tables] == before


def test_maintenance_keeps_what_the_refine_consumed_so_the_next_refine_stays_incremental(lake: Lake) -> None:
    """Given the refined zone up to date, then a CDC batch,
    When maintenance expires every snapshot it may (retention 0, keep 1),
    Then the snapshots the refine consumed are kept, and the next refine is incremental and exact."""
    from datetime import datetime, timedelta

    from lakehouse.maintenance.run import MaintenanceOptions, maintain

    refine(lake.spark, lake.config, run_id="before-maintenance")
    lake.apply_workload(changes=20, seed=11, mix=MIXED_WITH_DIMENSION_CHANGES)
    harsh = MaintenanceOptions(
        snapshot_retention_hours=0, retain_last=1, expire_every_hours=0, remove_orphans=False
    )

    report = maintain(lake.spark, lake.config, harsh, now=datetime.utcnow() + timedelta(minutes=1))
    again = refine(lake.spark, lake.config, run_id="after-maintenance")

    assert not report.failed, report.failed
    assert modes(again) == {t: "incremental" for t in (SALES_ENRICHED, *AGGREGATES)}
    assert_refined_equals_recomputation(lake)


def test_with_the_jobs_defaults_a_small_lakes_models_are_rebuilt_not_traced(lake: Lake) -> None:
    """Given the refined zone up to date over ~600 sales, then a CDC batch,
    When the refine runs with the refine job's default arguments (a model whose inputs hold under ten million
    rows is rebuilt: tracing its changes costs more than reading them all),
    Then every moved model is rebuilt, its report saying so with its inputs' row count from their snapshots'
    summaries, and the refined tables equal a recomputation from the clean tables."""
    from lakehouse.jobs.refine import parser
    from lakehouse.refine.refresh import RefineOptions

    defaults = parser().parse_args([])
    options = RefineOptions(
        rebuild_below_rows=defaults.rebuild_below_rows,
        rebuild_above_changed_fraction=defaults.rebuild_above_changed_fraction,
    )
    refine(lake.spark, lake.config, run_id="before-small")
    lake.apply_workload(changes=10, seed=13, mix=MIXED_WITH_DIMENSION_CHANGES)
    clean_rows = sum(
        lake.spark.table(lake.clean(n)).count()
        for n in ("web_sales", "date_dim", "time_dim", "item", "customer", "customer_address")
    )

    report = refine(lake.spark, lake.config, options, run_id="small")

    assert modes(report) == {t: "built" for t in (SALES_ENRICHED, *AGGREGATES)}
    sales = next(t for t in report.tables if t.table == SALES_ENRICHED)
    rows = int(sales.reason.split()[3])  # "its inputs hold <n> rows, under 1000000: ..."
    assert sales.reason.endswith(f"under {defaults.rebuild_below_rows}: a rebuild costs less"), sales.reason
    assert rows >= clean_rows, sales.reason
    assert_refined_equals_recomputation(lake)


def test_the_refine_rebuilds_when_someone_else_expired_what_it_consumed(lake: Lake, caplog) -> None:
    """Given the refined zone up to date, then a CDC batch, and the clean tables' old snapshots expired
    by hand (not by our maintenance, which keeps them),
    When the refine runs, Then it rebuilds the refined tables in full, says why, and they are exact."""
    import logging

    refine(lake.spark, lake.config, run_id="before-expiry")
    lake.apply_workload(changes=20, seed=12, mix=MIXED_WITH_DIMENSION_CHANGES)
    catalog = lake.config.catalog_name
    for name in ("web_sales", "item", "customer", "customer_address", "date_dim", "time_dim"):
        table = lake.clean(name)
        newest = lake.spark.sql(f"SELECT max(committed_at) AS t FROM {table}.snapshots").first()["t"]
        lake.spark.sql(
            f"CALL {catalog}.system.expire_snapshots(table => '{table.split('.', 1)[1]}', "
            f"older_than => TIMESTAMP '{newest}', retain_last => 1)"
        )

    with caplog.at_level(logging.WARNING, logger="lakehouse.refine.refresh"):
        report = refine(lake.spark, lake.config, run_id="after-expiry")

    assert modes(report)[SALES_ENRICHED] == "built"
    assert "no longer" in caplog.text or "rebuild" in caplog.text
    assert_refined_equals_recomputation(lake)


def test_the_refined_check_recomputes_the_refined_zone_from_the_source_database(lake: Lake) -> None:
    """Given a refined zone built from a clean zone equal to its source, When the demo's refined check runs
    (each model's SQL over the source database's rows, row checksums), Then every refined table matches; and
    once one refined row drifts (a revenue changed behind the refine's back), that table alone is reported."""
    from tools.verify import check_refined

    spark = lake.spark
    refine(spark, lake.config, run_id="refine-check")

    checks = check_refined(spark, lake.config, lake.db)
    assert [c.table for c in checks] == [f"refined.{t}" for t in (SALES_ENRICHED, *AGGREGATES)]
    assert all(c.matches for c in checks), [c.line() for c in checks]

    table = lake.refined("daily_revenue_by_category")
    spark.sql(
        f"UPDATE {table} SET revenue = revenue + 0.01 WHERE sold_date = (SELECT min(sold_date) FROM {table})"
    )
    drifted = {c.table for c in check_refined(spark, lake.config, lake.db) if not c.matches}
    assert drifted == {"refined.daily_revenue_by_category"}
    spark.sql(  # the shared lake, as it was
        f"UPDATE {table} SET revenue = revenue - 0.01 WHERE sold_date = (SELECT min(sold_date) FROM {table})"
    )


USERS_MODEL = """{{ config(unique_key='state') }}
-- Customers by the state of their current address: a model of a user's own, beside the examples.
SELECT a.ca_state AS state, count(*) AS customers, max(c.c_birth_date) AS youngest_born,
       max(c.c_last_update) AS last_update
FROM {{ source('customer') }} c
LEFT JOIN {{ source('customer_address') }} a ON c.c_current_addr_sk = a.ca_address_sk
GROUP BY a.ca_state
"""


def test_the_refined_check_covers_a_model_of_the_users_own_with_its_sql(lake: Lake) -> None:
    """Given the example models and a user's model (customers by state) in the folder, refined, When the refined
    check runs over that folder, Then it checks every model's table, the user's too, against its own SQL over
    the source database, and all match; once one of the user's rows drifts, that table alone is reported."""
    from lakehouse.refine.models import load_folder

    from deploy.glue_artifacts import model_files
    from tools.verify import check_refined

    spark = lake.spark
    files = [(str(p), p.read_text(encoding="utf-8")) for p in model_files()]
    folder = load_folder([*files, ("customers_by_state.sql", USERS_MODEL)])
    table = lake.refined("customers_by_state")
    try:
        refine(spark, lake.config, run_id="users-model", models=folder)

        checks = check_refined(spark, lake.config, lake.db, folder)
        assert sorted(c.table for c in checks) == [
            f"refined.{t}" for t in sorted(("customers_by_state", SALES_ENRICHED, *AGGREGATES))
        ]
        assert all(c.matches for c in checks), [c.line() for c in checks]

        spark.sql(f"UPDATE {table} SET customers = customers + 1 WHERE state IS NOT NULL")
        drifted = {c.table for c in check_refined(spark, lake.config, lake.db, folder) if not c.matches}
        assert drifted == {"refined.customers_by_state"}
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table} PURGE")  # the shared lake, as it was

"""The BI queries give, in Spark over the refined zone, the answers the source database gives; time
travel returns the earlier answers; the Athena snippet holds every query."""

from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from lakehouse.apply.cdc import apply_cdc
from lakehouse.base.config import LakeConfig
from lakehouse.io.iceberg import current_snapshot_id
from lakehouse.refine.refresh import refine

from tests.support import manifest
from tests.unit.refine.conftest import load_clean_zone_directly
from tools import sample_data as S
from tools.bi import (
    ATHENA_AS_OF,
    QUERY_DIR,
    athena_cfn_snippet,
    load_queries,
    render,
    run_query,
    spark_names,
    timestamp_as_of,
    version_as_of,
)
from tools.dashboard import Figures, collect_figures, write_dashboard

pytestmark = pytest.mark.spark

QUERIES = load_queries()
RETURNS_HEAVY = {"order_returned": 4, "new_order": 2, "item_reclassified": 1, "customer_moved": 1}


@dataclass
class BiLake:
    spark: object
    config: LakeConfig
    before_db: Path  # the source when the first refine ran
    after_db: Path  # the source now
    sales_snapshot: int  # sales_enriched and the category aggregate at the first refine
    category_snapshot: int
    between_commits: str  # a moment between the first and the second refine


@pytest.fixture(scope="module")
def bi_lake(spark, base_config, tmp_path_factory: pytest.TempPathFactory) -> BiLake:
    """Given a generated source loaded into a clean zone and refined, then a returns-heavy workload
    applied through CDC and refined again."""
    root = tmp_path_factory.mktemp("bi")
    config = replace(base_config, clean_database="bi_clean", refined_database="bi_refined")
    db = root / "source.db"
    S.create_source_database(db, scale=0.03, seed=99)
    schema = load_clean_zone_directly(spark, config, db)
    refine(spark, config, run_id="first")
    before = root / "before.db"
    shutil.copy(db, before)
    sales = current_snapshot_id(spark, config.table(config.refined_database, "sales_enriched"))
    category = current_snapshot_id(spark, config.table(config.refined_database, "daily_revenue_by_category"))
    between = spark.sql("SELECT date_format(current_timestamp(), 'yyyy-MM-dd HH:mm:ss.SSS') AS t").first()[
        "t"
    ]
    spark.sql("SELECT 1").collect()
    changes = S.run_workload(db, 30, seed=4, mix=RETURNS_HEAVY).changes
    files = S.write_cdc_files(db, changes, root / "raw")
    assert not apply_cdc(spark, config, schema, manifest(*files)).failed
    refine(spark, config, run_id="second")
    return BiLake(spark, config, before, db, sales, category, between)


def source_rows(db: Path, sql: str) -> list[tuple]:
    """Rows from SQLite, money as 2-decimal Decimals (SQLite sums in floating point)."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute(sql).fetchall()
    return [tuple(Decimal(f"{v:.2f}") if isinstance(v, float) else v for v in row) for row in rows]


def spark_rows(lake: BiLake, name: str, **names: str) -> list[tuple]:
    frame = run_query(lake.spark, QUERIES[name], spark_names(lake.config) | names)
    return [tuple(str(v) if hasattr(v, "isoformat") else v for v in row) for row in frame.collect()]


SALES_JOINS = """
    FROM web_sales ws
    LEFT JOIN item i ON ws.ws_item_sk = i.i_item_sk
    LEFT JOIN date_dim d ON ws.ws_sold_date_sk = d.d_date_sk
    LEFT JOIN customer c ON ws.ws_bill_customer_sk = c.c_customer_sk
    LEFT JOIN customer_address a ON c.c_current_addr_sk = a.ca_address_sk"""


def test_top_categories_match_the_source(bi_lake: BiLake) -> None:
    """Given the refined zone after changes
    When top_categories_by_revenue runs in Spark
    Then revenue, profit, units and orders by category are the source database's."""
    expected = source_rows(
        bi_lake.after_db,
        f"""SELECT i.i_category, SUM(ws_ext_sales_price), SUM(ws_net_profit), SUM(ws_quantity),
                   COUNT(DISTINCT COALESCE(d.d_date, '?') || '|' || ws_order_number)
            {SALES_JOINS} GROUP BY 1 ORDER BY 2 DESC, 1 NULLS LAST LIMIT 10""",
    )

    actual = spark_rows(bi_lake, "top_categories_by_revenue")

    assert [(r[0], r[1], r[2], r[4], r[5]) for r in actual] == expected
    assert all(r[3] == round(float(r[2]) / float(r[1]), 4) for r in actual)


def test_revenue_by_state_and_month_matches_the_source(bi_lake: BiLake) -> None:
    """Given the refined zone after changes (customers moved: their current state counts)
    When revenue_by_state_and_month runs in Spark
    Then every (state, year, month) row is the source database's."""
    expected = source_rows(
        bi_lake.after_db,
        f"""SELECT a.ca_state, CAST(strftime('%Y', d.d_date) AS INTEGER), CAST(strftime('%m', d.d_date) AS INTEGER),
                   SUM(ws_ext_sales_price), SUM(ws_net_profit), SUM(ws_quantity)
            {SALES_JOINS} WHERE d.d_date IS NOT NULL GROUP BY 1, 2, 3 ORDER BY 2, 3, 1 NULLS LAST""",
    )

    assert spark_rows(bi_lake, "revenue_by_state_and_month") == expected


def test_customer_lifetime_value_matches_the_source(bi_lake: BiLake) -> None:
    """Given the refined zone after changes
    When customer_lifetime_value runs in Spark
    Then the top 20 customers, their names (unicode, commas, quotes), orders and values are the source's."""
    expected = source_rows(
        bi_lake.after_db,
        f"""SELECT ws_bill_customer_sk, c.c_first_name, c.c_last_name, a.ca_state, COUNT(DISTINCT ws_order_number),
                   SUM(ws_net_paid), SUM(ws_net_profit), MIN(d.d_date), MAX(d.d_date)
            {SALES_JOINS} WHERE ws_bill_customer_sk IS NOT NULL GROUP BY 1, 2, 3, 4 ORDER BY 6 DESC, 1 LIMIT 20""",
    )

    assert spark_rows(bi_lake, "customer_lifetime_value") == expected


def test_time_travel_returns_the_earlier_answer(bi_lake: BiLake) -> None:
    """Given the refined zone refined twice, with returns and reclassifications in between
    When category_revenue_as_of runs as of the first refine's snapshot, and as of a time between the two
    Then both give the revenue by category the source had then, which differs from now's."""
    query = """SELECT i.i_category, SUM(ws_ext_sales_price), COUNT(*) FROM web_sales ws
               LEFT JOIN item i ON ws.ws_item_sk = i.i_item_sk GROUP BY 1 ORDER BY 1 NULLS LAST"""
    then, now = source_rows(bi_lake.before_db, query), source_rows(bi_lake.after_db, query)

    by_version = spark_rows(bi_lake, "category_revenue_as_of", as_of=version_as_of(bi_lake.category_snapshot))
    by_time = spark_rows(bi_lake, "category_revenue_as_of", as_of=timestamp_as_of(bi_lake.between_commits))

    assert by_version == then
    assert by_time == then
    assert then != now


def test_returns_impact_lists_the_lines_deleted_since(bi_lake: BiLake) -> None:
    """Given sale lines deleted at the source (returns) between the two refines
    When returns_impact runs as of the first refine's snapshot
    Then it lists, by category as it was, exactly the removed lines' count, units, revenue and profit."""
    with sqlite3.connect(bi_lake.before_db) as connection:
        connection.execute(f"ATTACH DATABASE '{bi_lake.after_db}' AS now")
        rows = connection.execute(
            """SELECT i.i_category, COUNT(*), SUM(ws.ws_quantity), SUM(ws.ws_ext_sales_price), SUM(ws.ws_net_profit)
               FROM main.web_sales ws LEFT JOIN main.item i ON ws.ws_item_sk = i.i_item_sk
               LEFT JOIN now.web_sales n ON n.ws_item_sk = ws.ws_item_sk AND n.ws_order_number = ws.ws_order_number
               WHERE n.ws_item_sk IS NULL GROUP BY 1 ORDER BY 4 DESC, 1 NULLS LAST"""
        ).fetchall()
    expected = [tuple(Decimal(f"{v:.2f}") if isinstance(v, float) else v for v in r) for r in rows]

    actual = spark_rows(bi_lake, "returns_impact", as_of=version_as_of(bi_lake.sales_snapshot))

    assert expected and actual == expected


def test_athena_snippet_names_every_query_and_is_current() -> None:
    """Given the BI query files
    When the CloudFormation snippet is generated
    Then it has the workgroup and one NamedQuery per file whose SQL has only CloudFormation's
    substitutions left, and bi/athena_named_queries.yaml is that snippet."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    snippet = athena_cfn_snippet(QUERIES)
    resources = yaml.load(snippet, Loader=Loader)

    named = [k for k, v in resources.items() if v["Type"] == "AWS::Athena::NamedQuery"]
    assert len(named) == len(QUERIES) >= 4
    assert resources["AthenaWorkGroup"]["Type"] == "AWS::Athena::WorkGroup"
    assert "${as_of}" not in snippet and ATHENA_AS_OF in snippet
    assert (QUERY_DIR.parent / "athena_named_queries.yaml").read_text(encoding="utf-8") == snippet
    assert render(QUERIES["top_categories_by_revenue"], {"refined_db": "x"}).count("x.daily_revenue") == 1


def test_dashboard_figures_come_from_the_refined_zone(bi_lake: BiLake, tmp_path: Path) -> None:
    """Given the refined zone after changes
    When the dashboard's figures are collected and the page written
    Then total revenue is the source's and every category has its bar."""
    figures = collect_figures(bi_lake.spark, bi_lake.config)
    [(revenue,)] = source_rows(bi_lake.after_db, "SELECT SUM(ws_ext_sales_price) FROM web_sales")

    page = write_dashboard(tmp_path / "dashboard.html", figures, {"files": 3}).read_text(encoding="utf-8")

    assert round(figures.totals["revenue"], 2) == float(revenue)
    assert all(json.dumps(name) in page for name, _ in figures.revenue_by_category)


def test_the_dashboard_has_no_business_figure_without_the_example_models(spark, base_config) -> None:
    """Given a refined zone without the example models' tables (a user's own models), When the dashboard's
    figures are collected, Then there are none (each chart says so) rather than a failed read."""
    config = replace(base_config, refined_database="bi_own_models")

    assert collect_figures(spark, config) == Figures()


def test_rollback_then_refine_catches_up(bi_lake: BiLake) -> None:
    """Given the refined tables rolled back to the first refine's snapshots (Iceberg rollback)
    When they are read, and when the refine runs again
    Then they first give the earlier answer, then the refine brings them back to the current one."""
    spark, config = bi_lake.spark, bi_lake.config
    query = f"""SELECT category, SUM(revenue), SUM(lines) FROM {config.catalog_name}.{config.refined_database}
                .daily_revenue_by_category GROUP BY 1 ORDER BY 1 NULLS LAST"""
    current = [tuple(r) for r in spark.sql(query).collect()]
    for table, snapshot in (
        ("sales_enriched", bi_lake.sales_snapshot),
        ("daily_revenue_by_category", bi_lake.category_snapshot),
    ):
        spark.sql(
            f"CALL {config.catalog_name}.system.rollback_to_snapshot('{config.refined_database}.{table}', {snapshot})"
        )

    rolled_back = [tuple(r) for r in spark.sql(query).collect()]
    refine(spark, config, run_id="after-rollback")
    caught_up = [tuple(r) for r in spark.sql(query).collect()]

    assert rolled_back != current
    assert [(r[0], r[2]) for r in rolled_back] == [
        (c, n)
        for c, _, n in source_rows(
            bi_lake.before_db,
            """SELECT i.i_category, 0, COUNT(*) FROM web_sales ws
               LEFT JOIN item i ON ws.ws_item_sk = i.i_item_sk GROUP BY 1 ORDER BY 1 NULLS LAST""",
        )
    ]
    assert caught_up == current

"""Freshness after a CDC run without consistent points reads again only the tables the run touched: another
table keeps its last measured row, its lag counted to the new measurement, and costs no metadata load."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.audit import freshness
from lakehouse.audit.freshness import after_cdc_run, freshness_table

from tests.support import BASE_TIME, DmsWriter, manifest, rows_of, schema_of

pytestmark = pytest.mark.spark

ITEM, REGION = "sales.item", "sales.region"
COLUMNS = {ITEM: ["sku", "price"], REGION: ["code", "name"]}
SCHEMA = schema_of(
    {
        ITEM: (["sku"], [("sku", "varchar(10)"), ("price", "int")]),
        REGION: (["code"], [("code", "char(2)"), ("name", "varchar(20)")]),
    }
)


def test_a_table_the_run_did_not_touch_keeps_its_row_and_costs_no_load(
    spark, lake_config, tmp_path, monkeypatch
):
    """Given both tables loaded and a first run that changed the item table, both measured after it,
    When a second run changes only the region table and freshness is measured for the tables it touched,
    Then the region's row is new (its newest change, the second run), the item's row is the first run's
    with its lag grown, and the item table was neither loaded nor checked for existence."""
    dms = DmsWriter(tmp_path / "raw" / "dms")
    dms.load(ITEM, COLUMNS[ITEM], [("A1", 1)])
    dms.load(REGION, COLUMNS[REGION], [("NY", "New York")])
    assert full_load(spark, lake_config, SCHEMA, str(dms.root)).ok
    first = dms.cdc(ITEM, COLUMNS[ITEM], [("U", ("A1", 2))])
    assert apply_cdc(spark, lake_config, SCHEMA, manifest(first, run_id="run-1")).ok
    measured = after_cdc_run(spark, lake_config, SCHEMA, [first], "run-1", consistent_points=False)
    assert measured["error"] is None, measured["error"]
    lag_before = {t["source_table"]: t["lag_seconds"] for t in measured["tables"]}
    second = dms.cdc(REGION, COLUMNS[REGION], [("U", ("NY", "Big Apple"))])
    assert apply_cdc(spark, lake_config, SCHEMA, manifest(second, run_id="run-2")).ok
    item_table = lake_config.clean_table("sales_item")
    reads: Counter = Counter()
    real_exists, real_lineage = freshness.table_exists, freshness.table_lineage
    monkeypatch.setattr(freshness, "table_exists", lambda s, t: reads.update([t]) or real_exists(s, t))
    monkeypatch.setattr(
        freshness, "table_lineage", lambda s, t, *a: reads.update([t]) or real_lineage(s, t, *a)
    )

    measured = after_cdc_run(
        spark, lake_config, SCHEMA, [second], "run-2", consistent_points=False, touched=[REGION]
    )

    assert measured["error"] is None, measured["error"]
    assert reads[item_table] == 0
    assert rows_of(
        spark,
        freshness_table(lake_config),
        ["source_table", "newest_source_commit_ts", "last_batch_id", "run_id"],
    ) == [
        (ITEM, BASE_TIME + timedelta(seconds=1), "run-1", "run-2"),  # the first CDC file's change
        (REGION, BASE_TIME + timedelta(seconds=2), "run-2", "run-2"),
    ]
    lag_after = {t["source_table"]: t["lag_seconds"] for t in measured["tables"]}
    assert lag_after[ITEM] >= lag_before[ITEM]

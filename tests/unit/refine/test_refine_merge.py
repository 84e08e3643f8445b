"""The refresh's MERGE over a large refined table: a change its keys spread over every data file (a dimension's) is
matched through a runtime Bloom filter of the keys on the target's scan, not by shuffling the whole table, and a
null key is still one key value."""

from __future__ import annotations

from dataclasses import replace

import pytest
from lakehouse.io.iceberg import append_rows, create_table, ensure_namespace
from lakehouse.refine.models import load_folder
from lakehouse.refine.refresh import refine

from tests.unit.refine.test_refresh_counts import MODELS
from tests.unit.spark.test_cdc_rules import every_target_bloom_filtered, sql_plans  # noqa: F401 (a fixture)

pytestmark = pytest.mark.spark


def test_a_dimension_change_merges_through_a_bloom_filter_of_its_keys_and_keeps_a_null_key_once(
    spark,
    base_config,
    every_target_bloom_filtered,  # noqa: F811
) -> None:
    """Given a fact of 60 sales in 6 files (one with a null id) left-joined to its items (enriched, keyed on the
    sale's id), built, and Spark's runtime Bloom filter asked for at any target size (the path of a large table);
    When an item sold in every file is reclassified, and the model refreshed; then the null sale's item too;
    Then each MERGE into enriched scans its target through a Bloom filter of the affected keys, the refresh is
    incremental, and enriched is, row for row, the model's SQL run from scratch (the null id once)."""
    config = replace(base_config, clean_database="merge_bloom_clean", refined_database="merge_bloom_refined")
    sales = [(n, n % 7, n) for n in range(59)] + [(None, 5, 100)]
    items = [(n, f"c{n % 3}") for n in range(7)]
    dimension = sales_and_items(spark, config, sales, items, files=6)
    folder = load_folder(MODELS.items())
    assert [t.mode for t in refine(spark, config, models=folder).tables] == ["built", "built"]
    enriched = config.table(config.refined_database, "enriched")
    category = dict(items)

    for item, reclassified in ((3, "c9"), (5, "c8")):
        spark.sql(f"UPDATE {dimension} SET category = '{reclassified}' WHERE item = {item}")
        category[item] = reclassified
        last_before = max(sql_plans(spark), default=-1)

        report = refine(spark, config, models=folder)

        assert {t.table: t.mode for t in report.tables} == {
            "enriched": "incremental",
            "by_category": "incremental",
        }
        plans = sql_plans(spark, after=last_before)
        # the MERGEs in their order: enriched's, then by_category's
        merges = [plans[e] for e in sorted(plans) if "WriteDelta" in plans[e]]
        assert len(merges) == 2 and "might_contain" in merges[0], merges
        rows = spark.table(enriched).select("id", "amount", "category").collect()
        expected = [(n, amount, category[i]) for n, i, amount in sales]
        assert sorted(map(tuple, rows), key=repr) == sorted(expected, key=repr)


def test_a_few_recomputed_rows_join_their_keys_by_a_broadcast_whatever_spark_estimates(
    spark, base_config
) -> None:
    """Given the enriched model built over 60 sales, and a broadcast threshold (2 KB) that the changed keys' rows
    fit at their default size but that Spark's estimate of the recomputed rows (a join's, not theirs) exceeds;
    When one item is reclassified and the model refreshed;
    Then the recomputed rows meet their keys in a join planned as a broadcast (not a sort-merge join, which
    shuffles both sides before adaptive execution may turn it into one) inside the MERGE's own plan (no query
    keeps them before it: the table merges on read, reading its source once), and enriched is
    row for row the model's SQL run from scratch."""
    config = replace(base_config, clean_database="merge_join_clean", refined_database="merge_join_refined")
    sales = [(n, n % 20, n) for n in range(60)]
    items = [(n, f"c{n % 3}") for n in range(20)]
    dimension = sales_and_items(spark, config, sales, items, files=3)
    folder = load_folder({"enriched.sql": MODELS["enriched.sql"]}.items())
    refine(spark, config, models=folder)
    before = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "2KB")
    try:
        spark.sql(f"UPDATE {dimension} SET category = 'c9' WHERE item = 3")
        last_before = max(sql_plans(spark), default=-1)

        report = refine(spark, config, models=folder)

        plans = sql_plans(spark, after=last_before).values()
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", before)
    assert [t.mode for t in report.tables] == ["incremental"]
    # the MERGE's source: its keys left-joined to their recomputed rows (absent: a delete), computed in the
    # MERGE's own plan (merge-on-read reads it once), not kept before it by a query (a Spark job) of its own
    merges = [plan for plan in plans if "coalesce(__present" in plan and "WriteDelta" in plan]
    kept = [plan for plan in plans if "coalesce(__present" in plan and "WriteDelta" not in plan]
    assert [plan for plan in kept if "CreateViewCommand" not in plan] == []  # the view's command runs no job
    assert len(merges) == 1, merges
    assert "BroadcastHashJoin LeftOuter" in merges[0] and "SortMergeJoin LeftOuter" not in merges[0], merges[
        0
    ]
    category = dict(items) | {3: "c9"}
    rows = spark.table(config.table(config.refined_database, "enriched")).select("id", "amount", "category")
    assert sorted(map(tuple, rows.collect())) == sorted((n, amount, category[i]) for n, i, amount in sales)


def sales_and_items(spark, config, sales: list[tuple], items: list[tuple], files: int) -> str:
    """The clean tables the models read: `main_sales` (id, item, amount) in `files` data files by id, and
    `main_item` (item, category). Returns the dimension's table name."""
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    fact, dimension = config.clean_table("main_sales"), config.clean_table("main_item")
    sales_schema, items_schema = "id bigint, item bigint, amount bigint", "item bigint, category string"
    create_table(spark, fact, spark.createDataFrame([], sales_schema).schema)
    create_table(spark, dimension, spark.createDataFrame([], items_schema).schema)
    append_rows(spark, fact, spark.createDataFrame(sales, sales_schema).repartitionByRange(files, "id"), {})
    append_rows(spark, dimension, spark.createDataFrame(items, items_schema), {})
    return dimension

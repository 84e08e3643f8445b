"""How often one incremental refresh turns a model's SQL into a DataFrame (Spark analyses it each time) and reads an
input as of its consumed snapshot: counted (never timed), since this is driver time with no Spark job.

A fact (`sales`) and a dimension (`item`); `enriched` joins them (keyed on the sale), `by_category` and `lines`
aggregate `enriched`, so both read its changes and ask which of its columns the models reading it use. One item is
reclassified: `enriched` traces the change along its join to the sales, the aggregates from `enriched`'s rows."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from lakehouse.io.iceberg import append_rows, create_table, ensure_namespace
from lakehouse.refine import refresh
from lakehouse.refine.models import load_folder
from lakehouse.refine.refresh import RefineOptions, refine

pytestmark = pytest.mark.spark

MODELS = {
    "enriched.sql": """{{ config(materialized='incremental', unique_key='id') }}
SELECT s.id, s.amount, i.category FROM {{ source('sales') }} s LEFT JOIN {{ source('item') }} i ON s.item = i.item
""",
    "by_category.sql": """{{ config(materialized='incremental', unique_key='category') }}
SELECT category, sum(amount) AS amount FROM {{ ref('enriched') }} GROUP BY category
""",
    "lines.sql": """{{ config(materialized='incremental', unique_key='category') }}
SELECT category, count(*) AS lines FROM {{ ref('enriched') }} GROUP BY category
""",
}


def test_a_traced_dimension_change_analyses_each_model_once_for_its_rows_and_once_for_its_keys(
    spark, base_config, monkeypatch
) -> None:
    """Given three incremental models built over a fact and a dimension, and one item reclassified; when the
    models are refreshed one at a time; then each refreshes incrementally to the rows a rebuild gives, each
    model's SQL is analysed twice in its own refresh (over its inputs, then over its keys' rows; the first
    aggregate's columns for the wanted-columns question taken from that first analysis) and the second
    aggregate's once more (asked by the first, before its own refresh), and the dimension is read as of its
    consumed snapshot by no one (the change is traced along the join: only the sales are read as they were)."""
    config = replace(base_config, clean_database="analyses_clean", refined_database="analyses_refined")
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    fact, dimension = config.clean_table("main_sales"), config.clean_table("main_item")
    create_table(spark, fact, spark.createDataFrame([], "id bigint, item bigint, amount bigint").schema)
    create_table(spark, dimension, spark.createDataFrame([], "item bigint, category string").schema)
    sales = [(n, n % 7, n) for n in range(100)]
    append_rows(spark, fact, spark.createDataFrame(sales, "id bigint, item bigint, amount bigint"), {})
    items = [(n, f"c{n % 3}") for n in range(7)]
    append_rows(spark, dimension, spark.createDataFrame(items, "item bigint, category string"), {})
    folder = load_folder(MODELS.items())
    options = RefineOptions(models_at_once=1)
    assert [t.mode for t in refine(spark, config, options, models=folder).tables] == ["built"] * 3
    spark.sql(f"UPDATE {dimension} SET category = 'c9' WHERE item = 3")

    analyses: Counter[str] = Counter()
    reads_as_of: Counter[str] = Counter()
    unwrapped_evaluator, unwrapped_read = refresh._Refiner.evaluator, refresh.read_as_of

    def counted_evaluator(refiner: refresh._Refiner, model: Any, views: dict[str, str]) -> Any:
        evaluate = unwrapped_evaluator(refiner, model, views)

        def analysed(frames: Any) -> Any:
            analyses[model.name] += 1
            return evaluate(frames)

        return analysed

    def counted_read(spark_: Any, table: str, snapshot_id: int) -> Any:
        reads_as_of[table.rsplit(".", 1)[-1]] += 1
        return unwrapped_read(spark_, table, snapshot_id)

    monkeypatch.setattr(refresh._Refiner, "evaluator", counted_evaluator)
    monkeypatch.setattr(refresh, "read_as_of", counted_read)
    report = refine(spark, config, options, models=folder)
    monkeypatch.undo()

    assert {t.table: t.mode for t in report.tables} == dict.fromkeys(
        ("enriched", "by_category", "lines"), "incremental"
    )
    assert analyses["enriched"] == 2, analyses
    assert sorted((analyses["by_category"], analyses["lines"])) == [2, 3], analyses
    # The item read once, as it is now (enriched's rows); the sales twice, now and as they were (the trace).
    assert reads_as_of["main_item"] == 1, reads_as_of
    assert reads_as_of["main_sales"] == 2, reads_as_of
    category = {n: "c9" if n % 7 == 3 else f"c{n % 7 % 3}" for n in range(100)}  # each sale's, now
    lines = spark.table(config.table(config.refined_database, "lines")).collect()
    assert {r.category: r.lines for r in lines} == Counter(category.values())
    amounts = spark.table(config.table(config.refined_database, "by_category")).collect()
    assert {r.category: r.amount for r in amounts} == {
        c: sum(n for n in range(100) if category[n] == c) for c in set(category.values())
    }

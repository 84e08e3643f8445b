"""How a refresh finds the keys a change reaches: a dimension's changed rows joined with the fact along the model's
own equi-join conditions, reading the fact's key and link columns alone; an input linked otherwise traced by
running the model; a model whose affected keys are most of its rows rebuilt rather than MERGEd; and an input's
changed rows found once for the models of a run that read them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from lakehouse.io.iceberg import append_rows, create_table, ensure_namespace
from lakehouse.refine.changes import traced_keys
from lakehouse.refine.consumed import SharedChanges
from lakehouse.refine.lineage import Hop, key_origin, key_traces
from lakehouse.refine.models import Model, load_folder, parse_model, reads_of
from lakehouse.refine.refresh import RefineOptions, read_models, refine
from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark

EXAMPLE_SCHEMAS = {
    "web_sales": "ws_item_sk bigint, ws_order_number bigint, ws_sold_date_sk bigint, ws_sold_time_sk bigint, "
    "ws_bill_customer_sk bigint, ws_quantity int, ws_list_price decimal(7,2), ws_sales_price decimal(7,2), "
    "ws_ext_sales_price decimal(7,2), ws_ext_discount_amt decimal(7,2), ws_coupon_amt decimal(7,2), "
    "ws_net_paid decimal(7,2), ws_ext_wholesale_cost decimal(7,2), ws_net_profit decimal(7,2)",
    "date_dim": "d_date_sk bigint, d_date date, d_year int, d_moy int, d_holiday string",
    "time_dim": "t_time_sk bigint, t_hour int",
    "item": "i_item_sk bigint, i_item_id string, i_product_name string, i_category string, i_class string, "
    "i_brand string",
    "customer": "c_customer_sk bigint, c_current_addr_sk bigint, c_first_name string, c_last_name string",
    "customer_address": "ca_address_sk bigint, ca_state string, ca_city string",
}
SCHEMAS = {
    "sales": "id bigint, item bigint, amount bigint",
    "item": "item bigint, category string",
    "band": "low bigint, high bigint, label string",
}
# The fact left-joined to a dimension by its key (traceable) and to a band by a range (not: a non-equi join).
MODELS = {
    "enriched.sql": """{{ config(unique_key='id') }}
SELECT s.id, s.amount, i.category, b.label
FROM {{ source('sales') }} s
LEFT JOIN {{ source('item') }} i ON s.item = i.item
LEFT JOIN {{ source('band') }} b ON s.amount >= b.low AND s.amount < b.high
""",
    "by_category.sql": """{{ config(unique_key='category') }}
SELECT category, sum(amount) AS amount, count(*) AS lines FROM {{ ref('enriched') }} GROUP BY category
""",
}
INNER = """{{ config(unique_key='id') }}
SELECT s.id, i.category FROM {{ source('sales') }} s JOIN {{ source('item') }} i ON s.item = i.item
"""


def run_model(spark: SparkSession, model: Model, frames: dict[str, DataFrame]) -> tuple[DataFrame, dict]:
    """The model's rows over `frames` (input name → frame) through temporary views, and the views' inputs."""
    views = {}
    for name, frame in frames.items():
        view = f"trace_input_{model.name}_{name}"
        frame.createOrReplaceTempView(view)
        views[view] = name
    return spark.sql(model.render(lambda r: f"trace_input_{model.name}_{r.input_name}")), views


def traces_of(spark: SparkSession, text: str, schemas: dict[str, str]) -> dict[str, tuple[Hop, ...]] | None:
    """Each traced input's hops of the model `text` over empty inputs of `schemas`; None: its key has no origin."""
    model = parse_model("m.sql", text)
    frames = {name: spark.createDataFrame([], schema) for name, schema in schemas.items()}
    rows, views = run_model(spark, model, {r.input_name: frames[r.input_name] for r in model.references})
    origin = key_origin(rows, views, model.unique_key, reads_of(model))
    if origin is None:
        return None
    return {name: trace.hops for name, trace in key_traces(rows, views, origin, reads_of(model)).items()}


def scanned_columns(frame: DataFrame) -> dict[str, list[str]]:
    """Each Iceberg table the frame's optimized plan scans (its name's last part) → the columns it reads."""
    leaves = frame._jdf.queryExecution().optimizedPlan().collectLeaves()
    scans: dict[str, list[str]] = {}
    for i in range(leaves.size()):
        leaf: Any = leaves.apply(i)
        if str(leaf.nodeName()) == "DataSourceV2ScanRelation":
            output = leaf.output()
            name = str(leaf.relation().table().name()).split(".")[-1]
            scans[name] = sorted(str(output.apply(j).name()) for j in range(output.size()))
    return scans


def test_the_example_dimensions_are_traced_to_the_sales_key_and_other_links_are_not(spark) -> None:
    """Given the example sales_enriched and models whose inputs are linked otherwise
    When their joins are read from the analyzed plans
    Then every dimension of sales_enriched links to web_sales by its join's columns (customer_address through
    customer), the sales themselves with no hop; a non-equi, null-safe or cast condition, a self-join or a
    subquery give no trace for that input; a key from two inputs or the null side of a full join, none at all."""
    [example] = [m for m in read_models().models if m.name == "sales_enriched"]

    assert traces_of(spark, example.text, EXAMPLE_SCHEMAS) == {
        "web_sales": (),
        "date_dim": (Hop("web_sales", ("d_date_sk",), ("ws_sold_date_sk",)),),
        "time_dim": (Hop("web_sales", ("t_time_sk",), ("ws_sold_time_sk",)),),
        "item": (Hop("web_sales", ("i_item_sk",), ("ws_item_sk",)),),
        "customer": (Hop("web_sales", ("c_customer_sk",), ("ws_bill_customer_sk",)),),
        "customer_address": (
            Hop("customer", ("ca_address_sk",), ("c_current_addr_sk",)),
            Hop("web_sales", ("c_customer_sk",), ("ws_bill_customer_sk",)),
        ),
    }
    head = "{{ config(unique_key='id') }}\nSELECT s.id, i.category FROM {{ source('sales') }} s "
    untraced = {
        "non-equi": "LEFT JOIN {{ source('item') }} i ON s.item < i.item",
        "null-safe": "LEFT JOIN {{ source('item') }} i ON s.item <=> i.item",
        "cast": "LEFT JOIN {{ source('item') }} i ON CAST(s.item AS string) = CAST(i.item AS string)",
        "self-join": "LEFT JOIN {{ source('item') }} i ON s.item = i.item "
        "LEFT JOIN {{ source('item') }} j ON i.item = j.item",
        "subquery": "LEFT JOIN {{ source('item') }} i ON s.item = i.item "
        "WHERE s.item IN (SELECT item FROM {{ source('item') }})",
    }
    for why, joined in untraced.items():
        assert traces_of(spark, head + joined, SCHEMAS) == {"sales": ()}, why
    two_inputs = (
        "{{ config(unique_key=['id', 'category']) }}\nSELECT s.id, i.category FROM {{ source('sales') }} s "
    )
    assert traces_of(spark, two_inputs + "JOIN {{ source('item') }} i ON s.item = i.item", SCHEMAS) is None
    assert traces_of(spark, head + "FULL JOIN {{ source('item') }} i ON s.item = i.item", SCHEMAS) is None


def _rows(spark: SparkSession, table: str, key: str) -> list[tuple]:
    return [tuple(r) for r in spark.table(table).orderBy(key).collect()]


def test_a_dimension_change_is_traced_an_untraced_one_run_and_most_keys_affected_rebuilt(
    spark, base_config
) -> None:
    """Given `enriched` (40 sales left-joined to 7 items by key, the sales of an 8th dangling, and to 4 amount
    bands by range), `inner` (the sales inner-joined to the items) and enriched's aggregate by category (4
    groups, one null), built
    When an item is reclassified, the missing one inserted, another deleted and a band relabelled, and the
    refine runs with models rebuilt whose affected keys are over 60 % of their rows
    Then the items' keys are traced along the joins (the inner model's sales appear and vanish with their items),
    the band's by running the model (untraced); enriched (21 of 40 keys affected) and inner (15 of 35) are
    MERGEd, the aggregate (5 groups against 4 rows) rebuilt saying why; each equals its SQL run from scratch; and
    the trace of an item reads the sales' `id` and `item` alone."""
    config = replace(base_config, clean_database="trace_clean", refined_database="trace_refined")
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    data = {
        "sales": [(n, n % 8, n) for n in range(40)],
        "item": [(n, f"c{n % 3}") for n in range(7)],
        "band": [(low, low + 10, f"b{low}") for low in range(0, 40, 10)],
    }
    for name, rows in data.items():
        table = config.clean_table(f"main_{name}")
        spark.sql(f"DROP TABLE IF EXISTS {table}")
        create_table(spark, table, spark.createDataFrame([], SCHEMAS[name]).schema)
        append_rows(spark, table, spark.createDataFrame(rows, SCHEMAS[name]), {})
    folder = load_folder([*MODELS.items(), ("inner.sql", INNER)])
    for model in folder.models:
        spark.sql(f"DROP TABLE IF EXISTS {config.table(config.refined_database, model.name)}")
    assert {t.mode for t in refine(spark, config, models=folder).tables} == {"built"}
    items = config.clean_table("main_item")
    spark.sql(f"UPDATE {items} SET category = 'c9' WHERE item = 3")
    append_rows(spark, items, spark.createDataFrame([(7, "c1")], SCHEMAS["item"]), {})
    spark.sql(f"DELETE FROM {items} WHERE item = 2")
    spark.sql(f"UPDATE {config.clean_table('main_band')} SET label = 'top' WHERE low = 30")

    report = refine(spark, config, RefineOptions(rebuild_above_affected_fraction=0.6), models=folder)

    tables = {t.table: t for t in report.tables}
    assert {n: (t.mode, t.affected, t.untraced) for n, t in tables.items()} == {
        "enriched": ("incremental", 21, ["band"]),
        "inner": ("incremental", 15, []),
        "by_category": ("built", 5, []),
    }
    assert tables["by_category"].reason == "5 keys affected, over 60% of its 4 rows: a rebuild costs less"
    clean = {name: spark.table(config.clean_table(f"main_{name}")) for name in SCHEMAS}
    models = {m.name: m for m in folder.models}
    expected = {name: run_model(spark, models[name], clean)[0] for name in ("enriched", "inner")}
    expected["by_category"] = run_model(spark, models["by_category"], {"enriched": expected["enriched"]})[0]
    for name, key in (("enriched", "id"), ("inner", "id"), ("by_category", "category")):
        assert _rows(spark, config.table(config.refined_database, name), key) == [
            tuple(r) for r in expected[name].orderBy(key).collect()
        ], name
    rows, views = run_model(spark, models["enriched"], clean)
    origin = key_origin(rows, views, ("id",), reads_of(models["enriched"]))
    assert origin is not None
    trace = key_traces(rows, views, origin, reads_of(models["enriched"]))["item"]
    keys = traced_keys(trace, clean, clean["item"].where("item = 3"), ("id",))
    assert scanned_columns(keys) == {"main_item": ["item"], "main_sales": ["id", "item"]}
    assert sorted(r.id for r in keys.collect()) == [3, 11, 19, 27, 35]


def test_an_inputs_changes_are_found_once_for_the_models_that_read_it(spark) -> None:
    """Given a run whose models read `enriched` twice and `item` once
    When each model asks for its input's changed rows between the same snapshots
    Then enriched's are found once and kept (the same rows for both), item's found each time and not kept;
    other snapshots are found anew."""
    found: list[str] = []

    def find(name: str):  # type: ignore[no-untyped-def]
        def rows():  # type: ignore[no-untyped-def]
            found.append(name)
            schema = "id bigint, v string"
            return spark.createDataFrame([(1, "old")], schema), spark.createDataFrame([(1, "new")], schema)

        return rows

    shared = SharedChanges({"enriched": 2, "item": 1})
    first = shared.changes("enriched", "t.enriched", 1, 2, find("enriched"))
    second = shared.changes("enriched", "t.enriched", 1, 2, find("enriched"))
    shared.changes("item", "t.item", 1, 2, find("item"))
    shared.changes("item", "t.item", 1, 2, find("item"))
    shared.changes("enriched", "t.enriched", 2, 3, find("enriched"))

    assert found == ["enriched", "item", "item", "enriched"]
    assert [[tuple(r) for r in frame.collect()] for frame in (*first, *second)] == [
        [(1, "old")],
        [(1, "new")],
    ] * 2
    shared.release()


ANTI_JOIN = """{{ config(unique_key='id') }}
SELECT s.id, s.amount FROM {{ source('sales') }} s LEFT JOIN {{ source('item') }} i ON s.item = i.item
WHERE i.item IS NULL
"""


def test_an_anti_join_written_as_a_filter_follows_its_dimension_both_ways(spark, base_config) -> None:
    """Given `orphans`, the sales whose item does not exist (a left join filtered on the item's key being null:
    the 5 sales of item 7), built
    When item 7 is inserted (its sales must leave the model) and item 2 deleted (its sales must enter it), and
    the refine runs incrementally
    Then the refined table equals the model's SQL run from scratch over the changed tables: the 5 sales of item
    2, none of item 7."""
    config = replace(base_config, clean_database="anti_clean", refined_database="anti_refined")
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    data = {"sales": [(n, n % 8, n) for n in range(40)], "item": [(n, f"c{n % 3}") for n in range(7)]}
    for name, rows in data.items():
        table = config.clean_table(f"main_{name}")
        spark.sql(f"DROP TABLE IF EXISTS {table}")
        create_table(spark, table, spark.createDataFrame([], SCHEMAS[name]).schema)
        append_rows(spark, table, spark.createDataFrame(rows, SCHEMAS[name]), {})
    folder = load_folder([("orphans.sql", ANTI_JOIN)])
    spark.sql(f"DROP TABLE IF EXISTS {config.table(config.refined_database, 'orphans')}")
    assert [t.mode for t in refine(spark, config, models=folder).tables] == ["built"]
    items = config.clean_table("main_item")
    append_rows(spark, items, spark.createDataFrame([(7, "c1")], SCHEMAS["item"]), {})
    spark.sql(f"DELETE FROM {items} WHERE item = 2")

    report = refine(spark, config, models=folder)

    assert [t.mode for t in report.tables] == ["incremental"]
    clean = {name: spark.table(config.clean_table(f"main_{name}")) for name in data}
    expected = run_model(spark, folder.models[0], clean)[0]
    assert _rows(spark, config.table(config.refined_database, "orphans"), "id") == [
        tuple(r) for r in expected.orderBy("id").collect()
    ]
    assert sorted(r[0] for r in _rows(spark, config.table(config.refined_database, "orphans"), "id")) == [
        2,
        10,
        18,
        26,
        34,
    ]

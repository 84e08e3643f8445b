"""The models on Spark, over tiny clean tables written directly (the subject is the refine, not the CDC): an
incremental refine of each example model equals a rebuild of the same SQL after random change sequences; a
model added to the folder appears after the next refine; a broken model fails alone, naming its file and line;
no model, no work."""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass, replace
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from lakehouse.base.config import LakeConfig
from lakehouse.base.names import quote
from lakehouse.io.iceberg import (
    append_rows,
    create_table,
    current_snapshot_id,
    ensure_namespace,
    iceberg_table,
    table_exists,
)
from lakehouse.refine.changes import changed_rows, null_safe_join
from lakehouse.refine.consumed import StagedReads, candidate_rows, file_changes, rows_in_files
from lakehouse.refine.refresh import EXAMPLE_MODELS, RefineOptions, read_models, refine
from pyspark.sql import types as T

from tests.support import last_execution, scan_metric
from tests.unit.refine.conftest import SOURCE_KEYS, example_model_rows

pytestmark = pytest.mark.spark

MONEY = "decimal(7,2)"
SPLITS_READ = "number of file splits read"  # Iceberg's reader: a small file is one split
COLUMNS: dict[str, list[tuple[str, str]]] = {
    "web_sales": [
        ("ws_item_sk", "bigint"),
        ("ws_order_number", "bigint"),
        ("ws_sold_date_sk", "bigint"),
        ("ws_sold_time_sk", "bigint"),
        ("ws_bill_customer_sk", "bigint"),
        ("ws_quantity", "int"),
        *[
            (c, MONEY)
            for c in (
                "ws_list_price",
                "ws_sales_price",
                "ws_ext_sales_price",
                "ws_ext_discount_amt",
                "ws_coupon_amt",
                "ws_net_paid",
                "ws_ext_wholesale_cost",
                "ws_net_profit",
            )
        ],
    ],
    "date_dim": [
        ("d_date_sk", "bigint"),
        ("d_date", "date"),
        ("d_year", "int"),
        ("d_moy", "int"),
        ("d_holiday", "string"),
    ],
    "time_dim": [("t_time_sk", "bigint"), ("t_hour", "int")],
    "item": [("i_item_sk", "bigint")]
    + [(c, "string") for c in ("i_item_id", "i_product_name", "i_category", "i_class", "i_brand")],
    "customer": [
        ("c_customer_sk", "bigint"),
        ("c_current_addr_sk", "bigint"),
        ("c_first_name", "string"),
        ("c_last_name", "string"),
    ],
    "customer_address": [("ca_address_sk", "bigint"), ("ca_state", "string"), ("ca_city", "string")],
}
KEYS_PER_TABLE = {
    "web_sales": 0,
    "date_dim": 4,
    "time_dim": 3,
    "item": 6,
    "customer": 5,
    "customer_address": 4,
}


def random_row(table: str, key: tuple[int, ...], rng: random.Random) -> tuple[Any, ...]:
    """A row of `table` with key `key`: references within the tiny key ranges (some dangling), few distinct
    attribute values (so groups collide), some nulls."""
    values: list[Any] = list(key)
    for name, kind in COLUMNS[table][len(key) :]:
        if rng.random() < 0.08:
            values.append(None)
        elif name.endswith("_sk"):
            reference = {
                "ws_sold_date_sk": 4,
                "ws_sold_time_sk": 3,
                "ws_bill_customer_sk": 5,
                "c_current_addr_sk": 4,
            }
            values.append(rng.randint(1, reference[name] + 1))  # one past the range: a dangling reference
        elif kind == "date":
            values.append(date(2024, 1, 1) + timedelta(days=rng.randint(0, 2)))
        elif kind == "int":
            values.append(rng.randint(1, 12))
        elif kind == MONEY:
            values.append(Decimal(rng.randint(-500, 5000)) / 100)
        else:
            values.append(rng.choice(["a", "b", "c"]))
    return tuple(values)


@dataclass
class TinyLake:
    spark: Any
    config: LakeConfig
    rows: dict[str, dict[tuple[int, ...], tuple[Any, ...]]]
    rng: random.Random

    def clean(self, table: str) -> str:
        return self.config.clean_table(f"main_{table}")

    def schema(self, table: str) -> T.StructType:
        return self.spark.createDataFrame([], ddl(table)).schema

    def write(self, table: str, changed: dict[tuple[int, ...], tuple[Any, ...] | None]) -> None:
        """One MERGE commit (merge-on-read, as CDC writes): a None row deletes its key."""
        key = SOURCE_KEYS[table]
        names = [n for n, _ in COLUMNS[table]]
        data = [
            row if row is not None else (*k, *[None] * (len(names) - len(k))) for k, row in changed.items()
        ]
        deleted = [row is None for row in changed.values()]
        frame = self.spark.createDataFrame(
            [(*row, gone) for row, gone in zip(data, deleted, strict=True)],
            f"{ddl(table)}, gone boolean",
        )
        frame.createOrReplaceTempView("tiny_changes")
        on = " AND ".join(f"t.{k} = s.{k}" for k in key)
        sets = ", ".join(f"t.{n} = s.{n}" for n in names if n not in key)
        self.spark.sql(
            f"MERGE INTO {self.clean(table)} t USING tiny_changes s ON {on} "
            f"WHEN MATCHED AND s.gone THEN DELETE WHEN MATCHED THEN UPDATE SET {sets} "
            f"WHEN NOT MATCHED AND NOT s.gone THEN INSERT ({', '.join(names)}) VALUES ({', '.join('s.' + n for n in names)})"
        )
        for k, row in changed.items():
            if row is None:
                self.rows[table].pop(k, None)
            else:
                self.rows[table][k] = row

    def random_changes(self, table: str) -> dict[tuple[int, ...], tuple[Any, ...] | None]:
        """A few inserts, updates, deletes and (sales) key moves of one table."""
        rng, rows = self.rng, self.rows[table]
        changes: dict[tuple[int, ...], tuple[Any, ...] | None] = {}
        for _ in range(rng.randint(1, 3)):
            what = rng.choice(["insert", "update", "delete", "move"])
            existing = sorted(set(rows) - set(changes))
            if what == "insert" or not existing:
                key = new_key(table, rows, changes, rng)
                if key is not None:
                    changes[key] = random_row(table, key, rng)
            elif what == "update":
                key = rng.choice(existing)
                changes[key] = random_row(table, key, rng)
            elif what == "delete":
                changes[rng.choice(existing)] = None
            else:  # the same row under another key
                key = rng.choice(existing)
                moved = new_key(table, rows, changes, rng)
                if moved is not None:
                    changes[key], changes[moved] = None, (*moved, *rows[key][len(moved) :])
        return changes


def ddl(table: str) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in COLUMNS[table])


def new_key(table: str, rows: dict, changes: dict, rng: random.Random) -> tuple[int, ...] | None:
    taken = set(rows) | set(changes)
    if table == "web_sales":
        free = [(i, o) for i in range(1, 8) for o in range(1, 6) if (i, o) not in taken]
    else:
        free = [(k,) for k in range(1, KEYS_PER_TABLE[table] + 2) if (k,) not in taken]
    return rng.choice(free) if free else None


@pytest.fixture()
def tiny_lake(spark, base_config, request) -> TinyLake:
    """Given six tiny clean tables (the example models' sources), each row random."""
    suffix = request.node.name.split("[")[0][-20:].replace("test_", "")
    config = replace(
        base_config, clean_database=f"tiny_clean_{suffix}", refined_database=f"tiny_refined_{suffix}"
    )
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    rng = random.Random(7)
    lake = TinyLake(spark, config, {t: {} for t in COLUMNS}, rng)
    for table in COLUMNS:
        spark.sql(f"DROP TABLE IF EXISTS {lake.clean(table)}")
        create_table(spark, lake.clean(table), lake.schema(table))
        count = 14 if table == "web_sales" else KEYS_PER_TABLE[table]
        for _ in range(count):
            key = new_key(table, lake.rows[table], {}, rng)
            lake.rows[table][key] = random_row(table, key, rng)
        frame = spark.createDataFrame(list(lake.rows[table].values()), lake.schema(table))
        append_rows(spark, lake.clean(table), frame, {})
    for table in ("sales_enriched", "daily_revenue_by_category", "daily_revenue_by_state", "sales_by_brand"):
        spark.sql(f"DROP TABLE IF EXISTS {config.table(config.refined_database, table)}")
    return lake


def refined_rows(lake: TinyLake, name: str, key: tuple[str, ...]) -> list[tuple]:
    frame = lake.spark.table(lake.config.table(lake.config.refined_database, name))
    return [tuple(r) for r in frame.orderBy(*key).collect()]


def rebuilt_rows(lake: TinyLake, name: str, key: tuple[str, ...]) -> list[tuple]:
    """The model's SQL run from scratch over the clean tables (and its refs' rebuilds)."""
    spark = lake.spark
    inputs = {t: spark.table(lake.clean(t)) for t in COLUMNS}
    inputs["sales_enriched"] = example_model_rows(spark, "sales_enriched", dict(inputs))
    return [tuple(r) for r in example_model_rows(spark, name, inputs).orderBy(*key).collect()]


def test_incremental_refresh_equals_a_rebuild_after_random_changes(tiny_lake: TinyLake) -> None:
    """Given the example models built over tiny clean tables
    When random changes (inserts, updates, deletes, key moves; facts and dimensions) are committed, first to
    one table, then to three at once, and the refine runs after each round
    Then each round refreshes every model incrementally, each changed input's keys traced along the joins (none
    found by running the model), and each refined table equals a rebuild of its SQL;
    and when an item with sales changes only its brand, a column the aggregates do not read of sales_enriched,
    its sales are recomputed and no key of either aggregate is (a change of columns a model does not read
    reaches none of its keys), the tables still equal their rebuilds."""
    lake = tiny_lake
    models = {m.name: m.unique_key for m in read_models().models}
    first = refine(lake.spark, lake.config, run_id="tiny-0")
    assert {t.table: t.mode for t in first.tables} == dict.fromkeys(models, "built")

    for round_number, tables in enumerate((1, 3), start=1):
        for table in lake.rng.sample(sorted(COLUMNS), k=tables):
            lake.write(table, lake.random_changes(table))
        report = refine(lake.spark, lake.config, run_id=f"tiny-{round_number}")

        assert {t.table: t.mode for t in report.tables} == dict.fromkeys(models, "incremental"), [
            (t.table, t.mode, t.reason, t.error) for t in report.tables
        ]
        assert [t.untraced for t in report.tables] == [[]] * len(models)
        for name, key in models.items():
            assert refined_rows(lake, name, key) == rebuilt_rows(lake, name, key), (round_number, name)

    sold = sorted({sale[0] for sale in lake.rows["web_sales"]} & {item[0] for item in lake.rows["item"]})
    item = lake.rows["item"][(sold[0],)]
    lake.write("item", {(sold[0],): (*item[:-1], f"{item[-1]}-rebranded")})
    report = refine(lake.spark, lake.config, run_id="tiny-brand")

    affected = {t.table: (t.mode, t.affected) for t in report.tables}
    assert affected["sales_enriched"][0] == "incremental" and affected["sales_enriched"][1] > 0
    assert affected["daily_revenue_by_category"] == affected["daily_revenue_by_state"] == ("incremental", 0)
    for name, key in models.items():
        assert refined_rows(lake, name, key) == rebuilt_rows(lake, name, key), ("brand", name)


def test_changed_rows_are_read_from_the_files_that_differ(spark, base_config) -> None:
    """Given a clean table of 40 rows in 4 data files
    When one row is updated and one deleted (merge-on-read: position deletes and one new data file)
    Then the rows read as maybe changed are the two old rows and the new file's row, nothing else (only rows
    added and deleted: they are the changes, with no comparison), and with staged reads only the files that
    differ are opened (the two with a new delete, the new one), whose rows are what a refresh reads (21 of
    41); and after a compaction rewrote every file, the rows read are all of them on both sides, so they are
    compared, and none is found changed."""
    ensure_namespace(spark, base_config.catalog_name, base_config.clean_database)
    table = base_config.clean_table("files_that_differ")
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    create_table(spark, table, spark.createDataFrame([], "id bigint, v bigint").schema)
    append_rows(spark, table, spark.range(40).selectExpr("id", "id * 2 AS v").repartition(4), {})
    before = current_snapshot_id(spark, table)
    spark.sql(f"UPDATE {table} SET v = -1 WHERE id = 3")
    spark.sql(f"DELETE FROM {table} WHERE id = 30")
    after = current_snapshot_id(spark, table)
    assert before is not None and after is not None

    files = file_changes(spark, table, before, after)
    assert files is not None and files.only_changes
    started = last_execution(spark)
    old, new = candidate_rows(spark, table, before, after, files)
    assert sorted(map(tuple, old.collect())) == [(3, 6), (30, 60)]
    assert sorted(map(tuple, new.collect())) == [(3, -1)]
    # filtered by `_file`: every file of each version is opened
    assert scan_metric(spark, started, SPLITS_READ) >= 4 + 5
    reads = StagedReads(spark)
    started = last_execution(spark)
    old, new = candidate_rows(spark, table, before, after, files, reads, iceberg_table(spark, table))
    assert sorted(map(tuple, old.collect())) == [(3, 6), (30, 60)]
    assert sorted(map(tuple, new.collect())) == [(3, -1)]
    # staged: the two files with a new delete and the new file, whose rows are what a refresh reads
    assert scan_metric(spark, started, SPLITS_READ) == 2 + 1
    assert rows_in_files(iceberg_table(spark, table), after, files.read) == 10 + 10 + 1
    reads.release()

    spark.sql(
        f"CALL {base_config.catalog_name}.system.rewrite_data_files(table => '{table}', options => map('rewrite-all', 'true'))"
    )
    compacted = current_snapshot_id(spark, table)
    assert compacted is not None
    files = file_changes(spark, table, after, compacted)
    assert files is not None and not files.only_changes
    old, new = candidate_rows(spark, table, after, compacted, files)
    assert (old.count(), new.count()) == (39, 39)
    assert [frame.count() for frame in changed_rows(old, new)] == [0, 0]


def test_a_model_added_to_the_folder_appears_and_a_broken_one_fails_alone(
    tiny_lake: TinyLake, tmp_path: Path
) -> None:
    """Given the example models refined, then a folder holding them, a new model (sales by brand, refs
    sales_enriched) and a model whose SQL names a missing column on its line 4
    When the refine runs over that folder
    Then the new model's table holds its SELECT's rows, the broken model fails with its file and line 4, and
    the examples are still refreshed (unchanged: no input moved)."""
    lake = tiny_lake
    refine(lake.spark, lake.config, run_id="before")
    folder = tmp_path / "models"
    shutil.copytree(EXAMPLE_MODELS, folder)
    (folder / "sales_by_brand.sql").write_text(
        "{{ config(unique_key='brand') }}\n"
        "SELECT brand, sum(revenue) AS revenue, count(*) AS lines\n"
        "FROM {{ ref('sales_enriched') }}\n"
        "GROUP BY brand\n",
        encoding="utf-8",
    )
    (folder / "broken.sql").write_text(
        "{{ config(unique_key='i_item_sk') }}\n-- a typo\nSELECT i_item_sk,\n       i_colour\nFROM {{ source('item') }}\n",
        encoding="utf-8",
    )

    report = refine(lake.spark, lake.config, RefineOptions(models_uri=str(folder)), run_id="after")

    modes = {t.table: t.mode for t in report.tables}
    assert modes == {
        "sales_enriched": "unchanged",
        "daily_revenue_by_category": "unchanged",
        "daily_revenue_by_state": "unchanged",
        "sales_by_brand": "built",
        "broken": "failed",
    }
    [broken] = report.failed
    assert broken.error is not None and broken.error.startswith(f"{folder / 'broken.sql'}:4: ")
    assert "i_colour" in broken.error
    expected = lake.spark.sql(
        f"SELECT brand, sum(revenue), count(*) FROM {lake.config.table(lake.config.refined_database, 'sales_enriched')} "
        "GROUP BY brand ORDER BY brand"
    ).collect()
    assert refined_rows(lake, "sales_by_brand", ("brand",)) == [tuple(r) for r in expected]
    assert not table_exists(lake.spark, lake.config.table(lake.config.refined_database, "broken"))


def test_no_model_no_work(tiny_lake: TinyLake, tmp_path: Path) -> None:
    """Given an empty models folder, When the refine runs, Then it reads nothing and says there is no model."""
    report = refine(tiny_lake.spark, tiny_lake.config, RefineOptions(models_uri=str(tmp_path)), run_id="none")

    assert (report.status, report.tables) == ("no-models", [])


def test_a_column_named_with_backticks_is_compared_and_joined_by_its_name(spark) -> None:
    """Given two versions of rows whose key and value columns are named with backticks, a space and a dot,
    When their changed rows are found and the after images joined null-safely to their keys,
    Then the update's two images are found, the null key joins to itself, and every column keeps its name."""
    key, value = "k`ey. 1", "v``al"
    schema = f"{quote(key)} INT, {quote(value)} STRING"
    before = spark.createDataFrame([(1, "a"), (2, "b"), (None, "n")], schema)
    after = spark.createDataFrame([(1, "a"), (2, "B"), (None, "n2")], schema)

    removed, added = changed_rows(before, after)
    joined = null_safe_join(
        added, spark.createDataFrame([(2,), (None,)], f"{quote(key)} INT"), [key], "inner"
    )

    assert sorted(removed.collect(), key=str) == sorted([(2, "b"), (None, "n")], key=str)
    assert sorted(added.collect(), key=str) == sorted([(2, "B"), (None, "n2")], key=str)
    assert joined.columns == [key, value]
    assert sorted(joined.collect(), key=str) == sorted([(2, "B"), (None, "n2")], key=str)

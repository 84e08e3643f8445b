"""A user's models over clean tables and columns with hostile names, refreshed end to end: built, the inputs
changed (updates, deletes, a key move, a dimension's change), refreshed incrementally, and equal to a rebuild of
the same SQL. The names are the source names tests/unit/spark/test_hostile_names.py carries through the apply
(a backtick with quotes, `;` and `--`, a dot, a quote, non-ASCII letters, a reserved word), used here as the
columns a model selects, joins on, groups by and keys by, a column keyed in another case than it is selected
in (the lake's names are case-insensitive: lakehouse.base.names.check_column_names), a model and its refined
table named `select`, and sources named as the source does: `Order$Lines`, and a table of the apply's hostile
ones, whose clean table's name is folded from it."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from lakehouse.base.config import LakeConfig
from lakehouse.base.names import quote
from lakehouse.io.iceberg import append_rows, create_table, ensure_namespace
from lakehouse.refine.refresh import RefineOptions, read_models, refine
from pyspark.sql import SparkSession

from tests.unit.spark.test_hostile_names import HOSTILE

pytestmark = pytest.mark.spark

SOURCE_NAMES = [table for _, table in HOSTILE]
TICKED = next(n for n in SOURCE_NAMES if "`" in n)  # a backtick, double quotes, ';' and '--'
DOTTED = next(n for n in SOURCE_NAMES if "." in n and not n.isascii())  # a dot, '%', spaces, CJK, accents
RESERVED = "select"
QUOTED = next(n for n in SOURCE_NAMES if "'" in n)  # single quotes, a parenthesis, an escape, "--"
EMOJI = next(n for n in SOURCE_NAMES if "😀" in n)  # upper-case non-ASCII, '#', '?'
PRODUCT_KEY = next(n for n in SOURCE_NAMES if n == "t.x")
CATEGORY = "ÜBER Category"
assert RESERVED in SOURCE_NAMES

# The sources as a model names them: the fact `Order$Lines` (mixed case and '$'), the dimension a hostile table of
# the apply's, `sales`.`back`tick "dq" ;--` (its clean table's name folded from it: names.table_name).
FACT: tuple[str, ...] = ("Order$Lines",)
DIMENSION = next(pair for pair in HOSTILE if pair[1] == TICKED)
COLUMNS = {
    FACT: [
        (DOTTED, "bigint"),
        (TICKED, "int"),
        (RESERVED, "bigint"),
        (QUOTED, "int"),
        (EMOJI, "decimal(7,2)"),
    ],
    DIMENSION: [(PRODUCT_KEY, "bigint"), (CATEGORY, "string")],
}
KEYS = {FACT: (DOTTED, TICKED), DIMENSION: (PRODUCT_KEY,)}
LINES = "hostile_lines"
BY_CATEGORY = RESERVED  # a model, and its refined table, named by a reserved word


def model_files() -> dict[str, str]:
    """A join model keyed by two hostile columns, and an aggregate over it keyed by a column in another case
    than its SELECT's (`category` for `Category`)."""
    q = quote
    lines = (
        f"{{{{ config(materialized='incremental', unique_key={[DOTTED, TICKED]!r}) }}}}\n"
        f"SELECT l.{q(DOTTED)}, l.{q(TICKED)}, l.{q(RESERVED)},\n"
        f"       p.{q(CATEGORY)} AS `Category`,\n"
        f"       l.{q(QUOTED)} * l.{q(EMOJI)} AS {q(EMOJI)}\n"
        f"FROM {{{{ source({', '.join(map(repr, FACT))}) }}}} l\n"
        f"LEFT JOIN {{{{ source({', '.join(map(repr, DIMENSION))}) }}}} p ON l.{q(RESERVED)} = p.{q(PRODUCT_KEY)}\n"
    )
    by_category = (
        "{{ config(materialized='incremental', unique_key='category') }}\n"
        f"SELECT `Category`, sum({q(EMOJI)}) AS {q(RESERVED)}, count(*) AS {q(QUOTED)}\n"
        f"FROM {{{{ ref({LINES!r}) }}}}\n"
        "GROUP BY `Category`\n"
    )
    return {LINES: lines, BY_CATEGORY: by_category}


class HostileLake:
    """The test's clean zone, its models folder and its refined zone."""

    def __init__(self, spark: SparkSession, config: LakeConfig, folder: Path) -> None:
        self.spark, self.config, self.folder = spark, config, folder
        self.options = RefineOptions(models_uri=str(folder))

    def clean(self, source: tuple[str, ...]) -> str:
        """The clean table of a source named as a model names it: (table,) or (schema, table)."""
        return self.config.clean_table(
            self.options.clean_name(source[-1], source[0] if len(source) == 2 else None)
        )

    def ddl(self, source: tuple[str, ...]) -> str:
        return ", ".join(f"{quote(name)} {kind}" for name, kind in COLUMNS[source])

    def write(
        self, source: tuple[str, ...], changes: list[tuple[Any, ...]], deleted: list[tuple[Any, ...]]
    ) -> None:
        """One MERGE commit (merge-on-read, as CDC writes): `changes` upserted, `deleted` keys deleted."""
        names = [name for name, _ in COLUMNS[source]]
        key = KEYS[source]
        gone = [(*k, *[None] * (len(names) - len(k)), True) for k in deleted]
        frame = self.spark.createDataFrame(
            [(*row, False) for row in changes] + gone, f"{self.ddl(source)}, `__gone` boolean"
        )
        frame.createOrReplaceTempView("hostile_changes")
        on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in key)
        sets = ", ".join(f"t.{quote(n)} = s.{quote(n)}" for n in names if n not in key)
        columns = ", ".join(quote(n) for n in names)
        values = ", ".join(f"s.{quote(n)}" for n in names)
        self.spark.sql(
            f"MERGE INTO {self.clean(source)} t USING hostile_changes s ON {on} "
            "WHEN MATCHED AND s.`__gone` THEN DELETE WHEN MATCHED THEN UPDATE SET "
            f"{sets} WHEN NOT MATCHED AND NOT s.`__gone` THEN INSERT ({columns}) VALUES ({values})"
        )

    def refined_rows(self, model: str) -> list[tuple]:
        return sorted(
            map(tuple, self.spark.table(self.config.table(self.config.refined_database, model)).collect()),
            key=repr,
        )

    def rebuilt_rows(self, model: str) -> list[tuple]:
        """The model's SQL run from scratch over the clean tables (a ref over its own rebuild)."""
        models = {m.name: m for m in read_models(str(self.folder)).models}
        lines = self.spark.sql(
            models[LINES].render(lambda r: self.clean((r.schema, r.name) if r.schema else (r.name,)))
        )
        lines.createOrReplaceTempView("hostile_lines_rebuilt")
        rebuilt = (
            lines
            if model == LINES
            else self.spark.sql(models[model].render(lambda r: "hostile_lines_rebuilt"))
        )
        return sorted(map(tuple, rebuilt.collect()), key=repr)


@pytest.fixture()
def hostile_lake(spark, base_config, tmp_path) -> HostileLake:
    """Given a fact and a dimension with hostile column names (a few rows each) and the two models' folder."""
    config = replace(
        base_config, clean_database="hostile_model_clean", refined_database="hostile_model_refined"
    )
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    folder = tmp_path / "models"
    folder.mkdir()
    for name, text in model_files().items():
        (folder / f"{name}.sql").write_text(text, encoding="utf-8")
    lake = HostileLake(spark, config, folder)
    rows = {
        FACT: [
            (1, 1, 10, 2, Decimal("1.50")),
            (1, 2, 11, 1, Decimal("4.00")),
            (2, 1, 10, 3, Decimal("2.25")),
            (3, 1, 12, 1, Decimal("9.99")),
            (3, 2, None, 5, Decimal("0.10")),
        ],
        DIMENSION: [(10, "tools"), (11, "toys"), (12, None)],
    }
    for source, data in rows.items():
        spark.sql(f"DROP TABLE IF EXISTS {lake.clean(source)}")
        schema = spark.createDataFrame([], lake.ddl(source)).schema
        create_table(spark, lake.clean(source), schema)
        append_rows(spark, lake.clean(source), spark.createDataFrame(data, schema), {})
    for model in (LINES, BY_CATEGORY):
        spark.sql(f"DROP TABLE IF EXISTS {config.table(config.refined_database, model)}")
    return lake


def test_models_over_hostile_names_refresh_incrementally_to_their_rebuilds(hostile_lake: HostileLake) -> None:
    """Given a join model and an aggregate over it (named `select`) whose every column (keys, join columns, groups, sums) has a
    hostile name, over a fact and a dimension named `Order$Lines` and `sales`.`back`tick "dq" ;--`, built
    When the fact changes (an update, a delete, a key move, an insert) and the refine runs, then the dimension
    (a category renamed, a product deleted) and the fact again
    Then each refine refreshes both models incrementally, each input's keys traced along the join, and both
    refined tables equal a rebuild of their SQL, their columns named as the SELECT names them."""
    lake = hostile_lake
    first = refine(lake.spark, lake.config, lake.options, run_id="hostile-0")
    assert {t.table: (t.mode, t.error) for t in first.tables} == {
        LINES: ("built", None),
        BY_CATEGORY: ("built", None),
    }

    rounds = [
        # an update, a delete, a key move ((3, 1) -> (4, 1)), an insert
        {
            FACT: (
                [
                    (1, 1, 10, 7, Decimal("1.50")),
                    (4, 1, 12, 1, Decimal("9.99")),
                    (2, 2, 11, 2, Decimal("3.00")),
                ],
                [(1, 2), (3, 1)],
            )
        },
        # a category renamed, a product deleted, and a line moved to another product
        {DIMENSION: ([(10, "Tools")], [(11,)]), FACT: ([(2, 1, 12, 3, Decimal("2.25"))], [])},
    ]
    for number, changes in enumerate(rounds, start=1):
        for source, (upserted, deleted) in changes.items():
            lake.write(source, upserted, deleted)
        report = refine(lake.spark, lake.config, lake.options, run_id=f"hostile-{number}")

        assert {t.table: (t.mode, t.error) for t in report.tables} == {
            LINES: ("incremental", None),
            BY_CATEGORY: ("incremental", None),
        }, [(t.table, t.mode, t.reason, t.error) for t in report.tables]
        assert [t.untraced for t in report.tables] == [[], []]
        for model in (LINES, BY_CATEGORY):
            assert lake.refined_rows(model) == lake.rebuilt_rows(model), (number, model)
    columns = lake.spark.table(lake.config.table(lake.config.refined_database, LINES)).columns
    assert columns == [DOTTED, TICKED, RESERVED, "Category", EMOJI]

"""Row history without Spark: which tables keep one (schema file, --history_tables), the history table's
columns, and the oracle the Spark tests compare with (tests/unit/spark/test_history.py)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from lakehouse.apply.history import (
    HISTORY_COLUMNS,
    history_schema,
    keeps_history,
    parse_history_tables,
    with_history,
)
from lakehouse.base.schema import SchemaFile
from lakehouse.jobs.cdc import parser as cdc_parser
from lakehouse.jobs.full_load import parser as full_load_parser
from pyspark.sql import types as T

T0 = datetime(2026, 11, 22, 10, 0, 0)


@dataclass(frozen=True)
class Change:
    """One change the source made: its sequence orders it, and it was committed `seq` seconds after T0."""

    seq: int
    op: str
    key: int
    price: int | None = None
    label: str | None = None

    @property
    def at(self) -> datetime:
        return T0 + timedelta(seconds=self.seq)


def oracle_history(
    loaded: dict[int, tuple[int | None, str | None]], loaded_at: datetime, changes: Iterable[Change]
) -> list[tuple]:
    """Every version of every key: each key's changes sorted by sequence (the load's rows, which carry no
    sequence, first), each version lasting from its change's time to the next change's; a delete's version
    holds the key only. Rows: (key, price, label, valid_from, valid_to, change_seq, operation, is_current),
    ordered by key, then valid_from, then change_seq."""
    versions: dict[int, dict[int | None, tuple]] = defaultdict(dict)
    for key, (price, label) in loaded.items():
        versions[key][None] = (None, loaded_at, "LOAD", price, label)
    for c in changes:
        values = (None, None) if c.op == "D" else (c.price, c.label)
        versions[c.key][c.seq] = (c.seq, c.at, c.op, *values)
    rows = []
    for key, by_seq in versions.items():
        ordered = sorted(by_seq.values(), key=lambda v: -1 if v[0] is None else v[0])
        for index, (seq, at, op, price, label) in enumerate(ordered):
            following = ordered[index + 1] if index + 1 < len(ordered) else None
            rows.append(
                (
                    key,
                    price,
                    label,
                    at,
                    following[1] if following else None,
                    Decimal(seq) if seq is not None else None,
                    op,
                    following is None,
                )
            )
    return sorted(rows, key=history_order)


def history_order(row: tuple) -> tuple:
    key, _, _, valid_from, _, seq, _, _ = row
    return (key, valid_from or datetime.min, -1 if seq is None else seq)


def current_rows(history: list[tuple]) -> list[tuple]:
    """What the clean table must hold: the current versions that are not deletes."""
    return sorted((k, p, label) for k, p, label, _, _, _, op, current in history if current and op != "D")


SCHEMA = SchemaFile.from_dict(
    {
        "dialect": "mysql",
        "tables": {
            "shop.item": {
                "primary_key": ["id"],
                "columns": [{"name": "id", "type": "int"}, {"name": "price", "type": "int"}],
                "history": True,
            },
            "shop.Stock": {"primary_key": ["sku"], "columns": [{"name": "sku", "type": "int"}]},
            "shop.log": {"primary_key": [], "columns": [{"name": "line", "type": "text"}]},
        },
    }
)


def test_the_oracle_splits_a_key_into_versions_between_consecutive_changes() -> None:
    """Given a loaded row, an update, a late-listed earlier update, a delete and a re-insert
    When the oracle orders them
    Then each version lasts until the next change, the delete holds the key only, the last is current."""
    changes = [Change(5, "D", 1, 9, "gone"), Change(2, "U", 1, 20, "b"), Change(1, "U", 1, 10, "a")]
    changes.append(Change(7, "I", 1, 30, "c"))

    history = oracle_history({1: (1, "l")}, T0, changes)

    at = [T0 + timedelta(seconds=s) for s in (1, 2, 5, 7)]
    assert history == [
        (1, 1, "l", T0, at[0], None, "LOAD", False),
        (1, 10, "a", at[0], at[1], Decimal(1), "U", False),
        (1, 20, "b", at[1], at[2], Decimal(2), "U", False),
        (1, None, None, at[2], at[3], Decimal(5), "D", False),
        (1, 30, "c", at[3], None, Decimal(7), "I", True),
    ]
    assert current_rows(history) == [(1, 30, "c")]


def test_the_schema_file_and_history_tables_choose_the_tables() -> None:
    """Given a schema file where one table asks for history
    When --history_tables adds others (any case, a JSON array or a comma list, or *)
    Then exactly those tables keep a history, a table without a primary key never does, and an unknown
    name is an error."""
    assert [n for n, s in SCHEMA.tables.items() if keeps_history(s)] == ["shop.item"]

    named = with_history(SCHEMA, parse_history_tables("SHOP.stock"))
    every = with_history(SCHEMA, parse_history_tables(" * "))
    as_json = with_history(SCHEMA, parse_history_tables('["shop.Stock"]'))

    assert [n for n, s in named.tables.items() if keeps_history(s)] == ["shop.item", "shop.Stock"]
    assert [n for n, s in as_json.tables.items() if keeps_history(s)] == ["shop.item", "shop.Stock"]
    assert [n for n, s in every.tables.items() if s.history] == ["shop.item", "shop.Stock", "shop.log"]
    assert [n for n, s in every.tables.items() if keeps_history(s)] == ["shop.item", "shop.Stock"]
    assert with_history(SCHEMA, parse_history_tables("")) is SCHEMA
    with pytest.raises(ValueError, match=r"shop\.itme"):
        with_history(SCHEMA, parse_history_tables("shop.itme"))


def test_the_schema_file_flag_is_checked_and_written_back() -> None:
    """Given a schema file whose history flag is not a boolean
    When it is read
    Then it is refused naming the table; a true flag survives to_dict."""
    bad = {
        "tables": {"a.b": {"primary_key": [], "columns": [{"name": "x", "type": "int"}], "history": "yes"}}
    }
    with pytest.raises(ValueError, match=r"'a\.b' history must be true or false"):
        SchemaFile.from_dict(bad)

    again = SchemaFile.from_dict(SCHEMA.to_dict())

    assert {n: s.history for n, s in again.tables.items()} == {
        "shop.item": True,
        "shop.Stock": False,
        "shop.log": False,
    }


def test_the_history_table_has_the_clean_columns_then_its_own() -> None:
    """Given a clean table's schema (data columns, then its metadata columns)
    When the history schema is made
    Then it has the data columns and the history columns; a data column named like one is refused."""
    clean = T.StructType(
        [
            T.StructField("id", T.IntegerType()),
            T.StructField("price", T.LongType()),
            T.StructField("dms_commit_ts", T.TimestampType()),
            T.StructField("dms_change_seq", T.DecimalType(38, 0)),
        ]
    )

    schema = history_schema(clean)

    assert [(f.name, f.dataType.simpleString()) for f in schema.fields] == [
        ("id", "int"),
        ("price", "bigint"),
        ("valid_from", "timestamp"),
        ("valid_to", "timestamp"),
        ("change_seq", "decimal(38,0)"),
        ("operation", "string"),
        ("is_current", "boolean"),
    ]
    assert HISTORY_COLUMNS == ("valid_from", "valid_to", "change_seq", "operation", "is_current")
    with pytest.raises(ValueError, match="operation"):
        history_schema(T.StructType([T.StructField("operation", T.StringType()), *clean.fields]))


@pytest.mark.parametrize("parser", [cdc_parser, full_load_parser])
def test_both_jobs_take_history_tables(parser) -> None:
    """Given the CDC and full-load jobs' parsers
    When --history_tables is passed (Glue passes "" for an empty parameter)
    Then the value reaches the job as given, and it is empty by default."""
    required = ["--manifest", "m"] if parser is cdc_parser else ["--raw_path", "r"]

    given = parser().parse_args([*required, "--history_tables", "shop.item,shop.Stock"])
    default = parser().parse_args(required)

    assert parse_history_tables(given.history_tables) == ("shop.item", "shop.Stock")
    assert parse_history_tables(default.history_tables) == ()

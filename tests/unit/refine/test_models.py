"""Refined models as files, without Spark: a model's key, refresh and inputs from its file, each error with its
file and line, the folder in refresh order with only its broken models refused, and the example models."""

from __future__ import annotations

import pytest
from lakehouse.refine.models import ModelError, load_folder, parse_model
from lakehouse.refine.refresh import read_models

# --- the folder, without Spark -------------------------------------------------------------------


def test_a_model_file_gives_its_key_refresh_and_inputs() -> None:
    """Given a dbt-style model (config block, source with and without a schema, ref, a Jinja comment)
    When it is parsed
    Then its name is the file's, its key and materialization are the config's, its inputs are listed once,
    and its rendering keeps every line where it was."""
    text = (
        "{{ config(materialized='incremental', unique_key=['a', 'b']) }}\n"
        "{# the left side #}\n"
        "SELECT x.a, y.b FROM {{ source('x') }} x\n"
        "JOIN {{ source('erp', 'y') }} y ON x.a = y.a JOIN {{ ref('other') }} o ON o.a = x.a\n"
        "JOIN {{ source('x') }} x2 ON x2.a = x.a\n"
    )

    model = parse_model("models/pairs.sql", text)

    assert (model.name, model.unique_key, model.materialized, model.incremental) == (
        "pairs",
        ("a", "b"),
        "incremental",
        True,
    )
    assert [r.input_name for r in model.references] == ["x", "erp.y", "other"]
    rendered = model.render(lambda r: f"<{r.input_name}>")
    assert rendered.splitlines()[2:4] == [
        "SELECT x.a, y.b FROM <x> x",
        "JOIN <erp.y> y ON x.a = y.a JOIN <other> o ON o.a = x.a",
    ]
    assert len(rendered.splitlines()) == len(text.splitlines())


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        (
            "{{ config(unique_key='a', materialized='view') }}\nSELECT a FROM {{ source('t') }}",
            1,
            "materialized",
        ),
        ("{{ config(unique_key='a') }}\nSELECT a\nFROM {{ sourc('t') }}", 3, "sourc()"),
        (
            "{{ config(unique_key='a') }}\n{% if is_incremental() %}\nSELECT a FROM {{ source('t') }}",
            2,
            "{% … %}",
        ),
        ("-- notes\n\nDELETE FROM {{ source('t') }}", 3, "one SELECT"),
        ("SELECT 1 AS a", 1, "at least one"),
        ("{{ config(unique_key=3) }}\nSELECT a FROM {{ source('t') }}", 1, "unique_key"),
        ("-- x\nSELECT `a;` FROM {{ source('t') }}; SELECT 'b;'", 2, "one statement"),
        ("{{ config(unique_key='a') }}\nSELECT a\nFROM {{ source('erp', 'a/b') }}", 3, "'/'"),
    ],
)
def test_a_model_with_an_error_is_refused_naming_its_file_and_line(text: str, line: int, says: str) -> None:
    """Given a model file with an error, When it is parsed, Then the error names the file, the line and why."""
    with pytest.raises(ModelError) as raised:
        parse_model("models/broken.sql", text)

    assert str(raised.value).startswith(f"models/broken.sql:{line}: ")
    assert says in str(raised.value)


def test_a_semicolon_or_dashes_in_a_name_a_value_or_a_comment_are_not_code() -> None:
    """Given a model whose quoted column names, string literals and comments hold `;`, `--` and quotes, after a
    block comment, over a source table named with a space, `;` and `--`
    When it is parsed
    Then it is one SELECT: what a name, a value or a comment holds is not read as the statement's code; and the
    source is named as the source names it."""
    text = (
        "/* notes; -- not a line comment */\n"
        "{{ config(unique_key='a;--b') }}\n"
        "SELECT `a;--b`, 'x;--y' AS `c``;'`, \"q\\\";\" AS d -- it's; a note\n"
        "FROM {{ source('erp', 'Order Lines;--') }}\n"
    )

    model = parse_model("models/odd.sql", text)

    assert (model.unique_key, [r.input_name for r in model.references]) == (
        ("a;--b",),
        ["erp.order lines;--"],
    )


def test_the_folder_orders_refs_and_refuses_only_the_broken_models() -> None:
    """Given a folder where one model refs another, one refs a missing model, two ref each other, and one has
    a syntax error
    When it is loaded
    Then the good ones come in refresh order, and each other one is refused with its own reason."""
    files = [
        ("m/top.sql", "SELECT * FROM {{ ref('base') }}"),
        ("m/base.sql", "SELECT * FROM {{ source('t') }}"),
        ("m/orphan.sql", "SELECT *\nFROM {{ ref('nowhere') }}"),
        ("m/ping.sql", "SELECT * FROM {{ ref('pong') }}"),
        ("m/pong.sql", "SELECT * FROM {{ ref('ping') }}"),
        ("m/bad.sql", "SELECT * FROM {{ source('t' }}"),
        ("m/child_of_bad.sql", "SELECT * FROM {{ ref('bad') }}"),
    ]

    folder = load_folder(files)

    assert [m.name for m in folder.models] == ["base", "top"]
    assert {name: str(e) for name, e in folder.errors.items()} == {
        "bad": "m/bad.sql:1: not an expression: \"source('t'\" ('(' was never closed)",
        "child_of_bad": "m/child_of_bad.sql:1: ref('bad') is broken",
        "orphan": "m/orphan.sql:2: ref('nowhere') is not a model of the folder",
        "ping": "m/ping.sql:1: refs form a cycle through ping",
        "pong": "m/pong.sql:1: ref('ping') is broken",
    }


def test_the_example_models_are_the_demo_star() -> None:
    """Given the models folder deployed with the stack, When it is read, Then it holds the demo's three
    refined tables, the sales first, each incremental by its key."""
    folder = read_models()

    assert not folder.errors
    assert [(m.name, m.unique_key, m.materialized) for m in folder.models] == [
        ("sales_enriched", ("ws_item_sk", "ws_order_number"), "incremental"),
        ("daily_revenue_by_category", ("sold_date", "category"), "incremental"),
        ("daily_revenue_by_state", ("sold_date", "customer_state"), "incremental"),
    ]

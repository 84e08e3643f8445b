"""The demo's row-history query (localaws/history_demo.py) without running the demo: the template's named
query with the demo's names, the customer picked, the query's rows as lines. Pure: a fake query runner."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from lakehouse.base.config import LakeConfig

from localaws import history_demo
from tools.emr_serverless_asl import load_template

LAKE = LakeConfig(catalog_name="local_glue", clean_database="demo_clean")
NAMES = {"history_db": "local_glue.demo_clean_history", "SourceSchema": "public"}
T = [datetime(2026, 11, 22, 10, 0, s) for s in range(4)]


def version(operation: str, at: int, until: int | None, seq: int | None, **data: Any) -> dict[str, Any]:
    row = {"c_customer_sk": 8, "c_current_addr_sk": None, "c_email_address": None}
    return (
        row
        | data
        | {
            "valid_from": T[at],
            "valid_to": T[until] if until is not None else None,
            "change_seq": Decimal(seq) if seq is not None else None,
            "operation": operation,
            "is_current": until is None,
        }
    )


VERSIONS = [
    version("LOAD", 0, 1, None, c_current_addr_sk=3, c_email_address="a@x"),
    version("U", 1, 2, 5, c_current_addr_sk=4, c_email_address="a@x"),
    version("D", 2, 3, 6),
    version("I", 3, None, 9, c_current_addr_sk=4, c_email_address="b@x"),
]


def test_the_demo_asks_for_the_customer_tables_history_and_reads_it_where_the_jobs_write_it() -> None:
    """Given the demo's source schema and lake
    When the HistoryTables value and the history table are named
    Then the value is <schema>.customer and the table the customer clean table's name in the histories'
    namespace of the demo's catalog."""
    assert history_demo.history_tables_parameter("public") == "public.customer"
    assert history_demo.history_table(LAKE, "public") == "local_glue.demo_clean_history.public_customer"


def test_the_named_query_is_the_templates_with_the_demos_names() -> None:
    """Given template.yaml's named query "every version of one key"
    When its SQL is taken with the demo's names
    Then it reads the demo's history table, keeps its `?` parameter and holds no placeholder; a name the
    demo lacks is an error, not a half-substituted query."""
    resources = load_template()["Resources"]

    sql = history_demo.named_query_sql(resources, history_demo.VERSIONS_QUERY, NAMES)

    assert "FROM local_glue.demo_clean_history.public_customer" in sql
    assert "c_customer_sk = ?" in sql and "${" not in sql
    with pytest.raises(KeyError):
        history_demo.named_query_sql(resources, history_demo.VERSIONS_QUERY, {"SourceSchema": "public"})


def test_the_most_changed_customers_versions_are_printed_one_line_each() -> None:
    """Given a runner that answers the key query with customer 8 and the named query with its versions
    (loaded, moved, deleted, inserted again)
    When the demo's lines are built
    Then the named query ran with key 8, and each version is one line: what it set first, then only the
    columns that changed, a delete as such, the last one current."""
    resources = load_template()["Resources"]
    table = history_demo.history_table(LAKE, "public")
    calls: list[tuple[str, list[Any]]] = []

    def run(sql: str, args):
        calls.append((sql, list(args)))
        return [{"k": 8, "n": 4}] if len(calls) == 1 else VERSIONS

    lines = history_demo.describe_versions(run, resources, table, NAMES)

    assert calls == [
        (history_demo.most_changed_key_sql(table), []),
        (history_demo.named_query_sql(resources, history_demo.VERSIONS_QUERY, NAMES), [8]),
    ]
    assert "GROUP BY `c_customer_sk` ORDER BY n DESC, k LIMIT 1" in calls[0][0]
    assert lines == [
        f"{table}, c_customer_sk 8 (the customer the run changed most): 4 versions, by the named query "
        "HistoryQueryVersionsOfKey",
        "  LOAD from 2026-11-22 10:00:00 until 2026-11-22 10:00:01 (change_seq -): c_current_addr_sk=3, "
        "c_email_address=a@x",
        "  U    from 2026-11-22 10:00:01 until 2026-11-22 10:00:02 (change_seq 5): c_current_addr_sk=4",
        "  D    from 2026-11-22 10:00:02 until 2026-11-22 10:00:03 (change_seq 6): deleted",
        "  I    from 2026-11-22 10:00:03 current (change_seq 9): c_current_addr_sk=4, c_email_address=b@x",
    ]
    assert history_demo.describe_versions(lambda sql, args: [], resources, table, NAMES) == [
        f"{table}: no versions (the customer table's history is empty)"
    ]

"""The demo's row-history query: the demo keeps the history of its `customer` table (template
parameter HistoryTables) and, at its end, runs the template's Athena named query "every version of one key"
(`HistoryQueryVersionsOfKey`, its SQL as template.yaml has it) in Spark, the engine of the demo's other
queries, for the customer the run changed most; one line per version."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lakehouse.apply.history import HISTORY_COLUMNS
from lakehouse.base.config import LakeConfig
from lakehouse.base.names import history_database, quote, table_name

HISTORY_TABLE = "customer"  # the source table whose history the demo keeps
KEY = "c_customer_sk"  # its primary key (the named query's parameter)
VERSIONS_QUERY = "HistoryQueryVersionsOfKey"  # template.yaml's named query: every version of one key
_PLACEHOLDER = re.compile(r"\$\{([^}]+)\}")

# A query runner: SQL text and its positional `?` parameters -> the rows, as column -> value.
Runner = Callable[[str, Sequence[Any]], list[dict[str, Any]]]


def history_tables_parameter(source_schema: str) -> str:
    """The HistoryTables value the demo deploys with: `<schema>.customer`."""
    return f"{source_schema}.{HISTORY_TABLE}"


def named_query_sql(resources: Mapping[str, Any], logical_id: str, names: Mapping[str, str]) -> str:
    """A named query's SQL as template.yaml has it (`!Sub [text, {...}]`), each `${name}` replaced by
    `names[name]` (a placeholder `names` lacks is a KeyError: no query runs half-substituted)."""
    text, _ = resources[logical_id]["Properties"]["QueryString"]["Fn::Sub"]
    return _PLACEHOLDER.sub(lambda match: names[match.group(1)], text)


def history_table(lake: LakeConfig, source_schema: str) -> str:
    """The demo's history table: the customer clean table's name in the histories' namespace."""
    return lake.table(history_database(lake.clean_database), table_name(source_schema, HISTORY_TABLE))


def most_changed_key_sql(table: str) -> str:
    """The key with the most versions (the smallest of those): the customer the run changed most."""
    key = quote(KEY)
    return f"SELECT {key} AS k, count(*) AS n FROM {table} GROUP BY {key} ORDER BY n DESC, k LIMIT 1"


def version_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per version, in the rows' order (the query's: oldest first): operation, valid from -> to
    ("current" for the current one), change sequence, then the columns that differ from the version
    before (for the first, every column with a value; a delete: "deleted")."""
    lines = []
    before: Mapping[str, Any] = {}
    for row in rows:
        data = {c: v for c, v in row.items() if c not in HISTORY_COLUMNS and c != KEY}
        until = "current" if row["is_current"] else f"until {row['valid_to']}"
        if row["operation"] == "D":
            changed = "deleted"
        else:
            shown = {
                c: v
                for c, v in data.items()
                if (c in before and before[c] != v) or (not before and v is not None)
            }
            changed = ", ".join(f"{c}={v}" for c, v in shown.items()) or "(no column changed)"
        sequence = row["change_seq"] if row["change_seq"] is not None else "-"
        lines.append(
            f"{row['operation']:<4} from {row['valid_from']} {until} (change_seq {sequence}): {changed}"
        )
        before = data
    return lines


def describe_versions(
    run: Runner, resources: Mapping[str, Any], table: str, names: Mapping[str, str]
) -> list[str]:
    """The lines the demo prints: which customer, the named query, then `version_lines` of its result."""
    found = run(most_changed_key_sql(table), [])
    if not found:
        return [f"{table}: no versions (the customer table's history is empty)"]
    key = found[0]["k"]
    rows = run(named_query_sql(resources, VERSIONS_QUERY, names), [key])
    head = f"{table}, {KEY} {key} (the customer the run changed most): {len(rows)} versions, by the named query {VERSIONS_QUERY}"
    return [head, *("  " + line for line in version_lines(rows))]


def describe(spark: Any, lake: LakeConfig, source_schema: str, resources: Mapping[str, Any]) -> list[str]:
    """`describe_versions` on the demo's warehouse, in Spark (the template's `${history_db}` is the
    histories' namespace of the demo's catalog)."""
    table = history_table(lake, source_schema)
    if not spark.catalog.tableExists(table):
        return [f"{table}: no history table (HistoryTables did not name {source_schema}.{HISTORY_TABLE})"]
    names = {
        "history_db": f"{lake.catalog_name}.{history_database(lake.clean_database)}",
        "SourceSchema": source_schema,
    }

    def run(sql: str, args: Sequence[Any]) -> list[dict[str, Any]]:
        frame = spark.sql(sql, args=list(args)) if args else spark.sql(sql)
        return [row.asDict() for row in frame.collect()]

    return describe_versions(run, resources, table, names)

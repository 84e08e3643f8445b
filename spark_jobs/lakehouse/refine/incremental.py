"""The incremental step of a refresh (lakehouse.refine.refresh): the affected keys' rows recomputed and MERGEd.

Recomputing a key's row is running the model for that key alone. Where the model's key is, unchanged, a column of
one input read once (through projections, filters, the preserved side of outer joins, either side of inner joins,
and the group keys of an aggregate at the top), the model's rows of the keys are the model run over that input's
rows of the keys: the input is filtered by the keys (first by their range, which Iceberg prunes files by, then by
a broadcast semi-join) before any join, so a refresh reads the rows it recomputes, not the whole input. Any
other model is run over its whole inputs and its output semi-joined to the keys."""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from py4j.protocol import Py4JError
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.base.names import quote, sql_string
from lakehouse.io.iceberg import with_commit_properties
from lakehouse.refine.changes import null_safe_join

# Plan nodes a column passes through unchanged whatever the rows (their child's column is their own).
PASS_THROUGH = {
    "Filter",
    "Sort",
    "SubqueryAlias",
    "View",
    "ResolvedHint",
    "Repartition",
    "RepartitionByExpression",
}
# Join types → the sides whose columns reach the output as they are (an outer join's other side may be nulls).
KEPT_SIDES = {
    "Inner": ("left", "right"),
    "Cross": ("left", "right"),
    "LeftOuter": ("left",),
    "LeftSemi": ("left",),
    "RightOuter": ("right",),
}
# Key types bounded by a range (a timestamp without time zone is not: its bound would come back zoned).
RANGED_TYPES = (T.NumericType, T.StringType, T.DateType, T.TimestampType)


@dataclass(frozen=True)
class KeyOrigin:
    """The input a model's key comes from, and each key column's name in it."""

    input_name: str
    columns: dict[str, str]  # model key column → the input's column


@dataclass(frozen=True)
class KeysSummary:
    """How many keys, and each key column's (lowest, highest, any null) among them."""

    count: int
    bounds: dict[str, tuple[Any, Any, bool]]


def key_origin(
    rows: DataFrame, view_inputs: Mapping[str, str], key: Sequence[str], reads: Mapping[str, int]
) -> KeyOrigin | None:
    """The input whose columns the model's `key` is, unchanged, or None (the module doc). `rows`: the model run
    over temporary views (`view_inputs`: view → input name); `reads`: how many times the model reads each input
    (an input read twice, a self-join, cannot be filtered for one of its reads)."""
    plan = rows._jdf.queryExecution().analyzed()
    output = {str(a.name()): a for a in _each(plan.output())}
    found: dict[str, tuple[str, str]] = {}
    for column in key:
        try:
            origin = _origin(plan, output[column].exprId().id(), view_inputs)
        except Py4JError:  # a plan node of another shape: the model is recomputed in full
            origin = None
        if origin is None:
            return None
        found[column] = origin
    names = {name for name, _ in found.values()}
    if len(names) != 1:
        return None
    [name] = names
    if reads.get(name) != 1:
        return None
    return KeyOrigin(name, {column: input_column for column, (_, input_column) in found.items()})


def _each(sequence: Any) -> list[Any]:
    return [sequence.apply(i) for i in range(sequence.size())]


def _ids(node: Any) -> set[int]:
    return {int(a.exprId().id()) for a in _each(node.output())}


def _attribute_id(expression: Any) -> int | None:
    """The id of the attribute `expression` is, or renames (`a.x AS y`), else None (a computed value)."""
    name = str(expression.nodeName())
    if name == "Alias":
        expression, name = expression.child(), str(expression.child().nodeName())
    return int(expression.exprId().id()) if name == "AttributeReference" else None


def _origin(node: Any, expr_id: int, view_inputs: Mapping[str, str]) -> tuple[str, str] | None:
    """(input, its column) the attribute `expr_id` of `node` is, unchanged for every row, or None."""
    name = str(node.nodeName())
    if name == "SubqueryAlias" and str(node.alias()) in view_inputs:
        column = next((a for a in _each(node.output()) if int(a.exprId().id()) == expr_id), None)
        return None if column is None else (view_inputs[str(node.alias())], str(column.name()))
    if name in ("Project", "Aggregate"):
        listed = node.projectList() if name == "Project" else node.aggregateExpressions()
        expression = next((e for e in _each(listed) if int(e.exprId().id()) == expr_id), None)
        source = None if expression is None else _attribute_id(expression)
        if source is None:
            return None
        if name == "Aggregate" and source not in {
            _attribute_id(g) for g in _each(node.groupingExpressions())
        }:
            return None
        return _origin(node.child(), source, view_inputs)
    if name == "Join":
        for side in KEPT_SIDES.get(str(node.joinType()), ()):
            child = node.left() if side == "left" else node.right()
            if expr_id in _ids(child):
                return _origin(child, expr_id, view_inputs)
        return None
    if name in PASS_THROUGH and expr_id in _ids(node.child()):
        return _origin(node.child(), expr_id, view_inputs)
    return None


def summarize_keys(keys: DataFrame) -> KeysSummary:
    """The keys' count and each column's bounds, in one Spark job."""
    ranged = [f.name for f in keys.schema.fields if isinstance(f.dataType, RANGED_TYPES)]
    figures = [F.count(F.lit(1)).alias("__count")]
    for index, column in enumerate(ranged):
        value = F.col(quote(column))
        figures += [
            F.min(value).alias(f"__min_{index}"),
            F.max(value).alias(f"__max_{index}"),
            F.max(value.isNull()).alias(f"__null_{index}"),
        ]
    row = keys.agg(*figures).collect()[0]
    bounds = {
        column: (row[f"__min_{i}"], row[f"__max_{i}"], bool(row[f"__null_{i}"]))
        for i, column in enumerate(ranged)
    }
    return KeysSummary(int(row["__count"]), bounds)


def rows_of_input_keys(
    frame: DataFrame, keys: DataFrame, origin: KeyOrigin, summary: KeysSummary
) -> DataFrame:
    """The rows of the input `frame` whose key columns (origin.columns) hold one of `keys`: a range filter Iceberg
    prunes data files by, then a broadcast null-safe semi-join."""
    condition: Column = F.lit(True)
    for column, (lowest, highest, has_null) in summary.bounds.items():
        value = F.col(quote(origin.columns[column]))
        if lowest is None:  # only nulls
            within = value.isNull()
        else:
            within = value.between(F.lit(lowest), F.lit(highest))
            within = within | value.isNull() if has_null else within
        condition = condition & within
    renamed = keys.select(*[F.col(quote(k)).alias(c) for k, c in origin.columns.items()])
    return null_safe_join(
        frame.where(condition), F.broadcast(renamed), list(origin.columns.values()), "left_semi"
    )


def merge_by_key(
    spark: SparkSession,
    table: str,
    keys: DataFrame,
    rows: DataFrame,
    key: Sequence[str],
    properties: dict[str, str],
    summary: KeysSummary | None = None,
) -> None:
    """MERGE `rows` for exactly the `keys` (null-safe: a null is one key value): a key without a row is
    deleted from the table. One commit, carrying `properties`, even when nothing changed (the consumed
    snapshots advance). The keys' bounds (`summary`) bound the target's rows too: Iceberg skips the data
    files outside them."""
    present = rows.withColumn("__present", F.lit(True))
    source = null_safe_join(keys.select(*[F.col(quote(k)) for k in key]), present, key, "left").withColumn(
        "__present", F.coalesce(F.col("__present"), F.lit(False))
    )
    columns = [f.name for f in spark.table(table).schema.fields]
    # The MERGE reads its source more than once (to find the target's files, then to write): the recomputed
    # rows are computed once and kept.
    source = source.select(*[F.col(quote(c)) for c in columns], "__present").localCheckpoint()
    view = f"refine_source_{abs(hash((table, threading.get_ident())))}"
    source.createOrReplaceTempView(view)
    on = " AND ".join(f"t.{quote(k)} <=> s.{quote(k)}" for k in key)
    if summary is not None:
        ranges = [_within_sql(f"t.{quote(c)}", bounds) for c, bounds in summary.bounds.items()]
        on = " AND ".join([on, *[r for r in ranges if r is not None]])
    updates = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in columns if c not in key)
    statement = (
        f"MERGE INTO {table} t USING {view} s ON {on} "
        "WHEN MATCHED AND NOT s.__present THEN DELETE "
        + (f"WHEN MATCHED THEN UPDATE SET {updates} " if updates else "")
        + f"WHEN NOT MATCHED AND s.__present THEN INSERT ({', '.join(quote(c) for c in columns)}) "
        f"VALUES ({', '.join(f's.{quote(c)}' for c in columns)})"
    )
    try:
        with_commit_properties(spark, properties, lambda: spark.sql(statement))
    finally:
        spark.catalog.dropTempView(view)


def _within_sql(column: str, bounds: tuple[Any, Any, bool]) -> str | None:
    """`column` within the keys' bounds, as SQL; None when a bound has no plain literal (a timestamp, NaN)."""
    lowest, highest, has_null = bounds
    if lowest is None:
        return f"{column} IS NULL"
    low, high = _sql_literal(lowest), _sql_literal(highest)
    if low is None or high is None:
        return None
    within = f"{column} BETWEEN {low} AND {high}"
    return f"({within} OR {column} IS NULL)" if has_null else within


def _sql_literal(value: Any) -> str | None:
    if isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return f"{value!r}D"
    if isinstance(value, str):
        return sql_string(value)
    if isinstance(value, date) and not isinstance(value, datetime):
        return f"DATE '{value.isoformat()}'"
    return None

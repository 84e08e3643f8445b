"""Where a model's key and joins come from, read from its analyzed plan (lakehouse.refine.refresh asks before an
incremental refresh): the input whose columns the key is (`key_origin`), and, for each other input, the path of
join conditions that links its rows to that input's rows (`key_traces`).

A trace is why a dimension's change need not run the model over the whole fact. Say input S is one whole side of
a join (under filters and projections), a side whose rows come out only joined (an inner join, the null-supplying
side of an outer join, a semi join's right side), and the join's condition has `s.x = r.y`, r a read of the
other side: S links to R. The key input's row f (always a real row of its output: `key_origin`) reaches the
join as a tuple t of the other side, and what comes out for t is fixed by its matches in S; so a change of S
alters f's rows only if a changed row of S (its old version with the inputs as they were, its new one with them
as they are now) matches a tuple t of f, which holds a real r with `r.y = s.x`. If R is the key input, r is f;
else R links on by its own join (r is real: t holds r only where r's join matched), down to the key input. So
the keys a changed row of S reaches are among those of the key input's rows joined with it along the links,
every join inner, reading only the columns the links and the key need; the other joins, the filters and the
other conjuncts of a condition are left out (they only remove keys: one recomputed for nothing is never one
missed). Only `a = b` between two plain columns is a link (a null never satisfies it); an input linked
otherwise (a non-equi or null-safe condition, a cast, a subquery, a full outer join, an input read twice) has
no trace and is traced by running the model (lakehouse.refine.changes)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JError
from pyspark.sql import DataFrame, SparkSession

from lakehouse.refine.models import Model, Reference, reads_of

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
BOTH_SIDES = ("left", "right")
# Join types whose right (left) side's rows come out only joined with a row of the other side.
JOINED_RIGHT = {"Inner", "LeftOuter", "LeftSemi"}
JOINED_LEFT = {"Inner", "RightOuter"}


@dataclass(frozen=True)
class KeyOrigin:
    """The input a model's key comes from, and each key column's name in it."""

    input_name: str
    columns: dict[str, str]  # model key column → the input's column


@dataclass(frozen=True)
class Hop:
    """One join of a trace: the rows of `input_name` whose `columns` equal the previous hop's `linked` columns
    (the changed input's, for the first hop)."""

    input_name: str
    linked: tuple[str, ...]  # the previous hop's columns
    columns: tuple[str, ...]  # this input's columns, pairwise equal to `linked`


@dataclass(frozen=True)
class KeyTrace:
    """How a changed row of `input_name` reaches the model's keys: through `hops` (none: the input is the key's
    own, its rows' key columns are the keys) to the key input's `origin.columns`."""

    input_name: str
    hops: tuple[Hop, ...]
    origin: KeyOrigin


def key_origin(
    rows: DataFrame, view_inputs: Mapping[str, str], key: Sequence[str], reads: Mapping[str, int]
) -> KeyOrigin | None:
    """The input whose columns the model's `key` is, unchanged (through projections, filters, the preserved
    side of outer joins, either side of inner joins, and the group keys of an aggregate at the top), or None.
    `rows`: the model run over temporary views (`view_inputs`: view → input name); `reads`: how many times the
    model reads each input (an input read twice, a self-join, cannot be filtered for one of its reads)."""
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


def key_traces(
    rows: DataFrame, view_inputs: Mapping[str, str], origin: KeyOrigin, reads: Mapping[str, int]
) -> dict[str, KeyTrace]:
    """Each input whose rows reach the model's keys through a path of links to the key input (the module doc),
    with that path; the key input itself, with none. `reads`: how many times the model's SQL reads each input
    (one read in a subquery is not in the plan's tree: an input read more than once is not traced)."""
    traces = {origin.input_name: KeyTrace(origin.input_name, (), origin)}
    try:
        in_tree, links = _reads_and_links(rows._jdf.queryExecution().analyzed(), view_inputs)
    except Py4JError:  # a plan node of another shape: every other input is traced by running the model
        return traces
    once = {a for a, count in in_tree.items() if count == 1 and reads.get(view_inputs[a]) == 1}
    starts = [a for a in once if view_inputs[a] == origin.input_name]
    if len(starts) != 1:
        return traces
    [start] = starts
    # Breadth first, backwards from the key input: each read's next link towards it.
    towards: dict[str, str] = {start: start}
    queue = deque([start])
    while queue:
        here = queue.popleft()
        for there in sorted({a for a, b in links if b == here and a in once}):
            if there not in towards:
                towards[there] = here
                queue.append(there)
    for alias in sorted(towards):
        hops, at = [], alias
        while at != start:
            nearer = towards[at]
            pairs = links[(at, nearer)]
            hops.append(Hop(view_inputs[nearer], tuple(a for a, _ in pairs), tuple(b for _, b in pairs)))
            at = nearer
        traces.setdefault(view_inputs[alias], KeyTrace(view_inputs[alias], tuple(hops), origin))
    return traces


def _reads_and_links(
    plan: Any, view_inputs: Mapping[str, str]
) -> tuple[dict[str, int], dict[tuple[str, str], list[tuple[str, str]]]]:
    """How many times the plan's tree reads each view (its alias), and the links: (a, b) → [(a's column, b's
    column)] when view a is one whole side of a join (under filters and projections) whose rows come out only
    joined (an inner join, the null-supplying side of an outer join, a semi join's right side), and the join's
    condition has `a.x = b.y`, b a view of the other side."""
    reads: dict[str, int] = {}
    links: dict[tuple[str, str], list[tuple[str, str]]] = {}
    stack = [plan]
    while stack:
        node = stack.pop()
        name = str(node.nodeName())
        if name == "SubqueryAlias" and str(node.alias()) in view_inputs:
            reads[str(node.alias())] = reads.get(str(node.alias()), 0) + 1
            continue
        if name == "Join" and node.condition().isDefined():
            join_type = str(node.joinType())
            for side, other, joined in (
                (node.left(), node.right(), join_type in JOINED_LEFT),
                (node.right(), node.left(), join_type in JOINED_RIGHT),
            ):
                alias = _single_read(side, view_inputs) if joined else None
                if alias is None:
                    continue
                for x, y in _equalities(node.condition().get()):
                    for mine, theirs in ((x, y), (y, x)):
                        here = _column_of(side, mine, view_inputs)
                        there = _column_of(other, theirs, view_inputs)
                        if here is not None and there is not None and here[0] == alias:
                            links.setdefault((alias, there[0]), []).append((here[1], there[1]))
        stack.extend(_each(node.children()))
    return reads, links


def _single_read(side: Any, view_inputs: Mapping[str, str]) -> str | None:
    """The view alias `side` reads, when it reads one view alone (through filters and projections only)."""
    name = str(side.nodeName())
    if name == "SubqueryAlias" and str(side.alias()) in view_inputs:
        return str(side.alias())
    if name in PASS_THROUGH or name == "Project":
        return _single_read(side.child(), view_inputs)
    return None


def _equalities(condition: Any) -> list[tuple[Any, Any]]:
    """The (attribute, attribute) pairs of the condition's `a = b` conjuncts."""
    name = str(condition.nodeName())
    if name == "And":
        return _equalities(condition.left()) + _equalities(condition.right())
    if name == "EqualTo":
        sides = (condition.left(), condition.right())
        if all(str(side.nodeName()) == "AttributeReference" for side in sides):
            return [sides]
    return []


def _column_of(side: Any, attribute: Any, view_inputs: Mapping[str, str]) -> tuple[str, str] | None:
    """(view alias, its column) an attribute of `side` is, through either side of any join below, or None."""
    expr_id = int(attribute.exprId().id())
    if expr_id not in _ids(side):
        return None
    return _origin(side, expr_id, view_inputs, by_alias=True, sides=BOTH_SIDES)


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


def _origin(
    node: Any,
    expr_id: int,
    view_inputs: Mapping[str, str],
    by_alias: bool = False,
    sides: tuple[str, ...] | None = None,
) -> tuple[str, str] | None:
    """(input, its column) the attribute `expr_id` of `node` is, unchanged for every row, or None; with
    `by_alias`, the view's alias instead of its input; `sides`: the join sides followed (None: the kept sides,
    KEPT_SIDES; an aggregate's group keys are followed only then)."""
    name = str(node.nodeName())
    if name == "SubqueryAlias" and str(node.alias()) in view_inputs:
        column = next((a for a in _each(node.output()) if int(a.exprId().id()) == expr_id), None)
        if column is None:
            return None
        return (str(node.alias()) if by_alias else view_inputs[str(node.alias())], str(column.name()))
    if name in ("Project", "Aggregate"):
        if name == "Aggregate" and sides is not None:
            return None
        listed = node.projectList() if name == "Project" else node.aggregateExpressions()
        expression = next((e for e in _each(listed) if int(e.exprId().id()) == expr_id), None)
        source = None if expression is None else _attribute_id(expression)
        if source is None:
            return None
        if name == "Aggregate" and source not in {
            _attribute_id(g) for g in _each(node.groupingExpressions())
        }:
            return None
        return _origin(node.child(), source, view_inputs, by_alias, sides)
    if name == "Join":
        for side in sides if sides is not None else KEPT_SIDES.get(str(node.joinType()), ()):
            child = node.left() if side == "left" else node.right()
            if expr_id in _ids(child):
                return _origin(child, expr_id, view_inputs, by_alias, sides)
        return None
    if name in PASS_THROUGH and expr_id in _ids(node.child()):
        return _origin(node.child(), expr_id, view_inputs, by_alias, sides)
    return None


def columns_read(
    rows: DataFrame, view_inputs: Mapping[str, str], reads: Mapping[str, int]
) -> dict[str, frozenset[str]]:
    """The columns of each input the model's plan uses anywhere (an output, a condition, a group key, an
    aggregate's argument): its rows depend on those alone, so a change of an input's other columns changes
    none of them. `rows`: the model run over temporary views (`view_inputs`: view → input name); `reads`: how
    many times its SQL reads each input. An input read where the plan's tree does not show it (a subquery),
    or in a plan this walk cannot read, is left out: all its columns count."""
    try:
        plan = rows._jdf.queryExecution().analyzed()
        used = {int(a.exprId().id()) for a in _each(plan.output())}
        outputs: dict[str, list[Any]] = {}  # input → the output attributes of each of its reads in the tree
        stack = [plan]
        while stack:
            node = stack.pop()
            if str(node.nodeName()) == "SubqueryAlias" and str(node.alias()) in view_inputs:
                outputs.setdefault(view_inputs[str(node.alias())], []).append(_each(node.output()))
                continue
            used |= {int(a.exprId().id()) for a in _each(node.references().toSeq())}
            stack.extend(_each(node.children()))
    except Py4JError:
        return {}
    return {
        name: frozenset(
            str(a.name()) for attributes in read for a in attributes if int(a.exprId().id()) in used
        )
        for name, read in outputs.items()
        if len(read) == reads.get(name)
    }


def columns_wanted(
    spark: SparkSession,
    models: Sequence[Model],
    name: str,
    table_of: Callable[[Reference], str],
    evaluator: Callable[[Model, dict[str, str]], Callable[[Mapping[str, DataFrame]], DataFrame]],
    known: dict[str, dict[str, frozenset[str]] | None],
) -> frozenset[str] | None:
    """The columns of input `name` that the `models` reading it read (None: all, or one model's not known),
    each model's from its plan over no rows of its inputs as they are now (`table_of`: an input's table;
    `evaluator`: the model's rows over given inputs, its temporary views added to the dict it is given).
    `known`: each model's columns_read found so far in the run (None: its plan did not analyse), used and
    added to, so that a model's SQL is analysed for it once a run whatever the inputs asked about."""
    wanted: set[str] = set()
    for model in models:
        if name not in {r.input_name for r in model.references}:
            continue
        if model.name not in known:
            known[model.name] = _columns_over_no_rows(spark, model, table_of, evaluator)
        read = known[model.name]
        columns = None if read is None else read.get(name)
        if columns is None:
            return None
        wanted |= columns
    return frozenset(wanted)


def _columns_over_no_rows(
    spark: SparkSession,
    model: Model,
    table_of: Callable[[Reference], str],
    evaluator: Callable[[Model, dict[str, str]], Callable[[Mapping[str, DataFrame]], DataFrame]],
) -> dict[str, frozenset[str]] | None:
    """columns_read of the model's plan over no rows of its inputs as they are now; None when it does not
    analyse now."""
    views: dict[str, str] = {}
    try:
        empty = {
            r.input_name: spark.createDataFrame([], spark.table(table_of(r)).schema) for r in model.references
        }
        return columns_read(evaluator(model, views)(empty), views, reads_of(model))
    except Exception:  # a model that does not analyse now: its inputs are read in full
        return None
    finally:
        for view in views:
            spark.catalog.dropTempView(view)

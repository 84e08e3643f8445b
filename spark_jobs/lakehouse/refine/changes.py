"""What an incremental refine computes (lakehouse.refine.refresh), as DataFrame steps that read and write nothing:
the rows that changed between two versions of an input, the model's keys those changes reach, and whether the
model's plan lets them be traced at all.

Affected keys, for a model Q over inputs S1…Sn and the changed rows Δ of one input Si (its before images Δ⁻,
read with the other inputs as they were, and its after images Δ⁺, with the others as they are now):

    keys( Q[Si := Δ] EXCEPT Q[Si := ∅] )

Q[Si := Δ] holds every output row a changed row takes part in; subtracting Q[Si := ∅] removes the rows that
take no part in it but an outer join keeps anyway (a sale whose item did not change still comes out of
`sales LEFT JOIN item`, with the same nulls with Δ as with nothing). The union over every changed input, old
and new, is every key whose row may differ: its row is then recomputed from the inputs as they are now, and a
key that no longer comes out is deleted. This holds for selections, projections, inner, outer and semi joins,
unions, and one aggregate at the top (its group keys): a group is recomputed whenever a changed row falls in it.
It does not hold for anti joins (NOT EXISTS, NOT IN), windows, limits, an aggregate below a join or a filter
(a changed row then moves a value every row sees), or non-deterministic expressions: such a model is rebuilt
(`incremental_blocker` says why).

That runs the model over the whole of every other input twice. Where the model's key is an input's columns and
a changed input links to that input through the model's own equi-join conditions (lakehouse.refine.lineage), its
keys are found without running the model: the key input's own changed rows are their keys, and another input's
changed rows are joined along the links with the key columns of the rows they reach (`traced_keys`), reading the
linked and key columns alone (a dimension's change reads two columns of the fact)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.base.names import quote
from lakehouse.refine.lineage import KeyTrace
from lakehouse.refine.planning import in_one_partition, in_one_task_if_small

HASH_COLUMNS = ("__refine_h1", "__refine_h2")
# Operators a changed row passes through row by row (the optimized plan's node names).
ROW_WISE = {
    "Project",
    "Filter",
    "Join",
    "Union",
    "Generate",
    "SubqueryAlias",
    "View",
    "ResolvedHint",
    "Sort",
    "Repartition",
    "RepartitionByExpression",
}
RELATIONS = {
    "RelationV2",
    "DataSourceV2Relation",
    "DataSourceV2ScanRelation",
    "LocalRelation",
    "LogicalRDD",
    "Relation",
    "LogicalRelation",
    "Range",
}
ROW_WISE_JOINS = {"Inner", "LeftOuter", "RightOuter", "FullOuter", "LeftSemi", "Cross"}

Evaluate = Callable[[Mapping[str, DataFrame]], DataFrame]


class ReadOnUse(Mapping[str, DataFrame]):
    """Input name → its rows (`read`), read when first asked for: a change traced along its links reads only
    the inputs the links join, a change traced by running the model reads them all."""

    def __init__(self, names: Iterable[str], read: Callable[[str], DataFrame]) -> None:
        self._names = tuple(names)
        self._read = read
        self._frames: dict[str, DataFrame] = {}

    def __getitem__(self, name: str) -> DataFrame:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._frames:
            self._frames[name] = self._read(name)
        return self._frames[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def with_row_hash(frame: DataFrame) -> DataFrame:
    """The rows with two 64-bit hashes of all their values (a null and its position count: (null, 1) and
    (1, null) differ)."""
    values: list[Any] = []
    for name in frame.columns:
        column = F.col(quote(name))
        values += [column, column.isNull()]
    return frame.withColumn(HASH_COLUMNS[0], F.xxhash64(*values)).withColumn(
        HASH_COLUMNS[1], F.xxhash64(F.lit("refine"), *values)
    )


def changed_rows(before: DataFrame, after: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(before images, after images): the rows of `before` that `after` no longer holds as they were, and the
    rows of `after` that `before` did not hold (an insert, an update's two images, a delete, a key move). The
    versions' rows are grouped by their hashes in one shuffle, a row counting -1 in `before` and +1 in
    `after`: what does not cancel out changed (both images are read in one query, which shuffles the versions
    once: the caller keeps what it derives from them). Versions of different columns (the schema changed):
    every row changed."""
    if before.columns != after.columns:
        return before, after
    row = F.struct(*[F.col(quote(c)) for c in before.columns])
    sides = (
        with_row_hash(before)
        .select(*HASH_COLUMNS, F.lit(-1).alias("__side"), row.alias("__row"))
        .unionByName(with_row_hash(after).select(*HASH_COLUMNS, F.lit(1).alias("__side"), row.alias("__row")))
    )
    net = (
        sides.groupBy(*HASH_COLUMNS)
        .agg(F.sum("__side").alias("__net"), F.first("__row").alias("__row"))
        .where(F.col("__net") != 0)
        .select("__net", "__row.*")
    )
    return (
        net.where(F.col("__net") < 0).drop("__net"),
        net.where(F.col("__net") > 0).drop("__net"),
    )


def empty_like(frame: DataFrame) -> DataFrame:
    """No rows, the same columns: an empty local relation, which the optimizer propagates (an inner join with it
    is empty without reading the other side)."""
    return frame.sparkSession.createDataFrame([], frame.schema)


def keys_reached(
    evaluate: Evaluate,
    inputs: Mapping[str, DataFrame],
    name: str,
    deltas: Sequence[DataFrame],
    key: Sequence[str],
) -> DataFrame:
    """The model's keys the rows of `deltas` (each a set of rows of input `name`) take part in, the other inputs
    as given: keys((Q[Δ1] UNION Q[Δ2] …) EXCEPT Q[∅]), one model run per delta and one without."""
    columns = [*[F.col(quote(k)) for k in key], *[F.col(h) for h in HASH_COLUMNS]]
    reached = [with_row_hash(evaluate({**inputs, name: delta})).select(*columns) for delta in deltas]
    with_delta = reached[0]
    for more in reached[1:]:
        with_delta = with_delta.unionByName(more)
    without = with_row_hash(evaluate({**inputs, name: empty_like(deltas[0])})).select(*columns)
    return with_delta.subtract(without).select(
        *[F.col(quote(k)) for k in key]
    )  # rows compared by their hashes


def traced_keys(
    trace: KeyTrace, inputs: Mapping[str, DataFrame], rows: DataFrame, key: Sequence[str]
) -> DataFrame:
    """The model's keys the `rows` of input `trace.input_name` reach along its links (lakehouse.refine.lineage),
    the other inputs as given: the rows joined with each link's input on its columns, every join inner, each
    input read for the columns the next link or the key needs alone; the changed side is broadcast (it is the
    change and the rows it links to, not an input)."""
    origin = trace.origin
    wanted = [trace.hops[0].linked if trace.hops else tuple(origin.columns.values())]
    wanted += [hop.linked for hop in trace.hops[1:]] + [tuple(origin.columns.values())]
    step = 0
    current = rows.select(*[F.col(quote(c)).alias(_traced(step, c)) for c in dict.fromkeys(wanted[0])])
    for step, hop in enumerate(trace.hops, start=1):
        columns = dict.fromkeys([*hop.columns, *wanted[step]])
        side = inputs[hop.input_name].select(*[F.col(quote(c)).alias(_traced(step, c)) for c in columns])
        condition = F.lit(True)
        for mine, theirs in zip(hop.linked, hop.columns, strict=True):
            condition = condition & (
                F.col(quote(_traced(step - 1, mine))) == F.col(quote(_traced(step, theirs)))
            )
        current = (
            F.broadcast(current)
            .join(side, condition, "inner")
            .select(*[F.col(quote(_traced(step, c))) for c in columns])
        )
    return current.select(*[F.col(quote(_traced(step, origin.columns[k]))).alias(k) for k in key])


def _traced(step: int, column: str) -> str:
    return f"__trace{step}_{column}"


def affected_keys(
    evaluate: Evaluate,
    before: Mapping[str, DataFrame],
    after: Mapping[str, DataFrame],
    changes: Mapping[str, tuple[DataFrame, DataFrame]],
    key: Sequence[str],
    traces: Mapping[str, KeyTrace],
) -> DataFrame | None:
    """Every key whose row may differ between the model over `before` and over `after`, from each changed
    input's (before images, after images); None when no input changed. An input with a trace (`traces`:
    lakehouse.refine.lineage) is traced along its links; any other by running the model (module doc). With one
    changed input, the others are the same in `before` and `after`, so Q[∅] is too: its before and after images
    share one subtraction."""
    parts = []
    sides: list[DataFrame] = []  # the frames unioned: each traced input's two, each other input's keys
    for name, (removed, added) in changes.items():
        if name in traces:
            sides += [
                traced_keys(traces[name], before, removed, key),
                traced_keys(traces[name], after, added, key),
            ]
            parts.append(sides[-2].unionByName(sides[-1]))
        elif len(changes) == 1:
            sides.append(keys_reached(evaluate, after, name, [removed, added], key))
            parts.append(sides[-1])
        else:
            sides.append(
                keys_reached(evaluate, before, name, [removed], key).unionByName(
                    keys_reached(evaluate, after, name, [added], key)
                )
            )
            parts.append(sides[-1])
    if not parts:
        return None
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    # Keys found each in one partition (a few changes kept in one, lakehouse.refine.consumed.SharedChanges) are
    # few: their distinct is taken in one task too, whatever Spark estimates (a checkpoint's estimate is that of
    # the plan that made it): no map job and reduce job.
    if all(in_one_partition(side) for side in sides):
        return union.coalesce(1).distinct()
    return in_one_task_if_small(union).distinct()


def incremental_blocker(rows: DataFrame) -> str | None:
    """Why the model's changes cannot be traced to its keys (module doc), or None when they can."""
    plan = rows._jdf.queryExecution().optimizedPlan()
    return _blocker(plan, aggregate_allowed=True)


def _children(node: Any) -> list[Any]:
    children = node.children()
    return [children.apply(i) for i in range(children.size())]


def _blocker(node: Any, aggregate_allowed: bool) -> str | None:
    name = str(node.nodeName())
    try:
        if not bool(node.deterministic()):
            return "it has a non-deterministic expression"
    except Exception:  # an older plan does not answer: its nodes are still checked
        pass
    if name in RELATIONS:
        return None
    if name == "Aggregate":
        if not aggregate_allowed:
            return (
                "it aggregates below a join, a filter or another aggregate (a change moves every row's value)"
            )
        return _first(_children(node), aggregate_allowed=False)
    if name == "Join":
        join_type = str(node.joinType())
        if join_type not in ROW_WISE_JOINS:
            return f"it has an anti join ({join_type}: NOT EXISTS, NOT IN or EXCEPT)"
        return _first(_children(node), aggregate_allowed=False)
    if name in ("Project", "Sort", "SubqueryAlias", "View", "ResolvedHint"):
        return _first(_children(node), aggregate_allowed)
    if name in ROW_WISE:
        return _first(_children(node), aggregate_allowed=False)
    return f"it uses {name}, whose output a changed row does not reach row by row"


def _first(children: list[Any], aggregate_allowed: bool) -> str | None:
    for child in children:
        why = _blocker(child, aggregate_allowed)
        if why is not None:
            return why
    return None


def null_safe_join(left: DataFrame, right: DataFrame, columns: Sequence[str], how: str) -> DataFrame:
    """Join on columns that may be null (a group with a null category is still one group)."""
    renamed = right.select(
        *[F.col(quote(c)).alias(f"__r_{c}") if c in columns else F.col(quote(c)) for c in right.columns]
    )
    condition = None
    for c in columns:
        term = left[quote(c)].eqNullSafe(renamed[quote(f"__r_{c}")])
        condition = term if condition is None else condition & term
    joined = left.join(renamed, condition, how)
    return joined if how in ("left_semi", "left_anti") else joined.drop(*[f"__r_{c}" for c in columns])

"""Whether a refined table is rebuilt, and why (pure: lakehouse.refine.refresh asks before it reads a row)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from lakehouse.refine.models import Model


def model_hash_of(model: Model) -> str:
    """What the refined table's commits record of the model that wrote them (`refine.model`)."""
    return hashlib.sha256(model.text.encode("utf-8")).hexdigest()[:16]


def rebuild_reason(
    model: Model,
    exists: bool,
    consumed: Mapping[str, int] | None,
    inputs: Mapping[str, int],
    recorded_hash: str | None,
) -> str | None:
    """Why the model's table is rebuilt in full, or None: it is unchanged (`consumed == inputs`) or can be
    refreshed from its inputs' changes (its consumed snapshots still to be found in their histories)."""
    if not exists:
        return "new table"
    if consumed is None:
        return "no consumed snapshots recorded"
    if set(consumed) != set(inputs):
        return f"its inputs changed (consumed {sorted(consumed)}, reads {sorted(inputs)})"
    if recorded_hash != model_hash_of(model):
        return "the model changed"
    if dict(consumed) == dict(inputs):
        return None
    if model.materialized == "table":
        return "materialized='table'"
    if not model.unique_key:
        return "no unique_key: cannot be refreshed incrementally"
    return None


def cheaper_to_rebuild(
    changed_rows: int, input_rows: int, rebuild_below_rows: int, rebuild_above_changed_fraction: float
) -> str | None:
    """Why a rebuild costs less than an incremental refresh, or None. An incremental refresh pays a fixed cost
    per moved input (its changed rows found, the model run with them and without them, the keys recomputed
    and MERGEd: a dozen Spark jobs) before any row; a rebuild reads every input row once. So small inputs are
    rebuilt, and so are models a refresh of which would read a large share of their inputs' rows.
    `changed_rows`: the moved inputs' rows a refresh reads, those of their data files that differ since the
    consumed snapshots (at least their rows added and deleted, from the snapshots' summaries; all of an input
    whose metadata cannot tell which files differ); `input_rows`: every input's rows now."""
    if input_rows < rebuild_below_rows:
        return f"its inputs hold {input_rows} rows, under {rebuild_below_rows}: a rebuild costs less"
    if rebuild_above_changed_fraction < 1 and changed_rows > rebuild_above_changed_fraction * input_rows:
        return (
            f"{changed_rows} rows of its inputs' {input_rows} changed or share a data file with a change, over "
            f"{rebuild_above_changed_fraction:.0%}: a rebuild costs less"
        )
    return None


def most_keys_affected(affected: int, model_rows: int, rebuild_above_affected_fraction: float) -> str | None:
    """Why a rebuild costs less than recomputing and MERGEing the affected keys, or None: when they are over
    `rebuild_above_affected_fraction` of the model's rows (`model_rows`, from its snapshot's summary), the
    recompute reads about what a rebuild reads, and the MERGE matches and deletes about every row a rebuild
    writes (an aggregate whose every group a change reaches). 1: never for that reason."""
    if rebuild_above_affected_fraction >= 1 or affected <= rebuild_above_affected_fraction * model_rows:
        return None
    return (
        f"{affected} keys affected, over {rebuild_above_affected_fraction:.0%} of its {model_rows} rows: "
        "a rebuild costs less"
    )

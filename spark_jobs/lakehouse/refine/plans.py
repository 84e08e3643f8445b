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

"""When a refresh is cheaper as a rebuild (lakehouse.refine.plans.cheaper_to_rebuild): pure, no Spark."""

from __future__ import annotations

import pytest
from lakehouse.refine.plans import cheaper_to_rebuild


@pytest.mark.parametrize(
    ("changed", "rows", "floor", "fraction", "rebuilt"),
    [
        (1, 999_999, 1_000_000, 0.1, True),  # small inputs: a rebuild reads fewer rows than tracing costs
        (1, 1_000_000, 1_000_000, 0.1, False),  # at the floor, a small change: traced
        (100_000, 1_000_000, 1_000_000, 0.1, False),  # exactly the fraction: traced
        (100_001, 1_000_000, 1_000_000, 0.1, True),  # over it: rebuilt
        (5, 10, 0, 1.0, False),  # both off: always traced
        (30, 10, 0, 1.0, False),  # a MERGE's rewritten rows may count past the table's size: still off
        (0, 0, 1, 1.0, True),  # empty inputs under any floor: rebuilt
    ],
)
def test_a_refresh_is_rebuilt_below_the_row_floor_or_above_the_changed_fraction(
    changed: int, rows: int, floor: int, fraction: float, rebuilt: bool
) -> None:
    """Given the moved inputs' changed rows and every input's rows, When the choice is made with a row floor and
    a changed fraction, Then a rebuild is chosen exactly below the floor or above the fraction, with a reason."""
    reason = cheaper_to_rebuild(changed, rows, floor, fraction)
    assert (reason is not None) == rebuilt, reason
    if reason is not None:
        assert str(rows) in reason and "a rebuild costs less" in reason

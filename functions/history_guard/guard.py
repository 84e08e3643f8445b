"""How long is this execution's history? One call: the newest event's id is the event count."""

from __future__ import annotations

from typing import Any

STEP_FUNCTIONS_HISTORY_LIMIT = 25_000


def event_count(sfn: Any, execution_arn: str) -> int:
    events = sfn.get_execution_history(executionArn=execution_arn, reverseOrder=True, maxResults=1)["events"]
    # max(), not events[0]: the same answer from AWS, and right from an emulator that ignores the paging
    return max((int(e["id"]) for e in events), default=0)


def should_roll_over(count: int, threshold: int) -> bool:
    if not 0 < threshold < STEP_FUNCTIONS_HISTORY_LIMIT:
        raise ValueError(
            f"threshold must be between 1 and {STEP_FUNCTIONS_HISTORY_LIMIT - 1}, got {threshold}"
        )
    return count >= threshold

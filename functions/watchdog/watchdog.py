"""Is the pipeline running? Counted from Step Functions every few minutes (a schedule), so "no execution"
is alarmed however long one CDC or reload run takes (the loop itself publishes nothing while it waits)."""

from __future__ import annotations

from typing import Any


def running_executions(sfn: Any, state_machine_arn: str, limit: int = 10) -> int:
    """How many executions of the state machine are RUNNING (counted up to `limit`)."""
    response = sfn.list_executions(
        stateMachineArn=state_machine_arn, statusFilter="RUNNING", maxResults=limit
    )
    return len(response.get("executions", []))

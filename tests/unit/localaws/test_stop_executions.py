"""`LocalPipeline.stop_executions` stops the pipeline until nothing runs, not only the executions it saw first: one
stopped while it hands over to its successor leaves that one running, holding the lease."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from localaws.pipeline_run import AppHandles, LocalPipeline, RunSettings


class HandingOverStepFunctions:
    """Step Functions where stopping `first` is too late to keep its successor from starting (a rollover)."""

    def __init__(self) -> None:
        self.status = {"first": "RUNNING"}
        self.stopped: list[str] = []

    def list_executions(self, stateMachineArn: str) -> dict[str, Any]:
        return {"executions": [{"executionArn": a, "status": s} for a, s in self.status.items()]}

    def stop_execution(self, executionArn: str, error: str, cause: str) -> None:
        self.stopped.append(executionArn)
        self.status[executionArn] = "ABORTED"
        if executionArn == "first":
            self.status["successor"] = "RUNNING"


def test_an_execution_started_by_the_one_being_stopped_is_stopped_too(tmp_path: Path) -> None:
    """Given a running execution whose stop comes as it starts its successor,
    When the pipeline's executions are stopped,
    Then both are stopped and none runs afterwards."""
    sfn = HandingOverStepFunctions()
    pipeline = LocalPipeline("http://127.0.0.1:1", RunSettings(name="s", workdir=tmp_path, source="sqlite"))
    pipeline._clients["stepfunctions"] = sfn
    pipeline.app = AppHandles("lake-s", "raw", "artifacts", "arn:sm", "s_clean", "s-cdc", "s-full-load")

    pipeline.stop_executions(quiet_seconds=0)

    assert sfn.stopped == ["first", "successor"]
    assert set(sfn.status.values()) == {"ABORTED"}


class StartingStepFunctions(HandingOverStepFunctions):
    """Step Functions whose first stop of `first` comes before its interpreter has started: the emulator then
    fails the call with InternalError."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0

    def stop_execution(self, executionArn: str, error: str, cause: str) -> None:
        if not self.refused:
            self.refused += 1
            raise ClientError(
                {
                    "Error": {
                        "Code": "InternalError",
                        "Message": "'NoneType' object has no attribute 'set_stop'",
                    }
                },
                "StopExecution",
            )
        super().stop_execution(executionArn, error, cause)


def test_an_execution_still_starting_is_stopped_on_the_next_pass(tmp_path: Path) -> None:
    """Given an execution whose first stop fails with InternalError because it has not started yet,
    When the pipeline's executions are stopped,
    Then the next pass stops it and its successor, and none runs afterwards."""
    sfn = StartingStepFunctions()
    pipeline = LocalPipeline("http://127.0.0.1:1", RunSettings(name="s", workdir=tmp_path, source="sqlite"))
    pipeline._clients["stepfunctions"] = sfn
    pipeline.app = AppHandles("lake-s", "raw", "artifacts", "arn:sm", "s_clean", "s-cdc", "s-full-load")

    pipeline.stop_executions(quiet_seconds=0)

    assert sfn.refused == 1
    assert sfn.stopped == ["first", "successor"]
    assert set(sfn.status.values()) == {"ABORTED"}


def test_a_stop_refused_for_another_reason_is_raised(tmp_path: Path) -> None:
    """Given Step Functions that refuse a stop as not allowed,
    When the pipeline's executions are stopped,
    Then the refusal is raised, not retried."""
    sfn = HandingOverStepFunctions()

    def refuse(executionArn: str, error: str, cause: str) -> None:
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "StopExecution")

    sfn.stop_execution = refuse  # type: ignore[method-assign]
    pipeline = LocalPipeline("http://127.0.0.1:1", RunSettings(name="s", workdir=tmp_path, source="sqlite"))
    pipeline._clients["stepfunctions"] = sfn
    pipeline.app = AppHandles("lake-s", "raw", "artifacts", "arn:sm", "s_clean", "s-cdc", "s-full-load")

    with pytest.raises(ClientError, match="AccessDeniedException"):
        pipeline.stop_executions(quiet_seconds=0, timeout=5)

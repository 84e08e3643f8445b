"""`LocalPipeline.stop_executions` stops the pipeline until nothing runs, not only the executions it saw first: one
stopped while it hands over to its successor leaves that one running, holding the lease."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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

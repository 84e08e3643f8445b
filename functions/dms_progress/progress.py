"""Where the DMS task stands: full load done, still loading, or failed (never an endless wait)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Statuses in which the task will never finish its full load without an operator.
FAILED_STATUSES = {"failed", "deleting", "stopped"}
FULL_LOAD_FINISHED_REASONS = ("FULL_LOAD_ONLY_FINISHED",)


class DmsTaskFailedError(RuntimeError):
    """The replication task failed or stopped before its full load finished."""


@dataclass(frozen=True)
class TaskProgress:
    task_arn: str
    status: str
    full_load_percent: int
    full_load_complete: bool
    tables_loaded: int
    tables_loading: int
    tables_queued: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_arn": self.task_arn,
            "status": self.status,
            "full_load_percent": self.full_load_percent,
            "full_load_complete": self.full_load_complete,
            "tables_loaded": self.tables_loaded,
            "tables_loading": self.tables_loading,
            "tables_queued": self.tables_queued,
        }


def task_progress(task: dict[str, Any]) -> TaskProgress:
    """Read a DescribeReplicationTasks entry. A task is done loading when its full load reached 100%
    and no table is loading or queued; a failed or stopped task raises with DMS's own reason."""
    status = task.get("Status", "unknown")
    stats = task.get("ReplicationTaskStats", {}) or {}
    percent = int(stats.get("FullLoadProgressPercent", 0) or 0)
    loading = int(stats.get("TablesLoading", 0) or 0)
    queued = int(stats.get("TablesQueued", 0) or 0)
    complete = percent >= 100 and loading == 0 and queued == 0
    stop_reason = task.get("StopReason", "") or ""
    finished_stop = (
        status == "stopped" and complete and any(r in stop_reason for r in FULL_LOAD_FINISHED_REASONS)
    )
    if status in FAILED_STATUSES and not finished_stop:
        message = task.get("LastFailureMessage") or stop_reason or "no reason given"
        raise DmsTaskFailedError(
            f"DMS task {task.get('ReplicationTaskIdentifier', '?')} is {status}: {message}"
        )
    return TaskProgress(
        task_arn=task.get("ReplicationTaskArn", ""),
        status=status,
        full_load_percent=percent,
        full_load_complete=complete,
        tables_loaded=int(stats.get("TablesLoaded", 0) or 0),
        tables_loading=loading,
        tables_queued=queued,
    )


def describe_task(dms: Any, task_arn: str) -> dict[str, Any]:
    response = dms.describe_replication_tasks(
        Filters=[{"Name": "replication-task-arn", "Values": [task_arn]}], WithoutSettings=True
    )
    tasks = response.get("ReplicationTasks", [])
    if not tasks:
        raise DmsTaskFailedError(f"DMS task {task_arn} does not exist")
    return tasks[0]

"""Where the DMS task stands: full load done, still loading, or failed (never an endless wait); and, on every
pass of the CDC loop, whether it still runs (a stopped or failed task fails the loop with DMS's reason)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Statuses in which the task will never finish its full load without an operator.
FAILED_STATUSES = {"failed", "deleting", "stopped"}
FULL_LOAD_FINISHED_REASONS = ("FULL_LOAD_ONLY_FINISHED",)


class DmsTaskFailedError(RuntimeError):
    """The replication task failed or stopped before its full load finished, or a table failed to load."""


class DmsTaskStoppedError(RuntimeError):
    """The replication task stopped or failed during CDC: no change reaches the raw zone until it runs again."""


@dataclass(frozen=True)
class TaskProgress:
    task_arn: str
    status: str
    full_load_percent: int
    full_load_complete: bool
    tables_loaded: int
    tables_loading: int
    tables_queued: int
    tables_errored: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_arn": self.task_arn,
            "status": self.status,
            "full_load_percent": self.full_load_percent,
            "full_load_complete": self.full_load_complete,
            "tables_loaded": self.tables_loaded,
            "tables_loading": self.tables_loading,
            "tables_queued": self.tables_queued,
            "tables_errored": self.tables_errored,
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
        tables_errored=int(stats.get("TablesErrored", 0) or 0),
    )


def errored_tables(dms: Any, task_arn: str) -> list[str]:
    """`schema.table` of every table DMS failed to load ("Table error"), from DescribeTableStatistics."""
    found: list[str] = []
    marker: str | None = None
    while True:
        request: dict[str, Any] = {"ReplicationTaskArn": task_arn, "MaxRecords": 500}
        if marker:
            request["Marker"] = marker
        response = dms.describe_table_statistics(**request)
        found += [
            f"{s.get('SchemaName')}.{s.get('TableName')}"
            for s in response.get("TableStatistics", [])
            if str(s.get("TableState", "")).lower().endswith("error")
        ]
        marker = response.get("Marker")
        if not marker:
            return sorted(found)


def check_full_load(dms: Any, progress: TaskProgress) -> TaskProgress:
    """A full load in which DMS errored on a table never completes it: that table would have no LOAD files and
    be loaded empty. Raise naming the tables (DescribeTableStatistics), or the count when DMS names none."""
    if progress.tables_errored <= 0:
        return progress
    tables = errored_tables(dms, progress.task_arn)
    named = ", ".join(tables) if tables else f"{progress.tables_errored} table(s), not named by DMS"
    raise DmsTaskFailedError(
        f"DMS task {progress.task_arn} errored on {named} during its full load (TablesErrored="
        f"{progress.tables_errored}): see the task's CloudWatch log, fix the cause, reload those tables"
    )


@dataclass(frozen=True)
class TaskHealth:
    task_arn: str
    status: str
    tables_errored: int

    def as_dict(self) -> dict[str, Any]:
        return {"task_arn": self.task_arn, "status": self.status, "tables_errored": self.tables_errored}


def task_health(task: dict[str, Any]) -> TaskHealth:
    """During CDC the task must be running (or on its way: starting, modifying...). Stopped, failed or being
    deleted raises with DMS's own reason. A full-load-only task that finished is its normal end."""
    status = task.get("Status", "unknown")
    stop_reason = task.get("StopReason", "") or ""
    finished_full_load_only = task.get("MigrationType") == "full-load" and any(
        r in stop_reason for r in FULL_LOAD_FINISHED_REASONS
    )
    if status in FAILED_STATUSES and not finished_full_load_only:
        reasons = [r for r in (task.get("LastFailureMessage"), stop_reason) if r]
        raise DmsTaskStoppedError(
            f"DMS task {task.get('ReplicationTaskIdentifier', '?')} is {status} during CDC: "
            f"{'; '.join(reasons) or 'no reason given'}. No change reaches the raw zone until it runs again: "
            "fix the cause, resume the task before the source's log retention ends, start an execution "
            'with {"skip_full_load": true}'
        )
    stats = task.get("ReplicationTaskStats", {}) or {}
    return TaskHealth(
        task_arn=task.get("ReplicationTaskArn", ""),
        status=status,
        tables_errored=int(stats.get("TablesErrored", 0) or 0),
    )


def describe_task(dms: Any, task_arn: str) -> dict[str, Any]:
    response = dms.describe_replication_tasks(
        Filters=[{"Name": "replication-task-arn", "Values": [task_arn]}], WithoutSettings=True
    )
    tasks = response.get("ReplicationTasks", [])
    if not tasks:
        raise DmsTaskFailedError(f"DMS task {task_arn} does not exist")
    return tasks[0]

"""Table reloads during CDC: wait for DMS to finish (re)loading a table, then have it applied, then retire it.

The drain records each LOAD file it sees during CDC as a reload request of its table (the store both share:
`lake_contracts.reload_requests`, where the request's key and body are described). A corrupt request (not a
JSON object, a time that is not ISO-8601, a count that is not one, a name its key does not give) is set aside
under `<prefix>/reloads-failed/` and reported (alarmed) while the others proceed. Here:
- `check`: which requests DMS has finished: the table's statistics say "Table completed" with a
  FullLoadEndTime at or after the newest LOAD file of the request (that load wrote them all). "Table error"
  is reported with DMS's reason (alarmed; the request stays). A request whose full-load run failed waits
  out a backoff (5 min, doubling, at most 6 h) before it is ready again: retried later, never dropped.
- `failed`: the full-load run failed: count the attempt (for the backoff), keep the request.
The `done` action (the full-load run of those tables succeeded) is the store's `retire_requests`: each request
is retired unless a LOAD file arrived after the check (another reload), which then stays pending. Idempotent."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError
from lake_contracts.layout import new_reload_run_id
from lake_contracts.reload_requests import (
    ReloadRequestStore,
    read_requests,
    record_failed_attempt,
)
from lake_contracts.times import iso, parse_time

COMPLETED = "Table completed"
ERRORED = ("Table error", "Error")
BACKOFF_FIRST = timedelta(minutes=5)
BACKOFF_MAX = timedelta(hours=6)


def backoff(attempts: int) -> timedelta:
    if attempts <= 0:
        return timedelta(0)
    return min(BACKOFF_FIRST * 2 ** (attempts - 1), BACKOFF_MAX)


def table_statistics(dms: Any, task_arn: str) -> dict[str, dict[str, Any]]:
    """DescribeTableStatistics of the task, by `schema.table`."""
    found: dict[str, dict[str, Any]] = {}
    marker: str | None = None
    while True:
        request: dict[str, Any] = {"ReplicationTaskArn": task_arn, "MaxRecords": 500}
        if marker:
            request["Marker"] = marker
        response = dms.describe_table_statistics(**request)
        for statistics in response.get("TableStatistics", []):
            found[f"{statistics.get('SchemaName')}.{statistics.get('TableName')}"] = statistics
        marker = response.get("Marker")
        if not marker:
            return found


def task_failure(dms: Any, task_arn: str) -> str:
    try:
        task = dms.describe_replication_tasks(
            Filters=[{"Name": "replication-task-arn", "Values": [task_arn]}], WithoutSettings=True
        )["ReplicationTasks"][0]
    except (ClientError, IndexError, KeyError):
        return "no reason given"
    return str(task.get("LastFailureMessage") or task.get("StopReason") or "no reason given")


@dataclass
class CheckResult:
    ready: list[str] = field(default_factory=list)
    waiting: list[dict[str, str]] = field(default_factory=list)
    errored: list[dict[str, str]] = field(default_factory=list)
    checked: dict[str, str] = field(default_factory=dict)  # table -> last_seen of the request checked
    set_aside: list[dict[str, str]] = field(default_factory=list)  # corrupt requests moved aside

    def as_dict(self, store: ReloadRequestStore, now: datetime) -> dict[str, Any]:
        run_id = new_reload_run_id(now)
        return {
            "ready": self.ready,
            "has_ready": bool(self.ready),
            # The full-load job's --tables as a JSON array: names keep commas and spaces exactly.
            "tables_argument": json.dumps(self.ready, ensure_ascii=False),
            "set_aside": self.set_aside,
            "run_id": run_id,
            "report_uri": f"s3://{store.bucket}/{store.layout.report_key(run_id)}",
            "waiting": self.waiting,
            "errored": self.errored,
            "checked": self.checked,
        }


def check(
    s3: Any, dms: Any, store: ReloadRequestStore, task_arn: str, now: datetime | None = None
) -> dict[str, Any]:
    moment = now or datetime.now(UTC)
    result = CheckResult()
    requests = read_requests(s3, store, result.set_aside, moment)
    if not requests:
        return result.as_dict(store, moment)
    statistics = table_statistics(dms, task_arn)
    failure: str | None = None
    for table, request in sorted(requests.items()):
        last_seen = parse_time(request.get("last_seen")) or moment
        stats = statistics.get(table)
        state = str((stats or {}).get("TableState", "not in the task's table statistics"))
        ended = parse_time((stats or {}).get("FullLoadEndTime"))
        if state in ERRORED:
            failure = failure or task_failure(dms, task_arn)
            result.errored.append({"table": table, "reason": f"DMS reports {state} for {table}: {failure}"})
            continue
        finished = state == COMPLETED and ended is not None and ended >= last_seen.replace(microsecond=0)
        if not finished:
            result.waiting.append({"table": table, "reason": f"DMS: {state}, full load ended {ended}"})
            continue
        retry_at = (parse_time(request.get("last_attempt_at")) or moment) + backoff(
            int(request.get("attempts", 0))
        )
        if retry_at > moment:
            result.waiting.append(
                {"table": table, "reason": f"a failed reload run is retried at {iso(retry_at)}"}
            )
            continue
        result.ready.append(table)
        result.checked[table] = str(request.get("last_seen", ""))
    return result.as_dict(store, moment)


def failed(
    s3: Any, store: ReloadRequestStore, tables: list[str], error: str, now: datetime | None = None
) -> dict[str, Any]:
    moment = now or datetime.now(UTC)
    recorded: list[dict[str, Any]] = []
    set_aside: list[dict[str, str]] = []
    for table in tables:
        request = record_failed_attempt(s3, store, table, error, moment, set_aside)
        if request is None:
            continue
        recorded.append(
            {
                "table": table,
                "attempts": request["attempts"],
                "retry_at": iso(moment + backoff(request["attempts"])),
            }
        )
    return {"recorded": recorded, "set_aside": set_aside}

"""Table reloads during CDC: wait for DMS to finish (re)loading a table, then have it applied, then retire it.

The drain records each LOAD file it sees during CDC as a reload request of its table
(`<prefix>/reloads/<schema>.<table>.json`: the files, when S3 first and last saw one). Here:
- `check`: which requests DMS has finished: the table's statistics say "Table completed" with a
  FullLoadEndTime at or after the newest LOAD file of the request (that load wrote them all). "Table error"
  is reported with DMS's reason (alarmed; the request stays). A request whose full-load run failed waits
  out a backoff (5 min, doubling, at most 6 h) before it is ready again: retried later, never dropped.
- `done`: the full-load run of those tables succeeded: retire each request, unless a LOAD file arrived
  after the check (another reload), which then stays pending and is applied again. Idempotent.
- `failed`: the full-load run failed: count the attempt (for the backoff), keep the request.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

MISSING = ("NoSuchKey", "404", "NotFound")
COMPLETED = "Table completed"
ERRORED = ("Table error", "Error")
BACKOFF_FIRST = timedelta(minutes=5)
BACKOFF_MAX = timedelta(hours=6)


@dataclass(frozen=True)
class Store:
    bucket: str
    prefix: str = "manifests"

    @property
    def reloads_prefix(self) -> str:
        return f"{self.prefix}/reloads/"

    def key(self, table: str) -> str:
        return f"{self.reloads_prefix}{table}.json"

    def report_uri(self, run_id: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}/reports/{run_id}.json"


def parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def backoff(attempts: int) -> timedelta:
    if attempts <= 0:
        return timedelta(0)
    return min(BACKOFF_FIRST * 2 ** (attempts - 1), BACKOFF_MAX)


def read_requests(s3: Any, store: Store) -> dict[str, dict[str, Any]]:
    requests: dict[str, dict[str, Any]] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=store.bucket, Prefix=store.reloads_prefix
    ):
        for item in page.get("Contents", []):
            if not item["Key"].endswith(".json"):
                continue
            table = item["Key"][len(store.reloads_prefix) : -len(".json")]
            request = _read(s3, store, table)
            if request is not None:
                requests[table] = request
    return requests


def _read(s3: Any, store: Store, table: str) -> dict[str, Any] | None:
    try:
        return json.loads(s3.get_object(Bucket=store.bucket, Key=store.key(table))["Body"].read())
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in MISSING:
            return None
        raise


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

    def as_dict(self, store: Store, now: datetime) -> dict[str, Any]:
        run_id = f"reload-{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
        return {
            "ready": self.ready,
            "has_ready": bool(self.ready),
            "tables_argument": ",".join(self.ready),
            "run_id": run_id,
            "report_uri": store.report_uri(run_id),
            "waiting": self.waiting,
            "errored": self.errored,
            "checked": self.checked,
        }


def check(s3: Any, dms: Any, store: Store, task_arn: str, now: datetime | None = None) -> dict[str, Any]:
    moment = now or datetime.now(UTC)
    requests = read_requests(s3, store)
    result = CheckResult()
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


def done(s3: Any, store: Store, checked: dict[str, str]) -> dict[str, list[str]]:
    retired, kept = [], []
    for table, last_seen in sorted(checked.items()):
        request = _read(s3, store, table)
        if request is None:
            retired.append(table)  # a retried retire
        elif str(request.get("last_seen", "")) != last_seen:
            kept.append(table)  # DMS wrote LOAD files after the check: reloaded again later
        else:
            s3.delete_object(Bucket=store.bucket, Key=store.key(table))
            retired.append(table)
    return {"retired": retired, "kept": kept}


def failed(
    s3: Any, store: Store, tables: list[str], error: str, now: datetime | None = None
) -> dict[str, Any]:
    moment = now or datetime.now(UTC)
    recorded = []
    for table in tables:
        request = _read(s3, store, table)
        if request is None:
            continue
        request["attempts"] = int(request.get("attempts", 0)) + 1
        request["last_attempt_at"] = iso(moment)
        request["last_error"] = error[:2000]
        s3.put_object(
            Bucket=store.bucket,
            Key=store.key(table),
            Body=json.dumps(request).encode(),
            ContentType="application/json",
        )
        recorded.append(
            {
                "table": table,
                "attempts": request["attempts"],
                "retry_at": iso(moment + backoff(request["attempts"])),
            }
        )
    return {"recorded": recorded}

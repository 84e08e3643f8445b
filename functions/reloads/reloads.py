"""Table reloads during CDC: wait for DMS to finish (re)loading a table, then have it applied, then retire it.

The drain records each LOAD file it sees during CDC as a reload request of its table
(`<prefix>/reloads/<encoded schema.table>.json`, the name percent-encoded outside [A-Za-z0-9._-] and carried
exactly as `table` in the body: the files, when S3 first and last saw one). A corrupt request (not a JSON
object, a time that is not ISO-8601, a count that is not one, a name its key does not give) is set aside
under `<prefix>/reloads-failed/` and reported (alarmed) while the others proceed. Here:
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
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError
from lake_contracts.documents import CorruptReloadRequestError, check_reload_request, read_reload_request
from lake_contracts.layout import ArtifactsLayout, new_reload_run_id
from lake_contracts.names import decode_name
from lake_contracts.s3 import delete_if_unchanged, is_conflict, is_missing
from lake_contracts.times import iso, parse_time

CorruptRequestError = CorruptReloadRequestError
COMPLETED = "Table completed"
ERRORED = ("Table error", "Error")
BACKOFF_FIRST = timedelta(minutes=5)
BACKOFF_MAX = timedelta(hours=6)


@dataclass(frozen=True)
class Store:
    """The artifacts bucket; the keys in it are the shared layout's."""

    bucket: str
    prefix: str = "manifests"

    @property
    def layout(self) -> ArtifactsLayout:
        return ArtifactsLayout(self.prefix)

    @property
    def reloads_prefix(self) -> str:
        return self.layout.reloads_prefix

    def key(self, table: str) -> str:
        return self.layout.reload_key(table)

    def aside_key(self, key: str, now: datetime) -> str:
        return self.layout.reload_aside_key(key, now)

    def report_uri(self, run_id: str) -> str:
        return f"s3://{self.bucket}/{self.layout.report_key(run_id)}"


def backoff(attempts: int) -> timedelta:
    if attempts <= 0:
        return timedelta(0)
    return min(BACKOFF_FIRST * 2 ** (attempts - 1), BACKOFF_MAX)


def read_requests(
    s3: Any, store: Store, set_aside: list[dict[str, str]], now: datetime
) -> dict[str, dict[str, Any]]:
    """The requests by table; a corrupt one is moved to `reloads-failed/` and appended to `set_aside`."""
    requests: dict[str, dict[str, Any]] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=store.bucket, Prefix=store.reloads_prefix
    ):
        for item in page.get("Contents", []):
            key = item["Key"]
            if not key.endswith(".json") or "/" in key[len(store.reloads_prefix) :]:
                continue
            try:
                try:
                    table = decode_name(key[len(store.reloads_prefix) : -len(".json")])
                except UnicodeDecodeError as error:
                    raise CorruptRequestError(
                        f"reload request {key}: its key is not an encoded name ({error})"
                    ) from None
                request = _read_key(s3, store, key, table)
            except CorruptRequestError as error:
                set_aside.append(_set_aside(s3, store, key, str(error), now))
                continue
            if request is not None and key != store.key(table):
                request = _move_to_encoded_key(s3, store, key, table, request)
            if request is not None:
                requests[table] = request
    return requests


def _move_to_encoded_key(
    s3: Any, store: Store, key: str, table: str, request: dict[str, Any]
) -> dict[str, Any] | None:
    """A request an older drain wrote under the unencoded name (`sales.a,b.json`) moves to the encoded key,
    where `done` and `failed` find it (else it would be reloaded on every loop). If the drain already wrote a
    request there, that one stands (it asks for the same table's reload, with a newer LOAD file)."""
    body = json.dumps(request | {"table": table}).encode()
    try:
        s3.put_object(Bucket=store.bucket, Key=store.key(table), Body=body, IfNoneMatch="*")
        moved: dict[str, Any] | None = request
    except ClientError as error:
        if not _changed_meanwhile(error):
            raise
        moved = None  # listed under its own key as well
    s3.delete_object(Bucket=store.bucket, Key=key)
    return moved


def check_request(request: Any, key: str, table: str) -> dict[str, Any]:
    """A reload request as the drain writes it; anything else is a CorruptRequestError naming the object."""
    return check_reload_request(request, key, table)


def _read_key(s3: Any, store: Store, key: str, table: str) -> dict[str, Any] | None:
    return _read_versioned(s3, store, key, table)[0]


def _read_versioned(s3: Any, store: Store, key: str, table: str) -> tuple[dict[str, Any] | None, str]:
    """The request and its ETag (None, "" when there is none)."""
    try:
        current = s3.get_object(Bucket=store.bucket, Key=key)
        body, etag = current["Body"].read(), str(current["ETag"])
    except ClientError as error:
        if is_missing(error):
            return None, ""
        raise
    return read_reload_request(body, key, table), etag


def _read(s3: Any, store: Store, table: str) -> dict[str, Any] | None:
    return _read_key(s3, store, store.key(table), table)


def _changed_meanwhile(error: ClientError) -> bool:
    return is_conflict(error) or is_missing(error)


def _set_aside(s3: Any, store: Store, key: str, reason: str, now: datetime) -> dict[str, str]:
    target = store.aside_key(key, now)
    s3.copy_object(
        Bucket=store.bucket,
        Key=target,
        CopySource={"Bucket": store.bucket, "Key": key},
        Metadata={"reason": reason[:1000].encode("ascii", "replace").decode()},
        MetadataDirective="REPLACE",
    )
    s3.delete_object(Bucket=store.bucket, Key=key)
    return {"request_key": key, "set_aside_key": target, "reason": reason}


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

    def as_dict(self, store: Store, now: datetime) -> dict[str, Any]:
        run_id = new_reload_run_id(now)
        return {
            "ready": self.ready,
            "has_ready": bool(self.ready),
            # The full-load job's --tables as a JSON array: names keep commas and spaces exactly.
            "tables_argument": json.dumps(self.ready, ensure_ascii=False),
            "set_aside": self.set_aside,
            "run_id": run_id,
            "report_uri": store.report_uri(run_id),
            "waiting": self.waiting,
            "errored": self.errored,
            "checked": self.checked,
        }


def check(s3: Any, dms: Any, store: Store, task_arn: str, now: datetime | None = None) -> dict[str, Any]:
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


def done(s3: Any, store: Store, checked: dict[str, str], now: datetime | None = None) -> dict[str, Any]:
    retired, kept, set_aside = [], [], []
    for table, last_seen in sorted(checked.items()):
        try:
            request, etag = _read_versioned(s3, store, store.key(table), table)
        except CorruptRequestError as error:
            set_aside.append(_set_aside(s3, store, store.key(table), str(error), now or datetime.now(UTC)))
            continue
        if request is None:
            retired.append(table)  # a retried retire
        elif str(request.get("last_seen", "")) != last_seen:
            kept.append(table)  # DMS wrote LOAD files after the check: reloaded again later
        elif delete_if_unchanged(s3, store.bucket, store.key(table), etag):
            retired.append(table)
        else:
            kept.append(table)  # the drain recorded a LOAD file between the read and the delete
    return {"retired": retired, "kept": kept, "set_aside": set_aside}


def failed(
    s3: Any, store: Store, tables: list[str], error: str, now: datetime | None = None
) -> dict[str, Any]:
    moment = now or datetime.now(UTC)
    recorded, set_aside = [], []
    for table in tables:
        for _ in range(3):  # the drain may add a LOAD file meanwhile: read again, count once
            try:
                request, etag = _read_versioned(s3, store, store.key(table), table)
            except CorruptRequestError as problem:
                set_aside.append(_set_aside(s3, store, store.key(table), str(problem), moment))
                request = None
            if request is None:
                break
            request["attempts"] = int(request.get("attempts", 0)) + 1
            request["last_attempt_at"] = iso(moment)
            request["last_error"] = error[:2000]
            try:
                s3.put_object(
                    Bucket=store.bucket,
                    Key=store.key(table),
                    Body=json.dumps(request).encode(),
                    ContentType="application/json",
                    IfMatch=etag,
                )
            except ClientError as problem:
                if not _changed_meanwhile(problem):
                    raise
                request = None
                continue
            break
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

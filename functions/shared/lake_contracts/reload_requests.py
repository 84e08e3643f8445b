"""The reload requests in the artifacts bucket: one store for both of their writers.

A request is `<prefix>/reloads/<encoded schema.table>.json` (the name percent-encoded by `names.encode_name`,
carried exactly as `table` in the body, read and checked by `documents.read_reload_request`). The drain adds
the LOAD files it sees to their table's request (`record_load_files`) and lists the tables waiting for a
reload (`pending_reload_tables`); the reloads function reads them all (`read_requests`), retires the ones
applied (`retire_requests`) and counts a failed run on them (`record_failed_attempt`). A corrupt request is
never dropped: it is kept under `<prefix>/reloads-failed/` with the reason in its metadata.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from botocore.exceptions import ClientError

from lake_contracts.documents import CorruptReloadRequestError, read_reload_request
from lake_contracts.layout import ArtifactsLayout
from lake_contracts.names import decode_name
from lake_contracts.s3 import delete_if_unchanged, is_conflict, is_missing
from lake_contracts.times import iso, parse_time

# (key, document, the ETag it was read at or None for a new object) -> the ETag written. The drain's writer
# is conditional on that version and fenced: a lost condition raises rather than overwrites.
ConditionalPut = Callable[[str, dict[str, Any], str | None], str]


class LoadFileSeen(Protocol):
    """A LOAD file DMS wrote during CDC, as the drain read it from its event."""

    @property
    def qualified_table(self) -> str: ...

    @property
    def uri(self) -> str: ...

    @property
    def created(self) -> datetime: ...


@dataclass(frozen=True)
class ReloadRequestStore:
    """The artifacts bucket's reload requests; the keys in it are the shared layout's."""

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


def _request_keys(s3: Any, store: ReloadRequestStore) -> Iterator[tuple[str, str]]:
    """Each request's key and the encoded name in it (folders below the prefix are not requests)."""
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=store.bucket, Prefix=store.reloads_prefix
    ):
        for item in page.get("Contents", []):
            key = item["Key"]
            segment = key[len(store.reloads_prefix) :]
            if segment.endswith(".json") and "/" not in segment:
                yield key, segment[: -len(".json")]


def pending_reload_tables(s3: Any, store: ReloadRequestStore) -> list[str]:
    """Tables with a reload request not yet applied (names decoded from their keys)."""
    tables = []
    for _, encoded in _request_keys(s3, store):
        try:
            tables.append(decode_name(encoded))
        except UnicodeDecodeError:
            tables.append(encoded)  # not ours; the reloads function sets it aside
    return sorted(tables)


def _stored(s3: Any, store: ReloadRequestStore, key: str) -> tuple[bytes, str] | None:
    """The stored document and its ETag, or None when there is none."""
    try:
        current = s3.get_object(Bucket=store.bucket, Key=key)
    except ClientError as error:
        if is_missing(error):
            return None
        raise
    return current["Body"].read(), str(current["ETag"])


def read_request(
    s3: Any, store: ReloadRequestStore, key: str, table: str
) -> tuple[dict[str, Any] | None, str]:
    """The request and its ETag (None, "" when there is none); a corrupt one is CorruptReloadRequestError."""
    stored = _stored(s3, store, key)
    if stored is None:
        return None, ""
    body, etag = stored
    return read_reload_request(body, key, table), etag


def _reason_metadata(reason: str) -> dict[str, str]:
    return {"reason": reason[:1000].encode("ascii", "replace").decode()}


def move_aside(s3: Any, store: ReloadRequestStore, key: str, reason: str, now: datetime) -> dict[str, str]:
    """Move a corrupt request to `reloads-failed/` (copied with the reason, then deleted): what is reported."""
    target = store.aside_key(key, now)
    s3.copy_object(
        Bucket=store.bucket,
        Key=target,
        CopySource={"Bucket": store.bucket, "Key": key},
        Metadata=_reason_metadata(reason),
        MetadataDirective="REPLACE",
    )
    s3.delete_object(Bucket=store.bucket, Key=key)
    return {"request_key": key, "set_aside_key": target, "reason": reason}


def record_load_files(
    s3: Any, store: ReloadRequestStore, files: Iterable[LoadFileSeen], now: datetime, put: ConditionalPut
) -> int:
    """Add LOAD files to their table's reload request (created at the first one; written with `put`,
    conditionally on the version read). A corrupt request is kept aside under `reloads-failed/` and replaced
    by a new one: the reload it asked for is still done, by the new request. Returns how many were set aside."""
    set_aside = 0
    by_table: dict[str, list[LoadFileSeen]] = {}
    for load_file in files:
        by_table.setdefault(load_file.qualified_table, []).append(load_file)
    for table, found in by_table.items():
        key = store.key(table)
        etag: str | None = None
        fresh = {"version": 1, "table": table, "recorded_at": iso(now), "files": [], "attempts": 0}
        request: dict[str, Any] = fresh
        stored = _stored(s3, store, key)
        if stored is not None:
            body, etag = stored
            try:
                request = read_reload_request(body, key, table)
            except CorruptReloadRequestError as error:
                # The version read is kept as it was; the new request replaces it conditionally on it.
                s3.put_object(
                    Bucket=store.bucket,
                    Key=store.aside_key(key, now),
                    Body=body,
                    Metadata=_reason_metadata(str(error)),
                )
                request = fresh
                set_aside += 1
        request["table"] = table
        times = [f.created for f in found]
        known = [request.get("first_seen"), request.get("last_seen")]
        times += [moment for t in known if isinstance(t, str) and (moment := parse_time(t)) is not None]
        request["files"] = sorted(set(request.get("files", [])) | {f.uri for f in found})
        request["first_seen"] = iso(min(times))
        request["last_seen"] = iso(max(times))
        put(key, request, etag)
    return set_aside


def _changed_meanwhile(error: ClientError) -> bool:
    return is_conflict(error) or is_missing(error)


def read_requests(
    s3: Any, store: ReloadRequestStore, set_aside: list[dict[str, str]], now: datetime
) -> dict[str, dict[str, Any]]:
    """The requests by table; a corrupt one is moved to `reloads-failed/` and appended to `set_aside`."""
    requests: dict[str, dict[str, Any]] = {}
    for key, encoded in _request_keys(s3, store):
        try:
            try:
                table = decode_name(encoded)
            except UnicodeDecodeError as error:
                raise CorruptReloadRequestError(
                    f"reload request {key}: its key is not an encoded name ({error})"
                ) from None
            request = read_request(s3, store, key, table)[0]
        except CorruptReloadRequestError as error:
            set_aside.append(move_aside(s3, store, key, str(error), now))
            continue
        if request is not None and key != store.key(table):
            request = _move_to_encoded_key(s3, store, key, table, request)
        if request is not None:
            requests[table] = request
    return requests


def _move_to_encoded_key(
    s3: Any, store: ReloadRequestStore, key: str, table: str, request: dict[str, Any]
) -> dict[str, Any] | None:
    """A request an older drain wrote under the unencoded name (`sales.a,b.json`) moves to the encoded key,
    where `retire_requests` and `record_failed_attempt` find it (else it would be reloaded on every loop). If
    the drain already wrote a request there, that one stands (it asks for the same table's reload, with a
    newer LOAD file)."""
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


def retire_requests(
    s3: Any, store: ReloadRequestStore, checked: dict[str, str], now: datetime | None = None
) -> dict[str, Any]:
    """The reload run of the `checked` tables (table -> `last_seen` when checked) succeeded: delete each
    request, unless a LOAD file arrived after the check (another reload: it stays pending). Idempotent."""
    retired, kept, set_aside = [], [], []
    for table, last_seen in sorted(checked.items()):
        try:
            request, etag = read_request(s3, store, store.key(table), table)
        except CorruptReloadRequestError as error:
            set_aside.append(move_aside(s3, store, store.key(table), str(error), now or datetime.now(UTC)))
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


def record_failed_attempt(
    s3: Any, store: ReloadRequestStore, table: str, error: str, now: datetime, set_aside: list[dict[str, str]]
) -> dict[str, Any] | None:
    """Count a failed reload run on the table's request (`attempts`, `last_attempt_at`, `last_error`): the
    request as written, or None when there is none (a corrupt one is moved aside into `set_aside`)."""
    request: dict[str, Any] | None = None
    for _ in range(3):  # the drain may add a LOAD file meanwhile: read again, count once
        try:
            request, etag = read_request(s3, store, store.key(table), table)
        except CorruptReloadRequestError as problem:
            set_aside.append(move_aside(s3, store, store.key(table), str(problem), now))
            request = None
        if request is None:
            break
        request["attempts"] = int(request.get("attempts", 0)) + 1
        request["last_attempt_at"] = iso(now)
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
    return request

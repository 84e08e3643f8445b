"""Drain the FIFO queue of new DMS files into ONE manifest: the batch of one Glue CDC run.

In-flight messages of a FIFO message group block further receives of that group, and S3 events all
share one group, so a drain that kept its messages in flight could take only 10 files per run. The
hand-off is durable instead: each received page is first written into the pending manifest on S3,
and only then deleted from the queue. The manifest is the unit of retry: it stays under `pending/`
until the CDC run that applied it succeeds (then the acknowledge step moves it to `done/`); a crash
between the write and the delete at worst lists a file in two manifests, which the CDC job makes
harmless.

Because a page leaves the queue within the drain's own run, the drain receives with a visibility
timeout just longer than that run (not the queue's, which outlasts a CDC run): if the Lambda dies
mid-page, the group is blocked for minutes, not for a whole CDC timeout.

Every message is judged on its own: anything that is not an S3 "Object Created" event of a DMS file of
the raw bucket below the DMS prefix goes to the dead-letter queue with the reason, whatever is wrong
with it. Full-load (`LOAD*`) files never enter a manifest: those created before the full-load job started
were read by it; a later one means DMS reloaded its table, and is recorded as a reload request for that
table (`<prefix>/reloads/<schema>.<table>.json`) before its message is deleted.

A pending manifest whose run keeps failing is handed out at most `max_manifest_attempts` times; a corrupt
one (unreadable, not a manifest) is not handed out at all. Either is then moved to `failed/` and the drain
goes on with new files (`continue`) or refuses to (`stop`), as configured. Each move is reported to the
caller's `on_moved_aside` as it happens, so its alarm is raised even if the rest of the drain fails.

Every write is fenced (`DrainFence`, docs/CONTRACTS.md "Fencing the Lambdas' writes"): the lease, the newest
drain of the execution, and the manifest's version (If-None-Match / If-Match), so two drains at once cannot
both write and correctness needs no reserved concurrency.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from aws_lambda_powertools.utilities.parser.models import S3EventNotificationEventBridgeModel
from botocore.exceptions import ClientError
from lake_contracts.documents import (
    CorruptManifestError,
    CorruptReloadRequestError,
    Manifest,
    read_manifest,
    read_reload_request,
)
from lake_contracts.layout import ArtifactsLayout, new_run_id, run_id_time
from lake_contracts.names import (
    LOAD_FILE,
    FileKind,
    decode_key,  # noqa: F401 - the event-key rule, named where the drain is read
    decode_name,
    dms_layout,
    key_readings,
    unusable_name,
)
from lake_contracts.s3 import (
    LeaseLostError,
    check_lease,
    delete_if_unchanged,
    error_code,
    is_conflict,
    is_missing,
)
from lake_contracts.times import aware, iso, parse_time

RECEIVE_PAGE = 10  # SQS's maximum per ReceiveMessage
MAX_OBJECT_SIZE = 5 * 1024**4  # S3's largest object (5 TiB)
StuckBatchPolicy = Literal["continue", "stop"]
# Called with {"manifest_key", "failed_key", "reason"} right after a pending manifest was moved to failed/.
MovedAsideReporter = Callable[[dict[str, str]], None]


def _ignore_moved_aside(moved: dict[str, str]) -> None:
    """The default reporter: the result's `moved_aside` lists the moves of a drain that returns."""


@dataclass(frozen=True)
class DrainLimits:
    max_files: int = 500
    max_bytes: int = 2 * 1024**3
    time_budget_seconds: float = 60.0
    wait_seconds: int = 1
    # How long a received page stays invisible: must outlast the rest of the Lambda's run.
    visibility_timeout_seconds: int = 330
    # The queue's redrive maxReceiveCount: every receive counts, so a message is given back only while
    # it keeps a margin below it (else it is taken, and the byte bound is exceeded by that page).
    max_receive_count: int = 5
    # How often a pending manifest is handed out to a CDC run before it is moved aside.
    max_manifest_attempts: int = 3
    on_stuck_batch: StuckBatchPolicy = "continue"


@dataclass(frozen=True)
class Locations:
    """The drain's queues and buckets; its keys in the artifacts bucket are the shared layout's."""

    queue_url: str
    dead_letter_queue_url: str
    artifacts_bucket: str
    manifest_prefix: str = "manifests"
    raw_bucket: str = ""  # empty: any bucket (tests of the manifest logic only)
    raw_prefix: str = "dms"

    @property
    def layout(self) -> ArtifactsLayout:
        return ArtifactsLayout(self.manifest_prefix)

    def pending_key(self, run_id: str) -> str:
        return self.layout.pending_key(run_id)

    @property
    def pending_prefix(self) -> str:
        return self.layout.pending_prefix

    def failed_key(self, name: str) -> str:
        return self.layout.failed_key(name)

    @property
    def reloads_prefix(self) -> str:
        return self.layout.reloads_prefix

    def reload_key(self, table: str) -> str:
        return self.layout.reload_key(table)

    @property
    def claim_key(self) -> str:
        """The drain that may write: the newest invocation (`DrainFence`)."""
        return self.layout.claim_key

    @property
    def full_load_marker_key(self) -> str:
        return self.layout.full_load_marker_key


class PoisonMessageError(ValueError):
    """A queue message that is not an S3 "Object Created" event of a DMS file of the raw zone."""


class StuckBatchError(RuntimeError):
    """A pending manifest failed too often (or is corrupt) and the policy is to stop."""


@dataclass(frozen=True)
class DmsFile:
    """One DMS file named by an S3 "Object Created" event."""

    bucket: str
    key: str
    schema: str
    table: str
    size: int
    created: datetime
    kind: FileKind

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    @property
    def qualified_table(self) -> str:
        return f"{self.schema}.{self.table}"


def _size(value: float | None) -> int:
    if value is None:
        raise PoisonMessageError("the event has no object size")
    if not math.isfinite(value) or value != int(value) or not 0 <= value <= MAX_OBJECT_SIZE:
        raise PoisonMessageError(f"object size {value!r} is not a byte count")
    return int(value)


# (bucket, key) -> the object's LastModified, or None when there is no such object
ObjectExists = Callable[[str, str], datetime | None]


def parse_file_event(
    body: str, raw_bucket: str = "", raw_prefix: str = "dms", exists: ObjectExists | None = None
) -> DmsFile:
    """The DMS file an EventBridge "Object Created" event (as the rule delivers it) names. Anything else,
    or anything malformed, raises PoisonMessageError with the reason. With `exists` (bucket, key ->
    LastModified or None), the key is the first of its readings (`key_readings`) that exists, and an event
    whose object exists under none is poison too; the file was created when S3 wrote it (LastModified), if
    that is before the event's time (EventBridge stamps the event when it sends it, later on a busy
    emulator)."""
    try:
        event = S3EventNotificationEventBridgeModel.model_validate_json(body)
    except Exception as error:  # any parse failure (type, depth, size) is this message's fault alone
        raise PoisonMessageError(f"not an S3 Object Created event: {type(error).__name__}: {error}") from None
    if event.source != "aws.s3" or event.detail_type != "Object Created":
        raise PoisonMessageError(f"unexpected event {event.source!r} / {event.detail_type!r}")
    bucket = event.detail.bucket.name
    if raw_bucket and bucket != raw_bucket:
        raise PoisonMessageError(f"bucket {bucket!r} is not the raw bucket {raw_bucket!r}")
    encoded = event.detail.object.key
    readings = key_readings(encoded)
    if not readings:
        raise PoisonMessageError(f"object key {encoded[:300]!r} is not URL-encoded UTF-8")
    written: datetime | None = None
    if exists is None:
        key = readings[0]
    else:
        found = None
        for reading in readings:
            written = exists(bucket, reading)
            if written is not None:
                found = reading
                break
        if found is None:
            raise PoisonMessageError(
                f"no object s3://{bucket}/{readings[0]} (the event's key {encoded[:300]!r}; tried"
                f" {readings[1:] or 'no other reading'}): removed since (a table reload removes its old"
                " files: nothing to apply) or never there"
            )
        key = found
    schema, table, kind = dms_layout(key, raw_prefix)
    if not schema:
        raise PoisonMessageError(
            f"s3://{bucket}/{key} is not a DMS file <{raw_prefix}>/<schema>/<table>/[<date folders>/]<file>"
            " named LOAD…(.csv|.csv.gz|.parquet) or <yyyymmdd-hhmmss…>(.csv|.csv.gz|.parquet)"
        )
    unusable = [name for name in (schema, table) if unusable_name(name)]
    if unusable:
        # the rule of spark_jobs/lakehouse/base/names.py check_source_name: the jobs refuse such a table, and
        # the reloads function refuses its name, so its reload request could never be retired
        raise PoisonMessageError(
            f"s3://{bucket}/{key}: a schema or table named {unusable[0]!r} (control characters, '.' or '..')"
        )
    created = aware(event.time)
    if written is not None:
        created = min(created, aware(written))
    return DmsFile(bucket, key, schema, table, _size(event.detail.object.size), created, kind)


def pending_manifests(s3: Any, where: Locations) -> list[str]:
    """Manifests left pending by a failed run or a stopped execution: they go first, oldest first."""
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=where.artifacts_bucket, Prefix=where.pending_prefix
    ):
        keys += [item["Key"] for item in page.get("Contents", []) if item["Key"].endswith(".json")]
    return sorted(keys)


@dataclass
class DrainFence:
    """What makes a drain's writes safe without reserved concurrency (issue 27). Before each write the drain
    checks that its execution still holds the pipeline lease and that it is still the newest drain of that
    execution (`claim`: a retry of the drain racing the original takes over, the original stops), and every
    write of a pending manifest is conditional on the version it read (created with If-None-Match, rewritten
    with If-Match on its ETag), so a drain whose manifest was resumed by a successor cannot write into it.
    Any of these failing is a LeaseLostError: the drain writes nothing more."""

    s3: Any
    bucket: str
    lease_key: str
    execution_arn: str
    claim_key: str
    drain_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def claim(self, now: datetime) -> None:
        check_lease(self.s3, self.bucket, self.lease_key, self.execution_arn)
        document = {"execution_arn": self.execution_arn, "drain_id": self.drain_id, "claimed_at": iso(now)}
        _put_json(self.s3, self.bucket, self.claim_key, document)

    def check(self) -> None:
        check_lease(self.s3, self.bucket, self.lease_key, self.execution_arn)
        try:
            claim = json.loads(self.s3.get_object(Bucket=self.bucket, Key=self.claim_key)["Body"].read())
        except ClientError as error:
            if not is_missing(error):
                raise
            claim = {}
        except ValueError:
            claim = {}
        if not isinstance(claim, dict) or claim.get("drain_id") != self.drain_id:
            raise LeaseLostError(
                f"another drain took over s3://{self.bucket}/{self.claim_key} (a retried or concurrent drain of"
                f" {self.execution_arn}): this one writes nothing more"
            )


def put_manifest(s3: Any, bucket: str, key: str, document: dict[str, Any], etag: str | None) -> str:
    """Create (`etag` None: If-None-Match) or rewrite (If-Match `etag`) a pending manifest; its new ETag.
    A lost condition is a LeaseLostError: another drain created or changed it meanwhile."""
    condition = {"IfNoneMatch": "*"} if etag is None else {"IfMatch": etag}
    try:
        response = s3.put_object(
            Bucket=bucket,
            Key=key,
            Body=json.dumps(document).encode(),
            ContentType="application/json",
            **condition,
        )
    except ClientError as error:
        code = error_code(error)
        if is_conflict(error) or (etag is not None and is_missing(error)):
            raise LeaseLostError(
                f"s3://{bucket}/{key} was {'created' if etag is None else 'changed or removed'} by another drain"
                f" ({code}): this one writes nothing more"
            ) from None
        raise
    return str(response["ETag"])


def drain(
    s3: Any,
    sqs: Any,
    where: Locations,
    limits: DrainLimits,
    now: datetime | None = None,
    *,
    on_moved_aside: MovedAsideReporter = _ignore_moved_aside,
    fence: DrainFence | None = None,
) -> dict[str, Any]:
    """Return the batch to apply next: a pending manifest if one exists, else a new one drained from
    the queue (up to the limits), or `has_work: false` when the queue is empty. A pending manifest moved
    aside on the way is passed to `on_moved_aside` at once (and listed in the result's `moved_aside`).
    With a `fence` (the Lambda always passes one), each write first checks it (`DrainFence`)."""
    moment = now or datetime.now(UTC)
    moved_aside: list[dict[str, str]] = []
    check = fence.check if fence is not None else _unfenced
    if fence is not None:
        fence.claim(moment)

    def report_moved_aside(moved: dict[str, str]) -> None:
        moved_aside.append(moved)
        on_moved_aside(moved)

    # A batch with files of a table DMS reloads waits for the reload (the reloads run before the next CDC
    # run, CheckReloads -> RunReload): the files the reload removed would fail it, and so move it aside
    # or, with OnStuckBatch=stop, stop the pipeline before the reload that fixes it could run.
    reloading = set(reloads_pending(s3, where))
    held: list[str] = []
    for key in pending_manifests(s3, where):
        resumed = _resume(s3, where, limits, key, report_moved_aside, check, reloading, held)
        if resumed is not None:
            extra = {"moved_aside": moved_aside, "reloads_pending": reloads_pending(s3, where)}
            return resumed | extra | ({"held_for_reload": held} if held else {})

    manifest = Manifest(new_run_id(moment), moment.strftime("%Y-%m-%dT%H:%M:%SZ"))
    key = where.pending_key(manifest.run_id)
    etag: str | None = None  # the manifest's version as this drain last wrote it
    full_load_started = _full_load_started(s3, where)
    exists = _object_exists(s3) if where.raw_bucket else None
    deadline = time.monotonic() + limits.time_budget_seconds
    counts = {"poison_messages": 0, "skipped_full_load": 0, "duplicates": 0, "reload_files": 0}
    set_aside = 0  # corrupt reload requests replaced (kept under reloads-failed/)
    while len(manifest.files) < limits.max_files and manifest.total_bytes < limits.max_bytes:
        if time.monotonic() > deadline:
            break
        wanted = min(RECEIVE_PAGE, limits.max_files - len(manifest.files))
        page = sqs.receive_message(
            QueueUrl=where.queue_url,
            MaxNumberOfMessages=wanted,
            WaitTimeSeconds=limits.wait_seconds,
            VisibilityTimeout=limits.visibility_timeout_seconds,
            AttributeNames=["SequenceNumber", "MessageGroupId", "ApproximateReceiveCount"],
        ).get("Messages", [])
        if not page:
            break
        sorted_page = _sort_page(sqs, where, page, manifest, limits, full_load_started, exists)
        for name in counts:
            counts[name] += getattr(sorted_page, name)
        # Recorded durably first (reload requests, manifest); only then may the messages leave the queue.
        try:
            if sorted_page.reloads or sorted_page.files:
                check()
            set_aside += _record_reloads(s3, where, sorted_page.reloads, moment)
            if sorted_page.files:
                etag = put_manifest(
                    s3,
                    where.artifacts_bucket,
                    key,
                    manifest.to_dict() | {"files": manifest.files + sorted_page.files},
                    etag,
                )
                manifest.files.extend(sorted_page.files)
        except LeaseLostError:
            # fenced off: give the page back at once, so the lease holder's drain need not wait out its
            # visibility timeout (FIFO returns it first)
            # best effort: they reappear after their visibility timeout anyway
            with contextlib.suppress(ClientError):
                _release(sqs, where.queue_url, sorted_page.leaving + sorted_page.released)
            raise
        if sorted_page.leaving:
            _delete(sqs, where.queue_url, sorted_page.leaving)
        if sorted_page.released:
            _release(sqs, where.queue_url, sorted_page.released)
            break
    pending = reloads_pending(s3, where)
    extra = counts | {"moved_aside": moved_aside, "reloads_pending": pending}
    if set_aside:
        extra["reload_requests_set_aside"] = set_aside
    if manifest.files and _manifest_tables(where, manifest) & set(pending):
        # Kept pending, not handed out, and not counted as an attempt: the drain after the reload gives it out.
        manifest.attempts = 0
        check()
        put_manifest(s3, where.artifacts_bucket, key, manifest.to_dict(), etag)
        held.append(key)
    if held:
        extra["held_for_reload"] = held
    if not manifest.files or key in held:
        return {"has_work": False, "file_count": 0} | extra
    return _result(where, key, manifest, resumed=False, etag=etag) | extra


def _manifest_tables(where: Locations, manifest: Manifest) -> set[str]:
    """The tables (`schema.table`, as reload requests name them) of a manifest's files."""
    tables = set()
    for entry in manifest.files:
        uri = str(entry.get("uri", ""))
        key = uri.split("/", 3)[3] if uri.startswith("s3://") and uri.count("/") >= 3 else ""
        schema, table, _ = dms_layout(key, where.raw_prefix)
        if schema:
            tables.add(f"{schema}.{table}")
    return tables


def _reloaded_since(s3: Any, where: Locations, manifest: Manifest, tables: set[str]) -> set[str]:
    """Of `tables`, those with a file of the manifest gone from the raw zone and a LOAD file written after
    the manifest was: DMS reloads them (it empties a reloaded table's folder, then writes LOAD files), and
    their reload requests are still in the queue. Only with the raw bucket known (the Lambda's)."""
    if not where.raw_bucket:
        return set()
    try:
        created = parse_time(manifest.created_at)
    except ValueError:
        return set()
    if created is None:
        return set()
    uris = manifest.uris
    found = set()
    for table in sorted(tables):
        schema, name = table.split(".", 1)
        prefix = f"{where.raw_prefix.strip('/')}/{schema}/{name}/"
        present: set[str] = set()
        reloaded = False
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=where.raw_bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                present.add(f"s3://{where.raw_bucket}/{item['Key']}")
                if LOAD_FILE.match(item["Key"].rsplit("/", 1)[-1]) and aware(item["LastModified"]) > created:
                    reloaded = True
        mine = {u for u in uris if u.startswith(f"s3://{where.raw_bucket}/{prefix}")}
        if reloaded and mine - present:
            found.add(table)
    return found


def _unfenced() -> None:
    """No fence: tests of the manifest logic alone (the Lambda always fences)."""


def _object_exists(s3: Any) -> ObjectExists:
    def exists(bucket: str, key: str) -> datetime | None:
        try:
            head = s3.head_object(Bucket=bucket, Key=key)
        except ClientError as error:
            if is_missing(error):
                return None
            raise  # 403, throttling: the drain fails (and is retried), the message is not judged
        return head.get("LastModified") or datetime.max.replace(tzinfo=UTC)

    return exists


def _resume(
    s3: Any,
    where: Locations,
    limits: DrainLimits,
    key: str,
    report_moved_aside: MovedAsideReporter,
    check: Callable[[], None] = _unfenced,
    reloading: set[str] | None = None,
    held: list[str] | None = None,
) -> dict[str, Any] | None:
    """Hand out a pending manifest again (one more attempt), or move it aside when it is corrupt or was
    handed out `max_manifest_attempts` times (None: look at the next one). A manifest with files of a table
    being reloaded (in `reloading`, or its files gone and LOAD files newer than it) is held: left pending as
    it is, its key added to `held` (None)."""
    try:
        current = s3.get_object(Bucket=where.artifacts_bucket, Key=key)
        body, etag = current["Body"].read(), str(current["ETag"])
    except ClientError as error:
        if is_missing(error):
            return None  # acknowledged meanwhile
        raise
    try:
        manifest = read_manifest(body, key)
    except CorruptManifestError as error:
        reason = f"corrupt manifest: {error}"
    else:
        tables = _manifest_tables(where, manifest)
        waited = set(manifest.waited_for_reload)
        gone = _reloaded_since(s3, where, manifest, tables - waited) if manifest.attempts else set()
        if tables & (reloading or set()) or gone:
            # Its failures so far were the reload's (files it removed): they don't count. `gone` is asked
            # once: the drain now reads the queue, where the reload's LOAD files are announced.
            if gone or manifest.attempts:
                manifest.attempts, manifest.waited_for_reload = 0, sorted(waited | gone)
                check()
                put_manifest(s3, where.artifacts_bucket, key, manifest.to_dict(), etag)
            if held is not None:
                held.append(key)
            return None
        if manifest.attempts < limits.max_manifest_attempts:
            manifest.attempts += 1
            check()
            etag = put_manifest(s3, where.artifacts_bucket, key, manifest.to_dict(), etag)
            return _result(where, key, manifest, resumed=True, etag=etag)
        reason = f"its CDC run failed {manifest.attempts} times"
    if limits.on_stuck_batch == "stop":
        raise StuckBatchError(f"s3://{where.artifacts_bucket}/{key}: {reason}; policy is to stop")
    check()
    target = where.failed_key(key.rsplit("/", 1)[-1])
    s3.put_object(
        Bucket=where.artifacts_bucket,
        Key=target,
        Body=body,
        Metadata={"reason": reason[:1000].encode("ascii", "replace").decode()},
    )
    if not delete_if_unchanged(s3, where.artifacts_bucket, key, etag):
        raise LeaseLostError(f"s3://{where.artifacts_bucket}/{key} changed meanwhile: not deleted")
    report_moved_aside({"manifest_key": key, "failed_key": target, "reason": reason})
    return None


def _full_load_started(s3: Any, where: Locations) -> datetime | None:
    """When the pipeline's full-load job started: LOAD files created before it were read by it."""
    try:
        body = s3.get_object(Bucket=where.artifacts_bucket, Key=where.full_load_marker_key)["Body"].read()
    except ClientError as error:
        if is_missing(error):
            return None
        raise
    return read_full_load_marker(body)


def read_full_load_marker(document: bytes) -> datetime | None:
    """`started_at` of the full-load marker (manifests/full-load.json), or None when it is unreadable (then
    every LOAD file is a reload request: costs a reload, loses nothing).

    The state machine writes it with aws-sdk:s3:putObject and `"Body.$": "States.JsonToString($.full_load)"`:
    AWS writes that string as is, `{"started_at":"…"}`; LocalStack 2026.3's Step Functions JSON-encodes any
    non-bytes blob parameter, a string too (state_task_service.py `_to_boto_request_value`), so it writes
    `"{\"started_at\":\"…\"}"`, a JSON string holding the object. Both are read; the time is Step
    Functions' `$$.State.EnteredTime` (`…T03:32:48.177403+00:00`) or any ISO-8601 with `Z`."""
    try:
        marker = json.loads(document)
        if isinstance(marker, str):
            marker = json.loads(marker)  # LocalStack's encoding of a string Body (see above)
        started = parse_time(str(marker["started_at"]))
    except (ValueError, KeyError, TypeError):
        return None
    return started


def reloads_pending(s3: Any, where: Locations) -> list[str]:
    """Tables with a reload request not yet applied (names decoded from their keys)."""
    tables = []
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=where.artifacts_bucket, Prefix=where.reloads_prefix
    ):
        for item in page.get("Contents", []):
            segment = item["Key"][len(where.reloads_prefix) :]
            if segment.endswith(".json") and "/" not in segment:
                try:
                    tables.append(decode_name(segment[: -len(".json")]))
                except UnicodeDecodeError:
                    tables.append(segment[: -len(".json")])  # not ours; the reloads function sets it aside
    return sorted(tables)


def _record_reloads(s3: Any, where: Locations, files: list[DmsFile], now: datetime) -> int:
    """Add LOAD files to their table's reload request (created at the first one; written conditionally on
    the version read). A corrupt request is kept aside under `reloads-failed/` and replaced by a new one:
    the reload it asked for is still done, by the new request. Returns how many were set aside."""
    set_aside = 0
    by_table: dict[str, list[DmsFile]] = {}
    for found in files:
        by_table.setdefault(found.qualified_table, []).append(found)
    for table, found in by_table.items():
        key = where.reload_key(table)
        etag: str | None = None
        fresh = {"version": 1, "table": table, "recorded_at": iso(now), "files": [], "attempts": 0}
        request: dict[str, Any] = fresh
        try:
            current = s3.get_object(Bucket=where.artifacts_bucket, Key=key)
            body, etag = current["Body"].read(), str(current["ETag"])
            request = read_reload_request(body, key, table)
        except ClientError as error:
            if not is_missing(error):
                raise
        except CorruptReloadRequestError as error:
            aside = where.layout.reload_aside_key(key, now)
            s3.put_object(
                Bucket=where.artifacts_bucket,
                Key=aside,
                Body=body,
                Metadata={"reason": str(error)[:1000].encode("ascii", "replace").decode()},
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
        put_manifest(s3, where.artifacts_bucket, key, request, etag)
    return set_aside


@dataclass
class SortedPage:
    files: list[dict[str, Any]] = field(default_factory=list)  # entries for the manifest
    reloads: list[DmsFile] = field(default_factory=list)  # LOAD files of reloaded tables
    leaving: list[dict[str, Any]] = field(default_factory=list)  # messages to delete once recorded
    released: list[dict[str, Any]] = field(default_factory=list)  # messages for the next batch
    poison_messages: int = 0
    skipped_full_load: int = 0
    duplicates: int = 0

    @property
    def reload_files(self) -> int:
        return len(self.reloads)


def _sort_page(
    sqs: Any,
    where: Locations,
    page: list[dict[str, Any]],
    manifest: Manifest,
    limits: DrainLimits,
    full_load_started: datetime | None,
    exists: ObjectExists | None = None,
) -> SortedPage:
    """Split a received page: files for the manifest, LOAD files of reloads, messages that may leave the
    queue (those, poison sent to the DLQ, files of the initial full load, duplicates) and, from the first
    file that would break the byte bound on, messages to give back to the queue in their order. A batch
    always takes at least one file."""
    result = SortedPage()
    batch_bytes = manifest.total_bytes
    seen = manifest.uris
    for index, message in enumerate(page):
        try:
            found = parse_file_event(message["Body"], where.raw_bucket, where.raw_prefix, exists)
        except ClientError:
            raise  # S3 failed to answer whether the object exists: not this message's fault
        except Exception as error:  # one bad message never fails the drain: it goes to the DLQ
            reason = (
                str(error) if isinstance(error, PoisonMessageError) else f"{type(error).__name__}: {error}"
            )
            _to_dead_letter_queue(sqs, where, message, reason)
            result.poison_messages += 1
            result.leaving.append(message)
            continue
        if found.kind == "load":
            # Skipped only when created in a whole second before the one the job started in: `created` is
            # at most the write time (LastModified is the write's second, an event is stamped after it), so
            # a file written at or after the start is never skipped; one written in the start's second
            # before it is a reload (S3 says the second only): that costs a reload, it loses nothing.
            if full_load_started is not None and found.created < full_load_started.replace(microsecond=0):
                result.skipped_full_load += 1  # read by the pipeline's full-load job
            else:
                result.reloads.append(found)
            result.leaving.append(message)
            continue
        if found.uri in seen:
            result.duplicates += 1
            result.leaving.append(message)
            continue
        over_bound = (manifest.files or result.files) and batch_bytes + found.size > limits.max_bytes
        if over_bound and _may_give_back(page[index:], limits):
            result.released = page[index:]
            return result
        batch_bytes += found.size
        seen.add(found.uri)
        result.files.append(
            {
                "uri": found.uri,
                "size": found.size,
                "sequence_number": message.get("Attributes", {}).get("SequenceNumber"),
                "message_id": message["MessageId"],
            }
        )
        result.leaving.append(message)
    return result


def _may_give_back(messages: list[dict[str, Any]], limits: DrainLimits) -> bool:
    """Giving a message back costs one receive; keep two receives spare before redrive to the DLQ
    (one for the next batch, one for a drain that dies), so a valid file never ends in the DLQ."""
    received = max(_receive_count(m) for m in messages)
    return received < limits.max_receive_count - 1


def _receive_count(message: dict[str, Any]) -> int:
    try:
        return int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1))
    except (TypeError, ValueError):
        return 1


def _result(
    where: Locations, key: str, manifest: Manifest, resumed: bool, etag: str | None
) -> dict[str, Any]:
    return {
        "manifest_etag": etag,  # the version handed out: the acknowledge retires exactly that one
        "has_work": True,
        "resumed": resumed,
        "run_id": manifest.run_id,
        "manifest_uri": f"s3://{where.artifacts_bucket}/{key}",
        "manifest_key": key,
        "file_count": len(manifest.files),
        "total_bytes": manifest.total_bytes,
        "attempt": manifest.attempts,
    }


def _put_json(s3: Any, bucket: str, key: str, document: dict[str, Any]) -> None:
    s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(document).encode(), ContentType="application/json")


def _delete(sqs: Any, queue_url: str, messages: Iterable[dict[str, Any]]) -> None:
    batch = list(messages)
    for start in range(0, len(batch), RECEIVE_PAGE):
        entries = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
            for i, m in enumerate(batch[start : start + RECEIVE_PAGE])
        ]
        response = sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries)
        if response.get("Failed"):
            raise RuntimeError(f"could not delete drained messages: {response['Failed']}")


def _release(sqs: Any, queue_url: str, messages: list[dict[str, Any]]) -> None:
    """Make messages visible again at once: FIFO returns them first, in order, to the next drain."""
    entries = [
        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
        for i, m in enumerate(messages)
    ]
    sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries)


def _to_dead_letter_queue(sqs: Any, where: Locations, message: dict[str, Any], reason: str) -> None:
    sqs.send_message(
        QueueUrl=where.dead_letter_queue_url,
        MessageBody=message["Body"],
        MessageGroupId="poison",
        MessageDeduplicationId=message["MessageId"],
        MessageAttributes={"reason": {"DataType": "String", "StringValue": reason[:1000] or "unknown"}},
    )


def oldest_moved_aside_days(s3: Any, where: Locations, now: datetime) -> float:
    """Age in days of the oldest batch moved aside (`failed/`), from its run id (when it was drained): its
    changes are at least that old. Requeued after `TombstoneRetentionDays`, its deletes would be older than
    the tombstones that keep a deleted row from coming back; 0 when there is none."""
    oldest: datetime | None = None
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=where.artifacts_bucket, Prefix=where.failed_key("")
    ):
        for item in page.get("Contents", []):
            drained = run_id_time(item["Key"].rsplit("/", 1)[-1].removesuffix(".json"))
            if drained is not None and (oldest is None or drained < oldest):
                oldest = drained
    return 0.0 if oldest is None else max((now - oldest).total_seconds() / 86400, 0.0)

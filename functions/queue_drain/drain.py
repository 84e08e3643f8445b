"""Drain the FIFO queue of new DMS CDC files into ONE manifest: the batch of one Glue CDC run.

In-flight messages of a FIFO message group block further receives of that group, and S3 events all
share one group, so a drain that kept its messages in flight could take only 10 files per run. The
hand-off is durable instead: each received page is first written into the pending manifest on S3,
and only then deleted from the queue. The manifest is the unit of retry: it stays under `pending/`
until the CDC run that applied it succeeds (then the acknowledge step moves it to `done/`); a crash
between the write and the delete at worst lists a file in two manifests, which the CDC job's
watermark makes harmless.

Because a page leaves the queue within the drain's own run, the drain receives with a visibility
timeout just longer than that run (not the queue's, which outlasts a CDC run): if the Lambda dies
mid-page, the group is blocked for minutes, not for a whole CDC timeout.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote_plus

RECEIVE_PAGE = 10  # SQS's maximum per ReceiveMessage


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


@dataclass(frozen=True)
class Locations:
    queue_url: str
    dead_letter_queue_url: str
    artifacts_bucket: str
    manifest_prefix: str = "manifests"

    def pending_key(self, run_id: str) -> str:
        return f"{self.manifest_prefix}/pending/{run_id}.json"

    @property
    def pending_prefix(self) -> str:
        return f"{self.manifest_prefix}/pending/"


@dataclass
class Manifest:
    run_id: str
    created_at: str
    files: list[dict[str, Any]] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(int(f.get("size", 0)) for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {"version": 1, "run_id": self.run_id, "created_at": self.created_at, "files": self.files}


class PoisonMessageError(ValueError):
    """A queue message that is not an S3 "Object Created" event for a file."""


def file_of(message_body: str) -> dict[str, Any]:
    """The S3 object an EventBridge "Object Created" event names (as the rule delivers it)."""
    try:
        event = json.loads(message_body)
        detail = event["detail"]
        bucket = detail["bucket"]["name"]
        key = unquote_plus(detail["object"]["key"])
        size = int(detail["object"].get("size", 0))
    except (ValueError, KeyError, TypeError) as error:
        raise PoisonMessageError(
            f"not an S3 Object Created event: {type(error).__name__}: {error}"
        ) from error
    if event.get("detail-type") not in (None, "Object Created"):
        raise PoisonMessageError(f"unexpected detail-type {event.get('detail-type')!r}")
    if key.endswith("/"):
        raise PoisonMessageError(f"s3://{bucket}/{key} is a folder marker, not a file")
    return {"uri": f"s3://{bucket}/{key}", "size": size}


def is_full_load_file(uri: str) -> bool:
    return uri.rsplit("/", 1)[-1].upper().startswith("LOAD")


def oldest_pending_manifest(s3: Any, where: Locations) -> str | None:
    """A manifest left pending by a failed run or a stopped execution: it goes first, oldest first."""
    response = s3.list_objects_v2(Bucket=where.artifacts_bucket, Prefix=where.pending_prefix)
    keys = sorted(item["Key"] for item in response.get("Contents", []) if item["Key"].endswith(".json"))
    return keys[0] if keys else None


def new_run_id(now: datetime) -> str:
    return f"{now:%Y%m%dT%H%M%S%fZ}-{uuid.uuid4().hex[:8]}"


def drain(
    s3: Any, sqs: Any, where: Locations, limits: DrainLimits, now: datetime | None = None
) -> dict[str, Any]:
    """Return the batch to apply next: a pending manifest if one exists, else a new one drained from
    the queue (up to the limits), or `has_work: false` when the queue is empty."""
    pending = oldest_pending_manifest(s3, where)
    if pending:
        document = json.loads(s3.get_object(Bucket=where.artifacts_bucket, Key=pending)["Body"].read())
        return _result(where, pending, document["run_id"], document["files"], resumed=True)

    moment = now or datetime.now(UTC)
    manifest = Manifest(new_run_id(moment), moment.strftime("%Y-%m-%dT%H:%M:%SZ"))
    key = where.pending_key(manifest.run_id)
    deadline = time.monotonic() + limits.time_budget_seconds
    poison = skipped = 0
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
        sorted_page = _sort_page(sqs, where, page, manifest, limits)
        poison += sorted_page.poison
        skipped += sorted_page.skipped_full_load
        if sorted_page.files:
            manifest.files.extend(sorted_page.files)
            s3.put_object(
                Bucket=where.artifacts_bucket,
                Key=key,
                Body=json.dumps(manifest.to_dict()).encode(),
                ContentType="application/json",
            )
        # Recorded durably (or poison, or not ours): only now may these messages leave the queue.
        if sorted_page.leaving:
            _delete(sqs, where.queue_url, sorted_page.leaving)
        if sorted_page.released:
            _release(sqs, where.queue_url, sorted_page.released)
            break
    if not manifest.files:
        return {"has_work": False, "file_count": 0, "poison_messages": poison, "skipped_full_load": skipped}
    return _result(where, key, manifest.run_id, manifest.files, resumed=False) | {
        "poison_messages": poison,
        "skipped_full_load": skipped,
    }


@dataclass
class SortedPage:
    files: list[dict[str, Any]] = field(default_factory=list)  # entries for the manifest
    leaving: list[dict[str, Any]] = field(default_factory=list)  # messages to delete once recorded
    released: list[dict[str, Any]] = field(default_factory=list)  # messages for the next batch
    poison: int = 0
    skipped_full_load: int = 0


def _sort_page(
    sqs: Any, where: Locations, page: list[dict[str, Any]], manifest: Manifest, limits: DrainLimits
) -> SortedPage:
    """Split a received page: files for the manifest, messages that may leave the queue (those files,
    poison sent to the DLQ, full-load files) and, from the first file that would break the byte bound
    on, messages to give back to the queue in their order. A batch always takes at least one file."""
    result = SortedPage()
    batch_bytes = manifest.total_bytes
    for index, message in enumerate(page):
        try:
            found = file_of(message["Body"])
        except PoisonMessageError as error:
            _to_dead_letter_queue(sqs, where, message, str(error))
            result.poison += 1
            result.leaving.append(message)
            continue
        if is_full_load_file(found["uri"]):
            result.skipped_full_load += 1  # LOAD files belong to the full-load job
            result.leaving.append(message)
            continue
        over_bound = (manifest.files or result.files) and batch_bytes + found["size"] > limits.max_bytes
        if over_bound and _may_give_back(page[index:], limits):
            result.released = page[index:]
            return result
        batch_bytes += found["size"]
        result.files.append(
            found
            | {
                "sequence_number": message.get("Attributes", {}).get("SequenceNumber"),
                "message_id": message["MessageId"],
            }
        )
        result.leaving.append(message)
    return result


def _may_give_back(messages: list[dict[str, Any]], limits: DrainLimits) -> bool:
    """Giving a message back costs one receive; keep two receives spare before redrive to the DLQ
    (one for the next batch, one for a drain that dies), so a valid file never ends in the DLQ."""
    received = max(int(m.get("Attributes", {}).get("ApproximateReceiveCount", 1)) for m in messages)
    return received < limits.max_receive_count - 1


def _result(
    where: Locations, key: str, run_id: str, files: list[dict[str, Any]], resumed: bool
) -> dict[str, Any]:
    return {
        "has_work": True,
        "resumed": resumed,
        "run_id": run_id,
        "manifest_uri": f"s3://{where.artifacts_bucket}/{key}",
        "manifest_key": key,
        "file_count": len(files),
        "total_bytes": sum(int(f.get("size", 0)) for f in files),
    }


def _delete(sqs: Any, queue_url: str, messages: list[dict[str, Any]]) -> None:
    entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
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
        MessageAttributes={"reason": {"DataType": "String", "StringValue": reason[:1000]}},
    )

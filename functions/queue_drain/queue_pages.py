"""The queue's side of a drain: receiving a page, sorting it (files for the manifest, LOAD files of reloads,
poison for the dead-letter queue, messages given back to keep the byte bound), and deleting or releasing the
messages once what they carry is recorded."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError
from drain_config import DrainLimits, Locations
from file_events import CreatedDmsFile, ObjectExists, PoisonMessageError, parse_file_event
from lake_contracts.documents import Manifest, ManifestFile

RECEIVE_PAGE = 10  # SQS's maximum per ReceiveMessage


def receive_page(sqs: Any, where: Locations, limits: DrainLimits, wanted: int) -> list[dict[str, Any]]:
    """Up to `wanted` messages, invisible for the rest of the drain's run."""
    page: list[dict[str, Any]] = sqs.receive_message(
        QueueUrl=where.queue_url,
        MaxNumberOfMessages=wanted,
        WaitTimeSeconds=limits.wait_seconds,
        VisibilityTimeout=limits.visibility_timeout_seconds,
        AttributeNames=["SequenceNumber", "MessageGroupId", "ApproximateReceiveCount"],
    ).get("Messages", [])
    return page


@dataclass
class SortedPage:
    files: list[ManifestFile] = field(default_factory=list)  # entries for the manifest
    reloads: list[CreatedDmsFile] = field(default_factory=list)  # LOAD files of reloaded tables
    leaving: list[dict[str, Any]] = field(default_factory=list)  # messages to delete once recorded
    released: list[dict[str, Any]] = field(default_factory=list)  # messages for the next batch
    poison_messages: int = 0
    skipped_full_load: int = 0
    duplicates: int = 0

    @property
    def reload_files(self) -> int:
        return len(self.reloads)


def sort_page(
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
        sequence_number = message.get("Attributes", {}).get("SequenceNumber")
        noted = {"sequence_number": sequence_number, "message_id": message["MessageId"]}
        result.files.append(ManifestFile(found.uri, found.size, noted))
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


def delete_messages(sqs: Any, queue_url: str, messages: Iterable[dict[str, Any]]) -> None:
    batch = list(messages)
    for start in range(0, len(batch), RECEIVE_PAGE):
        entries = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
            for i, m in enumerate(batch[start : start + RECEIVE_PAGE])
        ]
        response = sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries)
        if response.get("Failed"):
            raise RuntimeError(f"could not delete drained messages: {response['Failed']}")


def release_messages(sqs: Any, queue_url: str, messages: list[dict[str, Any]]) -> None:
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

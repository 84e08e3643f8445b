"""The batches out of line: pending ones (`manifests/pending/`: cut by the drain, handed out first) and failed
ones (`manifests/failed/`: moved aside after `MaxManifestAttempts` runs, alarm `batch-moved-aside`), and
putting a failed batch back in line once its cause is fixed.

A requeued batch goes back to `manifests/pending/` with its attempts reset: the next drain hands it out before
any new file, and it gets `MaxManifestAttempts` runs again. Its files are applied exactly once whatever was
applied of them before (the ledger), and in any order relative to what came since.

A batch is judged by its OLDEST file, by the time in the file's name (when DMS wrote it; a batch without a
timestamp-named file, by when it was drained): one written `TombstoneRetentionDays` ago or longer (the stack's
parameter) is refused with an error naming that file and the horizon (lake_contracts.resend_horizon): the
maintenance job may have dropped the tombstones of rows deleted since, so the batch's older changes would bring
those deleted rows back. A batch drained yesterday can hold files written months ago (an outage, a re-send).
A refused batch's changes need a reload of its tables (`lakectl reload`) instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lake_contracts.resend_horizon import (
    MIN_TOMBSTONE_RETENTION_DAYS,
    beyond_retention,
    oldest_cdc_file,
    resend_horizon,
)

FAILED = "manifests/failed/"
PENDING = "manifests/pending/"


class TooOldToRequeueError(ValueError):
    """The batch is older than the tombstones: requeued, it would bring deleted rows back."""


def drained_at(run_id: str) -> datetime | None:
    """When the drain created batch `run_id` (`<yyyymmddThhmmssffffff>Z-<hex>`), or None."""
    try:
        return datetime.strptime(run_id[:22], "%Y%m%dT%H%M%S%fZ").replace(tzinfo=UTC)
    except ValueError:
        return None


@dataclass(frozen=True)
class FailedBatch:
    key: str
    run_id: str
    files: int
    reason: str
    oldest_file: str | None = None  # its file with the oldest name time
    oldest_written_at: datetime | None = None  # UTC, naive: that file's time


def batch_age_from(document: dict[str, Any], run_id: str) -> tuple[str, datetime] | None:
    """What a batch's age is judged by: its oldest timestamp-named file (URI, name time, UTC naive); without
    one, when it was drained (`run id`, its time); None when neither is known."""
    oldest = oldest_cdc_file(str(f["uri"]) for f in document.get("files", []) if isinstance(f, dict))
    if oldest is not None:
        return oldest
    drained = drained_at(run_id)
    return (f"(drained as {run_id})", drained.replace(tzinfo=None)) if drained is not None else None


def failed_batches(s3: Any, bucket: str) -> list[FailedBatch]:
    found = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=FAILED):
        for item in page.get("Contents", []):
            head = s3.head_object(Bucket=bucket, Key=item["Key"])
            reason = head.get("Metadata", {}).get("reason", "")
            try:
                document = json.loads(s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read())
                run_id, files = str(document["run_id"]), len(document["files"])
                age_from = batch_age_from(document, run_id)
            except (ValueError, KeyError, TypeError, AttributeError):
                run_id, files, age_from = "", -1, None  # corrupt: listed, never requeued
            oldest, written = age_from if age_from else (None, None)
            found.append(FailedBatch(item["Key"], run_id, files, reason, oldest, written))
    return sorted(found, key=lambda b: b.key)


def requeue(
    s3: Any,
    bucket: str,
    batch: FailedBatch,
    tombstone_retention_days: int = MIN_TOMBSTONE_RETENTION_DAYS,
    now: datetime | None = None,
) -> str:
    """Move one failed batch back to pending with its attempts reset; returns the pending key. Refused when
    corrupt, or when its oldest file (by its name's time; without one, the batch by its drain time) was
    written before the re-send horizon, `tombstone_retention_days` before `now` (TooOldToRequeueError naming
    that file and the horizon). The manifest is read again: what is moved is what was judged."""
    if batch.files < 0:
        raise ValueError(f"{batch.key} is not a manifest (corrupt): inspect it, it cannot be requeued")
    document = json.loads(s3.get_object(Bucket=bucket, Key=batch.key)["Body"].read())
    moment = now or datetime.now(UTC)
    horizon = resend_horizon(moment, tombstone_retention_days)
    age_from = batch_age_from(document, batch.run_id)
    if age_from is None or beyond_retention(age_from[1], moment, tombstone_retention_days):
        oldest, written = age_from if age_from else ("(no file time, no drain time)", None)
        raise TooOldToRequeueError(
            f"{batch.key}: its oldest file {oldest} was written {written or 'at an unknown time'}, before the"
            f" re-send horizon {horizon} (TombstoneRetentionDays is {tombstone_retention_days}): its deletes'"
            " tombstones may be gone, so its older changes would bring deleted rows back. Not requeued: reload"
            " its tables instead (DMS ReloadTables)."
        )
    document["attempts"] = 0
    target = PENDING + batch.key.removeprefix(FAILED)
    s3.put_object(
        Bucket=bucket, Key=target, Body=json.dumps(document).encode(), ContentType="application/json"
    )
    s3.delete_object(Bucket=bucket, Key=batch.key)
    return target


def pending_batches(s3: Any, bucket: str) -> list[FailedBatch]:
    """The batches waiting in `manifests/pending/` (attempts so far as the reason), oldest key first."""
    found = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=PENDING):
        for item in page.get("Contents", []):
            try:
                document = json.loads(s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read())
                run_id, files = str(document["run_id"]), len(document["files"])
                age_from = batch_age_from(document, run_id)
                reason = f"{int(document.get('attempts', 0))} attempt(s) so far"
            except (ValueError, KeyError, TypeError, AttributeError):
                run_id, files, age_from, reason = "", -1, None, "corrupt"
            oldest, written = age_from if age_from else (None, None)
            found.append(FailedBatch(item["Key"], run_id, files, reason, oldest, written))
    return sorted(found, key=lambda b: b.key)

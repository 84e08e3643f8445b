"""Put batches the drain moved aside (`manifests/failed/`, alarm `batch-moved-aside`) back in line, once the
cause is fixed (docs/DEPLOY.md, "Operate"):

    python -m tools.requeue_batch --stack-name dms-iceberg-lake             # list them, with the reason
    python -m tools.requeue_batch --stack-name dms-iceberg-lake --run-id 20261124T101500000000Z-1a2b3c4d
    python -m tools.requeue_batch --stack-name dms-iceberg-lake --all

A requeued batch goes back to `manifests/pending/` with its attempts reset: the next drain hands it out before
any new file, and it gets `MaxManifestAttempts` runs again. Its files are applied exactly once whatever was
applied of them before (the ledger), and in any order relative to what came since.

A batch drained `TombstoneRetentionDays` ago or longer (the stack's parameter; its run id says when) is refused:
the maintenance job has dropped the tombstones of rows deleted since, so the batch's older changes would bring
those deleted rows back. The alarm `moved-aside-batch-aging` fires at half that age. A refused batch's changes
need a reload of its tables (DMS ReloadTables) instead.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

FAILED = "manifests/failed/"
PENDING = "manifests/pending/"
MIN_TOMBSTONE_RETENTION_DAYS = 29  # the template's lowest TombstoneRetentionDays: the safe default


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


def failed_batches(s3: Any, bucket: str) -> list[FailedBatch]:
    found = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=FAILED):
        for item in page.get("Contents", []):
            head = s3.head_object(Bucket=bucket, Key=item["Key"])
            reason = head.get("Metadata", {}).get("reason", "")
            try:
                document = json.loads(s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read())
                run_id, files = str(document["run_id"]), len(document["files"])
            except (ValueError, KeyError, TypeError):
                run_id, files = "", -1  # corrupt: listed, never requeued
            found.append(FailedBatch(item["Key"], run_id, files, reason))
    return sorted(found, key=lambda b: b.key)


def requeue(
    s3: Any,
    bucket: str,
    batch: FailedBatch,
    tombstone_retention_days: int = MIN_TOMBSTONE_RETENTION_DAYS,
    now: datetime | None = None,
) -> str:
    """Move one failed batch back to pending with its attempts reset; returns the pending key. Refused when
    corrupt, or drained `tombstone_retention_days` ago or longer (TooOldToRequeueError)."""
    if batch.files < 0:
        raise ValueError(f"{batch.key} is not a manifest (corrupt): inspect it, it cannot be requeued")
    drained = drained_at(batch.run_id)
    moment = now or datetime.now(UTC)
    if drained is None or moment - drained >= timedelta(days=tombstone_retention_days):
        raise TooOldToRequeueError(
            f"{batch.key}: drained {drained or 'at an unknown time'}, TombstoneRetentionDays is"
            f" {tombstone_retention_days}: its deletes' tombstones may be gone, so its older changes would bring"
            " deleted rows back. Not requeued: reload its tables instead (DMS ReloadTables)."
        )
    document = json.loads(s3.get_object(Bucket=bucket, Key=batch.key)["Body"].read())
    document["attempts"] = 0
    target = PENDING + batch.key.removeprefix(FAILED)
    s3.put_object(
        Bucket=bucket, Key=target, Body=json.dumps(document).encode(), ContentType="application/json"
    )
    s3.delete_object(Bucket=bucket, Key=batch.key)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    import boto3

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stack-name", default="dms-iceberg-lake")
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--run-id", action="append", default=[], help="requeue this batch (repeatable)")
    chosen.add_argument("--all", action="store_true", help="requeue every failed batch")
    args = parser.parse_args(argv)
    stack = boto3.client("cloudformation").describe_stacks(StackName=args.stack_name)["Stacks"][0]
    bucket = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}["ArtifactsBucketName"]
    parameters = {p["ParameterKey"]: p.get("ParameterValue") for p in stack.get("Parameters", [])}
    retention = int(parameters.get("TombstoneRetentionDays") or MIN_TOMBSTONE_RETENTION_DAYS)
    s3 = boto3.client("s3")
    batches = failed_batches(s3, bucket)
    if not args.all and not args.run_id:
        for batch in batches:
            print(f"{batch.run_id or '(corrupt)'}  {batch.files} files  {batch.reason}")
        return 0
    wanted = [b for b in batches if args.all or b.run_id in args.run_id]
    unknown = set(args.run_id) - {b.run_id for b in batches}
    if unknown:
        parser.error(f"no failed batch with run id {sorted(unknown)}")
    refused = 0
    for batch in wanted:
        try:
            print(f"requeued {batch.run_id}: s3://{bucket}/{requeue(s3, bucket, batch, retention)}")
        except TooOldToRequeueError as error:
            print(f"refused {batch.run_id}: {error}")
            refused += 1
    return 1 if refused else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Put batches the drain moved aside (`manifests/failed/`, alarm `batch-moved-aside`) back in line, once the
cause is fixed (docs/DEPLOY.md, "Operate"):

    python -m tools.requeue_batch --stack-name dms-iceberg-lake             # list them, with the reason
    python -m tools.requeue_batch --stack-name dms-iceberg-lake --run-id 20261124T101500000000Z-1a2b3c4d
    python -m tools.requeue_batch --stack-name dms-iceberg-lake --all

A requeued batch goes back to `manifests/pending/` with its attempts reset: the next drain hands it out before
any new file, and it gets `MaxManifestAttempts` runs again. Its files are applied exactly once whatever was
applied of them before (the ledger), and in any order relative to what came since.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

FAILED = "manifests/failed/"
PENDING = "manifests/pending/"


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


def requeue(s3: Any, bucket: str, batch: FailedBatch) -> str:
    """Move one failed batch back to pending with its attempts reset; returns the pending key."""
    if batch.files < 0:
        raise ValueError(f"{batch.key} is not a manifest (corrupt): inspect it, it cannot be requeued")
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
    for batch in wanted:
        print(f"requeued {batch.run_id}: s3://{bucket}/{requeue(s3, bucket, batch)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What makes a drain's writes safe without reserved concurrency (docs/CONTRACTS.md "Fencing the Lambdas'
writes"): the lease and the newest drain of the execution (`DrainFence`), and the manifest's version
(`put_manifest`, If-None-Match / If-Match). Any of these failing is a LeaseLostError: the drain writes nothing
more."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError
from lake_contracts.s3 import LeaseLostError, check_lease, error_code, is_conflict, is_missing
from lake_contracts.times import iso


@dataclass
class DrainFence:
    """What makes a drain's writes safe without reserved concurrency. Before each write the drain
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


def unfenced() -> None:
    """No fence: tests of the manifest logic alone (the Lambda always fences)."""


def _put_json(s3: Any, bucket: str, key: str, document: dict[str, Any]) -> None:
    s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(document).encode(), ContentType="application/json")

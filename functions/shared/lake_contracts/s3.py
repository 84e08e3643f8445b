"""What S3 answers, as the Lambdas read it: a missing object, a lost condition; the conditional delete; the
pipeline lease as every fenced function reads it (functions/lease writes it)."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError, ParamValidationError

# The error codes of "no such object": GetObject says NoSuchKey, HeadObject a bare 404 (NotFound via some SDKs).
MISSING = ("NoSuchKey", "404", "NotFound")
# A conditional write or delete lost (If-Match / If-None-Match): 412, or 409 when two writes raced.
CONFLICT = ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")
DEFAULT_LEASE_KEY = "locks/pipeline-lease.json"


class LeaseLostError(RuntimeError):
    """The calling execution does not hold the pipeline lease, or an object it meant to change changed: it
    writes nothing more."""


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def is_missing(error: ClientError) -> bool:
    return error_code(error) in MISSING


def is_conflict(error: ClientError) -> bool:
    return error_code(error) in CONFLICT


def delete_if_unchanged(s3: Any, bucket: str, key: str, etag: str) -> bool:
    """Delete `key` only while its ETag is `etag` (DeleteObject If-Match). False, and nothing deleted, when it
    changed meanwhile; True when it is deleted or was gone already. Where S3 does not implement conditional
    deletes (LocalStack 2026.3 answers 501) or the SDK cannot send one, the ETag is read again just before an
    unconditional delete."""
    try:
        s3.delete_object(Bucket=bucket, Key=key, IfMatch=etag)
        return True
    except ParamValidationError:
        pass  # an SDK whose DeleteObject has no If-Match: the ETag check below
    except ClientError as error:
        if is_conflict(error):
            return False
        if is_missing(error):
            return True
        if error_code(error) not in ("NotImplemented", "501"):
            raise
    try:
        current = s3.head_object(Bucket=bucket, Key=key)["ETag"]
    except ClientError as error:
        if is_missing(error):
            return True
        raise
    if current != etag:
        return False
    s3.delete_object(Bucket=bucket, Key=key)
    return True


def lease_holder(s3: Any, bucket: str, lease_key: str) -> str:
    """The execution the pipeline lease names. A missing or corrupt lease object (empty, not JSON, not an
    object, no holder) is a LeaseLostError that names the object: nobody provably holds the lease."""
    where = f"s3://{bucket}/{lease_key}"
    try:
        body = s3.get_object(Bucket=bucket, Key=lease_key)["Body"].read()
    except ClientError as error:
        if is_missing(error):
            raise LeaseLostError(f"no pipeline lease at {where}") from None
        raise
    try:
        lease = json.loads(body)
    except ValueError as error:
        raise LeaseLostError(f"the pipeline lease {where} is corrupt (not JSON: {error})") from None
    if not isinstance(lease, dict) or not isinstance(lease.get("holder"), str) or not lease["holder"]:
        raise LeaseLostError(f"the pipeline lease {where} is corrupt (no holder): {body[:200]!r}")
    return str(lease["holder"])


def check_lease(s3: Any, bucket: str, lease_key: str, execution_arn: str, consequence: str = "") -> None:
    """Fencing: raise LeaseLostError unless `execution_arn` holds the pipeline lease (`consequence` is added
    to the message: what was not done)."""
    holder = lease_holder(s3, bucket, lease_key)
    if holder != execution_arn:
        raise LeaseLostError(f"the pipeline lease is held by {holder}, not {execution_arn}{consequence}")

"""Acknowledge an applied batch: its manifest moves from `pending/` to `done/`.

This is the only step that retires a batch, and it runs only after the Glue CDC run succeeded; a
failed run leaves the manifest pending, and the next drain returns it first.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

MISSING = ("NoSuchKey", "404", "NotFound")


class ManifestNotPendingError(RuntimeError):
    """The manifest is neither pending nor acknowledged: it was never drained."""


def done_key(pending_key: str) -> str:
    if "/pending/" not in pending_key:
        raise ManifestNotPendingError(f"{pending_key} is not a pending manifest")
    return pending_key.replace("/pending/", "/done/", 1)


def acknowledge(s3: Any, bucket: str, pending_key: str) -> dict[str, Any]:
    """Copy to done/, then delete from pending/. Idempotent: a retry after the move finds done/."""
    target = done_key(pending_key)
    try:
        s3.copy_object(Bucket=bucket, Key=target, CopySource={"Bucket": bucket, "Key": pending_key})
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") not in MISSING:
            raise
        if _exists(s3, bucket, target):
            return {"acknowledged": target, "already": True}
        raise ManifestNotPendingError(f"s3://{bucket}/{pending_key} does not exist") from None
    s3.delete_object(Bucket=bucket, Key=pending_key)
    return {"acknowledged": target, "already": False}


def _exists(s3: Any, bucket: str, key: str) -> bool:
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError:
        return False
    return True

"""The queue's messages: the DMS file an S3 "Object Created" event names, or why the message is poison.

Every message is judged on its own: anything that is not an S3 "Object Created" event of a DMS file of the raw
bucket below the DMS prefix is a PoisonMessageError with the reason, whatever is wrong with it. The event's key
is read by the shared rule of event keys (`lake_contracts.names.key_readings`, `decode_key`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.parser.models import S3EventNotificationEventBridgeModel
from botocore.exceptions import ClientError
from lake_contracts.names import FileKind, dms_layout, key_readings, unusable_name
from lake_contracts.s3 import is_missing
from lake_contracts.times import aware

MAX_OBJECT_SIZE = 5 * 1024**4  # S3's largest object (5 TiB)


class PoisonMessageError(ValueError):
    """A queue message that is not an S3 "Object Created" event of a DMS file of the raw zone."""


@dataclass(frozen=True)
class CreatedDmsFile:
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
) -> CreatedDmsFile:
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
    return CreatedDmsFile(bucket, key, schema, table, _size(event.detail.object.size), created, kind)


def object_exists_in(s3: Any) -> ObjectExists:
    """`exists` for `parse_file_event`: the object's LastModified as S3 answers a HEAD of it."""

    def exists(bucket: str, key: str) -> datetime | None:
        try:
            head = s3.head_object(Bucket=bucket, Key=key)
        except ClientError as error:
            if is_missing(error):
                return None
            raise  # 403, throttling: the drain fails (and is retried), the message is not judged
        return head.get("LastModified") or datetime.max.replace(tzinfo=UTC)

    return exists

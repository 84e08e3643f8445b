"""A lost CDC file re-sent as the very message the EventBridge rule would have delivered to the FIFO queue (the
raw audit's recovery, lakehouse.audit.raw_zone)."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlparse

from lakehouse.audit.raw_files import RawFile
from lakehouse.io.storage import split_s3

# The EventBridge rule's SqsParameters (template.yaml, CdcFileCreatedRule): one group, arrival order.
MESSAGE_GROUP_ID = "dms-cdc-files"
RECOVERED_BY = "raw-audit"


def encode_key(key: str) -> str:
    """An object key as S3 event notifications carry it: URL-encoded. Every byte but unreserved characters
    and `/` is percent-escaped (a space is `%20`, never `+`), so both form decoding (`+` as space) and plain
    percent decoding give the key back."""
    return quote(key, safe="/")


def file_event(
    bucket: str,
    key: str,
    size: int,
    created: datetime,
    account: str = "000000000000",
    region: str = "us-east-1",
) -> dict[str, Any]:
    """The "Object Created" event EventBridge delivers for a new object (the FIFO queue's message body)."""
    moment = created.astimezone(UTC) if created.tzinfo else created.replace(tzinfo=UTC)
    identity = uuid.uuid5(uuid.NAMESPACE_URL, f"s3://{bucket}/{key}")
    return {
        "version": "0",
        "id": str(identity),
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": account,
        "time": moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [f"arn:aws:s3:::{bucket}"],
        "detail": {
            "version": "0",
            "bucket": {"name": bucket},
            "object": {"key": encode_key(key), "size": size, "etag": "", "sequencer": ""},
            "request-id": "raw-audit",
            "requester": account,
            "reason": "PutObject",
        },
    }


def deduplication_id(uri: str, recovery_round: int) -> str:
    """The same file in the same recovery round is one message (an audit retried within SQS's five-minute
    deduplication window sends it once); the next round may send it again."""
    return hashlib.sha256(f"{uri}#{recovery_round}".encode()).hexdigest()


def recovery_round(now: datetime, grace: timedelta) -> int:
    """Rounds are grace periods since the epoch: a lost file is re-sent at most once per round."""
    moment = now if now.tzinfo else now.replace(tzinfo=UTC)
    return int(moment.timestamp() // max(grace.total_seconds(), 1))


def recovery_message(
    file: RawFile, queue_url: str, recovery: int, region: str = "us-east-1"
) -> dict[str, Any]:
    """`sqs.send_message` arguments that re-enqueue a lost file as its EventBridge event."""
    if not file.uri.startswith("s3://"):
        raise ValueError(f"{file.uri}: only an S3 object has an S3 event to re-send")
    bucket, key = split_s3(file.uri)
    account = _account_of(queue_url)
    event = file_event(bucket, key, file.size, file.landed_at or file.written_at, account, region)
    return {
        "QueueUrl": queue_url,
        "MessageBody": json.dumps(event),
        "MessageGroupId": MESSAGE_GROUP_ID,
        "MessageDeduplicationId": deduplication_id(file.uri, recovery),
        "MessageAttributes": {"recovered_by": {"DataType": "String", "StringValue": RECOVERED_BY}},
    }


def _account_of(queue_url: str) -> str:
    """https://sqs.<region>.amazonaws.com/<account>/<name> (LocalStack's URLs have the same path)."""
    parts = [p for p in urlparse(queue_url).path.split("/") if p]
    return parts[0] if len(parts) == 2 and parts[0].isdigit() else "000000000000"

"""Repairs the tool asks for: a table reloaded by DMS (as the reconcile's repair does) and raw files put back
on the queue (as the raw audit re-sends a lost file: the very event EventBridge would have delivered)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from lake_contracts.resend_horizon import beyond_retention, oldest_cdc_file, resend_horizon
from lakehouse.audit.resend_event import MESSAGE_GROUP_ID, deduplication_id, file_event

from lakectl.stack import Stack

REDRIVEN_BY = "lakectl"


def reload_table(dms: Any, stack: Stack, table: str) -> dict[str, Any]:
    """Ask DMS for fresh LOAD files of `schema.table`: the loop applies them as an order-independent reload
    while CDC goes on."""
    schema, _, name = table.partition(".")
    if not schema or not name:
        raise ValueError(f"{table!r}: name the table as <schema>.<table>, as DMS spells it")
    dms.reload_tables(
        ReplicationTaskArn=stack.dms_task_arn,
        TablesToReload=[{"SchemaName": schema, "TableName": name}],
        ReloadOption="data-reload",
    )
    return {"table": table, "task": stack.dms_task_arn, "reload": "requested"}


class BeyondResendHorizonError(ValueError):
    """A file older than the tombstones: re-sent, its changes would bring rows deleted since back."""


def redrive_message(
    s3: Any, bucket: str, key: str, queue_url: str, stack: Stack, now: datetime, region: str = "us-east-1"
) -> dict[str, Any]:
    """`sqs.send_message` arguments that put raw file `key` back on the queue; refused past the re-send
    horizon (the file's name time, `TombstoneRetentionDays` before `now`), as the raw audit refuses it."""
    uri = f"s3://{bucket}/{key}"
    named = oldest_cdc_file([uri])
    days = stack.tombstone_retention_days
    if named is not None and beyond_retention(named[1], now, days):
        raise BeyondResendHorizonError(
            f"{uri} was written {named[1]}, before the re-send horizon {resend_horizon(now, days)}: reload its"
            " table instead (`lakectl reload`)"
        )
    head = s3.head_object(Bucket=bucket, Key=key)
    event = file_event(
        bucket, key, int(head["ContentLength"]), head["LastModified"], _account_of(queue_url), region
    )
    return {
        "QueueUrl": queue_url,
        "MessageBody": json.dumps(event),
        "MessageGroupId": MESSAGE_GROUP_ID,
        "MessageDeduplicationId": deduplication_id(uri, int(now.timestamp())),
        "MessageAttributes": {"recovered_by": {"DataType": "String", "StringValue": REDRIVEN_BY}},
    }


def redrive(s3: Any, sqs: Any, stack: Stack, keys: list[str], now: datetime | None = None) -> dict[str, Any]:
    """Each raw file (a key of the raw bucket, or its s3:// URI) back on the queue: the next drain applies
    the ones no ledger knows, exactly once; the ones it knows stay applied."""
    moment = now or datetime.now(UTC)
    bucket, queue_url = stack.output("RawBucketName"), stack.output("QueueUrl")
    region = getattr(sqs.meta, "region_name", None) or "us-east-1"
    sent, refused = [], []
    for given in keys:
        key = given.removeprefix(f"s3://{bucket}/")
        if key.startswith("s3://"):
            raise ValueError(f"{given} is not in the raw bucket {bucket}")
        try:
            sqs.send_message(**redrive_message(s3, bucket, key, queue_url, stack, moment, region))
            sent.append(key)
        except BeyondResendHorizonError as error:
            refused.append({"key": key, "reason": str(error)})
    return {"sent": sent, "refused": refused}


def _account_of(queue_url: str) -> str:
    """https://sqs.<region>.amazonaws.com/<account>/<name> (the local AWS's URLs have the same path)."""
    path = [p for p in queue_url.split("://", 1)[-1].split("/")[1:] if p]
    return path[0] if len(path) == 2 and path[0].isdigit() else "000000000000"

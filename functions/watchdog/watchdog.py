"""Is the pipeline running, and is the refined zone keeping up? Measured every few minutes (a schedule), so
"no execution" and a refined zone left behind are alarmed however long one CDC or reload run takes (the loop
itself publishes nothing while it waits) and whether or not refines still run."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError
from lake_contracts.layout import ArtifactsLayout
from lake_contracts.s3 import is_missing


def running_executions(sfn: Any, state_machine_arn: str, limit: int = 10) -> int:
    """How many executions of the state machine are RUNNING (counted up to `limit`)."""
    response = sfn.list_executions(
        stateMachineArn=state_machine_arn, statusFilter="RUNNING", maxResults=limit
    )
    return len(response.get("executions", []))


def refine_started(report: Any) -> datetime | None:
    """When the refine run of `report` (its run report) started: its `batch`, milliseconds since the epoch;
    None for a document that holds no such number."""
    batch = report.get("batch") if isinstance(report, dict) else None
    if not isinstance(batch, int) or isinstance(batch, bool) or batch <= 0:
        return None
    return datetime.fromtimestamp(batch / 1000, UTC)


def first_batch_applied_after(
    s3: Any, bucket: str, layout: ArtifactsLayout, moment: datetime
) -> datetime | None:
    """When the first CDC batch drained after `moment` was retired (its `done/` manifest written), or None.
    Run ids begin with their drain time (layout.new_run_id), so `done/` lists in drain order: one call."""
    response = s3.list_objects_v2(
        Bucket=bucket,
        Prefix=layout.done_prefix,
        StartAfter=f"{layout.done_prefix}{moment.astimezone(UTC):%Y%m%dT%H%M%S%fZ}",
        MaxKeys=1,
    )
    contents = response.get("Contents") or []
    return contents[0]["LastModified"] if contents else None


def refined_lag_seconds(s3: Any, bucket: str, layout: ArtifactsLayout, now: datetime) -> float | None:
    """How long the clean zone has held a batch the refined zone does not: now minus when the first batch
    drained after the newest refine that left no model failed started was retired; 0 when none was. None
    while no such refine has reported (or its report is unreadable): nothing to measure from."""
    try:
        body = s3.get_object(Bucket=bucket, Key=layout.refined_report_key)["Body"].read()
    except ClientError as error:
        if is_missing(error):
            return None
        raise
    try:
        started = refine_started(json.loads(body))
    except ValueError:
        started = None
    if started is None:
        return None
    applied = first_batch_applied_after(s3, bucket, layout, started)
    return max((now - applied).total_seconds(), 0.0) if applied is not None else 0.0

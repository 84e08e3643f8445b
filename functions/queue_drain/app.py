"""Lambda: drain the CDC file queue into one manifest (the batch of one Glue CDC run)."""

from __future__ import annotations

import math
import os
from datetime import UTC, datetime
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer, single_metric
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from drain import DrainFence, DrainLimits, Locations, drain, oldest_moved_aside_days
from pydantic import BaseModel, Field

LOCATIONS = Locations(
    queue_url=os.environ.get("QUEUE_URL", ""),
    dead_letter_queue_url=os.environ.get("DEAD_LETTER_QUEUE_URL", ""),
    artifacts_bucket=os.environ.get("ARTIFACTS_BUCKET", ""),
    manifest_prefix=os.environ.get("MANIFEST_PREFIX", "manifests"),
    raw_bucket=os.environ.get("RAW_BUCKET", ""),
    raw_prefix=os.environ.get("RAW_PREFIX", "dms"),
)
LEASE_KEY = os.environ.get("LEASE_KEY", "locks/pipeline-lease.json")
DEFAULT_LIMITS = DrainLimits(
    max_files=int(os.environ.get("MAX_FILES_PER_RUN", "500")),
    max_bytes=int(os.environ.get("MAX_BYTES_PER_RUN", str(2 * 1024**3))),
    time_budget_seconds=float(os.environ.get("DRAIN_TIME_BUDGET_SECONDS", "60")),
    max_receive_count=int(os.environ.get("QUEUE_MAX_RECEIVE_COUNT", "5")),
    max_manifest_attempts=int(os.environ.get("MAX_MANIFEST_ATTEMPTS", "3")),
    on_stuck_batch="stop" if os.environ.get("ON_STUCK_BATCH", "continue") == "stop" else "continue",
)

logger = Logger()
tracer = Tracer()
metrics = Metrics()
s3 = boto3.client("s3")
sqs = boto3.client("sqs")


class DrainRequest(BaseModel):
    max_files: int | None = Field(default=None, gt=0)
    max_bytes: int | None = Field(default=None, gt=0)
    # The state machine always passes its execution: only the lease holder may drain, so a request
    # that names no execution is refused (a manual drain names the execution holding the lease).
    execution_arn: str = Field(pattern=r"^arn:aws[a-z-]*:states:[^\s]+:execution:[^\s]+$")


def alarm_moved_aside(moved: dict[str, str]) -> None:
    """Log and publish a batch moved aside the moment it is moved: a metric flushed at the end of the
    run would be lost if the rest of the drain fails, and the batch would sit in failed/ unalarmed."""
    logger.error("pending manifest moved aside", extra=moved)
    with single_metric(name="ManifestsMovedAside", unit=MetricUnit.Count, value=1):
        pass  # printed (EMF) when the block ends, with the service dimension of Metrics()


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=DrainRequest)
def handler(request: DrainRequest, context: LambdaContext) -> dict[str, Any]:
    # Fenced without reserved concurrency: the lease, the newest drain of this execution, manifest versions.
    fence = DrainFence(s3, LOCATIONS.artifacts_bucket, LEASE_KEY, request.execution_arn, LOCATIONS.claim_key)
    remaining_seconds = context.get_remaining_time_in_millis() / 1000
    limits = DrainLimits(
        max_files=request.max_files or DEFAULT_LIMITS.max_files,
        max_bytes=request.max_bytes or DEFAULT_LIMITS.max_bytes,
        # leave room to write the manifest before the Lambda's own timeout
        time_budget_seconds=min(DEFAULT_LIMITS.time_budget_seconds, remaining_seconds - 10),
        # a page received now is deleted before this run ends, or reappears soon after it died
        visibility_timeout_seconds=math.ceil(remaining_seconds) + 30,
        max_receive_count=DEFAULT_LIMITS.max_receive_count,
        max_manifest_attempts=DEFAULT_LIMITS.max_manifest_attempts,
        on_stuck_batch=DEFAULT_LIMITS.on_stuck_batch,
    )
    result = drain(s3, sqs, LOCATIONS, limits, on_moved_aside=alarm_moved_aside, fence=fence)
    metrics.add_metric(name="FilesDrained", unit=MetricUnit.Count, value=result["file_count"])
    metrics.add_metric(name="PoisonMessages", unit=MetricUnit.Count, value=result.get("poison_messages", 0))
    metrics.add_metric(name="ReloadFilesRecorded", unit=MetricUnit.Count, value=result.get("reload_files", 0))
    metrics.add_metric(name="ReloadsPending", unit=MetricUnit.Count, value=len(result["reloads_pending"]))
    set_aside = result.get("reload_requests_set_aside", 0)
    if set_aside:
        logger.error("corrupt reload requests set aside under reloads-failed/ and replaced", extra=result)
    metrics.add_metric(name="ReloadRequestsSetAside", unit=MetricUnit.Count, value=set_aside)
    # Alarmed near TombstoneRetentionDays: a batch requeued after it would bring deleted rows back.
    oldest = oldest_moved_aside_days(s3, LOCATIONS, datetime.now(UTC))
    metrics.add_metric(name="OldestMovedAsideBatchAgeDays", unit=MetricUnit.Count, value=oldest)
    logger.info("drained", extra=result)
    return result

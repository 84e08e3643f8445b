"""Lambda: drain the CDC file queue into one manifest (the batch of one Glue CDC run)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, Literal

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer, single_metric
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from drain import drain
from drain_config import DrainLimits, Locations
from drain_fence import DrainFence
from lake_contracts.config import from_environment
from lake_contracts.s3 import DEFAULT_LEASE_KEY
from pending_manifests import oldest_moved_aside_days
from pydantic import BaseModel, ConfigDict, Field


class Settings(BaseModel):
    """The function's environment (template.yaml sets it), validated at cold start."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    queue_url: str = Field(alias="QUEUE_URL", min_length=1)
    dead_letter_queue_url: str = Field(alias="DEAD_LETTER_QUEUE_URL", min_length=1)
    artifacts_bucket: str = Field(alias="ARTIFACTS_BUCKET", min_length=1)
    manifest_prefix: str = Field("manifests", alias="MANIFEST_PREFIX", min_length=1)
    # Empty: events of any bucket, their objects not looked up (tests of the manifest logic only).
    raw_bucket: str = Field("", alias="RAW_BUCKET")
    raw_prefix: str = Field("dms", alias="RAW_PREFIX")
    lease_key: str = Field(DEFAULT_LEASE_KEY, alias="LEASE_KEY", min_length=1)
    max_files_per_run: int = Field(500, alias="MAX_FILES_PER_RUN", gt=0)
    max_bytes_per_run: int = Field(2 * 1024**3, alias="MAX_BYTES_PER_RUN", gt=0)
    drain_time_budget_seconds: float = Field(60, alias="DRAIN_TIME_BUDGET_SECONDS", gt=0, allow_inf_nan=False)
    queue_max_receive_count: int = Field(5, alias="QUEUE_MAX_RECEIVE_COUNT", ge=1)
    max_manifest_attempts: int = Field(3, alias="MAX_MANIFEST_ATTEMPTS", ge=1)
    on_stuck_batch: Literal["continue", "stop"] = Field("continue", alias="ON_STUCK_BATCH")


SETTINGS = from_environment(Settings)
LOCATIONS = Locations(
    queue_url=SETTINGS.queue_url,
    dead_letter_queue_url=SETTINGS.dead_letter_queue_url,
    artifacts_bucket=SETTINGS.artifacts_bucket,
    manifest_prefix=SETTINGS.manifest_prefix,
    raw_bucket=SETTINGS.raw_bucket,
    raw_prefix=SETTINGS.raw_prefix,
)
LEASE_KEY = SETTINGS.lease_key
DEFAULT_LIMITS = DrainLimits(
    max_files=SETTINGS.max_files_per_run,
    max_bytes=SETTINGS.max_bytes_per_run,
    time_budget_seconds=SETTINGS.drain_time_budget_seconds,
    max_receive_count=SETTINGS.queue_max_receive_count,
    max_manifest_attempts=SETTINGS.max_manifest_attempts,
    on_stuck_batch=SETTINGS.on_stuck_batch,
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

"""Lambda (scheduled): publish how many pipeline executions are running (PipelineExecutionsRunning) and, on a
stack with refined models, how long the refined zone has lagged the clean zone (RefinedLagSeconds)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from lake_contracts.config import from_environment
from lake_contracts.layout import ArtifactsLayout
from pydantic import BaseModel, ConfigDict, Field
from watchdog import refined_lag_seconds, running_executions


class Settings(BaseModel):
    """The function's environment (template.yaml sets it), validated at cold start."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    state_machine_arn: str = Field(
        alias="STATE_MACHINE_ARN", pattern=r"^arn:aws[a-z-]*:states:[a-z0-9-]+:\d{12}:stateMachine:\S+$"
    )
    artifacts_bucket: str = Field(alias="ARTIFACTS_BUCKET", min_length=1)
    # false: no refined model deployed, so no refine runs and there is no refined zone to measure
    measure_refined_lag: bool = Field(alias="MEASURE_REFINED_LAG")
    manifest_prefix: str = Field("manifests", alias="MANIFEST_PREFIX", min_length=1)


SETTINGS = from_environment(Settings)
STATE_MACHINE_ARN = SETTINGS.state_machine_arn
LAYOUT = ArtifactsLayout(SETTINGS.manifest_prefix)

logger = Logger()
tracer = Tracer()
metrics = Metrics()
sfn = boto3.client("stepfunctions")
s3 = boto3.client("s3")


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The event (a scheduled EventBridge event) carries nothing this function needs."""
    running = running_executions(sfn, STATE_MACHINE_ARN)
    metrics.add_metric(name="PipelineExecutionsRunning", unit=MetricUnit.Count, value=running)
    if running == 0:
        logger.warning("no pipeline execution is running", extra={"state_machine_arn": STATE_MACHINE_ARN})
    if not SETTINGS.measure_refined_lag:
        return {"running": running}
    lag = refined_lag_seconds(s3, SETTINGS.artifacts_bucket, LAYOUT, datetime.now(UTC))
    if lag is not None:
        metrics.add_metric(name="RefinedLagSeconds", unit=MetricUnit.Seconds, value=lag)
    return {"running": running, "refined_lag_seconds": lag}

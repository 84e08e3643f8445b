"""Lambda (scheduled): publish how many pipeline executions are running (PipelineExecutionsRunning)."""

from __future__ import annotations

from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from lake_contracts.config import from_environment
from pydantic import BaseModel, ConfigDict, Field
from watchdog import running_executions


class Settings(BaseModel):
    """The function's environment (template.yaml sets it), validated at cold start."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    state_machine_arn: str = Field(
        alias="STATE_MACHINE_ARN", pattern=r"^arn:aws[a-z-]*:states:[a-z0-9-]+:\d{12}:stateMachine:\S+$"
    )


SETTINGS = from_environment(Settings)
STATE_MACHINE_ARN = SETTINGS.state_machine_arn

logger = Logger()
tracer = Tracer()
metrics = Metrics()
sfn = boto3.client("stepfunctions")


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The event (a scheduled EventBridge event) carries nothing this function needs."""
    running = running_executions(sfn, STATE_MACHINE_ARN)
    metrics.add_metric(name="PipelineExecutionsRunning", unit=MetricUnit.Count, value=running)
    if running == 0:
        logger.warning("no pipeline execution is running", extra={"state_machine_arn": STATE_MACHINE_ARN})
    return {"running": running}

"""Lambda (scheduled): publish how many pipeline executions are running (PipelineExecutionsRunning)."""

from __future__ import annotations

import os
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from watchdog import running_executions

STATE_MACHINE_ARN = os.environ.get("STATE_MACHINE_ARN", "")

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

"""Lambda: report the DMS task's full-load progress to the state machine."""

from __future__ import annotations

import os
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from progress import describe_task, task_progress
from pydantic import BaseModel

DEFAULT_TASK_ARN = os.environ.get("DMS_TASK_ARN", "")

logger = Logger()
tracer = Tracer()
metrics = Metrics()
dms = boto3.client("dms")


class ProgressRequest(BaseModel):
    task_arn: str | None = None


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=ProgressRequest)
def handler(request: ProgressRequest, context: LambdaContext) -> dict[str, Any]:
    task_arn = request.task_arn or DEFAULT_TASK_ARN
    if not task_arn:
        raise ValueError("no DMS task: pass task_arn or set DMS_TASK_ARN")
    progress = task_progress(describe_task(dms, task_arn))
    metrics.add_metric(
        name="FullLoadProgressPercent", unit=MetricUnit.Percent, value=progress.full_load_percent
    )
    logger.info("DMS task progress", extra=progress.as_dict())
    return progress.as_dict()

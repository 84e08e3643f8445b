"""Lambda: report the DMS task's full-load progress (action `progress`), or check it still runs during CDC
(action `health`), to the state machine."""

from __future__ import annotations

from typing import Any, Literal

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from lake_contracts.config import from_environment
from progress import check_full_load, describe_task, task_health, task_progress
from pydantic import BaseModel, ConfigDict, Field

# A DMS replication task's ARN, or empty where the stack has no task (each request then names one).
DMS_TASK_ARN_PATTERN = r"^(arn:aws[a-z-]*:dms:[a-z0-9-]+:\d{12}:task:\S+)?$"


class Settings(BaseModel):
    """The function's environment (template.yaml sets it), validated at cold start."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    dms_task_arn: str = Field("", alias="DMS_TASK_ARN", pattern=DMS_TASK_ARN_PATTERN)


SETTINGS = from_environment(Settings)
DEFAULT_TASK_ARN = SETTINGS.dms_task_arn

logger = Logger()
tracer = Tracer()
metrics = Metrics()
dms = boto3.client("dms")


class ProgressRequest(BaseModel):
    task_arn: str | None = None
    action: Literal["progress", "health"] = "progress"


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=ProgressRequest)
def handler(request: ProgressRequest, context: LambdaContext) -> dict[str, Any]:
    task_arn = request.task_arn or DEFAULT_TASK_ARN
    if not task_arn:
        raise ValueError("no DMS task: pass task_arn or set DMS_TASK_ARN")
    if request.action == "health":
        health = task_health(describe_task(dms, task_arn))
        logger.info("DMS task health", extra=health.as_dict())
        return health.as_dict()
    progress = check_full_load(dms, task_progress(describe_task(dms, task_arn)))
    metrics.add_metric(
        name="FullLoadProgressPercent", unit=MetricUnit.Percent, value=progress.full_load_percent
    )
    logger.info("DMS task progress", extra=progress.as_dict())
    return progress.as_dict()

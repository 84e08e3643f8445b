"""Lambda: table reloads during CDC (check DMS, retire, record a failed run); see reloads.py and the shared
store of reload requests, lake_contracts/reload_requests.py."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from lake_contracts.config import from_environment
from lake_contracts.names import TABLE_NAME
from lake_contracts.reload_requests import ReloadRequestStore, retire_requests
from pydantic import BaseModel, ConfigDict, Field
from reloads import check, failed

# A DMS replication task's ARN, or empty where the stack has no task (DmsReplicationTaskArn left empty).
DMS_TASK_ARN_PATTERN = r"^(arn:aws[a-z-]*:dms:[a-z0-9-]+:\d{12}:task:\S+)?$"


class Settings(BaseModel):
    """The function's environment (template.yaml sets it), validated at cold start."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    artifacts_bucket: str = Field(alias="ARTIFACTS_BUCKET", min_length=1)
    manifest_prefix: str = Field("manifests", alias="MANIFEST_PREFIX", min_length=1)
    dms_task_arn: str = Field("", alias="DMS_TASK_ARN", pattern=DMS_TASK_ARN_PATTERN)


SETTINGS = from_environment(Settings)
STORE = ReloadRequestStore(SETTINGS.artifacts_bucket, SETTINGS.manifest_prefix)
DMS_TASK_ARN = SETTINGS.dms_task_arn

logger = Logger()
tracer = Tracer()
metrics = Metrics()
s3 = boto3.client("s3")
dms = boto3.client("dms")


# Every name the drain can write (commas, spaces, unicode: reload-request keys and --tables encode them).
TableName = Annotated[str, Field(pattern=TABLE_NAME, max_length=1024)]


class ReloadsRequest(BaseModel):
    action: Literal["check", "done", "failed"]
    checked: dict[TableName, str] = Field(default_factory=dict)  # done: what check returned
    tables: list[TableName] = Field(default_factory=list)  # failed: the tables of the failed run
    error: str = ""


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=ReloadsRequest)
def handler(request: ReloadsRequest, context: LambdaContext) -> dict[str, Any]:
    if request.action == "check":
        result = check(s3, dms, STORE, DMS_TASK_ARN)
        metrics.add_metric(name="ReloadsReady", unit=MetricUnit.Count, value=len(result["ready"]))
        metrics.add_metric(name="ReloadTableErrors", unit=MetricUnit.Count, value=len(result["errored"]))
        for errored in result["errored"]:
            logger.error("DMS could not reload a table", extra=errored)
    elif request.action == "done":
        result = retire_requests(s3, STORE, request.checked)
        metrics.add_metric(name="TablesReloaded", unit=MetricUnit.Count, value=len(result["retired"]))
    else:
        result = failed(s3, STORE, request.tables, request.error)
        metrics.add_metric(name="ReloadRunsFailed", unit=MetricUnit.Count, value=1)
        logger.error("reload run failed", extra=result | {"error": request.error[:2000]})
    for aside in result.get("set_aside", []):
        logger.error("corrupt reload request set aside", extra=aside)
    set_aside = len(result.get("set_aside", []))
    metrics.add_metric(name="ReloadRequestsSetAside", unit=MetricUnit.Count, value=set_aside)
    logger.info(f"reloads {request.action}", extra=result)
    return result

"""Lambda: retire a batch after its Glue CDC run succeeded."""

from __future__ import annotations

import os
from typing import Any

import boto3
from ack import acknowledge
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel

ARTIFACTS_BUCKET = os.environ.get("ARTIFACTS_BUCKET", "")

logger = Logger()
tracer = Tracer()
metrics = Metrics()
s3 = boto3.client("s3")


class AcknowledgeRequest(BaseModel):
    manifest_key: str
    run_id: str
    file_count: int = 0


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=AcknowledgeRequest)
def handler(request: AcknowledgeRequest, context: LambdaContext) -> dict[str, Any]:
    result = acknowledge(s3, ARTIFACTS_BUCKET, request.manifest_key)
    metrics.add_metric(name="FilesApplied", unit=MetricUnit.Count, value=request.file_count)
    logger.info("batch acknowledged", extra={"run_id": request.run_id, **result})
    return result | {"run_id": request.run_id}

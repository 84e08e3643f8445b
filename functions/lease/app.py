"""Lambda: acquire the pipeline lease for the calling execution (one pipeline at a time), and stop the job
runs of other executions still going (fencing: docs/CONTRACTS.md)."""

from __future__ import annotations

import os
import re
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from lease import acquire, stop_other_runs
from pydantic import BaseModel, Field, model_validator

ARTIFACTS_BUCKET = os.environ.get("ARTIFACTS_BUCKET", "")
LEASE_KEY = os.environ.get("LEASE_KEY", "locks/pipeline-lease.json")
# the pipeline's Spark jobs (comma list) and, with SparkEngine=emr-serverless, its application
GLUE_JOB_NAMES = [n.strip() for n in os.environ.get("GLUE_JOB_NAMES", "").split(",") if n.strip()]
EMR_APPLICATION_ID = os.environ.get("EMR_APPLICATION_ID", "")
EXECUTION_ARN = r"^arn:aws[a-z-]*:states:[a-z0-9-]+:\d{12}:execution:[^\s:]+:[^\s:]{1,80}$"

logger = Logger()
tracer = Tracer()
metrics = Metrics()
s3 = boto3.client("s3")
sfn = boto3.client("stepfunctions")
glue = boto3.client("glue")
emr = boto3.client("emr-serverless") if EMR_APPLICATION_ID else None


class LeaseRequest(BaseModel):
    execution_arn: str = Field(pattern=EXECUTION_ARN)
    previous_execution: str | None = Field(default=None, pattern=EXECUTION_ARN)
    # The state machine passes its whole input: a rolled-over execution names its predecessor there
    # (a claim only: the lease hands over only to the successor the predecessor itself started).
    execution_input: dict[str, Any] | None = None

    @model_validator(mode="after")
    def predecessor_from_input(self) -> LeaseRequest:
        named = (self.execution_input or {}).get("previous_execution")
        if self.previous_execution is None and named is not None:
            if not isinstance(named, str) or not re.match(EXECUTION_ARN, named):
                raise ValueError(f"previous_execution {named!r} is not an execution ARN")
            self.previous_execution = named
        return self


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=LeaseRequest)
def handler(request: LeaseRequest, context: LambdaContext) -> dict[str, Any]:
    decision = acquire(
        s3, sfn, ARTIFACTS_BUCKET, LEASE_KEY, request.execution_arn, request.previous_execution
    )
    decision = stop_other_runs(decision, glue, GLUE_JOB_NAMES, emr, EMR_APPLICATION_ID)
    if decision.stopping_runs:
        logger.warning("job runs of other executions still going: stopping them", extra=decision.as_dict())
    metrics.add_metric(name="LeaseRefused", unit=MetricUnit.Count, value=0 if decision.acquired else 1)
    logger.info("pipeline lease", extra=decision.as_dict() | {"execution_arn": request.execution_arn})
    return decision.as_dict()

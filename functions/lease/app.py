"""Lambda: acquire the pipeline lease for the calling execution (one pipeline at a time), and stop the job
runs of other executions still going (fencing: docs/CONTRACTS.md)."""

from __future__ import annotations

import re
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from lake_contracts.config import from_environment
from lake_contracts.s3 import DEFAULT_LEASE_KEY
from lease import acquire, stop_other_runs
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Settings(BaseModel):
    """The function's environment (template.yaml sets it), validated at cold start."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    artifacts_bucket: str = Field(alias="ARTIFACTS_BUCKET", min_length=1)
    lease_key: str = Field(DEFAULT_LEASE_KEY, alias="LEASE_KEY", min_length=1)
    # the pipeline's Spark jobs (a comma list) and, with SparkEngine=emr-serverless, its application
    glue_job_names: tuple[str, ...] = Field((), alias="GLUE_JOB_NAMES")
    # of those, the checks (reconcile, raw audit): a run of one started by hand, without a lease, is left going
    check_job_names: tuple[str, ...] = Field((), alias="CHECK_JOB_NAMES")
    emr_application_id: str = Field("", alias="EMR_APPLICATION_ID")

    @field_validator("glue_job_names", "check_job_names", mode="before")
    @classmethod
    def comma_list(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(name.strip() for name in value.split(",") if name.strip())
        return value


SETTINGS = from_environment(Settings)
ARTIFACTS_BUCKET = SETTINGS.artifacts_bucket
LEASE_KEY = SETTINGS.lease_key
GLUE_JOB_NAMES = list(SETTINGS.glue_job_names)
CHECK_JOB_NAMES = frozenset(SETTINGS.check_job_names)
EMR_APPLICATION_ID = SETTINGS.emr_application_id
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
    decision = stop_other_runs(decision, glue, GLUE_JOB_NAMES, emr, EMR_APPLICATION_ID, CHECK_JOB_NAMES)
    if decision.stopping_runs:
        logger.warning("job runs of other executions still going: stopping them", extra=decision.as_dict())
    metrics.add_metric(name="LeaseRefused", unit=MetricUnit.Count, value=0 if decision.acquired else 1)
    logger.info("pipeline lease", extra=decision.as_dict() | {"execution_arn": request.execution_arn})
    return decision.as_dict()

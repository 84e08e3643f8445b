"""Lambda: retire a batch after its Glue CDC run succeeded, and publish what the run did; after a full
load or a table reload (`load_run_id`), publish what that run quarantined."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

import boto3
from ack import (
    RunNotAppliedError,
    acknowledge,
    check_manifest_key,
    load_report_metrics,
    not_applied,
    pending_load_metrics,
    read_report,
    report_metrics,
    run_cost,
    table_lag_metrics,
)
from aws_lambda_powertools import Logger, Metrics, Tracer, single_metric
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from lake_contracts.config import from_environment
from lake_contracts.layout import LOAD_REPORT_PATTERN, RUN_ID_PATTERN, ArtifactsLayout
from lake_contracts.s3 import DEFAULT_LEASE_KEY
from pydantic import BaseModel, ConfigDict, Field, model_validator


class Settings(BaseModel):
    """The function's environment (template.yaml sets it), validated at cold start."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    artifacts_bucket: str = Field(alias="ARTIFACTS_BUCKET", min_length=1)
    manifest_prefix: str = Field("manifests", alias="MANIFEST_PREFIX", min_length=1)
    lease_key: str = Field(DEFAULT_LEASE_KEY, alias="LEASE_KEY", min_length=1)


SETTINGS = from_environment(Settings)
ARTIFACTS_BUCKET = SETTINGS.artifacts_bucket
MANIFEST_PREFIX = SETTINGS.manifest_prefix
LEASE_KEY = SETTINGS.lease_key
LAYOUT = ArtifactsLayout(MANIFEST_PREFIX)
EXECUTION_ARN = r"^arn:aws[a-z-]*:states:[^\s]+:execution:[^\s]+$"
UNITS = {"LagSeconds": MetricUnit.Seconds, "CdcRunSeconds": MetricUnit.Seconds}

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "acknowledge")  # every metric's `service` dimension
logger = Logger()
tracer = Tracer()
metrics = Metrics()
s3 = boto3.client("s3")


class GlueRun(BaseModel):
    """The parts of the `glue:startJobRun.sync` result this step reads."""

    model_config = ConfigDict(extra="ignore")
    ExecutionTime: int | None = Field(default=None, ge=0)
    DPUSeconds: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    MaxCapacity: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    NumberOfWorkers: int | None = Field(default=None, ge=0)
    WorkerType: str | None = None
    JobRunState: str | None = None  # SUCCEEDED after glue:startJobRun.sync; anything else is refused


class AcknowledgeRequest(BaseModel):
    """A CDC batch to retire (`manifest_key`, `run_id`, the `manifest_etag` the drain handed out, the
    `execution_arn` that must hold the lease), or a full load or reload whose report to publish
    (`load_run_id`)."""

    manifest_key: str | None = None
    run_id: str | None = Field(default=None, pattern=RUN_ID_PATTERN)
    manifest_etag: str | None = Field(default=None, min_length=1, max_length=200)
    execution_arn: str | None = Field(default=None, pattern=EXECUTION_ARN)
    file_count: int = Field(default=0, ge=0)
    glue_run: GlueRun | None = None
    load_run_id: str | None = Field(default=None, pattern=LOAD_REPORT_PATTERN)

    @model_validator(mode="after")
    def one_kind(self) -> AcknowledgeRequest:
        batch = self.manifest_key is not None and self.run_id is not None
        if batch == (self.load_run_id is not None):
            raise ValueError("either manifest_key and run_id (a CDC batch) or load_run_id (a load), not both")
        if batch and (self.manifest_etag is None or self.execution_arn is None):
            raise ValueError(
                "a CDC batch is retired only with its manifest_etag and the execution_arn holding the lease"
            )
        return self


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=AcknowledgeRequest)
def handler(request: AcknowledgeRequest, context: LambdaContext) -> dict[str, Any]:
    if request.load_run_id is not None:
        return publish_load_report(request.load_run_id)
    # the model says so
    assert request.manifest_key and request.run_id and request.manifest_etag and request.execution_arn
    check_manifest_key(request.manifest_key, request.run_id, MANIFEST_PREFIX)
    report, why_not = read_report(s3, ARTIFACTS_BUCKET, LAYOUT.report_key(request.run_id))
    refusal = not_applied(report, request.glue_run.JobRunState if request.glue_run else None)
    if refusal:
        raise RunNotAppliedError(f"batch {request.run_id} not retired: {refusal}")
    result = acknowledge(
        s3, ARTIFACTS_BUCKET, request.manifest_key, request.manifest_etag, (LEASE_KEY, request.execution_arn)
    )
    metrics.add_metric(name="FilesApplied", unit=MetricUnit.Count, value=request.file_count)
    published = report_metrics(report, datetime.now(UTC)) if report is not None else {}
    if report is None:
        logger.warning("run report not published", extra={"run_id": request.run_id, "reason": why_not})
    elif published.get("ChangesIgnoredAsOlder"):
        logger.warning(
            "changes skipped as older than the rows' (re)load or delete",
            extra={"run_id": request.run_id, "tables": report.ignoring_older},
        )
    if request.glue_run is not None:
        published |= run_cost(request.glue_run.model_dump())
    for name, value in published.items():
        metrics.add_metric(name=name, unit=UNITS.get(name, MetricUnit.Count), value=value)
    if report is not None:
        now = datetime.now(UTC)
        _publish_per_table("TableLagSeconds", table_lag_metrics(report, now))
        _publish_per_table("FullLoadPendingSeconds", pending_load_metrics(report, now))
    logger.info("batch acknowledged", extra={"run_id": request.run_id, **result, **published})
    return result | {"run_id": request.run_id, "published": published}


def _publish_per_table(name: str, values: dict[str, float]) -> None:
    for table, value in sorted(values.items()):  # one metric per table: its own dimension
        with single_metric(
            name=name, unit=MetricUnit.Seconds, value=value, default_dimensions={"service": SERVICE}
        ) as metric:
            metric.add_dimension(name="table", value=table)


def publish_load_report(load_run_id: str) -> dict[str, Any]:
    report, why_not = read_report(s3, ARTIFACTS_BUCKET, LAYOUT.report_key(load_run_id))
    if report is None:
        logger.warning("load report not published", extra={"run_id": load_run_id, "reason": why_not})
        return {"run_id": load_run_id, "published": {}}
    published = load_report_metrics(report)
    for name, value in published.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    logger.info("load report published", extra={"run_id": load_run_id, **published})
    return {"run_id": load_run_id, "published": published}

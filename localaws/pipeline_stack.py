"""The SAM app of a local pipeline run deployed on the embedded local AWS (`sam deploy --config-env local`),
and what runs in it: the state machine's executions, the Glue and EMR Serverless job runs, the schema file and
the reload requests in the artifacts bucket. `AppHandles` names what a run needs from the deployed stack.
"""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from localaws import replication, sam_app
from localaws.pipeline_settings import RunSettings
from tools.source_db import SourceDatabase

log = logging.getLogger(__name__)

# Template parameters this run sets, by the names template.yaml may give them (the first declared wins).
TASK_ARN_PARAMETERS = ("ReplicationTaskArn", "DmsTaskArn", "DmsReplicationTaskArn", "DMSTaskArn")
ENVIRONMENT_PARAMETERS = ("EnvironmentName", "Environment", "Env", "Stage")
CSV_NULL_PARAMETERS = ("CsvNullValue", "DmsCsvNullValue")
# SparkEngine=emr-serverless on the local AWS. The template requires the application's image (Python 3.11 on
# AWS); the local EMR Serverless never pulls it: it runs the entry points with the project's Python.
EMR_SERVERLESS_PARAMETERS = {
    "SparkEngine": "emr-serverless",
    "EmrImageUri": "000000000000.dkr.ecr.us-east-1.amazonaws.com/dms-iceberg-lake-spark:local",
}


@dataclass(frozen=True)
class AppHandles:
    """What a run needs from the deployed stack."""

    stack_name: str
    raw_bucket: str
    artifacts_bucket: str
    state_machine_arn: str
    clean_database: str
    cdc_job_name: str
    full_load_job_name: str
    queue_url: str | None = None
    dead_letter_queue_url: str | None = None
    emr_application_id: str | None = None  # SparkEngine=emr-serverless
    outputs: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_stack(cls, cloudformation: Any, stack_name: str) -> AppHandles:
        outputs = sam_app.stack_outputs(cloudformation, stack_name)
        resources = sam_app.stack_resources(cloudformation, stack_name)

        def pick(*names: str, default: str | None = None) -> str | None:
            for name in names:
                if outputs.get(name):
                    return outputs[name]
                if resources.get(name):
                    return resources[name]
            return default

        def required(*names: str) -> str:
            value = pick(*names)
            if value is None:
                raise KeyError(f"stack {stack_name} has none of {names}: outputs {sorted(outputs)}")
            return value

        return cls(
            stack_name=stack_name,
            raw_bucket=required("RawBucketName", "RawBucket"),
            artifacts_bucket=required("ArtifactsBucketName", "ArtifactsBucket"),
            state_machine_arn=required("StateMachineArn", "PipelineStateMachineArn", "PipelineStateMachine"),
            clean_database=required("CleanDatabaseName", "CleanDatabase"),
            cdc_job_name=required("CdcJobName", "CdcJob"),
            full_load_job_name=required("FullLoadJobName", "FullLoadJob"),
            queue_url=pick("QueueUrl", "RawFilesQueueUrl", "RawFilesQueue"),
            dead_letter_queue_url=pick("DeadLetterQueueUrl", "RawFilesDeadLetterQueueUrl", "DeadLetterQueue"),
            emr_application_id=pick("EmrApplicationId", "EmrApplication"),
            outputs=outputs,
            resources=resources,
        )


class DeployedStack:
    """The run's stack `lake-<name>` (`app` once deployed) and its executions. Not thread-safe."""

    def __init__(self, endpoint_url: str, settings: RunSettings, aws: Callable[[str], Any]) -> None:
        self.endpoint_url = endpoint_url
        self.settings = settings
        self.aws = aws
        self.app: AppHandles | None = None
        self.execution_arn: str | None = None
        self.schema_key = replication.SCHEMA_FILE_KEY  # a release publishes it under a versioned key

    @property
    def stack_name(self) -> str:
        return f"lake-{self.settings.name}"

    def run_parameters(self, source_db: SourceDatabase, task_arn: str) -> dict[str, str]:
        """The template parameters of this run: its environment, the DMS task it follows, the source's schema
        and engine, then the run's own (`RunSettings.parameters`)."""
        declared = sam_app.template_parameters()
        wanted = {
            ENVIRONMENT_PARAMETERS: self.settings.name,
            TASK_ARN_PARAMETERS: task_arn,
            CSV_NULL_PARAMETERS: replication.CSV_NULL_VALUE,
            ("SourceSchema",): source_db.schema,
            # the deployed reconcile job's SQL and JDBC URL (a SQLite source has no deployed reconcile)
            ("SourceEngine",): "mysql" if self.settings.source == "mysql" else "postgresql",
        }
        parameters = {}
        for candidates, value in wanted.items():
            name = sam_app.first_declared(candidates, declared)
            if name is None:
                log.warning("template.yaml declares none of %s; not set", candidates)
            else:
                parameters[name] = value
        return parameters | self.settings.parameters

    def deploy(
        self,
        source_db: SourceDatabase,
        task_arn: str,
        build: bool = True,
        template: Path | None = None,
    ) -> AppHandles:
        """`sam build` + `sam deploy --config-env local` with this run's parameters, then the Glue
        artifacts and the schema file into the artifacts bucket. `template`: one `sam_app.package` made
        already (its code in this local AWS's S3), deployed as it is (no build)."""
        if build and template is None:
            sam_app.build(self.endpoint_url)
        parameters = self.run_parameters(source_db, task_arn)
        sam_app.deploy(self.endpoint_url, self.stack_name, parameters, template=template)
        self.app = AppHandles.from_stack(self.aws("cloudformation"), self.stack_name)
        sam_app.upload_glue_artifacts(self.aws("s3"), self.app.artifacts_bucket, iceberg_jar=False)
        self.upload_schema(source_db)
        return self.app

    def release(
        self, source_db: SourceDatabase, task_arn: str, schema_file: Path, timeout: float = 1200
    ) -> subprocess.CompletedProcess[str]:
        """What `make deploy` runs (`python -m deploy.release`, docs/DEPLOY.md), from the repository's root as a
        user runs it, aimed at this local AWS by AWS_ENDPOINT_URL: the preflight, `sam build`, the code and
        `schema_file` published under versioned keys, `sam deploy --config-env local` with this run's
        parameters. The finished process is returned as it ended (a refused preflight exits 2); once it
        succeeded, `app` and `schema_key` name the stack's."""
        parameters = self.run_parameters(source_db, task_arn)
        command = [
            sys.executable,
            "-m",
            "deploy.release",
            "--stack-name",
            self.stack_name,
            "--config-env",
            "local",
            "--parameter-overrides",
            " ".join(f"{key}={shlex.quote(value)}" for key, value in parameters.items()),
            "--schema-file",
            str(schema_file),
            "--no-confirm-changeset",
        ]
        done = subprocess.run(
            command,
            cwd=sam_app.REPO_ROOT,
            env=sam_app.aws_environment(self.endpoint_url),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode == 0:
            cloudformation = self.aws("cloudformation")
            self.app = AppHandles.from_stack(cloudformation, self.stack_name)
            stack = cloudformation.describe_stacks(StackName=self.stack_name)["Stacks"][0]
            given = {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters", [])}
            self.schema_key = given["SchemaFileKey"]
        return done

    def publish_models(self, folder: Path) -> list[str]:
        """The job code published again with `folder` as the models folder, as a user's redeploy publishes their
        models (`<JobCodePrefix>/models/<name>.sql`; a model no longer in the folder is deleted)."""
        assert self.app is not None
        return sam_app.upload_glue_artifacts(
            self.aws("s3"), self.app.artifacts_bucket, iceberg_jar=False, models=folder
        )

    def upload_schema(self, source_db: SourceDatabase) -> str:
        """The schema file generated from the source's catalog, into the artifacts bucket."""
        assert self.app is not None
        return replication.upload_schema_file(self.aws("s3"), self.app.artifacts_bucket, source_db)

    def start_execution(self) -> str:
        assert self.app is not None
        name = f"{self.settings.name}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
        self.execution_arn = self.aws("stepfunctions").start_execution(
            stateMachineArn=self.app.state_machine_arn,
            name=name,
            input=json.dumps(self.settings.execution_input),
        )["executionArn"]
        return self.execution_arn

    def schema_tables(self) -> set[str]:
        """The clean tables of the schema file in the artifacts bucket (the tables the full load creates)."""
        from lakehouse.base.schema import SchemaFile

        assert self.app is not None
        body = self.aws("s3").get_object(Bucket=self.app.artifacts_bucket, Key=self.schema_key)
        schema = SchemaFile.from_dict(json.loads(body["Body"].read()), per_table=True)
        return {spec.iceberg_name for spec in schema.tables.values()}

    def reloads_pending(self) -> list[str]:
        """Tables whose reload request the pipeline has not applied yet (`manifests/reloads/`)."""
        assert self.app is not None
        listed = self.aws("s3").list_objects_v2(Bucket=self.app.artifacts_bucket, Prefix="manifests/reloads/")
        return [o["Key"].rsplit("/", 1)[-1].removesuffix(".json") for o in listed.get("Contents", [])]

    def executions(self) -> list[dict[str, Any]]:
        assert self.app is not None
        return self.aws("stepfunctions").list_executions(stateMachineArn=self.app.state_machine_arn)[
            "executions"
        ]

    def execution_failure(self) -> str:
        """Error and cause of the newest failed execution."""
        failed = [e for e in self.executions() if e["status"] in ("FAILED", "TIMED_OUT", "ABORTED")]
        if not failed:
            return ""
        newest = max(failed, key=lambda e: e["startDate"])
        described = self.aws("stepfunctions").describe_execution(executionArn=newest["executionArn"])
        return f"{described.get('error', '')}: {described.get('cause', '')}"[:2000]

    def stop_executions(self, quiet_seconds: float = 3.0, timeout: float = 120.0) -> None:
        """Stop the pipeline's running executions until none has run for `quiet_seconds` (its pending batch
        stays; nothing is lost). Once is not enough: an execution stopped while it hands over to its successor
        (a history rollover's states:startExecution) leaves that one running, and the successor takes the lease
        and stops every job run it did not start (the demo's final refine, stopped so, once)."""
        sfn = self.aws("stepfunctions")
        deadline = time.monotonic() + timeout
        quiet_since: float | None = None
        while True:
            running = [e["executionArn"] for e in self.executions() if e["status"] == "RUNNING"]
            for arn in running:
                try:
                    sfn.stop_execution(executionArn=arn, error="Stopped", cause="stopped by the local run")
                except ClientError as error:
                    # The emulator starts an execution's interpreter on a thread of its own, and a stop that
                    # comes before that thread has parsed the definition fails with InternalError ('NoneType'
                    # object has no attribute 'set_stop'); the next pass stops it.
                    if error.response.get("Error", {}).get("Code") != "InternalError":
                        raise
                    log.info("execution %s still starting, stopping it again: %s", arn, error)
            now = time.monotonic()
            if running:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= quiet_seconds:
                return
            if now > deadline:
                raise TimeoutError(f"executions still starting after {timeout:.0f}s: {running}")
            time.sleep(0.5)

    def run_job(
        self, job_name: str, arguments: dict[str, str] | None = None, timeout: float = 600
    ) -> dict[str, Any]:
        """One run of a deployed Glue job, waited for; raises with Glue's error if it does not succeed. A run
        the state machine started before it was stopped (a stopped execution leaves its Glue run going)
        finishes first: the jobs allow one run at a time."""
        glue = self.aws("glue")
        deadline = time.monotonic() + timeout
        while any(
            run["JobRunState"] in ("STARTING", "RUNNING", "STOPPING", "WAITING")
            for run in glue.get_job_runs(JobName=job_name)["JobRuns"]
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{job_name}: an earlier run still going after {timeout:.0f}s")
            time.sleep(2.0)
        run_id = glue.start_job_run(JobName=job_name, Arguments=arguments or {})["JobRunId"]
        while time.monotonic() < deadline:
            run = glue.get_job_run(JobName=job_name, RunId=run_id)["JobRun"]
            if run["JobRunState"] in ("SUCCEEDED", "FAILED", "ERROR", "TIMEOUT", "STOPPED"):
                if run["JobRunState"] != "SUCCEEDED":
                    raise RuntimeError(
                        f"{job_name} {run['JobRunState']}: {run.get('ErrorMessage', '')[:2000]}"
                    )
                return run
            time.sleep(2.0)
        raise TimeoutError(f"{job_name} still running after {timeout:.0f}s")

    def emr_job_runs(self) -> list[dict[str, Any]]:
        """The EMR Serverless application's job runs, newest first (SparkEngine=emr-serverless; else none)."""
        assert self.app is not None
        if not self.app.emr_application_id:
            return []
        emr = self.aws("emr-serverless")
        runs: list[dict[str, Any]] = []
        for page in emr.get_paginator("list_job_runs").paginate(applicationId=self.app.emr_application_id):
            runs += page["jobRuns"]
        return runs

    def stop_running_executions(self) -> None:
        """Stop every running execution once, best effort (the stack may be going away)."""
        if self.app is None:
            return
        for execution in self.executions():
            if execution["status"] == "RUNNING":
                try:
                    self.aws("stepfunctions").stop_execution(
                        executionArn=execution["executionArn"], error="Stopped", cause="run finished"
                    )
                except Exception as error:  # best effort: the stack may be going away
                    log.warning("stopping %s: %s", execution["executionArn"], error)

    def delete(self) -> None:
        """Delete the stack."""
        sam_app.delete_stack(self.aws("cloudformation"), self.stack_name)

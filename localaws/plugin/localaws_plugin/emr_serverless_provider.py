"""EMR Serverless job runs that really run: StartJobRun executes the run's entry point on the host with the
project's Python, as the local Glue runs a Glue job's script (localaws_plugin.host_runs is shared).

moto keeps the applications (Create/Get/List/Start/Stop/Update/DeleteApplication); this provider owns the runs
(Start/Get/Cancel/ListJobRuns), so Step Functions' `emr-serverless:startJobRun.sync` (sfn_emr_serverless)
sees SUBMITTED, RUNNING, then SUCCESS, FAILED (`stateDetails`: the last lines of stderr) or CANCELLED.
Locally the entry point and `--py-files` come from the local S3 (the libraries on PYTHONPATH); `--jars` and
`--conf` are not applied: the project's Spark session brings the pinned Iceberg runtime, and the run gets the
local catalog overrides the local Glue gives its runs (host_runs.local_overrides).
"""

from __future__ import annotations

import json
import logging
import secrets
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from localstack.aws.api import CommonServiceException, RequestContext, handler
from localstack.services.plugins import ServiceLifecycleHook

from localaws_plugin import host_runs, settings
from localaws_plugin.emr_serverless_runs import (
    ACTIVE_STATES,
    DEFAULT_TIMEOUT_MINUTES,
    JobRun,
    local_arguments,
    option_names,
    parse_spark_submit_parameters,
)

LOG = logging.getLogger(__name__)


def _not_found(message: str) -> CommonServiceException:
    return CommonServiceException("ResourceNotFoundException", message, status_code=404)


def _invalid(message: str) -> CommonServiceException:
    return CommonServiceException("ValidationException", message, status_code=400)


class EmrServerlessJobRunsProvider(ServiceLifecycleHook):
    def __init__(self) -> None:
        self._runs: dict[tuple[str, str, str], dict[str, JobRun]] = {}
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(
            settings.glue_max_parallel_runs(), thread_name_prefix="emr-serverless-run"
        )
        host_runs.start_warm_pool()  # shared with the local Glue's runs

    def on_before_stop(self) -> None:
        for runs in self._runs.values():
            for run in runs.values():
                if run.process and run.process.poll() is None:
                    run.cancel_requested = True
                    host_runs.signal_group(run.process)
        host_runs.shutdown_warm_pool()  # the idle warm workers too

    @staticmethod
    def _application(context: RequestContext, application_id: str) -> Any:
        from moto.emrserverless.models import emrserverless_backends

        application = emrserverless_backends[context.account_id][context.region].applications.get(
            application_id
        )
        if application is None:
            raise _not_found(f"Application {application_id} does not exist")
        return application

    def _runs_of(self, context: RequestContext, application_id: str) -> dict[str, JobRun]:
        return self._runs.setdefault((context.account_id, context.region, application_id), {})

    def _run(self, context: RequestContext, application_id: str, run_id: str) -> JobRun:
        self._application(context, application_id)
        run = self._runs_of(context, application_id).get(run_id)
        if run is None:
            raise _not_found(f"Job run {run_id} of application {application_id} does not exist")
        return run

    @handler("StartJobRun", expand=False)
    def start_job_run(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        application_id = request["applicationId"]
        application = self._application(context, application_id)
        if application.state == "TERMINATED":
            raise _invalid(f"Application {application_id} is terminated. Cannot start job run.")
        spark_submit = (request.get("jobDriver") or {}).get("sparkSubmit")
        if not spark_submit or not spark_submit.get("entryPoint"):
            raise _invalid("jobDriver.sparkSubmit.entryPoint is required (only Spark jobs run locally)")
        try:
            parse_spark_submit_parameters(spark_submit.get("sparkSubmitParameters"))
        except ValueError as error:
            raise _invalid(f"sparkSubmitParameters: {error}") from None
        timeout = request.get("executionTimeoutMinutes") or DEFAULT_TIMEOUT_MINUTES
        with self._lock:
            runs = self._runs_of(context, application_id)
            token = request.get("clientToken")
            for run in runs.values():  # StartJobRun is idempotent on its client token
                if token and run.client_token == token:
                    return {"applicationId": application_id, "jobRunId": run.run_id, "arn": run.arn}
            run = JobRun(
                application_id=application_id,
                run_id="00" + secrets.token_hex(8),
                account_id=context.account_id,
                region=context.region,
                name=request.get("name") or "",
                execution_role=request["executionRoleArn"],
                release_label=application.release_label,
                job_driver=request["jobDriver"],
                execution_timeout_minutes=int(timeout),
                configuration_overrides=request.get("configurationOverrides"),
                tags=dict(request.get("tags") or {}),
                client_token=token,
            )
            runs[run.run_id] = run
        self._executor.submit(self._execute, run)
        return {"applicationId": application_id, "jobRunId": run.run_id, "arn": run.arn}

    @handler("GetJobRun", expand=False)
    def get_job_run(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        run = self._run(context, request["applicationId"], request["jobRunId"])
        return {"jobRun": run.as_api()}

    @handler("ListJobRuns", expand=False)
    def list_job_runs(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        self._application(context, request["applicationId"])
        states = set(request.get("states") or [])
        runs = sorted(
            (
                r
                for r in self._runs_of(context, request["applicationId"]).values()
                if not states or r.state in states
            ),
            key=lambda r: r.created_at,
            reverse=True,
        )
        start = int(request.get("nextToken") or 0)
        limit = int(request.get("maxResults") or 50)
        response: dict[str, Any] = {"jobRuns": [run.as_summary() for run in runs[start : start + limit]]}
        if start + limit < len(runs):
            response["nextToken"] = str(start + limit)
        return response

    @handler("CancelJobRun", expand=False)
    def cancel_job_run(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        run = self._run(context, request["applicationId"], request["jobRunId"])
        if run.state in ACTIVE_STATES:
            run.cancel_requested = True
            run.move_to("CANCELLING")
            if run.process and run.process.poll() is None:
                host_runs.signal_group(run.process, signal.SIGTERM)
        return {"applicationId": run.application_id, "jobRunId": run.run_id}

    # running --------------------------------------------------------------------------------------------
    def _execute(self, run: JobRun) -> None:
        run_dir = settings.state_dir() / "emr-serverless" / run.application_id / run.run_id
        try:
            if run.cancel_requested:
                run.move_to("CANCELLED", "Job run cancelled before it started")
                return
            run.move_to("RUNNING")
            run_dir.mkdir(parents=True, exist_ok=True)
            command, python_path = self._prepare(run, run_dir)
            self._run_process(run, run_dir, command, python_path)
        except Exception as error:
            LOG.exception("EMR Serverless job run %s of %s failed to start", run.run_id, run.application_id)
            run.move_to("FAILED", f"{type(error).__name__}: {error}")

    def _prepare(self, run: JobRun, run_dir: Any) -> tuple[list[str], list[str]]:
        spark_submit = run.spark_submit
        (run_dir / "request.json").write_text(json.dumps(run.job_driver, indent=2))
        parameters = parse_spark_submit_parameters(spark_submit.get("sparkSubmitParameters"))
        s3 = host_runs.s3_client(run.region, run.account_id)
        script = host_runs.download(s3, spark_submit["entryPoint"], run_dir)
        python_path = [str(host_runs.download(s3, uri, run_dir)) for uri in parameters.py_files]
        arguments = list(spark_submit.get("entryPointArguments") or [])
        arguments = local_arguments(arguments, host_runs.local_overrides(option_names(arguments)))
        return [settings.host_python(), str(script), *arguments], python_path

    def _run_process(self, run: JobRun, run_dir: Any, command: list[str], python_path: list[str]) -> None:
        env = host_runs.script_environment(
            run.region,
            run.account_id,
            python_path,
            {"EMR_SERVERLESS_APPLICATION_ID": run.application_id, "EMR_SERVERLESS_JOB_RUN_ID": run.run_id},
        )
        timeout_seconds = run.execution_timeout_minutes * 60
        run.process = host_runs.start_script(command, run_dir, env)
        LOG.info("EMR Serverless job run %s of %s: %s", run.run_id, run.application_id, " ".join(command))
        try:
            returncode = run.process.wait(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            host_runs.kill_group(run.process)
            run.move_to("FAILED", f"Job run timed out after {run.execution_timeout_minutes} minutes")
            return
        if run.cancel_requested:
            host_runs.kill_group(run.process)
            run.move_to("CANCELLED", "Job run cancelled")
        elif returncode == 0:
            run.move_to("SUCCESS", "Job run succeeded")
        else:
            run.move_to("FAILED", host_runs.stderr_message(run_dir, returncode))
        LOG.info("EMR Serverless job run %s of %s: %s", run.run_id, run.application_id, run.state)

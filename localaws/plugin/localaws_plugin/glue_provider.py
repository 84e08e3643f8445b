"""Glue job runs that really run: StartJobRun executes the job's script on the host with the project's Python.

moto keeps jobs, databases and tables; this provider owns the runs (Start/Get/GetJobRuns/BatchStop), so
Step Functions' `glue:startJobRun.sync`, which polls GetJobRun, sees RUNNING then SUCCEEDED or FAILED.
"""

from __future__ import annotations

import logging
import secrets
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from localstack.aws.api import CommonServiceException, RequestContext, handler
from localstack.services.plugins import ServiceLifecycleHook

from localaws_plugin import host_runs, settings

LOG = logging.getLogger(__name__)

# Arguments only the Glue service understands; locally Spark and Iceberg come from the project's venv.
GLUE_ONLY_ARGUMENTS = {
    "--datalake-formats",
    "--extra-jars",
    "--extra-files",
    "--additional-python-modules",
    "--python-modules-installer-option",
    "--job-language",
    "--job-bookmark-option",
    "--TempDir",
    "--conf",
    "--spark-event-logs-path",
    "--user-jars-first",
    "--auto-scale-within-microbatch",
}
GLUE_ONLY_PREFIXES = ("--enable-", "--continuous-log-")
TERMINAL_STATES = {"SUCCEEDED", "FAILED", "STOPPED", "TIMEOUT", "ERROR"}


def _not_found(message: str) -> CommonServiceException:
    return CommonServiceException("EntityNotFoundException", message, status_code=400)


def script_arguments(
    default_arguments: dict[str, str], run_arguments: dict[str, str], local_overrides: dict[str, str]
) -> list[str]:
    """Run arguments over the job's defaults, minus Glue-only ones, plus the local overrides, as `--k v`."""
    merged = {**default_arguments, **run_arguments, **local_overrides}
    argv: list[str] = []
    for name, value in merged.items():
        if name in GLUE_ONLY_ARGUMENTS or name.startswith(GLUE_ONLY_PREFIXES) or name == "--extra-py-files":
            continue
        argv += [name, value]
    return argv


@dataclass
class JobRun:
    job_name: str
    run_id: str
    account_id: str
    region: str
    arguments: dict[str, str]
    job: dict[str, Any]
    state: str = "STARTING"
    started_on: datetime = field(default_factory=lambda: datetime.now(UTC))
    completed_on: datetime | None = None
    error_message: str | None = None
    process: subprocess.Popen | None = None
    stop_requested: bool = False
    running_since: float | None = None
    finished_at: float | None = None

    def as_api(self) -> dict[str, Any]:
        now = datetime.now(UTC)
        end = self.completed_on or now
        run: dict[str, Any] = {
            "Id": self.run_id,
            "Attempt": 0,
            "JobName": self.job_name,
            "JobMode": "SCRIPT",
            "StartedOn": self.started_on,
            "LastModifiedOn": self.completed_on or now,
            "JobRunState": self.state,
            "Arguments": self.arguments,
            "PredecessorRuns": [],
            "ExecutionTime": int((end - self.started_on).total_seconds()),
            "Timeout": self.job.get("Timeout", 2880),
            "GlueVersion": self.job.get("GlueVersion", "5.0"),
        }
        for key in ("MaxCapacity", "WorkerType", "NumberOfWorkers"):
            if key in self.job:
                run[key] = self.job[key]
        if self.completed_on:
            run["CompletedOn"] = self.completed_on
        if self.error_message:
            run["ErrorMessage"] = self.error_message
        return run


class GlueJobRunsProvider(ServiceLifecycleHook):
    def __init__(self) -> None:
        self._runs: dict[tuple[str, str, str], dict[str, JobRun]] = {}
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(settings.glue_max_parallel_runs(), thread_name_prefix="glue-run")
        host_runs.start_warm_pool()  # warm Spark workers, ready by the first run (LOCALAWS_WARM_SPARK=0: none)

    def on_before_stop(self) -> None:
        for runs in self._runs.values():
            for run in runs.values():
                if run.process and run.process.poll() is None:
                    run.stop_requested = True
                    host_runs.signal_group(run.process)
        host_runs.shutdown_warm_pool()  # the idle warm workers too

    def _job(self, context: RequestContext, job_name: str) -> dict[str, Any]:
        from moto.glue.models import glue_backends

        backend = glue_backends[context.account_id][context.region]
        job = backend.jobs.get(job_name)
        if job is None:
            raise _not_found(f"Job {job_name} not found")
        return job.as_dict()

    def _runs_of(self, context: RequestContext, job_name: str) -> dict[str, JobRun]:
        return self._runs.setdefault((context.account_id, context.region, job_name), {})

    @handler("StartJobRun", expand=False)
    def start_job_run(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        job_name = request["JobName"]
        job = self._job(context, job_name)
        max_concurrent = int((job.get("ExecutionProperty") or {}).get("MaxConcurrentRuns", 1))
        with self._lock:
            runs = self._runs_of(context, job_name)
            active = sum(1 for run in runs.values() if run.state not in TERMINAL_STATES)
            if active >= max_concurrent:
                raise CommonServiceException(
                    "ConcurrentRunsExceededException",
                    f"Concurrent runs exceeded for {job_name}: {active} active, MaxConcurrentRuns {max_concurrent}",
                )
            run = JobRun(
                job_name=job_name,
                run_id="jr_" + secrets.token_hex(32),
                account_id=context.account_id,
                region=context.region,
                arguments=dict(request.get("Arguments") or {}),
                job=job,
            )
            if "Timeout" in request:
                run.job["Timeout"] = request["Timeout"]
            runs[run.run_id] = run
        self._executor.submit(self._execute, run)
        return {"JobRunId": run.run_id}

    @handler("GetJobRun", expand=False)
    def get_job_run(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        run = self._runs_of(context, request["JobName"]).get(request["RunId"])
        if run is None:
            raise _not_found(f"Job run {request['RunId']} not found")
        return {"JobRun": run.as_api()}

    @handler("GetJobRuns", expand=False)
    def get_job_runs(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        self._job(context, request["JobName"])
        runs = sorted(
            self._runs_of(context, request["JobName"]).values(), key=lambda r: r.started_on, reverse=True
        )
        start = int(request.get("NextToken") or 0)
        limit = int(request.get("MaxResults") or 100)
        page = runs[start : start + limit]
        response: dict[str, Any] = {"JobRuns": [run.as_api() for run in page]}
        if start + limit < len(runs):
            response["NextToken"] = str(start + limit)
        return response

    @handler("BatchStopJobRun", expand=False)
    def batch_stop_job_run(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        runs = self._runs_of(context, request["JobName"])
        stopped, errors = [], []
        for run_id in request.get("JobRunIds", []):
            run = runs.get(run_id)
            if run is None or run.state in TERMINAL_STATES:
                errors.append(
                    {
                        "JobName": request["JobName"],
                        "JobRunId": run_id,
                        "ErrorDetail": {
                            "ErrorCode": "InvalidInputException",
                            "ErrorMessage": "run is not active",
                        },
                    }
                )
                continue
            run.stop_requested = True
            run.state = "STOPPING"
            if run.process and run.process.poll() is None:
                run.process.terminate()
            stopped.append({"JobName": request["JobName"], "JobRunId": run_id})
        return {"SuccessfulSubmissions": stopped, "Errors": errors}

    def _execute(self, run: JobRun) -> None:
        run_dir = settings.state_dir() / "glue" / run.job_name / run.run_id
        try:
            if run.stop_requested:
                self._finish(run, "STOPPED")
                return
            run.state = "RUNNING"
            run.running_since = time.monotonic()
            run_dir.mkdir(parents=True, exist_ok=True)
            command = self._prepare(run, run_dir)
            self._run_process(run, run_dir, command)
        except Exception as error:
            LOG.exception("Glue job run %s of %s failed to start", run.run_id, run.job_name)
            run.error_message = f"{type(error).__name__}: {error}"
            self._finish(run, "FAILED")

    def _download(self, run: JobRun, uri: str, target_dir: Path) -> Path:
        return host_runs.download(host_runs.s3_client(run.region, run.account_id), uri, target_dir)

    def _prepare(self, run: JobRun, run_dir: Path) -> list[str]:
        default_arguments = dict(run.job.get("DefaultArguments") or {})
        merged = {**default_arguments, **run.arguments}
        script = self._download(run, run.job["Command"]["ScriptLocation"], run_dir)
        python_path = []
        for uri in filter(None, (merged.get("--extra-py-files") or "").split(",")):
            python_path.append(str(self._download(run, uri.strip(), run_dir)))
        run.job["_python_path"] = python_path
        local_overrides = host_runs.local_overrides(merged)
        return [
            settings.host_python(),
            str(script),
            *script_arguments(default_arguments, run.arguments, local_overrides),
        ]

    def _run_process(self, run: JobRun, run_dir: Path, command: list[str]) -> None:
        env = host_runs.script_environment(
            run.region,
            run.account_id,
            run.job.get("_python_path", []),
            {"GLUE_JOB_NAME": run.job_name, "GLUE_JOB_RUN_ID": run.run_id},
        )
        timeout_seconds = int(run.job.get("Timeout") or 2880) * 60
        run.process = host_runs.start_script(command, run_dir, env)
        LOG.info("Glue job run %s of %s: %s", run.run_id, run.job_name, " ".join(command))
        try:
            returncode = run.process.wait(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            host_runs.kill_group(run.process)
            run.error_message = f"Job run timed out after {timeout_seconds // 60} minutes"
            self._finish(run, "TIMEOUT")
            return
        if run.stop_requested:
            host_runs.kill_group(run.process)
            self._finish(run, "STOPPED")
        elif returncode == 0:
            self._finish(run, "SUCCEEDED")
        else:
            run.error_message = host_runs.stderr_message(run_dir, returncode)
            self._finish(run, "FAILED")

    @staticmethod
    def _finish(run: JobRun, state: str) -> None:
        run.completed_on = datetime.now(UTC)
        run.state = state
        run.finished_at = time.monotonic()
        LOG.info("Glue job run %s of %s: %s", run.run_id, run.job_name, state)

"""Which of the loop's periodic Spark jobs are due: the source <-> lake reconcile and the raw zone
audit, each every N minutes (template parameters ReconcileEveryMinutes, RawAuditEveryMinutes; 0 = never).

The clock is the job's own run history, not the execution's state: a job is due once its newest run (on Glue,
or with SparkEngine=emr-serverless on the application, by the run's name) started a period ago. So nothing is
carried in the loop state or over a rollover, a run started by hand counts, and a failed run waits a period
like a successful one (it is alarmed, not retried at every pass). The history
guard answers it on every pass (one call: no history events of its own). A job that never ran counts from the
execution's start (a new pipeline audits and reconciles one period in, not at once). `overdue` is two periods:
the loop then runs the reconcile even between two CDC runs, so a queue never found empty cannot starve it.

Reading the run history can fail (throttling, a permission): then the job is not due this pass. The guard
never fails the execution for it.

The refine is not periodic but rate-limited (RefineEveryMinutes): the loop refines after RefineEveryNBatches
batches, or idle, only once the refine job's newest run started that long ago. Each run is billed at least a
minute on Glue, so a busy loop (a batch every two minutes) would otherwise pay a start-up every few batches.
That floor is open when it is 0, when the refine never ran, and when its runs cannot be read: one refine
too many costs a billed minute, a refined zone held back costs its readers.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

log = logging.getLogger(__name__)

# the loop's names for its periodic jobs -> the environment variables naming the job and its period
JOBS = {
    "reconcile": ("RECONCILE_JOB_NAME", "RECONCILE_EVERY_MINUTES"),
    "raw_audit": ("RAW_AUDIT_JOB_NAME", "RAW_AUDIT_EVERY_MINUTES"),
}
REFINE = ("REFINE_JOB_NAME", "REFINE_EVERY_MINUTES")
EMR_RUNS_LOOKED_AT = 200


@dataclass(frozen=True)
class Periodic:
    key: str  # reconcile | raw_audit: the answer's field (refine: the minimum interval)
    job_name: str  # the Glue job (or the EMR Serverless run name, the Glue job's name)
    every_minutes: float  # 0: never


def periodic_jobs(environ: Mapping[str, str]) -> list[Periodic]:
    """The periodic jobs the template configured (a job without a name or with no period is left out)."""
    jobs = []
    for key, (name_variable, every_variable) in JOBS.items():
        name = environ.get(name_variable, "").strip()
        every = float(environ.get(every_variable, "0") or 0)
        if every < 0:
            raise ValueError(f"{every_variable} {every}: 0 (never) or a number of minutes")
        if name and every > 0:
            jobs.append(Periodic(key, name, every))
    return jobs


def refine_floor(environ: Mapping[str, str]) -> Periodic | None:
    """The refine's minimum interval, if the template set one (a job name and minutes above 0)."""
    name_variable, every_variable = REFINE
    name = environ.get(name_variable, "").strip()
    every = float(environ.get(every_variable, "0") or 0)
    if every < 0:
        raise ValueError(f"{every_variable} {every}: 0 (no minimum interval) or a number of minutes")
    return Periodic("refine", name, every) if name and every > 0 else None


def refine_interval_passed(
    floor: Periodic | None, last_started: Callable[[str], datetime | None], now: datetime
) -> bool:
    """May the loop start a refine now: no floor, a refine job that never ran, runs that cannot be read, or
    a newest run that started `floor.every_minutes` ago."""
    if floor is None:
        return True
    try:
        last = last_started(floor.job_name)
    except Exception as error:  # open: the next refine corrects a stale refined zone, nothing else does
        log.warning("the runs of %s could not be read: %s: %s", floor.job_name, type(error).__name__, error)
        return True
    return last is None or is_due(last, floor.every_minutes, now)


def is_due(last_started: datetime, every_minutes: float, now: datetime, periods: int = 1) -> bool:
    """A job whose newest run started at `last_started` is due `periods` periods later (never when off)."""
    if every_minutes <= 0:
        return False
    started = last_started if last_started.tzinfo else last_started.replace(tzinfo=UTC)
    return now >= started + timedelta(minutes=every_minutes * periods)


def schedule(
    jobs: list[Periodic],
    last_started: Callable[[str], datetime | None],
    now: datetime,
    since: Callable[[], datetime] | None = None,
) -> dict[str, dict[str, bool]]:
    """`due` and `overdue` for every job of the loop (False for one not configured or whose runs could not
    be read); a job that never ran counts from `since()` (the execution's start), or is due now without it."""
    due = dict.fromkeys(JOBS, False)
    overdue = dict.fromkeys(JOBS, False)
    for job in jobs:
        try:
            last = last_started(job.job_name) or (since() if since else now - timedelta(days=36500))
        except Exception as error:  # not due this pass; the next pass asks again
            log.warning("the runs of %s could not be read: %s: %s", job.job_name, type(error).__name__, error)
            continue
        due[job.key] = is_due(last, job.every_minutes, now)
        overdue[job.key] = is_due(last, job.every_minutes, now, periods=2)
    return {"due": due, "overdue": overdue}


def glue_last_started(glue: Any) -> Callable[[str], datetime | None]:
    def last_started(job_name: str) -> datetime | None:
        runs = glue.get_job_runs(JobName=job_name, MaxResults=10).get("JobRuns", [])
        # max(), not runs[0]: newest first on AWS, and right from an emulator that orders otherwise
        return max((run["StartedOn"] for run in runs if run.get("StartedOn")), default=None)

    return last_started


def emr_last_started(emr: Any, application_id: str) -> Callable[[str], datetime | None]:
    def last_started(job_name: str) -> datetime | None:
        newest: datetime | None = None
        seen = 0
        for page in emr.get_paginator("list_job_runs").paginate(applicationId=application_id):
            for run in page.get("jobRuns", []):
                seen += 1
                if run.get("name") == job_name and (newest is None or run["createdAt"] > newest):
                    newest = run["createdAt"]
            if seen >= EMR_RUNS_LOOKED_AT:  # newest first: a job running every period is among them
                break
        return newest

    return last_started


_clients: dict[str, Any] = {}


def _client(service: str) -> Any:
    if service not in _clients:
        import boto3

        _clients[service] = boto3.client(service)
    return _clients[service]


def answer(
    execution_arn: str, environ: Mapping[str, str] | None = None, now: datetime | None = None
) -> dict[str, Any]:
    """The guard's answer about the periodic jobs of the execution's loop and the refine's minimum interval,
    from the function's environment."""
    environ = os.environ if environ is None else environ
    moment = now or datetime.now(UTC)
    jobs = periodic_jobs(environ)
    floor = refine_floor(environ)
    if not jobs and floor is None:
        return schedule([], lambda _: None, moment) | {"refine_interval_passed": True}
    application_id = environ.get("EMR_APPLICATION_ID", "")
    reader = (
        emr_last_started(_client("emr-serverless"), application_id)
        if application_id
        else glue_last_started(_client("glue"))
    )

    @functools.cache
    def execution_start() -> datetime:
        return _client("stepfunctions").describe_execution(executionArn=execution_arn)["startDate"]

    return schedule(jobs, reader, moment, execution_start) | {
        "refine_interval_passed": refine_interval_passed(floor, reader, moment)
    }

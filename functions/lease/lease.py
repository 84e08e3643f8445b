"""The pipeline lease: one execution of the state machine at a time, enforced by a conditional write.

The lease is one S3 object naming the execution that holds it. An execution acquires it when
- it is absent (written with If-None-Match: *, so of two racing executions exactly one wins),
- it is held by an execution that is no longer RUNNING (failed, stopped, timed out, succeeded), or
- it is held by the execution that rolled over to this one: it names the holder as `previous_execution`
  AND is the successor the holder started itself, an execution of the same state machine named
  `rollover-<md5 hex of the holder's execution ARN>` (the name StartNextExecution gives it). The input
  alone proves nothing: whoever starts an execution chooses it; the name is the state machine's own.
in the last two cases by a compare-and-swap on the object's ETag (If-Match), so two executions taking
over from the same dead holder cannot both win. Liveness is asked of Step Functions, not guessed from a
timeout: a RUNNING execution keeps its lease however long its CDC run takes, and a dead one never blocks.

Fencing (docs/CONTRACTS.md, "Fencing"): the document carries an `epoch`, incremented at every acquisition
that changes the holder. Every job run the state machine starts carries the holder and the epoch, and checks
them right before each of its commits (spark_jobs/lakehouse/io/fence.py). The check leaves the window of one
commit; this side closes it: an execution that holds the lease stops every Spark job run of the pipeline
still going that it did not start itself (a stopped execution's runs go on) and says so
(`old_runs_running`): the state machine waits and asks again until none is left, before it starts its own.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError
from lake_contracts.s3 import error_code, is_conflict

ACTIVE_GLUE_STATES = ("STARTING", "RUNNING", "STOPPING", "WAITING")
ACTIVE_EMR_STATES = ["SUBMITTED", "PENDING", "SCHEDULED", "RUNNING", "QUEUED", "CANCELLING"]
HOLDER_ARGUMENT = "--lease_holder"
RUNS_LOOKED_AT = 200  # per job, newest first: a job allows one run at a time, an active run is among them


@dataclass(frozen=True)
class LeaseDecision:
    acquired: bool
    holder: str
    reason: str
    epoch: int = 0
    # job runs of other executions still going (being stopped): the holder starts none of its own before
    stopping_runs: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "acquired": self.acquired,
            "holder": self.holder,
            "reason": self.reason,
            "epoch": self.epoch,
            "old_runs_running": bool(self.stopping_runs),
            "stopping_runs": list(self.stopping_runs),
        }


def _document(execution_arn: str, now: datetime, taken_from: str | None, epoch: int) -> bytes:
    body = {
        "holder": execution_arn,
        "acquired_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "taken_from": taken_from,
        "epoch": epoch,
    }
    return json.dumps(body).encode()


class CorruptLeaseError(RuntimeError):
    """The lease object exists but is not a lease document: nobody provably holds the lease, nor is free."""


def _lease_document(body: bytes, bucket: str, key: str) -> dict[str, Any]:
    """The lease object's document; a body that is not a JSON object with a holder is a CorruptLeaseError
    naming the object and what to do (taking it over could admit a second execution)."""
    try:
        document = json.loads(body)
    except ValueError as error:
        problem = f"not JSON ({error})"
    else:
        if isinstance(document, dict) and isinstance(document.get("holder"), str) and document["holder"]:
            return document
        problem = "not an object naming a holder"
    raise CorruptLeaseError(
        f"the pipeline lease s3://{bucket}/{key} is corrupt, {problem}: {body[:200]!r}. No execution can "
        "tell who holds it. Make sure no execution of the pipeline is running, then delete the object: the "
        "next execution takes the lease."
    )


def _epoch(document: dict[str, Any]) -> int:
    try:
        return int(document.get("epoch") or 0)
    except (TypeError, ValueError):
        return 0


def rollover_successor_name(predecessor_arn: str) -> str:
    """The name the state machine gives the successor it starts on rollover:
    States.Format('rollover-{}', States.Hash($$.Execution.Id, 'MD5')); States.Hash returns the digest as
    lower-case hex (AWS: States.Hash('input data', 'MD5') = '812f45842bc6d66ee14572ce20db8e86')."""
    return "rollover-" + hashlib.md5(predecessor_arn.encode()).hexdigest()


def is_rollover_successor(execution_arn: str, predecessor_arn: str) -> bool:
    """True when `execution_arn` is the execution `predecessor_arn` started on rollover: of the same
    state machine (the ARN up to the execution name is the same) and named after the predecessor."""
    machine, _, name = execution_arn.rpartition(":")
    predecessor_machine = predecessor_arn.rpartition(":")[0]
    return machine == predecessor_machine and name == rollover_successor_name(predecessor_arn)


def execution_status(sfn: Any, execution_arn: str) -> str:
    """RUNNING, SUCCEEDED, FAILED, TIMED_OUT, ABORTED… or MISSING when Step Functions does not know it."""
    try:
        return str(sfn.describe_execution(executionArn=execution_arn)["status"])
    except ClientError as error:
        if error_code(error) in ("ExecutionDoesNotExist", "InvalidArn"):
            return "MISSING"
        raise


def acquire(
    s3: Any,
    sfn: Any,
    bucket: str,
    key: str,
    execution_arn: str,
    previous_execution: str | None = None,
    now: datetime | None = None,
) -> LeaseDecision:
    moment = now or datetime.now(UTC)
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=_document(execution_arn, moment, None, 1), IfNoneMatch="*")
        return LeaseDecision(True, execution_arn, "the lease was free", 1)
    except ClientError as error:
        if not is_conflict(error):
            raise
    current = s3.get_object(Bucket=bucket, Key=key)
    document = _lease_document(current["Body"].read(), bucket, key)
    holder, epoch = str(document.get("holder", "")), _epoch(document)
    if holder == execution_arn:
        return LeaseDecision(
            True, holder, "this execution holds the lease already (a retried acquire)", epoch
        )
    names_the_holder = bool(holder) and previous_execution == holder
    if names_the_holder and is_rollover_successor(execution_arn, holder):
        reason = f"handed over by {holder}"
    else:
        status = execution_status(sfn, holder) if holder else "MISSING"
        if status == "RUNNING":
            refusal = f"execution {holder} is RUNNING and holds the pipeline lease"
            if names_the_holder:
                refusal += (
                    f"; {execution_arn} names it as previous_execution but is not its rollover successor"
                    f" (an execution of the same state machine named {rollover_successor_name(holder)})"
                )
            return LeaseDecision(False, holder, refusal, epoch)
        reason = f"taken over from {holder or 'nobody'} ({status})"
    try:
        s3.put_object(
            Bucket=bucket,
            Key=key,
            Body=_document(execution_arn, moment, holder, epoch + 1),
            IfMatch=current["ETag"],
        )
    except ClientError as error:
        if not is_conflict(error):
            raise
        won = _lease_document(s3.get_object(Bucket=bucket, Key=key)["Body"].read(), bucket, key)
        winner = str(won.get("holder", ""))
        return LeaseDecision(
            winner == execution_arn, winner, f"another execution took the lease first: {winner}", _epoch(won)
        )
    return LeaseDecision(True, execution_arn, reason, epoch + 1)


def stop_other_runs(
    decision: LeaseDecision,
    glue: Any,
    job_names: list[str],
    emr: Any = None,
    emr_application_id: str = "",
    check_jobs: frozenset[str] = frozenset(),
) -> LeaseDecision:
    """For a holder: stop every active job run of the pipeline's Glue jobs (and EMR Serverless application)
    that this execution did not start, i.e. whose `--lease_holder` argument names another execution or is
    absent (a run the previous version of the state machine started, or one started by hand: none may
    commit beside the holder); the decision lists those still going. A run already STOPPING/CANCELLING is
    listed, not stopped again. Asked again until none is left (the state machine waits in between).

    The exception is `check_jobs` (the reconcile and the raw audit) started by hand, without a lease: they
    never write the clean zone (their own report table, a DMS reload request, a re-sent file event: all safe
    beside the holder), and an operator's check must not be stopped by every history rollover. A check run
    carrying another execution's lease is stopped like any other."""
    if not decision.acquired:
        return decision
    going = [*_stop_glue_runs(glue, job_names, decision.holder, check_jobs)]
    if emr is not None and emr_application_id:
        going += _cancel_emr_runs(emr, emr_application_id, decision.holder, check_jobs)
    return replace(decision, stopping_runs=tuple(going))


def _stop_glue_runs(
    glue: Any, job_names: list[str], holder: str, check_jobs: frozenset[str] = frozenset()
) -> list[str]:
    going: list[str] = []
    for job in job_names:
        runs: list[dict[str, Any]] = []
        request: dict[str, Any] = {"JobName": job, "MaxResults": 50}
        while len(runs) < RUNS_LOOKED_AT:
            page = glue.get_job_runs(**request)
            runs += page.get("JobRuns", [])
            if not page.get("NextToken"):
                break
            request["NextToken"] = page["NextToken"]
        others = [
            run
            for run in runs
            if run.get("JobRunState") in ACTIVE_GLUE_STATES
            and (run.get("Arguments") or {}).get(HOLDER_ARGUMENT) != holder
            and not (job in check_jobs and not (run.get("Arguments") or {}).get(HOLDER_ARGUMENT))
        ]
        to_stop = [run["Id"] for run in others if run.get("JobRunState") != "STOPPING"]
        if to_stop:
            glue.batch_stop_job_run(JobName=job, JobRunIds=to_stop)
        going += [
            f"glue {job} {run['Id']} ({run.get('JobRunState')}; started under "
            f"{(run.get('Arguments') or {}).get(HOLDER_ARGUMENT) or 'no lease'})"
            for run in others
        ]
    return going


def _cancel_emr_runs(
    emr: Any, application_id: str, holder: str, check_jobs: frozenset[str] = frozenset()
) -> list[str]:
    going: list[str] = []
    listed = emr.list_job_runs(applicationId=application_id, states=ACTIVE_EMR_STATES, maxResults=50)
    for summary in listed.get("jobRuns", []):
        run = emr.get_job_run(applicationId=application_id, jobRunId=summary["id"])["jobRun"]
        arguments = list(run.get("jobDriver", {}).get("sparkSubmit", {}).get("entryPointArguments", []))
        started_under = next(
            (arguments[i + 1] for i, a in enumerate(arguments[:-1]) if a == HOLDER_ARGUMENT), None
        )
        if started_under == holder or (started_under is None and run.get("name", "") in check_jobs):
            continue
        if run.get("state") != "CANCELLING":
            emr.cancel_job_run(applicationId=application_id, jobRunId=run["jobRunId"])
        going.append(
            f"emr-serverless {run.get('name', '')} {run['jobRunId']} (started under {started_under or 'no lease'})"
        )
    return going

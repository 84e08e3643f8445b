"""Runs the tool starts: the pipeline's execution (its input decided from the full-load marker, never by
hand), the reconcile on demand and the reapply of fixed quarantined files (both fenced by the lease of the
execution holding it), and the waits on them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from lakectl.stack import FULL_LOAD_MARKER_KEY, LEASE_KEY, Clients, Stack, object_exists, read_json

EXECUTION_ENDED = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")
GLUE_RUN_ENDED = ("SUCCEEDED", "FAILED", "STOPPED", "TIMEOUT", "ERROR")

Progress = Callable[[str], None]  # told the state of what is awaited at each poll


class NoLeaseHolderError(RuntimeError):
    """No execution holds the pipeline lease: a fenced run has nothing to be fenced by."""


def execution_input(s3: Any, stack: Stack) -> dict[str, Any]:
    """`{"skip_full_load": true}` once the full load is recorded (`manifests/full-load.json`): the loop resumes
    and a pending batch is applied first. `{}` before: the execution waits for DMS's full load and applies it.
    The other choice would skip the initial load, or load it again over the changes since."""
    return {"skip_full_load": True} if object_exists(s3, stack.artifacts_bucket, FULL_LOAD_MARKER_KEY) else {}


def start_pipeline(stack: Stack, clients: Clients, now: datetime | None = None) -> dict[str, Any]:
    """Start an execution unless one runs already (a second one would only find the lease taken)."""
    sfn = clients("stepfunctions")
    arn = stack.output("StateMachineArn")
    running = sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING").get("executions", [])
    if running:
        return {"started": False, "execution_arn": running[0]["executionArn"], "reason": "already running"}
    document = execution_input(clients("s3"), stack)
    name = f"lakectl-{(now or datetime.now(UTC)):%Y%m%dT%H%M%S%f}"
    started = sfn.start_execution(stateMachineArn=arn, name=name, input=json.dumps(document))
    return {"started": True, "execution_arn": started["executionArn"], "input": document}


def lease_of(s3: Any, stack: Stack) -> tuple[str, int]:
    lease = read_json(s3, stack.artifacts_bucket, LEASE_KEY)
    if not lease or not lease.get("holder"):
        raise NoLeaseHolderError(
            f"no execution holds the lease s3://{stack.artifacts_bucket}/{LEASE_KEY}: `lakectl start` first"
        )
    return str(lease["holder"]), int(lease.get("epoch") or 0)


def fenced_arguments(stack: Stack, holder: str, epoch: int) -> dict[str, str]:
    """A job run's lease arguments, as the state machine gives its own runs: it commits nothing once the
    lease moves on from `holder`."""
    return {"--lease_uri": stack.lease_uri, "--lease_holder": holder, "--lease_epoch": str(epoch)}


def start_reconcile(stack: Stack, clients: Clients, now: datetime | None = None) -> dict[str, Any]:
    """The reconcile job as the loop runs it (divergence reported, not failed on; repaired as RepairMode
    says), under the lease of the execution holding it."""
    holder, epoch = lease_of(clients("s3"), stack)
    run_id = f"reconcile-{(now or datetime.now(UTC)):%Y-%m-%dT%H:%M:%S.%fZ}"
    arguments = fenced_arguments(stack, holder, epoch) | {
        "--run_id": run_id,
        "--report_uri": f"s3://{stack.artifacts_bucket}/manifests/reports/{run_id}.json",
        "--repair_mode": stack.parameters.get("RepairMode") or "report",
        "--dms_task_arn": stack.dms_task_arn,
        "--fail_on_divergence": "false",
    }
    job = stack.output("ReconcileJobName")
    started = clients("glue").start_job_run(JobName=job, Arguments=arguments)
    return {"job": job, "job_run_id": started["JobRunId"], "run_id": run_id, "lease_holder": holder}


def reapply_arguments(
    stack: Stack,
    holder: str,
    epoch: int,
    run_id: str,
    files: list[str],
    batch_run_id: str | None,
    dry_run: bool,
) -> dict[str, str]:
    """The reapply job's run arguments: the files (a JSON array: a Glue run holds one value per name) or the
    CDC run whose quarantined files to apply again, under the lease of `holder`."""
    chosen = {"--run_id": batch_run_id} if batch_run_id else {"--files_json": json.dumps(files)}
    return (
        fenced_arguments(stack, holder, epoch)
        | chosen
        | {
            "--dry_run": "true" if dry_run else "false",
            "--report_uri": f"s3://{stack.artifacts_bucket}/manifests/reapply/{run_id}.json",
        }
    )


def start_reapply(
    stack: Stack,
    clients: Clients,
    files: list[str],
    batch_run_id: str | None,
    dry_run: bool = False,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The reapply job (fixed quarantined files applied again) run under the lease of the execution holding
    it: the loop's own runs and this one never commit to a table at once, and a run the lease left behind
    commits nothing."""
    if bool(files) == bool(batch_run_id):
        raise ValueError("give --file (one or more) or --run-id")
    holder, epoch = lease_of(clients("s3"), stack)
    run_id = f"reapply-{(now or datetime.now(UTC)):%Y-%m-%dT%H:%M:%S.%fZ}"
    arguments = reapply_arguments(stack, holder, epoch, run_id, files, batch_run_id, dry_run)
    return _start_reapply_job(stack, clients, holder, run_id, arguments)


def rollback_arguments(
    stack: Stack, holder: str, epoch: int, run_id: str, target: dict[str, Any], dry_run: bool
) -> dict[str, str]:
    """The reapply job's run arguments in rollback mode: the table and its target (`snapshot_id` or `before`)
    as one JSON value, the deployment's TombstoneRetentionDays (files older than the tombstones are refused),
    under the lease of `holder`."""
    return fenced_arguments(stack, holder, epoch) | {
        "--rollback_json": json.dumps(target),
        "--tombstone_retention_days": str(stack.tombstone_retention_days),
        "--dry_run": "true" if dry_run else "false",
        "--report_uri": f"s3://{stack.artifacts_bucket}/manifests/reapply/{run_id}.json",
    }


def start_rollback(
    stack: Stack,
    clients: Clients,
    table: str,
    snapshot_id: int | None,
    before: str | None,
    dry_run: bool = False,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The reapply job in rollback mode, under the lease of the execution holding it: the loop's runs and the
    rollback never commit to the table at once, and a run the lease left behind commits nothing."""
    if (snapshot_id is None) == (before is None):
        raise ValueError("give --to-snapshot or --before")
    schema, _, name = table.partition(".")
    if not schema or not name:
        raise ValueError(f"{table!r}: name the table as <schema>.<table>, as DMS spells it")
    if before is not None:
        datetime.fromisoformat(before)  # a ValueError naming it, before any run starts
    target: dict[str, Any] = {"table": table}
    target |= {"snapshot_id": snapshot_id} if snapshot_id is not None else {"before": before}
    holder, epoch = lease_of(clients("s3"), stack)
    run_id = f"rollback-{(now or datetime.now(UTC)):%Y-%m-%dT%H:%M:%S.%fZ}"
    arguments = rollback_arguments(stack, holder, epoch, run_id, target, dry_run)
    return _start_reapply_job(stack, clients, holder, run_id, arguments)


def _start_reapply_job(
    stack: Stack, clients: Clients, holder: str, run_id: str, arguments: dict[str, str]
) -> dict[str, Any]:
    """A run of the stack's reapply job with `arguments` (the lease holder's among them)."""
    job = stack.output("ReapplyJobName")
    started = clients("glue").start_job_run(JobName=job, Arguments=arguments)
    return {
        "job": job,
        "job_run_id": started["JobRunId"],
        "run_id": run_id,
        "lease_holder": holder,
        "report_uri": arguments["--report_uri"],
    }


def read_report(s3: Any, report_uri: str) -> dict[str, Any] | None:
    """A run's published report (None: the run published none, e.g. it failed before)."""
    bucket, _, key = report_uri.removeprefix("s3://").partition("/")
    return read_json(s3, bucket, key)


def wait_for_glue_run(
    glue: Any, job: str, run_id: str, progress: Progress, poll_seconds: float = 5.0, timeout: float = 7200
) -> str:
    """Poll a Glue job run until it ends; returns its final state."""
    return _wait(
        lambda: glue.get_job_run(JobName=job, RunId=run_id)["JobRun"]["JobRunState"],
        GLUE_RUN_ENDED,
        progress,
        poll_seconds,
        timeout,
    )


def wait_for_lease(
    s3: Any, sfn: Any, stack: Stack, execution_arn: str, progress: Progress, poll_seconds: float = 2.0
) -> str:
    """Poll until the execution holds the pipeline lease ("HOLDS_LEASE") or ends (its status)."""

    def state() -> str:
        lease = read_json(s3, stack.artifacts_bucket, LEASE_KEY) or {}
        if lease.get("holder") == execution_arn:
            return "HOLDS_LEASE"
        return str(sfn.describe_execution(executionArn=execution_arn)["status"])

    return _wait(state, ("HOLDS_LEASE", *EXECUTION_ENDED), progress, poll_seconds, 900)


def _wait(
    state: Callable[[], str], final: tuple[str, ...], progress: Progress, poll_seconds: float, timeout: float
) -> str:
    begun = time.monotonic()
    while True:
        current = state()
        progress(f"{current} after {time.monotonic() - begun:.0f} s")
        if current in final:
            return current
        if time.monotonic() - begun > timeout:
            raise TimeoutError(f"still {current} after {timeout:.0f} s")
        time.sleep(poll_seconds)

"""Acknowledge an applied batch: its manifest moves from `pending/` to `done/`; what the run did is published.

This is the only step that retires a batch, and it runs only after the Glue CDC run succeeded; a
failed run leaves the manifest pending, and the next drain returns it first. It does not trust that: it
refuses (RunNotAppliedError) a batch whose own input says it was not applied (the Glue run's JobRunState
is not SUCCEEDED, the run report holds an error or a failed table). And it is fenced like the drain: it
retires only while its execution holds the pipeline lease, and only the version of the manifest the drain
handed out (`manifest_etag`): a manifest changed since (a drain that lost the lease wrote into it) is not
retired (LeaseLostError), its files are applied by a later run.

The CDC job writes its run report to `<prefix>/reports/<run_id>.json` (docs/CONTRACTS.md); its totals become
metrics: ChangesApplied, QuarantinedRecords, QuarantinedFiles and LagSeconds (now minus the newest applied
source commit time), and per clean table TableLagSeconds (dimension `table`: now minus the newest source
commit time the table holds, from the report's `freshness`) and FullLoadPendingSeconds (dimension `table`:
now minus when a table's full load committed its rows and never its facts, from the report's
`pending_loads`: not loaded until the full load runs again). A missing or unreadable report never fails the
acknowledge: nothing is published.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError
from lake_contracts.layout import RUN_ID, ArtifactsLayout
from lake_contracts.run_report import RunSummary
from lake_contracts.s3 import LeaseLostError, check_lease, delete_if_unchanged, is_missing
from lake_contracts.times import parse_time

DPU_PER_WORKER = {"G.025X": 0.25, "G.1X": 1.0, "G.2X": 2.0, "G.4X": 4.0, "G.8X": 8.0, "Standard": 1.0}


class ManifestNotPendingError(RuntimeError):
    """The manifest is neither pending nor acknowledged: it was never drained."""


class RunNotAppliedError(RuntimeError):
    """The acknowledge's own input says the batch was not (entirely) applied: it is not retired."""


def not_applied(report: RunSummary | None, job_run_state: str | None) -> str:
    """Why the run did not apply its batch, by the acknowledge's input; "" when nothing says so."""
    if job_run_state is not None and job_run_state != "SUCCEEDED":
        return f"the CDC job run ended {job_run_state}"
    if report is None:
        return ""
    if report.error:
        return f"the run report has an error: {report.error[:500]}"
    if report.failed_tables:
        return f"the run report has failed tables: {', '.join(report.failed_tables)[:500]}"
    return ""


def done_key(pending_key: str) -> str:
    if "/pending/" not in pending_key:
        raise ManifestNotPendingError(f"{pending_key} is not a pending manifest")
    return pending_key.replace("/pending/", "/done/", 1)


def check_manifest_key(manifest_key: str, run_id: str, prefix: str = "manifests") -> None:
    """The manifest key the state machine passes must be the pending manifest of that run."""
    if not RUN_ID.match(run_id) or manifest_key != ArtifactsLayout(prefix).pending_key(run_id):
        raise ManifestNotPendingError(f"{manifest_key} is not the pending manifest of run {run_id}")


def acknowledge(
    s3: Any,
    bucket: str,
    pending_key: str,
    manifest_etag: str,
    lease: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """Copy to done/, then delete from pending/, both only while `lease` (lease key, execution ARN) is held
    and the manifest is the version `manifest_etag` handed out. Idempotent: a retry after the move finds
    done/."""
    target = done_key(pending_key)

    def fence() -> None:
        if lease is not None:
            check_lease(s3, bucket, lease[0], lease[1], ": nothing retired")

    fence()
    try:
        current = s3.get_object(Bucket=bucket, Key=pending_key)
    except ClientError as error:
        if not is_missing(error):
            raise
        if _exists(s3, bucket, target):
            return {"acknowledged": target, "already": True}
        raise ManifestNotPendingError(f"s3://{bucket}/{pending_key} does not exist") from None
    body, etag = current["Body"].read(), str(current["ETag"])
    if etag.strip('"') != manifest_etag.strip('"'):
        raise LeaseLostError(
            f"s3://{bucket}/{pending_key} changed since the drain handed it out (ETag {etag}, handed out"
            f" {manifest_etag}): files the run did not read may be in it; not retired"
        )
    s3.put_object(Bucket=bucket, Key=target, Body=body, ContentType="application/json")
    fence()
    if not delete_if_unchanged(s3, bucket, pending_key, etag):
        s3.delete_object(Bucket=bucket, Key=target)  # the pending one stays: not retired
        raise LeaseLostError(f"s3://{bucket}/{pending_key} changed meanwhile: not retired")
    return {"acknowledged": target, "already": False}


def _exists(s3: Any, bucket: str, key: str) -> bool:
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError as error:
        if is_missing(error):
            return False
        raise  # 403 and the like: a missing permission must not look like "never drained"
    return True


def read_report(s3: Any, bucket: str, key: str) -> tuple[RunSummary | None, str]:
    """The run report, or None and why not (missing, unreadable)."""
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code")
        return None, f"no run report at s3://{bucket}/{key} ({code})"
    try:
        report = json.loads(body)
    except ValueError as error:
        return None, f"run report s3://{bucket}/{key} is not JSON: {error}"
    if not isinstance(report, dict):
        return None, f"run report s3://{bucket}/{key} is not an object"
    return RunSummary.from_document(report), ""


def report_metrics(report: RunSummary, now: datetime) -> dict[str, float]:
    """Metric values from a run report (only the contract's keys are read)."""
    totals = report.totals
    # A retried run skips the tables its failed attempt applied: what that attempt quarantined is only in
    # the run-wide counts (the quarantine table's rows of this run id), which the job reports beside.
    values: dict[str, float] = {
        "ChangesApplied": totals["inserted_or_updated"] + totals["deleted"],
        "QuarantinedRecords": max(totals["quarantined_records"], report.run_quarantined_records),
        "QuarantinedFiles": max(totals["quarantined_files"], report.run_quarantined_files),
        # Changes skipped as older than the row's (re)load or delete: a bogus change sequence freezes rows.
        "ChangesIgnoredAsOlder": totals["ignored_older"],
    }
    if report.newest_commit_ts:
        try:
            moment = parse_time(report.newest_commit_ts)
        except ValueError:
            return values
        if moment is None:
            return values
        values["LagSeconds"] = max((now - moment).total_seconds(), 0.0)
    return values


def table_lag_metrics(report: RunSummary, now: datetime) -> dict[str, float]:
    """Per clean table (`schema.table`): now minus the newest source commit time it holds, from the run
    report's `freshness` (lakehouse.audit.freshness; a report without it, or a table without a time, gives none)."""
    newest = {
        row["source_table"]: row.get("newest_source_commit_ts")
        for row in report.freshness_rows
        if isinstance(row.get("source_table"), str)
    }
    return _seconds_since(newest, now)


def pending_load_metrics(report: RunSummary, now: datetime) -> dict[str, float]:
    """Per clean table whose full load committed its rows and never its facts (the report's `pending_loads`,
    lakehouse.apply.pending_load): how long it has been pending."""
    return _seconds_since(report.pending_load_since, now)


def _seconds_since(moments: dict[str, Any], now: datetime) -> dict[str, float]:
    """Each table's seconds from its moment to `now` (a moment that is not a time gives none)."""
    seconds: dict[str, float] = {}
    for table, text in moments.items():
        try:
            moment = parse_time(text) if isinstance(text, str) and text else None
        except ValueError:
            moment = None
        if moment is not None:
            seconds[table] = max((now - moment).total_seconds(), 0.0)
    return seconds


def load_report_metrics(report: RunSummary) -> dict[str, float]:
    """What a full load or a table reload quarantined (its run report), so that the quarantine alarm sees
    every job that quarantines, not only CDC runs."""
    values = report_metrics(report, datetime.now(UTC))
    return {name: values[name] for name in ("QuarantinedRecords", "QuarantinedFiles")}


def run_cost(glue_run: dict[str, Any]) -> dict[str, float]:
    """Seconds and DPU-seconds of a Glue job run (the `glue:startJobRun.sync` result)."""
    seconds = float(glue_run.get("ExecutionTime") or 0)
    values = {"CdcRunSeconds": seconds}
    if glue_run.get("DPUSeconds") is not None:  # reported for auto-scaled and Flex runs
        values["CdcDpuSeconds"] = float(glue_run["DPUSeconds"])
    elif glue_run.get("MaxCapacity"):
        values["CdcDpuSeconds"] = seconds * float(glue_run["MaxCapacity"])
    elif glue_run.get("NumberOfWorkers") and glue_run.get("WorkerType") in DPU_PER_WORKER:
        values["CdcDpuSeconds"] = (
            seconds * glue_run["NumberOfWorkers"] * DPU_PER_WORKER[glue_run["WorkerType"]]
        )
    return values

"""`lakectl status`: what the pipeline is doing and how far behind it is, from the stack's own objects: the
lease, the running execution, the queue, the batches out of line, the newest run report (its freshness per
table, the tables whose full load was left pending) and the newest reconcile report (its divergence)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from lakectl.batches import FailedBatch, failed_batches, pending_batches
from lakectl.stack import FULL_LOAD_MARKER_KEY, LEASE_KEY, Clients, Stack, object_exists, read_json

REPORTS = "manifests/reports/"
RECONCILE_REPORTS = REPORTS + "reconcile-"
# the reconcile job's own state between runs (the template's --state_uri), beside its reports: not a report
RECONCILE_STATE = REPORTS + "reconcile-rotation.json"


def newest_object(s3: Any, bucket: str, prefix: str, exclude: tuple[str, ...] = ()) -> str | None:
    """The key under `prefix` written last (LastModified, then key), leaving out keys starting with `exclude`."""
    newest: tuple[datetime, str] | None = None
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            if item["Key"].startswith(exclude):
                continue
            candidate = (item["LastModified"], item["Key"])
            newest = max(newest, candidate) if newest else candidate
    return newest[1] if newest else None


def running_execution(sfn: Any, state_machine_arn: str) -> dict[str, Any] | None:
    found = sfn.list_executions(stateMachineArn=state_machine_arn, statusFilter="RUNNING").get(
        "executions", []
    )
    if not found:
        return None
    newest = max(found, key=lambda e: e["startDate"])
    return {"name": newest["name"], "arn": newest["executionArn"], "started": _iso(newest["startDate"])}


def queue_state(sqs: Any, cloudwatch: Any, queue_url: str, now: datetime) -> dict[str, Any]:
    """Messages waiting and in flight, and the oldest one's age (SQS's metric, None where none is published)."""
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    points = cloudwatch.get_metric_statistics(
        Namespace="AWS/SQS",
        MetricName="ApproximateAgeOfOldestMessage",
        Dimensions=[{"Name": "QueueName", "Value": queue_url.rstrip("/").rsplit("/", 1)[-1]}],
        StartTime=now - timedelta(minutes=10),
        EndTime=now,
        Period=60,
        Statistics=["Maximum"],
    ).get("Datapoints", [])
    newest = max(points, key=lambda p: p["Timestamp"]) if points else None
    return {
        "waiting": int(attributes.get("ApproximateNumberOfMessages", 0)),
        "in_flight": int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0)),
        "oldest_age_seconds": newest["Maximum"] if newest else None,
    }


def batch_row(batch: FailedBatch) -> dict[str, Any]:
    return {
        "run_id": batch.run_id or None,
        "key": batch.key,
        "files": batch.files,
        "reason": batch.reason,
        "oldest_file": batch.oldest_file,
        "oldest_written_at": _iso(batch.oldest_written_at),
    }


def last_run(s3: Any, bucket: str, now: datetime) -> dict[str, Any] | None:
    """The newest run report but the reconcile's, the raw audit's and the refine's: its run, error, totals,
    freshness and the tables its full load left pending (not loaded: committed rows, never their facts), how
    long at `now`."""
    others = (RECONCILE_REPORTS, REPORTS + "raw-audit-", REPORTS + "refine-")
    key = newest_object(s3, bucket, REPORTS, exclude=others)
    document = read_json(s3, bucket, key) if key else None
    if document is None:
        return None
    freshness = document.get("freshness")
    tables = freshness.get("tables") if isinstance(freshness, dict) else None
    return {
        "key": key,
        "run_id": document.get("run_id"),
        "job": document.get("job"),
        "error": document.get("error"),
        "failed_tables": sorted(
            str(t.get("table"))
            for t in document.get("tables") or []
            if isinstance(t, dict) and t.get("error")
        ),
        "totals": document.get("totals") or {},
        "pending_loads": _pending_loads(document.get("pending_loads"), now),
        "freshness": [
            {
                "table": row.get("source_table"),
                "newest_source_change": row.get("newest_source_commit_ts"),
                "applied_through": row.get("applied_through_ts"),
                "last_batch": row.get("last_batch_id"),
            }
            for row in sorted(
                (r for r in tables or [] if isinstance(r, dict)), key=lambda r: str(r.get("source_table"))
            )
        ],
    }


def last_reconcile(s3: Any, bucket: str) -> dict[str, Any] | None:
    key = newest_object(s3, bucket, RECONCILE_REPORTS, exclude=(RECONCILE_STATE,))
    document = read_json(s3, bucket, key) if key else None
    if document is None:
        return None
    tables = [t for t in document.get("tables") or [] if isinstance(t, dict)]
    diverged = [t for t in tables if t.get("missing") or t.get("extra") or t.get("differing")]
    return {
        "key": key,
        "run_id": document.get("run_id"),
        "error": document.get("error"),
        "tables_checked": len(tables),
        "diverged": [
            {k: t.get(k) for k in ("table", "missing", "extra", "differing", "in_flight", "repaired")}
            for t in sorted(diverged, key=lambda t: str(t.get("table")))
        ],
    }


def collect_status(stack: Stack, clients: Clients, now: datetime | None = None) -> dict[str, Any]:
    moment = now or datetime.now(UTC)
    s3, bucket = clients("s3"), stack.artifacts_bucket
    lease = read_json(s3, bucket, LEASE_KEY)
    return {
        "stack": stack.name,
        "lease": {k: lease.get(k) for k in ("holder", "epoch", "acquired_at")} if lease else None,
        "execution": running_execution(clients("stepfunctions"), stack.output("StateMachineArn")),
        "full_load_recorded": object_exists(s3, bucket, FULL_LOAD_MARKER_KEY),
        "queue": queue_state(clients("sqs"), clients("cloudwatch"), stack.output("QueueUrl"), moment),
        "pending_batches": [batch_row(b) for b in pending_batches(s3, bucket)],
        "failed_batches": [batch_row(b) for b in failed_batches(s3, bucket)],
        "last_run": last_run(s3, bucket, moment),
        "last_reconcile": last_reconcile(s3, bucket),
    }


def render_status(status: dict[str, Any]) -> str:
    """The status as lines for a person."""
    lease, execution, queue = status["lease"], status["execution"], status["queue"]
    age = queue["oldest_age_seconds"]
    lines = [
        f"stack       {status['stack']}",
        f"lease       {lease['holder']} (epoch {lease['epoch']}, since {lease['acquired_at']})"
        if lease
        else "lease       free",
        f"execution   {execution['name']} (started {execution['started']})"
        if execution
        else "execution   none running",
        f"full load   {'recorded' if status['full_load_recorded'] else 'not recorded yet'}",
        f"queue       {queue['waiting']} waiting, {queue['in_flight']} in flight"
        + (f", oldest {age:.0f} s" if age is not None else ""),
    ]
    for title in ("pending_batches", "failed_batches"):
        batches = status[title]
        lines.append(f"{title.replace('_', ' '):<11} {len(batches)}")
        lines += [f"  {b['run_id'] or '(corrupt)'}  {b['files']} files  {b['reason']}" for b in batches]
    run = status["last_run"]
    if run:
        outcome = run["error"] or (
            f"failed tables {', '.join(run['failed_tables'])}" if run["failed_tables"] else "ok"
        )
        lines.append(f"last run    {run['job']} {run['run_id']}: {outcome}")
        lines += [
            f"  {row['table']}: full load pending since {row['pending_since']} ({row['pending_seconds']} s): not "
            "loaded until the full load runs again"
            for row in run["pending_loads"]
        ]
        lines += [
            f"  {row['table']}: newest change {row['newest_source_change']}, applied through {row['applied_through']}"
            for row in run["freshness"]
        ]
    else:
        lines.append("last run    none reported")
    reconcile = status["last_reconcile"]
    if reconcile:
        diverged = reconcile["diverged"]
        lines.append(
            f"reconcile   {reconcile['run_id']}: {reconcile['tables_checked']} tables checked, {len(diverged)} diverged"
            + (f" ({reconcile['error']})" if reconcile["error"] else "")
        )
        lines += [
            f"  {t['table']}: {t['missing']} missing, {t['extra']} extra, {t['differing']} differing"
            for t in diverged
        ]
    else:
        lines.append("reconcile   none reported")
    return "\n".join(lines)


def _pending_loads(listed: Any, now: datetime) -> list[dict[str, Any]]:
    """A report's `pending_loads` as the status shows them (entries of another shape passed over): how long
    each has been pending now, or at the report where its time does not read."""
    rows = []
    for entry in listed if isinstance(listed, list) else []:
        if not isinstance(entry, dict) or not entry.get("table"):
            continue
        since, seconds = entry.get("pending_since"), entry.get("pending_seconds")
        try:
            moment = datetime.fromisoformat(str(since))
            seconds = round((now - (moment if moment.tzinfo else moment.replace(tzinfo=UTC))).total_seconds())
        except ValueError:
            pass
        rows.append({"table": str(entry["table"]), "pending_since": since, "pending_seconds": seconds})
    return sorted(rows, key=lambda row: row["table"])


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

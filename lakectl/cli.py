"""`lakectl`: the command line. The stack is chosen by name (`--stack-name`, or LAKECTL_STACK_NAME) in a region
(`--region`, or AWS's own settings) at an endpoint (`--endpoint-url`, or AWS_ENDPOINT_URL: the local AWS);
every resource is then found through that stack. Human output by default, `--json` for scripts."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from lakectl.batches import TooOldToRequeueError, failed_batches, pending_batches, requeue
from lakectl.repairs import redrive, reload_table
from lakectl.runs import (
    NoLeaseHolderError,
    read_report,
    start_pipeline,
    start_reapply,
    start_reconcile,
    start_rollback,
    wait_for_glue_run,
    wait_for_lease,
)
from lakectl.stack import Clients, Stack, load_stack
from lakectl.status import batch_row, collect_status, render_status

DEFAULT_STACK = "dms-iceberg-lake"


def session_clients(region: str | None, endpoint_url: str | None) -> Clients:
    session = boto3.session.Session(region_name=region)
    made: dict[str, Any] = {}

    def client(service: str) -> Any:
        if service not in made:
            made[service] = session.client(service, endpoint_url=endpoint_url)
        return made[service]

    return client


def progress_line(message: str) -> None:
    """A progress display on stderr that rewrites its own line (stdout stays the result)."""
    sys.stderr.write(f"\r  {message}\033[K")
    sys.stderr.flush()


def run_status(stack: Stack, clients: Clients, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    status = collect_status(stack, clients)
    return status, render_status(status)


def run_start(stack: Stack, clients: Clients, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    result = start_pipeline(stack, clients)
    if args.wait and result["started"]:
        arn = result["execution_arn"]
        result["state"] = wait_for_lease(clients("s3"), clients("stepfunctions"), stack, arn, progress_line)
        sys.stderr.write("\n")
    if not result["started"]:
        return result, f"not started: {result['execution_arn']} is already running"
    text = f"started {result['execution_arn']} with input {json.dumps(result['input'])}"
    return result, text + (f" ({result['state']})" if "state" in result else "")


def run_requeue(stack: Stack, clients: Clients, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    s3, bucket = clients("s3"), stack.artifacts_bucket
    failed = failed_batches(s3, bucket)
    if not args.all and not args.run_id:
        pending = pending_batches(s3, bucket)
        listing = {"pending": [batch_row(b) for b in pending], "failed": [batch_row(b) for b in failed]}
        lines = [
            f"{title:<8} {b.run_id or '(corrupt)'}  {b.files} files  oldest {b.oldest_written_at}  {b.reason}"
            for title, batches in (("pending", pending), ("failed", failed))
            for b in batches
        ]
        return listing, "\n".join(lines) or "no pending or failed batch"
    unknown = set(args.run_id) - {b.run_id for b in failed}
    if unknown:
        raise SystemExit(f"no failed batch with run id {sorted(unknown)}")
    result: dict[str, Any] = {"requeued": [], "refused": []}
    for batch in (b for b in failed if args.all or b.run_id in args.run_id):
        try:
            result["requeued"].append(
                {"run_id": batch.run_id, "key": requeue(s3, bucket, batch, stack.tombstone_retention_days)}
            )
        except (TooOldToRequeueError, ValueError) as error:
            result["refused"].append({"run_id": batch.run_id, "key": batch.key, "reason": str(error)})
    lines = [f"requeued {r['run_id']}: s3://{bucket}/{r['key']}" for r in result["requeued"]]
    lines += [f"refused {r['run_id'] or r['key']}: {r['reason']}" for r in result["refused"]]
    return result, "\n".join(lines)


def run_reload(stack: Stack, clients: Clients, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    result = reload_table(clients("dms"), stack, args.table)
    return result, f"DMS reloads {args.table}: the pipeline applies its LOAD files as a reload"


def run_redrive(stack: Stack, clients: Clients, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    result = redrive(clients("s3"), clients("sqs"), stack, args.keys)
    lines = [f"queued {key}" for key in result["sent"]] + [
        f"refused {r['reason']}" for r in result["refused"]
    ]
    return result, "\n".join(lines)


def run_reconcile(stack: Stack, clients: Clients, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    result = start_reconcile(stack, clients)
    if args.wait:
        result["state"] = wait_for_glue_run(
            clients("glue"), result["job"], result["job_run_id"], progress_line
        )
        sys.stderr.write("\n")
    text = f"reconcile {result['run_id']}: Glue run {result['job_run_id']} under the lease of {result['lease_holder']}"
    return result, text + (f": {result['state']}" if "state" in result else "")


def run_reapply(stack: Stack, clients: Clients, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    result = start_reapply(stack, clients, args.file, args.run_id, args.dry_run)
    if args.wait:
        result["state"] = wait_for_glue_run(
            clients("glue"), result["job"], result["job_run_id"], progress_line
        )
        sys.stderr.write("\n")
    text = (
        f"reapply {result['run_id']}: Glue run {result['job_run_id']} under the lease of "
        f"{result['lease_holder']}, report {result['report_uri']}"
    )
    return result, text + (f": {result['state']}" if "state" in result else "")


def run_rollback(stack: Stack, clients: Clients, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The reapply job rolls the table back (fenced by the lease); then, from its report, the files the
    rolled-back commits applied go back on the queue (refused past the tombstones, as `redrive` refuses)."""
    result = start_rollback(stack, clients, args.table, args.to_snapshot, args.before, args.dry_run)
    result["state"] = wait_for_glue_run(
        clients("glue"), result["job"], result["job_run_id"], progress_line if args.wait else _quiet
    )
    if args.wait:
        sys.stderr.write("\n")
    report = result["report"] = read_report(clients("s3"), result["report_uri"])
    if report is None:
        result["refused"] = (
            f"the rollback run {result['job_run_id']} ended {result['state']} without a report: its Glue log says why"
        )
    elif report.get("refused"):
        result["refused"] = report["refused"]
    elif (
        report.get("rolled_back") and report.get("files_to_redrive") and not (args.no_redrive or args.dry_run)
    ):
        try:
            result["redrive"] = redrive(clients("s3"), clients("sqs"), stack, report["files_to_redrive"])
        except (ValueError, ClientError) as error:  # rolled back already: say so, with what is left to do
            result["refused"] = f"rolled back, but the re-drive failed: {error}; re-drive the report's files"
            return result, f"{_rollback_text(result, args)}\n  {result['refused']}"
        if result["redrive"]["refused"]:
            result["refused"] = "; ".join(r["reason"] for r in result["redrive"]["refused"])
    return result, _rollback_text(result, args)


def _rollback_text(result: dict[str, Any], args: argparse.Namespace) -> str:
    report = result.get("report") or {}
    head = f"rollback {result['run_id']} of {args.table} (Glue run {result['job_run_id']}: {result['state']})"
    if report.get("refused"):
        return f"{head}: refused: {report['refused']}"
    if report.get("note"):
        return f"{head}: {report['note']}"
    if not report:
        return f"{head}: {result['refused']}"
    done = "would roll back" if report.get("dry_run") else "rolled back"
    lines = [
        f"{head}: {done} to snapshot {report['target_snapshot_id']}, undoing {report['rolled_back_snapshot_ids']}"
    ]
    files = report.get("files_to_redrive") or []
    sent = set((result.get("redrive") or {}).get("sent", []))
    for uri in files:
        key = uri.removeprefix(f"s3://{_bucket_of(uri)}/")
        state = "re-driven" if key in sent else "to re-drive"
        lines.append(f"  {state} {uri}")
    for refusal in (result.get("redrive") or {}).get("refused", []):
        lines.append(f"  refused {refusal['reason']}")
    if files and not result.get("redrive") and not report.get("dry_run"):
        lines.append(f"  re-drive them: lakectl redrive {' '.join(files)}")
    return "\n".join(lines)


def _bucket_of(uri: str) -> str:
    return uri.removeprefix("s3://").partition("/")[0]


def _quiet(message: str) -> None:
    """No progress display (without --wait)."""


Command = Callable[[Stack, Clients, argparse.Namespace], tuple[dict[str, Any], str]]
COMMANDS: dict[str, tuple[Command, str]] = {
    "status": (run_status, "lease, execution, queue, batches, last run and its freshness, divergence"),
    "start": (run_start, "start the pipeline (the full load or not, decided from the full-load marker)"),
    "requeue": (run_requeue, "list pending and failed batches; put failed ones back in line"),
    "reload": (run_reload, "ask DMS to reload one table (<schema>.<table>)"),
    "redrive": (run_redrive, "put raw files back on the queue"),
    "reconcile": (run_reconcile, "run the reconcile now, fenced by the lease"),
    "reapply": (run_reapply, "apply fixed quarantined files again (a Glue run, fenced by the lease)"),
    "rollback": (
        run_rollback,
        "roll one clean table back to a snapshot (a Glue run, fenced by the lease) and re-drive its files",
    ),
}


def options(top_level: bool) -> argparse.ArgumentParser:
    """The options every command takes, before or after its name (after it, only what is given counts)."""

    def default(value: Any) -> Any:
        return value if top_level else argparse.SUPPRESS

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--stack-name", default=default(os.environ.get("LAKECTL_STACK_NAME", DEFAULT_STACK)))
    common.add_argument(
        "--region", default=default(None), help="the stack's region (default: AWS's settings)"
    )
    common.add_argument(
        "--endpoint-url", default=default(None), help="another endpoint (default: AWS_ENDPOINT_URL)"
    )
    common.add_argument(
        "--json", action="store_true", default=default(False), help="one JSON document on stdout"
    )
    return common


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="lakectl", description=__doc__, parents=[options(True)])
    commands = top.add_subparsers(dest="command", required=True)
    for name, (_, summary) in COMMANDS.items():
        command = commands.add_parser(name, help=summary, description=summary, parents=[options(False)])
        if name in ("start", "reconcile", "reapply", "rollback"):
            command.add_argument("--wait", action="store_true", help="wait, showing progress on stderr")
    requeue_args = commands.choices["requeue"].add_mutually_exclusive_group()
    requeue_args.add_argument("--run-id", action="append", default=[], help="requeue this batch (repeatable)")
    requeue_args.add_argument("--all", action="store_true", help="requeue every failed batch")
    commands.choices["reload"].add_argument("table", help="<schema>.<table>, as DMS spells it")
    commands.choices["redrive"].add_argument("keys", nargs="+", help="raw files: keys or s3:// URIs")
    reapply_args = commands.choices["reapply"]
    chosen = reapply_args.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--file", nargs="+", default=[], help="quarantined files' s3:// URIs, once fixed")
    chosen.add_argument("--run-id", default=None, help="every file this CDC run quarantined anything of")
    reapply_args.add_argument("--dry-run", action="store_true", help="list what would apply, apply nothing")
    rollback_args = commands.choices["rollback"]
    rollback_args.add_argument("table", help="<schema>.<table>, as DMS spells it")
    target = rollback_args.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-snapshot", type=int, default=None, help="the snapshot id to roll back to")
    target.add_argument(
        "--before", default=None, help="to the last snapshot committed at or before this ISO time (UTC)"
    )
    rollback_args.add_argument(
        "--dry-run", action="store_true", help="report what it would do, commit nothing"
    )
    rollback_args.add_argument(
        "--no-redrive", action="store_true", help="roll back only: re-drive the reported files yourself"
    )
    return top


def main(argv: Sequence[str] | None = None, clients: Clients | None = None) -> int:
    args = parser().parse_args(argv)
    made = clients or session_clients(args.region, args.endpoint_url)
    try:
        stack = load_stack(made("cloudformation"), args.stack_name)
        result, text = COMMANDS[args.command][0](stack, made, args)
    except (LookupError, NoLeaseHolderError, ValueError, ClientError, BotoCoreError) as error:
        print(f"lakectl {args.command}: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2, default=str) if args.json else text)
    return 1 if result.get("refused") else 0


if __name__ == "__main__":
    raise SystemExit(main())

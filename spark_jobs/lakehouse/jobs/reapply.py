"""The reapply job (the stack's reapply Glue job that `lakectl reapply` starts, fenced by the lease; locally
`python -m tools.reapply_quarantined`): apply quarantined DMS files again once they are fixed
(lakehouse.apply.reapply), or, with `--rollback_json` (`lakectl rollback`), roll one clean table back and
report the files to re-drive (lakehouse.apply.rollback; docs/CONTRACTS.md, "What each recovery command
guarantees")."""

from __future__ import annotations

import argparse
import json
import logging
from datetime import datetime
from typing import Any

from lake_contracts.resend_horizon import MIN_TOMBSTONE_RETENTION_DAYS

from lakehouse.apply.reapply import reapply_quarantined
from lakehouse.apply.rollback import rollback_table
from lakehouse.base.config import LakeConfig
from lakehouse.io.session import build_session
from lakehouse.jobs.arguments import apply_options, dms_arguments, load_schema
from lakehouse.jobs.shape import job_main, publish_report
from lakehouse.maintenance.records_move import move_records

log = logging.getLogger("lakehouse")


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Apply quarantined DMS files again once they are fixed")
    parser.add_argument("--file", action="append", default=[], help="a quarantined file's URI (repeatable)")
    parser.add_argument(
        "--files_json",
        type=json.loads,
        default=[],
        help="quarantined files' URIs as a JSON array (a Glue run has one value per argument name)",
    )
    parser.add_argument("--run_id", default=None, help="every file this CDC run quarantined anything of")
    parser.add_argument(
        "--rollback_json",
        type=json.loads,
        default=None,
        help='roll a clean table back instead: {"table": "schema.table", "snapshot_id": N} or "before": ISO time',
    )
    parser.add_argument(
        "--tombstone_retention_days",
        type=float,
        default=MIN_TOMBSTONE_RETENTION_DAYS,
        help="TombstoneRetentionDays: a rollback refuses files older than the tombstones (the re-send horizon)",
    )
    parser.add_argument("--dry_run", choices=["true", "false"], default="false", help="list, apply nothing")
    dms_arguments(parser)
    return parser


def run(config: LakeConfig, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    files = [*args.file, *args.files_json]
    chosen = [bool(files), args.run_id is not None, args.rollback_json is not None]
    if sum(chosen) != 1:
        parser.error("give --file (one or more), --run_id or --rollback_json")
    if not config.schema_file:
        parser.error("--schema_file is required: the tables' keys decide how the files apply")
    if args.rollback_json is not None:
        target = rollback_target(args.rollback_json, parser)
    schema = load_schema(config, args.history_tables)  # the stack's HistoryTables, as the CDC job has it
    spark = build_session(config, "dms-reapply-quarantined")
    move_records(spark, config)  # records of an older release: into their namespace, once
    if args.rollback_json is not None:
        rollback = rollback_table(
            spark,
            config,
            schema,
            target["table"],
            target["snapshot_id"],
            target["before"],
            args.tombstone_retention_days,
            dry_run=args.dry_run == "true",
        )
        publish_report(rollback.to_dict(), args.report_uri, config)
        if rollback.refused:
            log.error("rollback of %s refused: %s", rollback.table, rollback.refused)
        return 0 if rollback.ok else 1
    report = reapply_quarantined(
        spark,
        config,
        schema,
        files,
        args.run_id,
        apply_options(args),
        dry_run=args.dry_run == "true",
    )
    publish_report(report.to_dict(), args.report_uri, config)
    for uri in report.already_applied:
        log.info("nothing left to apply of %s: every record of it is applied", uri)
    for uri, why in sorted(report.refused.items()):
        log.error("refused %s: %s", uri, why)
    return 0 if report.ok else 1


def rollback_target(document: Any, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """`{"table": "schema.table", "snapshot_id": N}` or `{"table": …, "before": "<ISO time, UTC>"}`."""
    if not isinstance(document, dict) or not isinstance(document.get("table"), str):
        parser.error(
            '--rollback_json: a JSON object {"table": "schema.table", "snapshot_id": N | "before": TIME}'
        )
    snapshot_id, before = document.get("snapshot_id"), document.get("before")
    if (snapshot_id is None) == (before is None):
        parser.error("--rollback_json: give snapshot_id or before, not both, not neither")
    try:
        return {
            "table": document["table"],
            "snapshot_id": int(snapshot_id) if snapshot_id is not None else None,
            "before": datetime.fromisoformat(before) if before is not None else None,
        }
    except (TypeError, ValueError) as error:
        parser.error(f"--rollback_json: {error}")


main = job_main(parser, run)

"""The reapply job (the stack's reapply Glue job that `lakectl reapply` starts, fenced by the lease; locally
`python -m tools.reapply_quarantined`): apply quarantined DMS files again once they are fixed
(lakehouse.apply.reapply; docs/CONTRACTS.md, "What each recovery command guarantees")."""

from __future__ import annotations

import argparse
import json
import logging

from lakehouse.apply.reapply import reapply_quarantined
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
    parser.add_argument("--dry_run", choices=["true", "false"], default="false", help="list, apply nothing")
    dms_arguments(parser)
    return parser


def run(config: LakeConfig, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    files = [*args.file, *args.files_json]
    if bool(files) == (args.run_id is not None):
        parser.error("give --file (one or more) or --run_id")
    if not config.schema_file:
        parser.error("--schema_file is required: the tables' keys decide how the files apply")
    schema = load_schema(config, args.history_tables)  # the stack's HistoryTables, as the CDC job has it
    spark = build_session(config, "dms-reapply-quarantined")
    move_records(spark, config)  # records of an older release: into their namespace, once
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


main = job_main(parser, run)

"""The CDC job (`spark_jobs/cdc_job.py`): apply one manifest of DMS CDC files to the clean zone, then
measure freshness (and, when asked, the newest consistent point)."""

from __future__ import annotations

import argparse
import logging

from lake_contracts.documents import Manifest

from lakehouse.apply.cdc import apply_cdc
from lakehouse.audit.freshness import after_cdc_run
from lakehouse.base.config import LakeConfig
from lakehouse.io.session import APPLY_TUNING, build_session
from lakehouse.io.storage import read_json
from lakehouse.jobs.arguments import apply_options, dms_arguments, finish, load_schema
from lakehouse.jobs.shape import job_main, require_schema_file
from lakehouse.maintenance.records_move import move_records

log = logging.getLogger("lakehouse")


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Apply a manifest of DMS CDC files to the clean zone")
    parser.add_argument("--manifest", required=True, help="the batch to apply (written by the drain Lambda)")
    parser.add_argument(
        "--freshness",
        choices=["true", "false"],
        default="true",
        help="after the run, write each clean table's freshness (lake_freshness) and the newest consistent "
        "point (consistent_points); both in the run report",
    )
    parser.add_argument(
        "--consistent_points",
        choices=["true", "false"],
        default="true",
        help="with --freshness: also record the newest consistent point (consistent_points, what a refine "
        "--read_at consistent reads) and each table's applied-through time. It lists each table's folder from "
        "what the table had applied at the last run (lakehouse.audit.raw_listing), not the raw zone",
    )
    parser.add_argument(
        "--raw_path",
        default=None,
        help="the raw zone's root, listed for what is not applied yet (default: from the batch's files)",
    )
    parser.add_argument(
        "--consistency_settle_seconds",
        type=float,
        default=300,
        help="the longest a committed source change takes to be in a DMS file of the raw zone (capture "
        "latency, CdcMaxBatchInterval, clocks apart): a consistent point is at least this old",
    )
    dms_arguments(parser)
    return parser


def run(config: LakeConfig, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    require_schema_file(parser, config)
    schema = load_schema(config, args.history_tables)
    manifest = Manifest.from_dict(read_json(args.manifest, config.s3_endpoint_url))
    spark = build_session(config, "dms-cdc", APPLY_TUNING)
    move_records(spark, config)  # records of an older release: into their namespace, once
    log.info("applying manifest %s: %d files", args.manifest, len(manifest.files))
    report = apply_cdc(spark, config, schema, manifest, apply_options(args))
    if args.freshness == "true":
        uris = [f.uri for f in manifest.files]
        report.freshness = after_cdc_run(
            spark,
            config,
            schema,
            uris,
            report.run_id,
            args.raw_path or None,
            args.consistency_settle_seconds,
            consistent_points=args.consistent_points == "true",
            touched=[t.table for t in report.tables],
        )
    return finish(report, args, config)


main = job_main(parser, run)

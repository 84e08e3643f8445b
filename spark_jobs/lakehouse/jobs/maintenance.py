"""The maintenance job (`spark_jobs/maintenance_job.py`): one bounded pass between CDC runs that compacts,
expires and cleans what is due in the clean, history, refined and records tables (lakehouse.maintenance)."""

from __future__ import annotations

import argparse
import logging

from lakehouse.base.config import LakeConfig
from lakehouse.io.session import build_session
from lakehouse.jobs.shape import job_main, publish_report
from lakehouse.maintenance.options import MaintenanceOptions
from lakehouse.maintenance.records_move import move_records
from lakehouse.maintenance.run import maintain

log = logging.getLogger("lakehouse")


def parser() -> argparse.ArgumentParser:
    defaults = MaintenanceOptions()
    parser = argparse.ArgumentParser(description="Compact, expire and clean what is due in the lake's tables")
    parser.add_argument("--run_id", default="maintenance", help="names the run in the report")
    parser.add_argument(
        "--target_file_size_mb", type=int, default=defaults.target_file_size_mb, help="compacted file size"
    )
    parser.add_argument(
        "--min_input_files",
        type=int,
        default=defaults.min_input_files,
        help="compact a group of files once it has this many",
    )
    parser.add_argument(
        "--delete_file_threshold",
        type=int,
        default=defaults.delete_file_threshold,
        help="rewrite a data file (its deletes applied) once this many delete files point at it",
    )
    parser.add_argument(
        "--delete_ratio_threshold",
        type=float,
        default=defaults.delete_ratio_threshold,
        help="rewrite a data file (its deletes applied) once this share of its rows is deleted",
    )
    parser.add_argument(
        "--rewrite_mb_per_pass",
        type=float,
        default=defaults.rewrite_mb_per_pass,
        help="data a pass rewrites at most, over all tables (the slice a CDC run can wait for); the rest next pass",
    )
    parser.add_argument(
        "--expire_every_hours",
        type=float,
        default=defaults.expire_every_hours,
        help="expire snapshots and remove orphan files of a table once this much past the retention is expirable",
    )
    parser.add_argument(
        "--snapshot_retention_hours",
        type=float,
        default=defaults.snapshot_retention_hours,
        help="expire snapshots older than this (time travel reaches this far back)",
    )
    parser.add_argument(
        "--retain_last", type=int, default=defaults.retain_last, help="snapshots kept whatever their age"
    )
    parser.add_argument(
        "--orphan_file_age_hours",
        type=float,
        default=defaults.orphan_file_age_hours,
        help="remove files no snapshot references once older than this (at least 24; 0 turns it off)",
    )
    parser.add_argument(
        "--tombstone_retention_days",
        type=float,
        default=defaults.tombstone_retention_days,
        help="keep a delete's tombstone this long (longer than any CDC file can be delivered late)",
    )
    parser.add_argument("--report_uri", default=None, help="where to write the run report (JSON)")
    return parser


def run(config: LakeConfig, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    options = MaintenanceOptions(
        target_file_size_mb=args.target_file_size_mb,
        min_input_files=args.min_input_files,
        delete_file_threshold=args.delete_file_threshold,
        delete_ratio_threshold=args.delete_ratio_threshold,
        rewrite_mb_per_pass=args.rewrite_mb_per_pass,
        expire_every_hours=args.expire_every_hours,
        snapshot_retention_hours=args.snapshot_retention_hours,
        retain_last=args.retain_last,
        orphan_file_age_hours=args.orphan_file_age_hours,
        tombstone_retention_days=args.tombstone_retention_days,
        remove_orphans=args.orphan_file_age_hours > 0,
    )
    spark = build_session(config, "dms-maintenance")
    move_records(spark, config)  # records of an older release: into their namespace, once
    report = maintain(spark, config, options, args.run_id)
    publish_report(report.to_dict(), args.report_uri, config)
    for table in report.failed:
        log.error("%s: maintenance failed: %s", table.table, table.error)
    return 1 if report.failed else 0


main = job_main(parser, run)

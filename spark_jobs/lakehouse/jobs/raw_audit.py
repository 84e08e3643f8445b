"""The raw zone <-> ledger audit job (`spark_jobs/raw_audit_job.py`, and a local command): list the raw prefix,
re-enqueue every CDC file older than the grace period that no ledger, manifest or quarantine knows (unless
it was written before TombstoneRetentionDays ago: reported, never re-sent), and publish FilesRecovered. The reconcile job runs the same audit every ReconcileEveryMinutes; this job runs it
before (or without) that job. It commits nothing to the lake, so it takes no lease arguments."""

from __future__ import annotations

import argparse
from datetime import timedelta

from lake_contracts.resend_horizon import MIN_TOMBSTONE_RETENTION_DAYS

from lakehouse.audit.raw_zone import METRICS_NAMESPACE, audit_raw_zone
from lakehouse.base.config import LakeConfig
from lakehouse.io.session import build_session
from lakehouse.jobs.shape import job_main, publish_report
from lakehouse.maintenance.records_move import move_records


def parser() -> argparse.ArgumentParser:
    parsed = argparse.ArgumentParser(description="Re-enqueue CDC files of the raw zone nothing will apply")
    parsed.add_argument("--raw_path", required=True, help="where DMS writes: s3://<raw bucket>/<RawPrefix>")
    parsed.add_argument(
        "--manifest_prefix", required=True, help="the drain's manifests: s3://<artifacts bucket>/manifests"
    )
    parsed.add_argument("--queue_url", required=True, help="the FIFO queue of CDC file events")
    parsed.add_argument(
        "--grace_minutes",
        type=float,
        default=60.0,
        help="a file younger than this may still have its event on the way or queued (default 60: "
        "QueueAgeAlarmMinutes' default, beyond which a queued event is alarmed as waiting)",
    )
    parsed.add_argument(
        "--tombstone_retention_days",
        type=float,
        default=float(MIN_TOMBSTONE_RETENTION_DAYS),
        help="the deployment's TombstoneRetentionDays: a lost file written longer ago than this is reported "
        "(FilesBeyondTombstoneRetention), never re-sent (its later deletes' tombstones may be gone). Default "
        f"{MIN_TOMBSTONE_RETENTION_DAYS}, the template's lowest: the safe side",
    )
    parsed.add_argument(
        "--metrics_namespace",
        default=METRICS_NAMESPACE,
        help="CloudWatch namespace of FilesRecovered ('' publishes nothing: local runs without AWS)",
    )
    parsed.add_argument("--report_uri", default=None, help="where to write the audit's report (JSON)")
    return parsed


def run(config: LakeConfig, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.grace_minutes < 0:
        raise SystemExit("--grace_minutes must not be negative")
    if args.tombstone_retention_days <= 0:
        raise SystemExit("--tombstone_retention_days must be positive")
    spark = build_session(config, "dms-raw-audit")
    move_records(spark, config)  # records of an older release: into their namespace, once
    report = audit_raw_zone(
        spark,
        config,
        args.raw_path,
        args.manifest_prefix,
        args.queue_url,
        timedelta(minutes=args.grace_minutes),
        metrics_namespace=args.metrics_namespace or None,
        tombstone_retention_days=args.tombstone_retention_days,
    )
    publish_report(report.to_dict(), args.report_uri, config)
    return 0


main = job_main(parser, run)

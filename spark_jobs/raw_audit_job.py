"""Glue job (and a local command): the raw zone <-> ledger audit on its own (lakehouse/raw_audit.py).

Lists the raw prefix, re-enqueues every CDC file older than the grace period that no ledger, manifest or
quarantine knows, and publishes FilesRecovered. The reconcile job runs the same audit every
ReconcileEveryMinutes; this script runs it before (or without) that job:

    python spark_jobs/raw_audit_job.py --schema_file schema.json --raw_path s3://raw/dms \
        --manifest_prefix s3://artifacts/manifests --queue_url https://sqs…/cdc-files.fifo --grace_minutes 60
"""

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # local runs: the lakehouse package beside us

from lakehouse.config import parse_job_arguments
from lakehouse.raw_audit import METRICS_NAMESPACE, audit_raw_zone
from lakehouse.session import build_session
from lakehouse.storage import write_text


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
        "--metrics_namespace",
        default=METRICS_NAMESPACE,
        help="CloudWatch namespace of FilesRecovered ('' publishes nothing: local runs without AWS)",
    )
    parsed.add_argument("--report_uri", default=None, help="where to write the audit's report (JSON)")
    return parsed


def main(argv: Sequence[str]) -> int:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    config, args = parse_job_arguments(argv, parser())
    if args.grace_minutes < 0:
        raise SystemExit("--grace_minutes must not be negative")
    spark = build_session(config, "dms-raw-audit")
    report = audit_raw_zone(
        spark,
        config,
        args.raw_path,
        args.manifest_prefix,
        args.queue_url,
        timedelta(minutes=args.grace_minutes),
        metrics_namespace=args.metrics_namespace or None,
    )
    text = json.dumps(report.to_dict(), indent=2)
    print(text)
    if args.report_uri:
        write_text(args.report_uri, text, config.s3_endpoint_url)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The refine job (`spark_jobs/refine_job.py`): bring each model's refined table up to date with the clean zone,
incrementally; a model that failed (the others still refreshed) fails the run, so it is alarmed."""

from __future__ import annotations

import argparse
import json
from dataclasses import fields

from lakehouse.base.config import LakeConfig
from lakehouse.io.session import build_session
from lakehouse.io.storage import write_text
from lakehouse.jobs.shape import job_main, publish_report
from lakehouse.refine.refresh import RefineOptions, RefineReport, refine


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Refine the clean zone into the refined zone, incrementally")
    parser.add_argument("--source_schema", default="main", help="source schema of the clean tables' names")
    parser.add_argument("--refined_location", default=None, help="location prefix of new refined tables")
    parser.add_argument(
        "--min_interval_seconds", type=float, default=0.0, help="skip when refined this recently"
    )
    parser.add_argument(
        "--read_at",
        choices=["current", "consistent"],
        default="current",
        help="read the clean tables at their current snapshots, or at the newest consistent point the CDC "
        "runs recorded (never half a source transaction)",
    )
    parser.add_argument(
        "--models_uri",
        default=None,
        help="the models folder (a local folder or an s3:// prefix of <name>.sql files); default: the examples",
    )
    parser.add_argument(
        "--rebuild_below_rows",
        type=int,
        default=10_000_000,
        help="rebuild a model whose inputs hold fewer rows than this (an incremental refresh's fixed cost "
        "exceeds reading them all); 0: never for that reason",
    )
    parser.add_argument(
        "--rebuild_above_changed_fraction",
        type=float,
        default=0.1,
        help="rebuild a model when a refresh would read more than this share of its inputs' rows (those of "
        "the data files that differ since its last refine); 1: never for that reason",
    )
    parser.add_argument(
        "--rebuild_above_affected_fraction",
        type=float,
        default=0.5,
        help="rebuild a model when the keys its inputs' changes reach are more than this share of its rows "
        "(counted before the recompute); 1: never for that reason",
    )
    parser.add_argument(
        "--models_at_once",
        type=int,
        default=0,
        help="models refreshed at once, a model as soon as the models it refs are (each in its own pool of "
        "Spark's FAIR scheduler); 0: from the run's cores (4 to 32); 1: one at a time in the folder's order",
    )
    parser.add_argument("--run_id", default="refine", help="names the run in the commits and the report")
    parser.add_argument("--report_uri", default=None, help="where to write the run report (JSON)")
    parser.add_argument(
        "--refreshed_report_uri",
        default=None,
        help="where a run that left no model failed (and was not skipped as too soon) also writes its report: "
        "the refined zone's lag is measured from the newest such run (docs/CONTRACTS.md)",
    )
    return parser


def options_of(args: argparse.Namespace) -> RefineOptions:
    """The refine's options from the job's arguments, each by the name they share (an empty models folder:
    the examples)."""
    given = {f.name: getattr(args, f.name) for f in fields(RefineOptions)}
    return RefineOptions(**(given | {"models_uri": args.models_uri or None}))


def run(config: LakeConfig, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    spark = build_session(config, "refine")
    report = refine(spark, config, options_of(args), args.run_id)
    publish_report(report.to_dict(), args.report_uri, config)
    publish_if_refreshed(report, args.refreshed_report_uri, config)
    return 1 if report.failed else 0


def publish_if_refreshed(report: RefineReport, uri: str | None, config: LakeConfig) -> bool:
    """Write the report to `uri` when the run left the refined zone reflecting what it read: no model failed
    and the run was not skipped as too soon (one whose models wait for data, or with no model, reflects
    all there is). Whether it was written."""
    if not uri or report.failed or report.status == "too-soon":
        return False
    write_text(uri, json.dumps(report.to_dict(), default=str), config.s3_endpoint_url)
    return True


main = job_main(parser, run)

"""Job entry points (Glue scripts and local runs share them): parse arguments, run, report."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from lakehouse.changes import ChangeColumns
from lakehouse.config import LakeConfig, parse_job_arguments
from lakehouse.dms_reader import ReaderOptions
from lakehouse.manifest import Manifest
from lakehouse.pipeline import ApplyOptions, RunReport, apply_cdc, full_load
from lakehouse.schema import SchemaFile
from lakehouse.session import build_session
from lakehouse.storage import read_json, write_text

log = logging.getLogger("lakehouse")


def _configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)


def _dms_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--csv_null_value", default=None, help="DMS CsvNullValue, when set on the endpoint")
    parser.add_argument("--timestamp_column", default="dms_timestamp", help="DMS TimestampColumnName")
    parser.add_argument("--change_seq_column", default="AR_H_CHANGE_SEQ")
    parser.add_argument("--before_image_prefix", default="BI_")
    parser.add_argument("--parallel_tables", type=int, default=4)
    parser.add_argument("--no_primary_key", choices=["append", "skip"], default="append")
    parser.add_argument("--report_uri", default=None, help="where to write the run report (JSON)")


def apply_options(args: argparse.Namespace) -> ApplyOptions:
    return ApplyOptions(
        reader=ReaderOptions(csv_null_value=args.csv_null_value or None),  # Glue passes "" for unset
        names=ChangeColumns(
            timestamp=args.timestamp_column,
            change_seq=args.change_seq_column,
            before_image_prefix=args.before_image_prefix,
        ),
        parallel_tables=args.parallel_tables,
        no_primary_key=args.no_primary_key,
    )


def load_schema(config: LakeConfig) -> SchemaFile:
    if not config.schema_file:
        raise SystemExit("--schema_file is required: generate it with python -m lakehouse.schema_gen")
    return SchemaFile.from_dict(read_json(config.schema_file, config.s3_endpoint_url))


def _finish(report: RunReport, args: argparse.Namespace, config: LakeConfig) -> int:
    text = json.dumps(report.to_dict(), indent=2, default=str)
    print(text)
    if args.report_uri:
        write_text(args.report_uri, text, config.s3_endpoint_url)
    for table in report.failed:
        log.error("%s failed: %s", table.table, table.error)
    return 1 if report.failed else 0


def cdc_main(argv: Sequence[str]) -> int:
    _configure_logging()
    parser = argparse.ArgumentParser(description="Apply a manifest of DMS CDC files to the clean zone")
    parser.add_argument("--manifest", required=True)
    _dms_arguments(parser)
    config, args = parse_job_arguments(argv, parser)
    spark = build_session(config, "dms-cdc")
    manifest = Manifest.from_dict(read_json(args.manifest, config.s3_endpoint_url))
    log.info("applying manifest %s: %d files", args.manifest, len(manifest.files))
    report = apply_cdc(spark, config, load_schema(config), manifest, apply_options(args))
    return _finish(report, args, config)


def full_load_main(argv: Sequence[str]) -> int:
    _configure_logging()
    parser = argparse.ArgumentParser(description="Load DMS full-load files into the clean zone")
    parser.add_argument("--raw_path", required=True)
    parser.add_argument("--tables", default="", help="comma list of schema.table (default: all)")
    parser.add_argument("--reload", default="false", help="true: overwrite tables loaded before")
    parser.add_argument("--run_id", default="full-load")
    _dms_arguments(parser)
    config, args = parse_job_arguments(argv, parser)
    spark = build_session(config, "dms-full-load")
    tables = [t.strip() for t in args.tables.split(",") if t.strip()]
    report = full_load(
        spark,
        config,
        load_schema(config),
        args.raw_path,
        tables,
        reload=args.reload.lower() == "true",
        run_id=args.run_id,
        options=apply_options(args),
    )
    return _finish(report, args, config)

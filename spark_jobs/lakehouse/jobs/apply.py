"""Job entry points (Glue scripts and local runs share them): parse arguments, run, report."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence

from lakehouse.apply_run import ApplyOptions
from lakehouse.cdc_apply import apply_cdc
from lakehouse.changes import ChangeColumns
from lakehouse.config import LakeConfig, parse_job_arguments
from lakehouse.dms_reader import ReaderOptions
from lakehouse.freshness import after_cdc_run
from lakehouse.full_load import full_load
from lakehouse.history import parse_history_tables, with_history
from lakehouse.logs import configure_logging
from lakehouse.manifest import Manifest
from lakehouse.names import parse_tables_argument
from lakehouse.run_report import RunReport
from lakehouse.schema import SchemaFile
from lakehouse.session import APPLY_TUNING, build_session
from lakehouse.storage import read_json, write_text

log = logging.getLogger("lakehouse")


def dms_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--csv_null_value",
        default=None,
        help="the DMS endpoint's CsvNullValue, when it sets one (then null and empty string differ)",
    )
    parser.add_argument(
        "--csv_delimiter",
        default=",",
        type=csv_delimiter,
        help="the DMS endpoint's CsvDelimiter (default ','; '\\t' or 'tab' for a tab)",
    )
    parser.add_argument(
        "--timestamp_column", default="dms_timestamp", help="the DMS endpoint's TimestampColumnName"
    )
    parser.add_argument(
        "--change_seq_column",
        default="AR_H_CHANGE_SEQ",
        help="the table-mapping add-column holding $AR_H_CHANGE_SEQ (without it: file time, then record order)",
    )
    parser.add_argument(
        "--before_image_prefix",
        default="BI_",
        help="prefix of the pk-only before-image columns (key changes)",
    )
    parser.add_argument("--parallel_tables", type=int, default=4, help="tables applied at once")
    parser.add_argument(
        "--no_primary_key",
        choices=["append", "skip"],
        default="append",
        help="tables without a primary key: append their inserts (updates, deletes quarantined) or skip them",
    )
    parser.add_argument(
        "--type_mismatch",
        choices=["fail", "quarantine"],
        default="fail",
        help="a value that fits no type of its column: stop the table with the value named (the schema file "
        "is out of date), or quarantine its record and go on",
    )
    parser.add_argument(
        "--reload_margin_seconds",
        type=int,
        default=300,
        help="a reload whose LOAD rows carry no AR_H_CHANGE_SEQ is placed by when DMS started it, give or "
        "take this long: newer than the table's rows up to this long after, older than later changes only "
        "from this long before",
    )
    parser.add_argument(
        "--history_tables",
        default="",
        help="schema.table names (a comma list or a JSON array; * for all) whose every row version is kept in "
        '<clean table>_history, besides those the schema file marks "history": true (docs/CONTRACTS.md)',
    )
    parser.add_argument("--report_uri", default=None, help="where to write the run report (JSON)")


def csv_delimiter(text: str) -> str:
    """The endpoint's CsvDelimiter as a job argument: a tab may be spelled `\\t` or `tab` (Glue arguments
    and consoles can't hold a literal tab); Glue passes "" for a parameter left empty: the default."""
    value = {"\\t": "\t", "tab": "\t", "": ","}.get(text, text)
    if not value.strip(" ") or any(ch in value for ch in '"\r\n'):
        raise argparse.ArgumentTypeError(
            f"{text!r} can't be a CSV delimiter (a quote, a line break or blanks would break every record)"
        )
    return value


def apply_options(args: argparse.Namespace) -> ApplyOptions:
    return ApplyOptions(
        # Glue passes "" for unset
        reader=ReaderOptions(csv_null_value=args.csv_null_value or None, delimiter=args.csv_delimiter),
        names=ChangeColumns(
            timestamp=args.timestamp_column,
            change_seq=args.change_seq_column,
            before_image_prefix=args.before_image_prefix,
        ),
        parallel_tables=args.parallel_tables,
        no_primary_key=args.no_primary_key,
        type_mismatch=args.type_mismatch,
        reload_margin_seconds=args.reload_margin_seconds,
    )


def load_schema(config: LakeConfig, history_tables: str | None = None) -> SchemaFile:
    """The schema file, read and checked (a clear error names what is wrong in it), with the tables
    `--history_tables` names marked to keep their row history."""
    try:
        document = read_json(config.schema_file, config.s3_endpoint_url)
    except json.JSONDecodeError as error:
        raise SystemExit(f"--schema_file {config.schema_file}: not JSON ({error})") from None
    try:
        schema = SchemaFile.from_dict(document, per_table=True)
    except ValueError as error:
        raise SystemExit(f"--schema_file {config.schema_file}: {error}") from None
    for why in schema.refused.values():  # reported as failed tables; the others run
        log.error("--schema_file %s: %s", config.schema_file, why)
    try:
        return with_history(schema, parse_history_tables(history_tables))
    except ValueError as error:
        raise SystemExit(str(error)) from None


def _finish(report: RunReport, args: argparse.Namespace, config: LakeConfig) -> int:
    text = json.dumps(report.to_dict(), indent=2, default=str)
    print(text)
    if args.report_uri:
        write_text(args.report_uri, text, config.s3_endpoint_url)
    for table in report.failed:
        log.error("%s failed: %s", table.table, table.error)
    if report.error:
        log.error("the run failed: %s", report.error)
    totals = report.totals()
    if totals["quarantined_records"] or totals["quarantined_files"]:
        log.warning(
            "quarantined %d record(s) and %d file(s): see the table %s",
            totals["quarantined_records"],
            totals["quarantined_files"],
            config.quarantine,
        )
    return 0 if report.ok else 1


def cdc_parser() -> argparse.ArgumentParser:
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
        default="false",
        help="with --freshness: also record the newest consistent point (consistent_points, what a refine "
        "--read_at consistent reads) and each table's applied-through time. It lists the raw zone's CDC "
        "files after every run, a cost that grows with the raw zone, so it is asked for (docs/BI.md)",
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


def cdc_main(argv: Sequence[str]) -> int:
    configure_logging()
    parser = cdc_parser()
    config, args = parse_job_arguments(argv, parser)
    _require_schema_file(parser, config)
    schema = load_schema(config, args.history_tables)
    manifest = Manifest.from_dict(read_json(args.manifest, config.s3_endpoint_url))
    spark = build_session(config, "dms-cdc", APPLY_TUNING)
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
        )
    return _finish(report, args, config)


def _require_schema_file(parser: argparse.ArgumentParser, config: LakeConfig) -> None:
    if not config.schema_file:
        parser.error("--schema_file is required: generate it with python -m tools.schema_gen")


def full_load_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Load DMS full-load files into the clean zone")
    parser.add_argument(
        "--raw_path", required=True, help="where DMS writes: <raw_path>/<schema>/<table>/LOAD*.csv"
    )
    parser.add_argument(
        "--tables",
        default="",
        help='schema.table names: a JSON array (["sales.a,b", " x. y"], names kept exactly) or, if the value '
        "does not start with '[', a comma list (default: all)",
    )
    parser.add_argument(
        "--reload",
        choices=["true", "false"],
        default="false",
        help="true: reload tables loaded before (changes newer than the reload survive it)",
    )
    parser.add_argument("--run_id", default="full-load", help="names the run in the commits and the report")
    dms_arguments(parser)
    return parser


def full_load_main(argv: Sequence[str]) -> int:
    configure_logging()
    parser = full_load_parser()
    config, args = parse_job_arguments(argv, parser)
    _require_schema_file(parser, config)
    schema = load_schema(config, args.history_tables)
    spark = build_session(config, "dms-full-load", APPLY_TUNING)
    try:
        tables = parse_tables_argument(args.tables)
    except ValueError as error:
        parser.error(str(error))
    try:
        report = full_load(
            spark,
            config,
            schema,
            args.raw_path,
            tables,
            reload=args.reload.lower() == "true",
            run_id=args.run_id,
            options=apply_options(args),
        )
    except (FileNotFoundError, ValueError) as error:  # nothing was loaded: say why, exit non-zero
        raise SystemExit(f"full load: {error}") from None
    return _finish(report, args, config)


def maintenance_parser() -> argparse.ArgumentParser:
    from lakehouse.maintenance import MaintenanceOptions

    defaults = MaintenanceOptions()
    parser = argparse.ArgumentParser(description="Compact, expire and clean the clean and refined tables")
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


def maintenance_main(argv: Sequence[str]) -> int:
    from lakehouse.maintenance import MaintenanceOptions, maintain

    configure_logging()
    parser = maintenance_parser()
    config, args = parse_job_arguments(argv, parser)
    options = MaintenanceOptions(
        target_file_size_mb=args.target_file_size_mb,
        min_input_files=args.min_input_files,
        delete_file_threshold=args.delete_file_threshold,
        snapshot_retention_hours=args.snapshot_retention_hours,
        retain_last=args.retain_last,
        orphan_file_age_hours=args.orphan_file_age_hours,
        tombstone_retention_days=args.tombstone_retention_days,
        remove_orphans=args.orphan_file_age_hours > 0,
    )
    spark = build_session(config, "dms-maintenance")
    report = maintain(spark, config, options, args.run_id)
    text = json.dumps(report.to_dict(), indent=2, default=str)
    print(text)
    if args.report_uri:
        write_text(args.report_uri, text, config.s3_endpoint_url)
    for table in report.failed:
        log.error("%s: maintenance failed: %s", table.table, table.error)
    return 1 if report.failed else 0

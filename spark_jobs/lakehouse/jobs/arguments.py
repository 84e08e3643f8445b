"""What the CDC and full-load jobs (and the reapply tool) share: the DMS endpoint's settings as arguments,
the apply's options made from them, the schema file read and checked, and the run report's ending."""

from __future__ import annotations

import argparse
import json
import logging

from lake_contracts.run_report import RunReport

from lakehouse.apply.history import parse_history_tables, with_history
from lakehouse.apply.run import ApplyOptions
from lakehouse.base.config import LakeConfig
from lakehouse.base.schema import SchemaFile
from lakehouse.dms.changes import ChangeColumns
from lakehouse.dms.reader import ReaderOptions
from lakehouse.io.storage import read_json
from lakehouse.jobs.shape import publish_report

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
    parser.add_argument(
        "--parallel_tables",
        type=int,
        default=0,
        help="tables applied at once; 0 (default): from the run's cores (a quarter of its default parallelism, "
        "4 to 32), each table in its own pool of Spark's FAIR scheduler",
    )
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
    if config.schema_file is None:  # each job refuses to run without it before it gets here
        raise SystemExit("--schema_file is required")
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


def finish(report: RunReport, args: argparse.Namespace, config: LakeConfig) -> int:
    publish_report(report.to_dict(), args.report_uri, config)
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
    for pending in report.pending_loads:
        log.warning(
            "%s: its full load committed its rows at %s and never its facts: not loaded until the full load "
            "runs again (full_load_job.py --tables %s)",
            pending["table"],
            pending["pending_since"],
            pending["table"],
        )
    return 0 if report.ok else 1

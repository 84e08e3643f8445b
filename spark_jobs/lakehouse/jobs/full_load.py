"""The full-load job (`spark_jobs/full_load_job.py`): load the DMS LOAD files of every table (or of the
tables named) into the clean zone; with `--reload true`, reload tables loaded before."""

from __future__ import annotations

import argparse

from lakehouse.apply.full_load import full_load
from lakehouse.base.config import LakeConfig
from lakehouse.base.names import parse_tables_argument
from lakehouse.io.session import APPLY_TUNING, build_session
from lakehouse.jobs.arguments import apply_options, dms_arguments, finish, load_schema
from lakehouse.jobs.shape import job_main, require_schema_file
from lakehouse.maintenance.records_move import move_records


def parser() -> argparse.ArgumentParser:
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


def run(config: LakeConfig, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    require_schema_file(parser, config)
    schema = load_schema(config, args.history_tables)
    spark = build_session(config, "dms-full-load", APPLY_TUNING)
    move_records(spark, config)  # records of an older release: into their namespace, once
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
    return finish(report, args, config)


main = job_main(parser, run)

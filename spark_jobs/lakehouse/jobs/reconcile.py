"""The reconcile job's entry (`spark_jobs/reconcile_job.py`): its arguments, the source's credentials (the
arguments or a Secrets Manager secret), and `run`, which runs `lakehouse.reconcile.run.reconcile` with
the sightings carried over from the last run and writes the report, the metrics and the state."""

from __future__ import annotations

import argparse
import json
import logging
from datetime import datetime
from typing import Any

from lakehouse.base.config import LakeConfig
from lakehouse.io.fence import check_before_commit, installed
from lakehouse.io.session import build_session
from lakehouse.io.storage import is_missing, read_json, write_text
from lakehouse.jobs.arguments import load_schema
from lakehouse.jobs.shape import job_main, publish_report
from lakehouse.reconcile.bisect import raw_caught_up, sightings_document, sightings_from
from lakehouse.reconcile.mysql import MysqlJdbcSource
from lakehouse.reconcile.plan import ReconcileOptions, SourceSide
from lakehouse.reconcile.run import dms_reloader, publish_metrics, reconcile
from lakehouse.reconcile.sources import PostgresJdbcSource, SqliteReconcileSource

log = logging.getLogger(__name__)


def parser() -> argparse.ArgumentParser:
    defaults = ReconcileOptions()
    parser = argparse.ArgumentParser(description="Compare every clean table with its source table")
    parser.add_argument(
        "--run_id", default="reconcile", help="names the run in the report and dms_divergence"
    )
    parser.add_argument("--source_engine", choices=["postgresql", "mysql", "sqlite"], default="postgresql")
    parser.add_argument(
        "--source_jdbc_url",
        default="",
        help="jdbc:postgresql://host:port/db (mysql: jdbc:mysql://host:port/db)",
    )
    parser.add_argument("--source_user", default="", help="the source user (read-only: docs/DEPLOY.md)")
    parser.add_argument("--source_password", default="", help="local runs only; on AWS --source_secret_id")
    parser.add_argument(
        "--source_secret_id",
        default="",
        help="a Secrets Manager secret (username, password, and host/port/dbname when there is no URL)",
    )
    parser.add_argument("--source_sqlite_path", default="", help="--source_engine sqlite: the file")
    parser.add_argument("--tables", default="", help="comma list of schema.table (default: all)")
    parser.add_argument(
        "--max_source_rows",
        type=int,
        default=0,
        help="row budget of one run: tables rotate over runs (0: no budget; one table always runs)",
    )
    parser.add_argument(
        "--state_uri",
        default="",
        help="where the rotation and the differences not yet judged are carried to the next run (JSON)",
    )
    parser.add_argument("--segment_rows", type=int, default=defaults.segment_rows)
    parser.add_argument("--bisect_factor", type=int, default=defaults.bisect_factor)
    parser.add_argument("--leaf_rows", type=int, default=defaults.leaf_rows)
    parser.add_argument(
        "--parallelism", type=int, default=defaults.parallelism, help="concurrent source reads"
    )
    parser.add_argument("--sample_keys", type=int, default=defaults.sample_keys)
    parser.add_argument("--raw_path", default="", help="where DMS writes (the recheck waits for its files)")
    parser.add_argument(
        "--settle_seconds",
        type=float,
        default=300.0,
        help="S: a change committed at c is in a CDC file DMS named by c + S; a difference is divergence only"
        " once seen S ago and still there after the lake applied those files",
    )
    parser.add_argument(
        "--recheck_wait_seconds",
        type=float,
        default=300.0,
        help="> 0: a run that found differences waits S out, then this long for the lake to catch up;"
        " 0 (the loop's): it never waits and carries them to the next run (needs --state_uri)",
    )
    parser.add_argument("--repair_mode", choices=["alarm", "reload"], default="alarm")
    parser.add_argument(
        "--compare_mysql_float",
        choices=["true", "false"],
        default="false",
        help="true: compare MySQL FLOAT columns (only where DMS carries them exactly, as the local DMS does;"
        " AWS DMS does not, so by default they are left out of the comparison and named in the report)",
    )
    parser.add_argument(
        "--dms_task_arn", default="", help="--repair_mode reload: the DMS task to reload from"
    )
    parser.add_argument(
        "--fail_on_divergence",
        choices=["true", "false"],
        default="true",
        help="true: a diverged table fails the run (the failed-job alarm fires)",
    )
    parser.add_argument(
        "--metrics_namespace",
        default="",
        help="publish the run's figures to CloudWatch under this namespace (DmsIcebergLake on AWS; '': none)",
    )
    parser.add_argument("--report_uri", default=None, help="where to write the run report (JSON)")
    return parser


# what an RDS secret's `engine` holds (mysql, mariadb, aurora-mysql, postgres, aurora-postgresql) -> ours
SECRET_ENGINES = (("mysql", "mysql"), ("mariadb", "mysql"), ("postgres", "postgresql"))


def source_credentials(args: Any) -> tuple[str, dict[str, str]]:
    """The JDBC URL and user/password: from the arguments, or from a Secrets Manager secret (the shape
    RDS and DMS secrets have: username, password, host, port, dbname)."""
    url, user, password = args.source_jdbc_url, args.source_user, args.source_password
    if args.source_secret_id:
        import boto3

        secret = json.loads(
            boto3.client("secretsmanager").get_secret_value(SecretId=args.source_secret_id)["SecretString"]
        )
        user = user or secret.get("username", "")
        password = secret.get("password", password)
        engine = str(secret.get("engine", "")).lower()
        wanted = next((ours for theirs, ours in SECRET_ENGINES if theirs in engine), args.source_engine)
        if wanted != args.source_engine:
            raise SystemExit(
                f"reconcile: the source secret is of a {engine} database, read with --source_engine {wanted}"
                f" (template: SourceEngine={wanted}), not {args.source_engine}"
            )
        if not url and secret.get("host") and args.source_engine == "mysql":
            url = f"jdbc:mysql://{secret['host']}:{secret.get('port', 3306)}/{secret.get('dbname', '')}"
        elif not url and secret.get("host"):
            url = f"jdbc:postgresql://{secret['host']}:{secret.get('port', 5432)}/{secret.get('dbname', 'postgres')}"
    if not url:
        raise SystemExit("reconcile: --source_jdbc_url or a --source_secret_id with host is required")
    schemes = ("jdbc:mysql:", "jdbc:mariadb:") if args.source_engine == "mysql" else ("jdbc:postgresql:",)
    if not url.startswith(schemes):  # the other engine's SQL would fail on the first table, less clearly
        raise SystemExit(
            f"reconcile: --source_engine {args.source_engine} (template: SourceEngine) reads a {schemes[0]} URL,"
            f" not {url.split('//', 1)[0]}//…"
        )
    properties = {"user": user}
    if password:
        properties["password"] = password
    return url, properties


def reload_requests_from(document: Any) -> dict[str, datetime]:
    """The reloads asked of DMS an earlier run carried over; an unreadable entry is dropped (logged): its
    table's reload may then be asked again, never lost."""
    found: dict[str, datetime] = {}
    for name, at in (document or {}).items() if isinstance(document, dict) else ():
        try:
            found[str(name)] = datetime.fromisoformat(str(at))
        except ValueError:
            log.warning("%s: the reload request carried over is unreadable (%r); dropped", name, at)
    return found


def write_state(uri: str, state: dict[str, Any], endpoint_url: str | None) -> None:
    """The state the next run reads, written only by a run that still holds the pipeline lease (a run whose
    execution lost it must not hand its rotation, sightings and reload requests to the holder's runs)."""
    check_before_commit()
    write_text(uri, json.dumps(state), endpoint_url)


def run(config: LakeConfig, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if not config.schema_file:
        parser.error("--schema_file is required")
    schema = load_schema(config)
    options = ReconcileOptions(
        segment_rows=args.segment_rows,
        bisect_factor=args.bisect_factor,
        leaf_rows=args.leaf_rows,
        parallelism=args.parallelism,
        max_source_rows=args.max_source_rows or None,
        sample_keys=args.sample_keys,
        settle_seconds=args.settle_seconds,
        recheck_wait_seconds=args.recheck_wait_seconds,
        repair_mode=args.repair_mode,
        compare_mysql_float=args.compare_mysql_float == "true",
        empty_clean_tables=installed() is not None,
    )
    if options.repair_mode == "reload" and not args.dms_task_arn:
        parser.error("--repair_mode reload needs --dms_task_arn")
    spark = build_session(config, "dms-reconcile")
    source: SourceSide
    if args.source_engine == "sqlite":
        if not args.source_sqlite_path:
            parser.error("--source_engine sqlite needs --source_sqlite_path")
        source = SqliteReconcileSource(spark, args.source_sqlite_path)
    elif args.source_engine == "mysql":
        url, properties = source_credentials(args)
        source = MysqlJdbcSource(spark, url, properties, options.parallelism)
    else:
        url, properties = source_credentials(args)
        source = PostgresJdbcSource(spark, url, properties, options.parallelism)
    start_after, earlier, reloads = None, {}, {}
    if args.state_uri:
        try:
            state = read_json(args.state_uri, config.s3_endpoint_url)
            start_after, earlier = state.get("last_table"), sightings_from(state.get("sightings"))
            reloads = reload_requests_from(state.get("reload_requests"))
        except Exception as error:
            if not is_missing(error):
                raise
    reloader = None
    if options.repair_mode == "reload":
        import boto3

        reloader = dms_reloader(boto3.client("dms"), args.dms_task_arn)
    report = reconcile(
        spark,
        config,
        schema,
        source,
        options,
        run_id=args.run_id,
        tables=[t.strip() for t in args.tables.split(",") if t.strip()],
        caught_up=raw_caught_up(spark, config, args.raw_path) if args.raw_path else None,
        start_after=start_after,
        reload_tables=reloader,
        earlier=earlier,
        reloads_requested=reloads,
    )
    publish_report(report.to_dict(), args.report_uri, config)
    if args.metrics_namespace:
        import boto3

        publish_metrics(report, boto3.client("cloudwatch"), args.metrics_namespace)
    if args.state_uri:
        state = {
            "last_table": report.next_table or start_after,
            "sightings": sightings_document(report.sightings, options.max_sightings),
            "reload_requests": {name: at.isoformat() for name, at in report.reload_requests.items()},
        }
        write_state(args.state_uri, state, config.s3_endpoint_url)
    for table in report.failed:
        log.error("%s: reconcile failed: %s", table.table, table.error)
    if not report.ok:
        return 1
    return 2 if report.diverged and args.fail_on_divergence == "true" else 0


main = job_main(parser, run)

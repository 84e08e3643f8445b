"""One whole pipeline on the embedded local AWS: the SAM app deployed, a sample source replicated by a DMS
task, the state machine running, a change workload, and the clean zone checked against the source.

The source is an embedded PostgreSQL server read through a logical replication slot (the default), or an
SQLite file (`RunSettings.source = "sqlite"`). Used by `python -m localaws.demo` and by tests/integration/
pipeline. Everything started is stopped by `close()` (executions, the DMS task, the PostgreSQL server); the
LocalStack process itself is the caller's (`running_stack`).
"""

from __future__ import annotations

import json
import logging
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from localaws import replication, sam_app
from localaws.mariadb import LocalMariaDb
from localaws.postgres import LocalPostgres
from localaws.progress import ProgressMonitor, ProgressSnapshot
from localaws.stack import StackConfig
from tools.source_db import SourceDatabase

log = logging.getLogger(__name__)

# Template parameters this run sets, by the names template.yaml may give them (the first declared wins).
TASK_ARN_PARAMETERS = ("ReplicationTaskArn", "DmsTaskArn", "DmsReplicationTaskArn", "DMSTaskArn")
ENVIRONMENT_PARAMETERS = ("EnvironmentName", "Environment", "Env", "Stage")
CSV_NULL_PARAMETERS = ("CsvNullValue", "DmsCsvNullValue")
VERIFY_CATALOG = "local_glue"  # the demo's own Spark catalog name over the local Glue warehouse
# SparkEngine=emr-serverless on the local AWS. The template requires the application's image (Python 3.11 on
# AWS); the local EMR Serverless never pulls it: it runs the entry points with the project's Python.
EMR_SERVERLESS_PARAMETERS = {
    "SparkEngine": "emr-serverless",
    "EmrImageUri": "000000000000.dkr.ecr.us-east-1.amazonaws.com/dms-iceberg-lake-spark:local",
}


@dataclass(frozen=True)
class AppHandles:
    """What a run needs from the deployed stack."""

    stack_name: str
    raw_bucket: str
    artifacts_bucket: str
    state_machine_arn: str
    clean_database: str
    cdc_job_name: str
    full_load_job_name: str
    queue_url: str | None = None
    dead_letter_queue_url: str | None = None
    emr_application_id: str | None = None  # SparkEngine=emr-serverless
    outputs: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_stack(cls, cloudformation: Any, stack_name: str) -> AppHandles:
        outputs = sam_app.stack_outputs(cloudformation, stack_name)
        resources = sam_app.stack_resources(cloudformation, stack_name)

        def pick(*names: str, default: str | None = None) -> str | None:
            for name in names:
                if outputs.get(name):
                    return outputs[name]
                if resources.get(name):
                    return resources[name]
            return default

        def required(*names: str) -> str:
            value = pick(*names)
            if value is None:
                raise KeyError(f"stack {stack_name} has none of {names}: outputs {sorted(outputs)}")
            return value

        return cls(
            stack_name=stack_name,
            raw_bucket=required("RawBucketName", "RawBucket"),
            artifacts_bucket=required("ArtifactsBucketName", "ArtifactsBucket"),
            state_machine_arn=required("StateMachineArn", "PipelineStateMachineArn", "PipelineStateMachine"),
            clean_database=required("CleanDatabaseName", "CleanDatabase"),
            cdc_job_name=required("CdcJobName", "CdcJob"),
            full_load_job_name=required("FullLoadJobName", "FullLoadJob"),
            queue_url=pick("QueueUrl", "RawFilesQueueUrl", "RawFilesQueue"),
            dead_letter_queue_url=pick("DeadLetterQueueUrl", "RawFilesDeadLetterQueueUrl", "DeadLetterQueue"),
            emr_application_id=pick("EmrApplicationId", "EmrApplication"),
            outputs=outputs,
            resources=resources,
        )


@dataclass
class RunSettings:
    """Knobs of one run (defaults: the demo's)."""

    name: str = "demo"
    scale: float = 0.3
    seed: int = 42
    workdir: Path = Path("var/demo")
    parameters: dict[str, str] = field(default_factory=dict)
    replication: replication.ReplicationSettings | None = None
    execution_input: dict[str, Any] = field(default_factory=dict)
    source: str = "postgresql"  # the source database: postgresql (an embedded server), mysql (a local MariaDB
    # server, localaws/mariadb.py) or sqlite (a file)


SOURCE_KINDS = ("postgresql", "mysql", "sqlite")
MYSQL_DATABASE = "shop"  # the MySQL source's database: DMS's schema, the files' folder


class LocalPipeline:
    """Drives one run; see the module docstring. Not thread-safe."""

    def __init__(self, endpoint_url: str, settings: RunSettings, stack: StackConfig | None = None) -> None:
        self.endpoint_url = endpoint_url
        self.settings = settings
        self.stack = stack or StackConfig()
        self.workdir = settings.workdir.resolve()
        if settings.source not in SOURCE_KINDS:
            raise ValueError(f"source {settings.source!r}: one of {SOURCE_KINDS}")
        self.postgres = LocalPostgres(self.workdir / "postgres") if settings.source == "postgresql" else None
        self.mariadb: LocalMariaDb | None = (
            None  # started by create_source (a temp dir the `mysql` user reaches)
        )
        self.source_db = SourceDatabase.sqlite(self.workdir / "source.db")  # the server's, once it runs
        self.resource_identifier = replication.new_resource_identifier()
        self.task_arn = replication.task_arn(self.resource_identifier)
        self.task: replication.ReplicationTask | None = None
        self.app: AppHandles | None = None
        self.execution_arn: str | None = None
        self.row_changes = 0
        self._clients: dict[str, Any] = {}
        self._spark: Any = None

    # AWS ---------------------------------------------------------------------------------------------------
    def aws(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = sam_app.client(service, self.endpoint_url)
        return self._clients[service]

    @property
    def stack_name(self) -> str:
        return f"lake-{self.settings.name}"

    # steps -------------------------------------------------------------------------------------------------
    def create_source(self) -> dict[str, int]:
        """A new source database, so a new replica: the clean and refined tables of an earlier run of
        this environment (same names in the local warehouse) are removed, or their rows, applied files and
        tombstones would be mistaken for the new task's."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        for zone in ("clean", "clean_history", "refined"):  # clean_history: lakehouse.apply.history
            shutil.rmtree(Path(self.stack.warehouse) / f"{self.settings.name}_{zone}", ignore_errors=True)
        if self.postgres is not None:
            self.source_db = self.postgres.start().source
        if self.settings.source == "mysql":
            self.source_db = self._start_mariadb()
        return replication.create_source_database(self.source_db, self.settings.scale, self.settings.seed)

    def _start_mariadb(self) -> SourceDatabase:
        """The local MariaDB server (in a temp directory: run by root, it runs as the `mysql` user, who must
        reach it) and a fresh source database."""
        import pymysql

        base = Path(tempfile.mkdtemp(prefix="localaws-mariadb-"))
        base.chmod(0o755)
        self.mariadb = LocalMariaDb(base)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        address = self.mariadb.start(port)
        with pymysql.connect(**address.connect_kwargs()) as db, db.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {MYSQL_DATABASE}")
            cursor.execute(f"CREATE DATABASE {MYSQL_DATABASE} CHARACTER SET utf8mb4")
        return SourceDatabase.mysql(f"mysql://root@localhost/{MYSQL_DATABASE}?unix_socket={address.socket}")

    @property
    def source_schema(self) -> str:
        """The replicated schema: the files' schema folder and the schema file's table prefix."""
        return self.source_db.schema

    def deploy(self, build: bool = True, template: Path | None = None) -> AppHandles:
        """`sam build` + `sam deploy --config-env local` with this run's parameters, then the Glue
        artifacts and the schema file into the artifacts bucket. `template`: one `sam_app.package` made
        already (its code in this local AWS's S3), deployed as it is (no build)."""
        if build and template is None:
            sam_app.build(self.endpoint_url)
        declared = sam_app.template_parameters()
        wanted = {
            ENVIRONMENT_PARAMETERS: self.settings.name,
            TASK_ARN_PARAMETERS: self.task_arn,
            CSV_NULL_PARAMETERS: replication.CSV_NULL_VALUE,
            ("SourceSchema",): self.source_schema,
            # the deployed reconcile job's SQL and JDBC URL (a SQLite source has no deployed reconcile)
            ("SourceEngine",): "mysql" if self.settings.source == "mysql" else "postgresql",
        }
        parameters = {}
        for candidates, value in wanted.items():
            name = sam_app.first_declared(candidates, declared)
            if name is None:
                log.warning("template.yaml declares none of %s; not set", candidates)
            else:
                parameters[name] = value
        parameters |= self.settings.parameters
        sam_app.deploy(self.endpoint_url, self.stack_name, parameters, template=template)
        self.app = AppHandles.from_stack(self.aws("cloudformation"), self.stack_name)
        sam_app.upload_glue_artifacts(self.aws("s3"), self.app.artifacts_bucket, iceberg_jar=False)
        self.upload_schema()
        return self.app

    def upload_schema(self) -> str:
        assert self.app is not None
        return replication.upload_schema_file(self.aws("s3"), self.app.artifacts_bucket, self.source_db)

    def replication_settings(self) -> replication.ReplicationSettings:
        assert self.app is not None
        base = self.settings.replication or replication.ReplicationSettings(bucket=self.app.raw_bucket)
        return replace(base, bucket=self.app.raw_bucket, source_schema=self.source_schema)

    def start_replication(self) -> replication.ReplicationTask:
        self.task = replication.create_replication_task(
            self.aws("dms"),
            self.source_db,
            self.replication_settings(),
            identifier=f"lake-{self.settings.name}",
            resource_identifier=self.resource_identifier,
        )
        replication.start_task(self.aws("dms"), self.task)
        return self.task

    def start_execution(self) -> str:
        assert self.app is not None
        name = f"{self.settings.name}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
        self.execution_arn = self.aws("stepfunctions").start_execution(
            stateMachineArn=self.app.state_machine_arn,
            name=name,
            input=json.dumps(self.settings.execution_input),
        )["executionArn"]
        return self.execution_arn

    def run_workload(self, operations: int, seed: int) -> int:
        """`operations` business transactions on the source; returns the row changes they made."""
        from tools import sample_data

        result = sample_data.run_workload(self.source_db, operations, seed)
        self.row_changes += len(result.changes)
        return len(result.changes)

    def add_column(self, table: str, column: str, sql_type: str) -> None:
        """A schema change mid-stream, the documented way: ALTER on the source, then the schema file
        regenerated from the source catalog and uploaded before rows with the column arrive."""
        replication.add_column(self.source_db, table, column, sql_type)
        self.upload_schema()

    def widen_column(self, table: str, column: str, sql_type: str) -> None:
        """A type widened on the source mid-stream (`ALTER TABLE … ALTER COLUMN … TYPE`, PostgreSQL), then the
        schema file regenerated from the source catalog and uploaded."""
        if self.source_db.dialect != "postgresql":
            raise ValueError("SQLite cannot change a column's type")
        self.execute_sql(f'ALTER TABLE "{table}" ALTER COLUMN "{column}" TYPE {sql_type}')
        self.upload_schema()

    def kill_replication_connection(self) -> int:
        """Terminate the local DMS's connection to the source (a failover, a DBA's pg_terminate_backend): the
        task fails as DMS does; returns the connections terminated."""
        rows = self.source_rows(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'localaws-dms'"
        )
        return sum(1 for (terminated,) in rows if terminated)

    def resume_replication(self) -> None:
        """StartReplicationTask resume-processing: CDC goes on from the slot's last confirmed position."""
        assert self.task is not None
        self.aws("dms").start_replication_task(
            ReplicationTaskArn=self.task.arn, StartReplicationTaskType="resume-processing"
        )

    def execute_sql(self, statement: str, parameters: tuple[Any, ...] = ()) -> int:
        """One statement on the source (`?` placeholders), committed; returns the rows it changed."""
        with self.source_db.connect() as db:
            return db.execute(statement, parameters).rowcount

    def source_rows(self, statement: str, parameters: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """The rows of a query on the source (`?` placeholders)."""
        with self.source_db.connect() as db:
            return [tuple(row) for row in db.execute(statement, parameters).fetchall()]

    # observing ---------------------------------------------------------------------------------------------
    def monitor(self, ignore_files: frozenset[str] = frozenset()) -> ProgressMonitor:
        assert self.app is not None
        return ProgressMonitor(
            aws=self.aws,
            task_arn=self.task_arn,
            raw_bucket=self.app.raw_bucket,
            warehouse=self.stack.warehouse,
            clean_database=self.app.clean_database,
            state_machine_arn=self.app.state_machine_arn,
            ignore_files=ignore_files,
        )

    def wait_until_applied(
        self,
        timeout: float,
        report: Callable[[ProgressSnapshot], None] | None = None,
        every: float = 5.0,
        ignore_files: frozenset[str] = frozenset(),
        settle: float = 3.0,
    ) -> ProgressSnapshot:
        """Wait until every table's CDC files in the raw zone are applied (named by a commit) and the full
        load is in: every table the schema file names is loaded, not only the tables that exist so far
        (the full load creates them one by one), after `settle` seconds for DMS to flush its buffer.
        Raises if an execution fails."""
        monitor = self.monitor(ignore_files)
        wanted = self.schema_tables()
        time.sleep(settle)
        deadline = time.monotonic() + timeout
        last_report = 0.0
        while True:
            snapshot = monitor.snapshot()
            if report and time.monotonic() - last_report >= every:
                report(snapshot)
                last_report = time.monotonic()
            if snapshot.execution_status in ("FAILED", "TIMED_OUT", "ABORTED"):
                raise RuntimeError(f"execution {snapshot.execution_status}: {self.execution_failure()}")
            done = {name for name, state in snapshot.clean.items() if state.full_load_done}
            # the replicas only: the clean database also holds tables the jobs derive (lake_freshness, …)
            loaded = wanted and wanted <= done
            if loaded and not snapshot.pending and snapshot.dms_status in ("running", "stopped"):
                return snapshot
            if time.monotonic() >= deadline:
                raise TimeoutError(f"not caught up after {timeout:.0f}s: {snapshot.line()}")
            time.sleep(1.0)

    def schema_tables(self) -> set[str]:
        """The clean tables of the schema file in the artifacts bucket (the tables the full load creates)."""
        from lakehouse.base.schema import SchemaFile

        assert self.app is not None
        body = self.aws("s3").get_object(Bucket=self.app.artifacts_bucket, Key=replication.SCHEMA_FILE_KEY)
        schema = SchemaFile.from_dict(json.loads(body["Body"].read()), per_table=True)
        return {spec.iceberg_name for spec in schema.tables.values()}

    def reload_tables(self, *tables: str) -> None:
        """A DBA's table reload during CDC (DMS ReloadTables): DMS empties the tables' folders and writes
        new LOAD files; the pipeline records reload requests and applies them once DMS reports them done."""
        assert self.task is not None
        self.aws("dms").reload_tables(
            ReplicationTaskArn=self.task.arn,
            TablesToReload=[{"SchemaName": self.source_schema, "TableName": t} for t in tables],
        )

    def reloads_pending(self) -> list[str]:
        """Tables whose reload request the pipeline has not applied yet (`manifests/reloads/`)."""
        assert self.app is not None
        listed = self.aws("s3").list_objects_v2(Bucket=self.app.artifacts_bucket, Prefix="manifests/reloads/")
        return [o["Key"].rsplit("/", 1)[-1].removesuffix(".json") for o in listed.get("Contents", [])]

    def executions(self) -> list[dict[str, Any]]:
        assert self.app is not None
        return self.aws("stepfunctions").list_executions(stateMachineArn=self.app.state_machine_arn)[
            "executions"
        ]

    def execution_failure(self) -> str:
        """Error and cause of the newest failed execution."""
        failed = [e for e in self.executions() if e["status"] in ("FAILED", "TIMED_OUT", "ABORTED")]
        if not failed:
            return ""
        newest = max(failed, key=lambda e: e["startDate"])
        described = self.aws("stepfunctions").describe_execution(executionArn=newest["executionArn"])
        return f"{described.get('error', '')}: {described.get('cause', '')}"[:2000]

    @property
    def refined_database(self) -> str:
        assert self.app is not None
        return self.app.outputs.get("RefinedDatabaseName") or self.app.clean_database.replace(
            "_clean", "_refined"
        )

    def lake_config(self) -> Any:
        """The demo's own view of the local warehouse (a hadoop catalog over the local Glue's folder)."""
        from lakehouse.base.config import LakeConfig

        assert self.app is not None
        return LakeConfig(
            catalog_name=VERIFY_CATALOG,
            warehouse=str(self.stack.warehouse),
            clean_database=self.app.clean_database,
            refined_database=self.refined_database,
        )

    def spark(self) -> Any:
        """One local Spark session reading the warehouse the local Glue jobs write (kept for the run)."""
        from lakehouse.io.session import build_session

        if self._spark is None:
            self._spark = build_session(self.lake_config(), "verify-lake")
        for key, value in {
            f"spark.sql.catalog.{VERIFY_CATALOG}": "org.apache.iceberg.spark.SparkCatalog",
            f"spark.sql.catalog.{VERIFY_CATALOG}.type": "hadoop",
            f"spark.sql.catalog.{VERIFY_CATALOG}.warehouse": self.stack.warehouse.resolve().as_uri(),
            f"spark.sql.catalog.{VERIFY_CATALOG}.cache-enabled": "false",  # see other writers' commits
        }.items():
            self._spark.conf.set(key, value)
        return self._spark

    def verify(self) -> list[Any]:
        """Every clean table against its source table (row checksums); see tools.verify."""
        from lakehouse.base.schema import SchemaFile

        from tools.verify import check_all

        spark = self.spark()
        schema = SchemaFile.from_dict(replication.schema_document(self.source_db))
        return check_all(spark, self.lake_config(), schema, self.source_db)

    def verify_refined(self) -> list[Any]:
        """Every refined table against its recomputation from the source database (row checksums)."""
        from tools.verify import check_refined

        return check_refined(self.spark(), f"{VERIFY_CATALOG}.{self.refined_database}", self.source_db)

    def stop_executions(self, quiet_seconds: float = 3.0, timeout: float = 120.0) -> None:
        """Stop the pipeline's running executions until none has run for `quiet_seconds` (its pending batch
        stays; nothing is lost). Once is not enough: an execution stopped while it hands over to its successor
        (a history rollover's states:startExecution) leaves that one running, and the successor takes the lease
        and stops every job run it did not start (the demo's final refine, stopped so, once)."""
        sfn = self.aws("stepfunctions")
        deadline = time.monotonic() + timeout
        quiet_since: float | None = None
        while True:
            running = [e["executionArn"] for e in self.executions() if e["status"] == "RUNNING"]
            for arn in running:
                sfn.stop_execution(executionArn=arn, error="Stopped", cause="stopped by the local run")
            now = time.monotonic()
            if running:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= quiet_seconds:
                return
            if now > deadline:
                raise TimeoutError(f"executions still starting after {timeout:.0f}s: {running}")
            time.sleep(0.5)

    def run_job(
        self, job_name: str, arguments: dict[str, str] | None = None, timeout: float = 600
    ) -> dict[str, Any]:
        """One run of a deployed Glue job, waited for; raises with Glue's error if it does not succeed. A run
        the state machine started before it was stopped (a stopped execution leaves its Glue run going)
        finishes first: the jobs allow one run at a time."""
        glue = self.aws("glue")
        deadline = time.monotonic() + timeout
        while any(
            run["JobRunState"] in ("STARTING", "RUNNING", "STOPPING", "WAITING")
            for run in glue.get_job_runs(JobName=job_name)["JobRuns"]
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{job_name}: an earlier run still going after {timeout:.0f}s")
            time.sleep(2.0)
        run_id = glue.start_job_run(JobName=job_name, Arguments=arguments or {})["JobRunId"]
        while time.monotonic() < deadline:
            run = glue.get_job_run(JobName=job_name, RunId=run_id)["JobRun"]
            if run["JobRunState"] in ("SUCCEEDED", "FAILED", "ERROR", "TIMEOUT", "STOPPED"):
                if run["JobRunState"] != "SUCCEEDED":
                    raise RuntimeError(
                        f"{job_name} {run['JobRunState']}: {run.get('ErrorMessage', '')[:2000]}"
                    )
                return run
            time.sleep(2.0)
        raise TimeoutError(f"{job_name} still running after {timeout:.0f}s")

    def emr_job_runs(self) -> list[dict[str, Any]]:
        """The EMR Serverless application's job runs, newest first (SparkEngine=emr-serverless; else none)."""
        assert self.app is not None
        if not self.app.emr_application_id:
            return []
        emr = self.aws("emr-serverless")
        runs: list[dict[str, Any]] = []
        for page in emr.get_paginator("list_job_runs").paginate(applicationId=self.app.emr_application_id):
            runs += page["jobRuns"]
        return runs

    def run_reports(self) -> list[dict[str, Any]]:
        """The CDC runs' reports (`manifests/reports/<run_id>.json`), oldest first."""
        assert self.app is not None
        s3 = self.aws("s3")
        reports = []
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.app.artifacts_bucket, Prefix="manifests/reports/"
        ):
            for item in page.get("Contents", []):
                report = json.loads(
                    s3.get_object(Bucket=self.app.artifacts_bucket, Key=item["Key"])["Body"].read()
                )
                if report.get("job") == "cdc":
                    reports.append(report)
        return sorted(reports, key=lambda r: r.get("run_id", ""))

    def quarantined(self) -> list[dict[str, Any]]:
        """Rows of the clean zone's quarantine table (file + line + reason of what was set aside)."""
        assert self.app is not None
        if self._spark is None:
            self.verify()
        table = f"{VERIFY_CATALOG}.{self.app.clean_database}.dms_quarantine"
        if not self._spark.catalog.tableExists(table):
            return []
        return [row.asDict() for row in self._spark.table(table).collect()]

    # cleanup -----------------------------------------------------------------------------------------------
    def close(self, delete_stack: bool = False) -> None:
        """Stop what this run started: running executions, the DMS task (and optionally the stack)."""
        if self.app is not None:
            for execution in self.executions():
                if execution["status"] == "RUNNING":
                    try:
                        self.aws("stepfunctions").stop_execution(
                            executionArn=execution["executionArn"], error="Stopped", cause="run finished"
                        )
                    except Exception as error:  # best effort: the stack may be going away
                        log.warning("stopping %s: %s", execution["executionArn"], error)
        if self.task is not None:
            try:
                replication.stop_task(self.aws("dms"), self.task)
            except Exception as error:
                log.warning("stopping the DMS task: %s", error)
        if self.postgres is not None:
            try:
                self.postgres.stop()
            except Exception as error:
                log.warning("stopping PostgreSQL: %s", error)
        if self.mariadb is not None:
            try:
                self.mariadb.stop()
                shutil.rmtree(self.mariadb.base_dir, ignore_errors=True)
            except Exception as error:
                log.warning("stopping MariaDB: %s", error)
        if delete_stack and self.app is not None:
            try:
                sam_app.delete_stack(self.aws("cloudformation"), self.stack_name)
            except Exception as error:
                log.warning("deleting %s: %s", self.stack_name, error)

"""One whole pipeline on the embedded local AWS: the SAM app deployed, a sample source replicated by a DMS
task, the state machine running, a change workload, and the clean zone checked against the source.

The source is an embedded PostgreSQL server read through a logical replication slot (the default), or an
SQLite file (`RunSettings.source = "sqlite"`). Used by `python -m localaws.demo` and by tests/integration/
pipeline. Everything started is stopped by `close()` (executions, the DMS task, the PostgreSQL server); the
LocalStack process itself is the caller's (`running_stack`).

`LocalPipeline` composes the run's parts, one module each: the source servers (`pipeline_sources`), the local
DMS task (`pipeline_dms`), the deployed stack and its executions (`pipeline_stack`), the checks and reports
(`pipeline_checks`); it keeps what spans them: the progress it waits on, the schema changes, the cleanup.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from localaws import replication, sam_app
from localaws.mariadb import LocalMariaDb
from localaws.pipeline_checks import VERIFY_CATALOG, LakeChecks
from localaws.pipeline_dms import LocalDmsTask
from localaws.pipeline_settings import SOURCE_KINDS, RunSettings
from localaws.pipeline_sources import MYSQL_DATABASE, SourceServers
from localaws.pipeline_stack import (
    CSV_NULL_PARAMETERS,
    EMR_SERVERLESS_PARAMETERS,
    ENVIRONMENT_PARAMETERS,
    TASK_ARN_PARAMETERS,
    AppHandles,
    DeployedStack,
)
from localaws.postgres import LocalPostgres
from localaws.progress import ProgressMonitor, ProgressSnapshot
from localaws.stack import StackConfig
from tools.source_db import SourceDatabase

__all__ = [
    "CSV_NULL_PARAMETERS",
    "EMR_SERVERLESS_PARAMETERS",
    "ENVIRONMENT_PARAMETERS",
    "MYSQL_DATABASE",
    "SOURCE_KINDS",
    "TASK_ARN_PARAMETERS",
    "VERIFY_CATALOG",
    "AppHandles",
    "LocalPipeline",
    "RunSettings",
]

log = logging.getLogger(__name__)


class LocalPipeline:
    """Drives one run; see the module docstring. Not thread-safe."""

    def __init__(self, endpoint_url: str, settings: RunSettings, stack: StackConfig | None = None) -> None:
        self.endpoint_url = endpoint_url
        self.settings = settings
        self.stack = stack or StackConfig()
        self.workdir = settings.workdir.resolve()
        self.sources = SourceServers(self.workdir, settings.source)
        self.dms = LocalDmsTask(self.aws, settings)
        self.deployed = DeployedStack(endpoint_url, settings, self.aws)
        self.checks = LakeChecks(self.deployed, self.sources, self.stack.warehouse, self.aws)
        self.row_changes = 0
        self._clients: dict[str, Any] = {}

    # AWS ---------------------------------------------------------------------------------------------------
    def aws(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = sam_app.client(service, self.endpoint_url)
        return self._clients[service]

    # the parts' state, as attributes of the run ------------------------------------------------------------
    @property
    def postgres(self) -> LocalPostgres | None:
        return self.sources.postgres

    @property
    def mariadb(self) -> LocalMariaDb | None:
        return self.sources.mariadb

    @property
    def source_db(self) -> SourceDatabase:
        return self.sources.source_db

    @source_db.setter
    def source_db(self, source_db: SourceDatabase) -> None:
        self.sources.source_db = source_db

    @property
    def source_schema(self) -> str:
        """The replicated schema: the files' schema folder and the schema file's table prefix."""
        return self.sources.schema

    @property
    def resource_identifier(self) -> str:
        return self.dms.resource_identifier

    @property
    def task_arn(self) -> str:
        return self.dms.task_arn

    @property
    def task(self) -> replication.ReplicationTask | None:
        return self.dms.task

    @property
    def app(self) -> AppHandles | None:
        return self.deployed.app

    @app.setter
    def app(self, app: AppHandles | None) -> None:
        self.deployed.app = app

    @property
    def execution_arn(self) -> str | None:
        return self.deployed.execution_arn

    @property
    def stack_name(self) -> str:
        return self.deployed.stack_name

    @property
    def refined_database(self) -> str:
        return self.checks.refined_database

    # steps -------------------------------------------------------------------------------------------------
    def create_source(self) -> dict[str, int]:
        """A new source database, so a new replica: the clean and refined tables of an earlier run of
        this environment (same names in the local warehouse) are removed, or their rows, applied files and
        tombstones would be mistaken for the new task's."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        # clean_history: lakehouse.apply.history; clean_records: the pipeline's own (base.names.records_database)
        for zone in ("clean", "clean_history", "clean_records", "refined"):
            shutil.rmtree(Path(self.stack.warehouse) / f"{self.settings.name}_{zone}", ignore_errors=True)
        return self.sources.create(self.settings.scale, self.settings.seed)

    def deploy(self, build: bool = True, template: Path | None = None) -> AppHandles:
        """`sam build` + `sam deploy --config-env local` with this run's parameters, then the Glue
        artifacts and the schema file into the artifacts bucket. `template`: one `sam_app.package` made
        already (its code in this local AWS's S3), deployed as it is (no build)."""
        return self.deployed.deploy(self.source_db, self.task_arn, build=build, template=template)

    def release(self, schema_file: Path) -> subprocess.CompletedProcess[str]:
        """The stack deployed as a user deploys it: what `make deploy` runs, with this run's parameters and
        `schema_file` (see `DeployedStack.release`); the process as it ended."""
        return self.deployed.release(self.source_db, self.task_arn, schema_file)

    def create_replication(self, raw_bucket: str) -> replication.ReplicationTask:
        """The DMS task created before the stack, as a user's own task (CreateDmsTask=false) is: writing to the
        raw bucket the stack will create (`raw_bucket`), not started (`start_replication` starts it)."""
        return self.dms.create(self.source_db, self.dms.replication_settings(raw_bucket, self.source_schema))

    def publish_models(self, folder: Path) -> list[str]:
        """The stack's job code published again with the models of `folder` (the next refine reads them)."""
        return self.deployed.publish_models(folder)

    def upload_schema(self) -> str:
        """The schema file regenerated from the source's catalog, into the artifacts bucket."""
        return self.deployed.upload_schema(self.source_db)

    def replication_settings(self) -> replication.ReplicationSettings:
        assert self.app is not None
        return self.dms.replication_settings(self.app.raw_bucket, self.source_schema)

    def start_replication(self) -> replication.ReplicationTask:
        return self.dms.start(self.source_db, self.replication_settings())

    def start_execution(self) -> str:
        return self.deployed.start_execution()

    def run_workload(self, operations: int, seed: int) -> int:
        """`operations` business transactions on the source; returns the row changes they made."""
        changes = self.sources.run_workload(operations, seed)
        self.row_changes += changes
        return changes

    def add_column(self, table: str, column: str, sql_type: str) -> None:
        """A schema change mid-stream, the documented way: ALTER on the source, then the schema file
        regenerated from the source catalog and uploaded before rows with the column arrive."""
        self.sources.add_column(table, column, sql_type)
        self.upload_schema()

    def widen_column(self, table: str, column: str, sql_type: str) -> None:
        """A type widened on the source mid-stream (`ALTER TABLE … ALTER COLUMN … TYPE`, PostgreSQL), then the
        schema file regenerated from the source catalog and uploaded."""
        self.sources.widen_column(table, column, sql_type)
        self.upload_schema()

    def kill_replication_connection(self) -> int:
        """Terminate the local DMS's connection to the source: the task fails as DMS does."""
        return self.sources.kill_replication_connection()

    def resume_replication(self) -> None:
        """StartReplicationTask resume-processing: CDC goes on from the slot's last confirmed position."""
        self.dms.resume()

    def execute_sql(self, statement: str, parameters: tuple[Any, ...] = ()) -> int:
        """One statement on the source (`?` placeholders), committed; returns the rows it changed."""
        return self.sources.execute_sql(statement, parameters)

    def source_rows(self, statement: str, parameters: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """The rows of a query on the source (`?` placeholders)."""
        return self.sources.source_rows(statement, parameters)

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
            # the replicas only (a table someone else made in the clean database is no replica to wait for)
            loaded = wanted and wanted <= done
            if loaded and not snapshot.pending and snapshot.dms_status in ("running", "stopped"):
                return snapshot
            if time.monotonic() >= deadline:
                raise TimeoutError(f"not caught up after {timeout:.0f}s: {snapshot.line()}")
            time.sleep(1.0)

    def schema_tables(self) -> set[str]:
        """The clean tables of the schema file in the artifacts bucket (the tables the full load creates)."""
        return self.deployed.schema_tables()

    def reload_tables(self, *tables: str) -> None:
        """A DBA's table reload during CDC (DMS ReloadTables): DMS empties the tables' folders and writes
        new LOAD files; the pipeline records reload requests and applies them once DMS reports them done."""
        self.dms.reload_tables(self.source_schema, tables)

    def reloads_pending(self) -> list[str]:
        """Tables whose reload request the pipeline has not applied yet (`manifests/reloads/`)."""
        return self.deployed.reloads_pending()

    def executions(self) -> list[dict[str, Any]]:
        return self.deployed.executions()

    def execution_failure(self) -> str:
        """Error and cause of the newest failed execution."""
        return self.deployed.execution_failure()

    def lake_config(self) -> Any:
        """The demo's own view of the local warehouse (a hadoop catalog over the local Glue's folder)."""
        return self.checks.lake_config()

    def spark(self) -> Any:
        """One local Spark session reading the warehouse the local Glue jobs write (kept for the run)."""
        return self.checks.spark()

    def verify(self) -> list[Any]:
        """Every clean table against its source table (row checksums); see tools.verify."""
        return self.checks.verify()

    def verify_refined(self) -> list[Any]:
        """The refined table of each model the stack publishes against the model's SQL over the source database
        (row checksums)."""
        return self.checks.verify_refined()

    def stop_executions(self, quiet_seconds: float = 3.0, timeout: float = 120.0) -> None:
        """Stop the pipeline's running executions until none has run for `quiet_seconds`."""
        self.deployed.stop_executions(quiet_seconds=quiet_seconds, timeout=timeout)

    def run_job(
        self, job_name: str, arguments: dict[str, str] | None = None, timeout: float = 600
    ) -> dict[str, Any]:
        """One run of a deployed Glue job, waited for; raises with Glue's error if it does not succeed."""
        return self.deployed.run_job(job_name, arguments, timeout=timeout)

    def emr_job_runs(self) -> list[dict[str, Any]]:
        """The EMR Serverless application's job runs, newest first (SparkEngine=emr-serverless; else none)."""
        return self.deployed.emr_job_runs()

    def run_reports(self) -> list[dict[str, Any]]:
        """The CDC runs' reports (`manifests/reports/<run_id>.json`), oldest first."""
        return self.checks.run_reports()

    def quarantined(self) -> list[dict[str, Any]]:
        """Rows of the clean zone's quarantine table (file + line + reason of what was set aside)."""
        return self.checks.quarantined()

    # cleanup -----------------------------------------------------------------------------------------------
    def close(self, delete_stack: bool = False) -> None:
        """Stop what this run started: running executions, the DMS task (and optionally the stack)."""
        self.deployed.stop_running_executions()
        if self.task is not None:
            try:
                self.dms.stop()
            except Exception as error:
                log.warning("stopping the DMS task: %s", error)
        if self.postgres is not None:
            try:
                self.sources.stop_postgres()
            except Exception as error:
                log.warning("stopping PostgreSQL: %s", error)
        if self.mariadb is not None:
            try:
                self.sources.stop_mariadb()
            except Exception as error:
                log.warning("stopping MariaDB: %s", error)
        if delete_stack and self.app is not None:
            try:
                self.deployed.delete()
            except Exception as error:
                log.warning("deleting %s: %s", self.stack_name, error)

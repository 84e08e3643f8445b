"""The source database of a local pipeline run and the server that holds it: an embedded PostgreSQL server
(`localaws/postgres.py`, the default), a local MariaDB server (`localaws/mariadb.py`, `source="mysql"`) or an
SQLite file. Creates the sample source, runs statements and workloads on it, and stops its server.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

from localaws import replication
from localaws.mariadb import LocalMariaDb
from localaws.pipeline_settings import SOURCE_KINDS
from localaws.postgres import LocalPostgres
from tools.source_db import SourceDatabase

MYSQL_DATABASE = "shop"  # the MySQL source's database: DMS's schema, the files' folder


class SourceServers:
    """The run's source database (`source_db`) and its server, if any. Not thread-safe."""

    def __init__(self, workdir: Path, source: str) -> None:
        if source not in SOURCE_KINDS:
            raise ValueError(f"source {source!r}: one of {SOURCE_KINDS}")
        self.workdir = workdir
        self.source = source
        self.postgres = LocalPostgres(workdir / "postgres") if source == "postgresql" else None
        self.mariadb: LocalMariaDb | None = None  # started by create (a temp dir the `mysql` user reaches)
        self.source_db = SourceDatabase.sqlite(workdir / "source.db")  # the server's, once it runs

    def create(self, scale: float, seed: int) -> dict[str, int]:
        """The server started (PostgreSQL, MariaDB) and the sample source created in it; returns its tables'
        row counts."""
        if self.postgres is not None:
            self.source_db = self.postgres.start().source
        if self.source == "mysql":
            self.source_db = self._start_mariadb()
        return replication.create_source_database(self.source_db, scale, seed)

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
    def schema(self) -> str:
        """The replicated schema: the files' schema folder and the schema file's table prefix."""
        return self.source_db.schema

    def run_workload(self, operations: int, seed: int) -> int:
        """`operations` business transactions on the source; returns the row changes they made."""
        from tools import sample_data

        result = sample_data.run_workload(self.source_db, operations, seed)
        return len(result.changes)

    def add_column(self, table: str, column: str, sql_type: str) -> None:
        """`ALTER TABLE … ADD COLUMN` on the source."""
        replication.add_column(self.source_db, table, column, sql_type)

    def widen_column(self, table: str, column: str, sql_type: str) -> None:
        """A type widened on the source (`ALTER TABLE … ALTER COLUMN … TYPE`, PostgreSQL)."""
        if self.source_db.dialect != "postgresql":
            raise ValueError("SQLite cannot change a column's type")
        self.execute_sql(f'ALTER TABLE "{table}" ALTER COLUMN "{column}" TYPE {sql_type}')

    def kill_replication_connection(self) -> int:
        """Terminate the local DMS's connection to the source (a failover, a DBA's pg_terminate_backend): the
        task fails as DMS does; returns the connections terminated."""
        rows = self.source_rows(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'localaws-dms'"
        )
        return sum(1 for (terminated,) in rows if terminated)

    def execute_sql(self, statement: str, parameters: tuple[Any, ...] = ()) -> int:
        """One statement on the source (`?` placeholders), committed; returns the rows it changed."""
        with self.source_db.connect() as db:
            return db.execute(statement, parameters).rowcount

    def source_rows(self, statement: str, parameters: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """The rows of a query on the source (`?` placeholders)."""
        with self.source_db.connect() as db:
            return [tuple(row) for row in db.execute(statement, parameters).fetchall()]

    def stop_postgres(self) -> None:
        """Stop the embedded PostgreSQL server, if this run has one."""
        if self.postgres is not None:
            self.postgres.stop()

    def stop_mariadb(self) -> None:
        """Stop the local MariaDB server, if this run started one, and remove its directory."""
        if self.mariadb is not None:
            self.mariadb.stop()
            shutil.rmtree(self.mariadb.base_dir, ignore_errors=True)

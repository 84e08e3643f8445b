"""What a replication task runs with: its source endpoint, the capture that endpoint opens, its options.

`SourceSettings` reads a source endpoint (SQLite, PostgreSQL, or MySQL/MariaDB) and opens its capture, which
`CaptureSource` describes: `SqliteSource` (triggers), `PostgresSource` (a logical slot) or `MysqlSource` (the
binlog). `TaskOptions` holds the local knobs of the task settings (`"LocalAws": {…}`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from localaws_plugin import settings as emulator_settings
from localaws_plugin.dms_sqlite import CapturedChange, SqliteSource


class CaptureSource(Protocol):
    """What a replication run reads: `SqliteSource` (triggers), `PostgresSource` (a logical slot) or
    `MysqlSource` (the binlog)."""

    path: str

    def close(self) -> None: ...
    def tables(self) -> list[str]: ...
    def columns(self, table: str) -> list[str]: ...
    def declared_types(self, table: str) -> dict[str, str]: ...
    def primary_key(self, table: str) -> list[str]: ...
    def count_rows(self, table: str) -> int: ...
    def install_capture(self, tables: list[str], resume: bool = False) -> int: ...
    def refresh_triggers(self, tables: list[str]) -> list[str]: ...
    def snapshot(self, table: str) -> tuple[int, list[str], list[tuple]]: ...
    def changes_after(self, seq: int) -> list[CapturedChange]: ...
    def prune(self, up_to_seq: int) -> None: ...
    def describe_position(self, seq: int) -> str: ...


MYSQL_ENGINES = ("mysql", "mariadb", "aurora")  # EngineName values of a MySQL-compatible source


@dataclass(frozen=True)
class SourceSettings:
    """A source endpoint. EngineName `sqlite`: DatabaseName is the file's path. EngineName `postgres`: ServerName
    (a host, or a local server's socket directory), Port, DatabaseName, Username, Password, and the extra
    connection attributes `slotName` (default: the task's identifier), `publicationName` (default:
    `<slot>_publication`) and `PluginName` (pgoutput, the only one). `schemaName` is the schema replicated
    and the files' schema folder (default `main` for SQLite, `public` for PostgreSQL). EngineName `mysql`,
    `mariadb` or `aurora`: ServerName (a host, or a local server's Unix socket path), Port, Username, Password,
    and the database replicated (DatabaseName, or the extra connection attribute `schemaName`), which is
    also the files' schema folder."""

    path: str
    schema: str = "main"
    engine: str = "sqlite"
    host: str | None = None
    port: int | None = None
    username: str | None = None
    password: str | None = None
    slot: str | None = None
    publication: str | None = None
    heartbeat_schema: str | None = None  # HeartbeatEnable (PostgreSQL): the heartbeat's schema, None = off
    heartbeat_seconds: float = 300.0  # HeartbeatFrequency (minutes on the endpoint)

    @classmethod
    def from_endpoint(
        cls,
        database_name: str | None,
        server_name: str | None,
        extra_connection_attributes: str | None,
        engine: str = "sqlite",
        port: int | None = None,
        username: str | None = None,
        password: str | None = None,
        task_identifier: str = "localaws",
        postgres_settings: dict[str, Any] | None = None,
    ) -> SourceSettings:
        attributes = {}
        for part in (extra_connection_attributes or "").split(";"):
            if "=" in part:
                key, value = part.split("=", 1)
                attributes[key.strip().lower()] = value.strip()
        engine = engine.lower()
        if engine in MYSQL_ENGINES:
            if not server_name:
                raise ValueError(f"a {engine} source endpoint needs a ServerName")
            database = attributes.get("schemaname") or attributes.get("schema") or database_name
            if not database:
                raise ValueError(
                    f"a {engine} source endpoint needs the database replicated: DatabaseName or schemaName="
                )
            return cls(
                path=database,
                schema=database,
                engine="mysql",
                host=server_name,
                port=port or 3306,
                username=username or "root",
                password=password,
            )
        if engine in ("postgres", "postgresql", "aurora-postgresql"):
            plugin = attributes.get("pluginname", "no-preference").lower()
            if plugin not in ("no-preference", "pgoutput"):  # AWS DMS: test-decoding or pglogical
                raise ValueError(
                    f"PluginName={plugin}: the local DMS decodes with pgoutput (set no-preference or pgoutput)"
                )
            if not server_name:
                raise ValueError("a postgres source endpoint needs a ServerName")
            slot = attributes.get("slotname") or _slot_name(task_identifier)
            endpoint = postgres_settings or {}
            heartbeat = endpoint.get("HeartbeatEnable", attributes.get("heartbeatenable", False))
            heartbeat_on = heartbeat is True or str(heartbeat).strip().lower() in ("true", "y", "yes", "1")
            schema_of_heartbeat = (
                endpoint.get("HeartbeatSchema") or attributes.get("heartbeatschema") or "public"
            )
            minutes = float(endpoint.get("HeartbeatFrequency") or attributes.get("heartbeatfrequency") or 5)
            return cls(
                path=database_name or "postgres",
                schema=attributes.get("schemaname") or attributes.get("schema") or "public",
                engine="postgres",
                host=server_name,
                port=port or 5432,
                username=username or "postgres",
                password=password,
                slot=slot,
                publication=attributes.get("publicationname") or f"{slot}_publication",
                heartbeat_schema=schema_of_heartbeat if heartbeat_on else None,
                heartbeat_seconds=minutes * 60,
            )
        path = database_name or attributes.get("path") or server_name or ""
        return cls(path=path, schema=attributes.get("schemaname") or attributes.get("schema") or "main")

    def open(self) -> CaptureSource:
        """The capture over this source: `SqliteSource` or `PostgresSource`."""
        if self.engine == "sqlite":
            return SqliteSource(self.path)
        if self.engine == "mysql":
            from localaws_plugin.dms_mysql import MysqlSettings, MysqlSource

            return MysqlSource(
                MysqlSettings(
                    host=self.host or "",
                    port=self.port or 3306,
                    user=self.username or "root",
                    password=self.password,
                    database=self.schema,
                )
            )
        from localaws_plugin.dms_postgres import PostgresSettings, PostgresSource

        return PostgresSource(
            PostgresSettings(
                host=self.host or "",
                port=self.port or 5432,
                database=self.path,
                user=self.username or "postgres",
                password=self.password,
                schema=self.schema,
                slot=self.slot or "localaws",
                publication=self.publication or "localaws_publication",
                heartbeat_schema=self.heartbeat_schema,
            )
        )


def _slot_name(identifier: str) -> str:
    """A replication slot name from a task identifier: lower-case letters, digits and underscores, ≤ 63."""
    return "".join(c if c.isalnum() else "_" for c in identifier.lower())[:63]


@dataclass(frozen=True)
class TaskOptions:
    poll_seconds: float = 0.5
    max_rows_per_load_file: int | None = None
    heartbeat_seconds: float | None = None  # LocalAws.HeartbeatSeconds: overrides HeartbeatFrequency (tests)
    lenient: bool = field(default_factory=emulator_settings.dms_lenient)  # write what AWS DMS drops

    @classmethod
    def from_task_settings(cls, settings: dict[str, Any]) -> TaskOptions:
        local = settings.get("LocalAws") or {}
        max_rows = local.get("MaxRowsPerLoadFile")
        lenient = local.get("Lenient")
        return cls(
            poll_seconds=float(local.get("PollSeconds", 0.5)),
            max_rows_per_load_file=int(max_rows) if max_rows else None,
            heartbeat_seconds=float(local["HeartbeatSeconds"]) if local.get("HeartbeatSeconds") else None,
            lenient=emulator_settings.dms_lenient() if lenient is None else bool(lenient),
        )

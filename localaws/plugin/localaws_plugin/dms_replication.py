"""A replication task that really replicates: full load of an SQLite source into DMS-format files, then CDC.

No LocalStack import: the files go through `put_object(bucket, key, body)`, which the provider binds to S3 in
LocalStack (so bucket notifications fire) and unit tests bind to a dict.

Full load then CDC, as DMS: the capture starts (triggers installed, position P taken) before the first table
is read, each table is read in a consistent snapshot, and CDC replays every change after P, so changes
committed during the full load appear in a LOAD file and again in the first CDC files. LOAD rows carry the
change-log position of their table's snapshot as AR_H_CHANGE_SEQ: every later change has a higher one.

Table reloads (`ReloadTables` while CDC runs), as DMS does them for an S3 target with the default
TargetTablePrepMode DROP_AND_CREATE: the CDC changes captured so far are written first, the table's folder
is emptied (its LOAD and CDC files deleted), then the table is read again into LOAD files numbered from 1;
the table statistics say "Full load", then "Table completed" with the reload's FullLoadStart/EndTime.

What AWS DMS loses is lost: a source marks each change AWS DMS would not deliver (`CapturedChange.lost`), and
the run drops it with a warning naming table and position, unless the task is lenient (`LOCALAWS_DMS_LENIENT=1`
in the emulator's environment, or the task setting `"LocalAws": {"Lenient": true}`), which writes it as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from localaws_plugin import settings as emulator_settings
from localaws_plugin.dms_format import (
    ChangeRow,
    FileLayout,
    S3TargetSettings,
    TableMapping,
    cdc_file_name,
    load_file_name,
    object_key,
    split_into_files,
)
from localaws_plugin.dms_sqlite import CapturedChange, SqliteSource

LOG = logging.getLogger(__name__)


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


PutObject = Callable[[str, str, bytes], None]
DeletePrefix = Callable[[str, str], None]  # (bucket, key prefix): delete every object below it

# Capture positions of every run per source file: the change log is pruned only below the slowest run.
_positions_lock = threading.Lock()
_positions_by_source: dict[str, dict[int, int]] = {}


def _record_position_and_prune(source: CaptureSource, run_id: int, position: int) -> None:
    with _positions_lock:
        positions = _positions_by_source.setdefault(source.path, {})
        positions[run_id] = position
        floor = min(positions.values())
    source.prune(floor)


def _forget_position(path: str, run_id: int) -> None:
    with _positions_lock:
        _positions_by_source.get(path, {}).pop(run_id, None)


FULL_LOAD_TYPES = ("full-load", "full-load-and-cdc")
MYSQL_ENGINES = ("mysql", "mariadb", "aurora")  # EngineName values of a MySQL-compatible source
CDC_TYPES = ("cdc", "full-load-and-cdc")


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


@dataclass
class TableStatistics:
    schema: str
    table: str
    state: str = "Table does not exist"
    full_load_rows: int = 0
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    last_update: datetime = field(default_factory=lambda: datetime.now(UTC))
    full_load_start: datetime | None = None
    full_load_end: datetime | None = None

    def as_api(self) -> dict[str, Any]:
        loaded = {
            key: value
            for key, value in (
                ("FullLoadStartTime", self.full_load_start),
                ("FullLoadEndTime", self.full_load_end),
            )
            if value is not None
        }
        return loaded | {
            "SchemaName": self.schema,
            "TableName": self.table,
            "Inserts": self.inserts,
            "Updates": self.updates,
            "Deletes": self.deletes,
            "Ddls": 0,
            "FullLoadRows": self.full_load_rows,
            "FullLoadCondtnlChkFailedRows": 0,
            "FullLoadErrorRows": 0,
            "LastUpdateTime": self.last_update,
            "TableState": self.state,
            "ValidationState": "Not enabled",
        }


class ReplicationRun:
    """The state and the worker thread of one replication task."""

    def __init__(
        self,
        migration_type: str,
        source: SourceSettings,
        target: S3TargetSettings,
        mapping: TableMapping,
        options: TaskOptions,
        put_object: PutObject,
        delete_prefix: DeletePrefix | None = None,
    ) -> None:
        self.migration_type = migration_type
        self.source_settings = source
        self.target = target
        self.mapping = mapping
        self.options = options
        self.put_object = put_object
        self.delete_prefix = delete_prefix
        self._reloads: list[str] = []
        self._reloads_lock = threading.Lock()
        self.status = "ready"
        self.stop_reason: str | None = None
        self.last_failure_message: str | None = None
        self.full_load_percent = 0
        self.tables_loaded = self.tables_loading = self.tables_queued = self.tables_errored = 0
        self.start_date: datetime | None = None
        self.fresh_start_date: datetime | None = None
        self.stop_date: datetime | None = None
        self.full_load_start: datetime | None = None
        self.full_load_finish: datetime | None = None
        self.table_statistics: dict[str, TableStatistics] = {}
        self.flushed_seq: int | None = None  # CDC resumes after this
        self.captured_at: float | None = None  # wall clock of the capture's last read of the source
        self.pending_since: float | None = None  # wall clock since which changes wait to be written
        self.full_load_done = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_cdc_name: dict[str, str] = {}
        self._load_counters: dict[str, int] = {}

    # lifecycle -----------------------------------------------------------------------------------------
    def start(self, start_type: str = "start-replication") -> None:
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError("the replication task is already running")
        if start_type == "reload-target" or self.start_date is None:
            self.full_load_done = False
            self.flushed_seq = None
            self.fresh_start_date = datetime.now(UTC)
        self.status = "starting"
        self.stop_reason = self.last_failure_message = None
        self.stop_date = None
        self.start_date = datetime.now(UTC)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="dms-replication", daemon=True)
        self._thread.start()

    def stop(self, wait: bool = True) -> None:
        if self._thread is None or not self._thread.is_alive():
            raise RuntimeError("the replication task is not running")
        self.status = "stopping"
        self._stop.set()
        if wait:
            self._thread.join(timeout=60)

    def request_reload(self, tables: list[str]) -> None:
        """ReloadTables: reload these tables at the next capture cycle (the task keeps running)."""
        if self._thread is None or not self._thread.is_alive() or self.status != "running":
            raise RuntimeError("tables can be reloaded only while the task is running")
        if self.migration_type not in FULL_LOAD_TYPES:
            raise RuntimeError("tables can be reloaded only by a full-load or full-load-and-cdc task")
        with self._reloads_lock:
            self._reloads += [t for t in tables if t not in self._reloads]
        for table in tables:
            if table in self.table_statistics:
                self.table_statistics[table].state = "Queued for full load"

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def elapsed_millis(self) -> int:
        if self.start_date is None:
            return 0
        return int(((self.stop_date or datetime.now(UTC)) - self.start_date).total_seconds() * 1000)

    def _run(self) -> None:
        source: CaptureSource | None = None
        try:
            source = self.source_settings.open()
            tables = [t for t in source.tables() if self.mapping.selects(self.source_settings.schema, t)]
            if not tables:
                raise RuntimeError(
                    f"no source table of {self.source_settings.path} matches the table mappings"
                )
            capture_start = source.install_capture(tables, resume=self.flushed_seq is not None)
            if self.flushed_seq is None:
                self.flushed_seq = capture_start
            self.status = "running"
            if self.migration_type in FULL_LOAD_TYPES and not self.full_load_done:
                self._full_load(source, tables)
            if self.migration_type not in CDC_TYPES:
                self._finish("stopped", "Stop Reason FULL_LOAD_ONLY_FINISHED")
                return
            self._capture_changes(source, tables)
            self._finish("stopped", "Stop Reason NORMAL")
        except Exception as error:
            LOG.exception("replication task failed")
            self.last_failure_message = f"{type(error).__name__}: {error}"
            self.tables_errored = max(self.tables_errored, 1) if self.tables_loading else self.tables_errored
            self._finish("failed", "Stop Reason FATAL_ERROR")
        finally:
            _forget_position(source.path if source is not None else self.source_settings.path, id(self))
            if source is not None:
                source.close()

    def _finish(self, status: str, reason: str) -> None:
        self.stop_date = datetime.now(UTC)
        self.stop_reason = reason
        self.status = status

    # full load -----------------------------------------------------------------------------------------
    def _full_load(self, source: CaptureSource, tables: list[str]) -> None:
        schema = self.source_settings.schema
        self.full_load_start = datetime.now(UTC)
        row_counts = {table: source.count_rows(table) for table in tables}
        total_rows = sum(row_counts.values())
        loaded_rows = 0
        self.tables_queued, self.tables_loaded, self.full_load_percent = len(tables), 0, 0
        for table in tables:
            self.table_statistics[table] = TableStatistics(schema, table, state="Before load")
        for table in tables:
            if self._stop.is_set():
                return
            self.tables_queued -= 1
            self.tables_loading = 1
            statistics = self.table_statistics[table]
            statistics.state = "Full load"
            statistics.full_load_start = datetime.now(UTC)
            layout, change_rows = self._snapshot_rows(source, table)
            for file_rows in self._write_load_files(source, table, layout, change_rows):
                loaded_rows += file_rows
                if total_rows:
                    self.full_load_percent = min(99, loaded_rows * 100 // total_rows)
            statistics.full_load_rows = len(change_rows)
            statistics.state = "Table completed"
            statistics.last_update = statistics.full_load_end = datetime.now(UTC)
            self.tables_loading = 0
            self.tables_loaded += 1
        self.full_load_percent = 100
        self.full_load_finish = datetime.now(UTC)
        self.full_load_done = True

    def _file_bodies(
        self,
        source: CaptureSource,
        table: str,
        layout: FileLayout,
        rows: list[ChangeRow],
        max_rows: int | None,
    ) -> list[tuple[bytes, int]]:
        """(body, rows) of the files holding `rows`: CSV, or Parquet typed from the source's DDL."""
        if self.target.data_format == "parquet":
            from localaws_plugin.dms_parquet import parquet_files

            per_file = max_rows or len(rows) or 1
            bodies = parquet_files(layout, rows, self.target, source.declared_types(table), per_file)
            return [(body, min(per_file, len(rows) - i * per_file)) for i, body in enumerate(bodies)]
        header = 1 if self.target.add_column_name else 0
        return [
            (body.encode(), body.count(self.target.csv_row_delimiter) - header)
            for body in split_into_files(layout, rows, self.target, max_rows)
        ]

    def _snapshot_rows(self, source: CaptureSource, table: str) -> tuple[FileLayout, list[ChangeRow]]:
        """The table read in one snapshot: its full-load layout, and an `I` row per source row carrying the
        snapshot's change-log position (every later change has a higher one)."""
        snapshot_seq, columns, rows = source.snapshot(table)
        loaded_at = datetime.now(UTC).replace(tzinfo=None)
        layout = FileLayout(
            include_op=self.target.include_op_for_full_load,
            timestamp_column=self.target.timestamp_column_name,
            data_columns=tuple(columns),
            before_image_columns=self._before_image_columns(source, table, columns),
            added_columns=tuple(self.mapping.added_columns_for(self.source_settings.schema, table)),
        )
        return layout, [
            ChangeRow("I", snapshot_seq, loaded_at, dict(zip(columns, row, strict=True))) for row in rows
        ]

    def _write_load_files(
        self, source: CaptureSource, table: str, layout: FileLayout, rows: list[ChangeRow]
    ) -> Any:
        """Write LOAD files of `rows`, numbered on from the table's counter; yields each file's row count."""
        schema = self.source_settings.schema
        for body, count in self._file_bodies(
            source, table, layout, rows, self.options.max_rows_per_load_file
        ):
            self._load_counters[table] = self._load_counters.get(table, 0) + 1
            name = load_file_name(self._load_counters[table], self.target.extension)
            self.put_object(
                self.target.bucket_name, object_key(self.target.bucket_folder, schema, table, name), body
            )
            yield count

    def _reload_pending_tables(self, source: CaptureSource) -> None:
        with self._reloads_lock:
            tables, self._reloads = self._reloads, []
        schema = self.source_settings.schema
        for table in tables:
            statistics = self.table_statistics.setdefault(table, TableStatistics(schema, table))
            statistics.state = "Full load"
            statistics.full_load_start = datetime.now(UTC)
            statistics.full_load_end = None
            if self.delete_prefix is not None:  # TargetTablePrepMode DROP_AND_CREATE: the folder is emptied
                folder = object_key(self.target.bucket_folder, schema, table, "") + "/"
                self.delete_prefix(self.target.bucket_name, folder)
            self._load_counters[table] = 0
            self._last_cdc_name.pop(table, None)
            layout, change_rows = self._snapshot_rows(source, table)
            for _ in self._write_load_files(source, table, layout, change_rows):
                pass
            statistics.full_load_rows = len(change_rows)
            statistics.state = "Table completed"
            statistics.last_update = statistics.full_load_end = datetime.now(UTC)
            LOG.info("DMS reload: %s.%s reloaded, %d rows", schema, table, len(change_rows))

    def _before_image_columns(
        self, source: CaptureSource, table: str, columns: list[str] | tuple[str, ...]
    ) -> tuple[tuple[str, str], ...]:
        if self.mapping.before_image_prefix is None:
            return ()
        chosen = source.primary_key(table) if self.mapping.before_image_pk_only else list(columns)
        prefix, suffix = self.mapping.before_image_prefix, self.mapping.before_image_suffix
        return tuple((f"{prefix}{c}{suffix}", c) for c in chosen if c in columns)

    # change data capture -------------------------------------------------------------------------------
    def _capture_changes(self, source: CaptureSource, tables: list[str]) -> None:
        schema = self.source_settings.schema
        for table in tables:
            self.table_statistics.setdefault(table, TableStatistics(schema, table))
        position = self.flushed_seq or 0
        pending: list[CapturedChange] = []
        pending_bytes = 0
        oldest_pending: float | None = None
        interval = self.target.cdc_max_batch_interval_seconds
        min_bytes = self.target.cdc_min_file_size_kb * 1024
        beat = getattr(source, "heartbeat", None) if self.source_settings.heartbeat_schema else None
        beat_every = self.options.heartbeat_seconds or self.source_settings.heartbeat_seconds
        last_beat = time.monotonic()
        while True:
            stopping = self._stop.wait(self.options.poll_seconds)
            current = [t for t in source.tables() if self.mapping.selects(schema, t)]
            for table in source.refresh_triggers(current):
                self.table_statistics.setdefault(table, TableStatistics(schema, table))
                LOG.info("DMS capture: triggers of %s rebuilt for columns %s", table, source.columns(table))
            changes = source.changes_after(position)
            if changes:
                position = changes[-1].seq
                changes = self._delivered(source, changes)
            if changes:
                pending += [c for c in changes if c.table in self.table_statistics]
                pending_bytes += sum(len(str(c.values)) for c in changes)
                oldest_pending = oldest_pending or time.monotonic()
            due = oldest_pending is not None and (
                time.monotonic() - oldest_pending >= interval or pending_bytes >= min_bytes
            )
            with self._reloads_lock:
                reloading = bool(self._reloads)
            if pending and (due or stopping or reloading):
                self._write_cdc_files(source, pending)
                pending, pending_bytes, oldest_pending = [], 0, None
            self.captured_at = time.time()  # CDCLatencySource / CDCLatencyTarget (dms_provider)
            self.pending_since = (self.pending_since or self.captured_at) if pending else None
            if reloading and not stopping:
                self._reload_pending_tables(source)
            if not pending:
                self.flushed_seq = position
                _record_position_and_prune(source, id(self), position)
                if beat is not None and not stopping and time.monotonic() - last_beat >= beat_every:
                    beat()  # HeartbeatEnable: the slot moves on while the replicated tables are quiet
                    last_beat = time.monotonic()
            if stopping:
                return

    def _delivered(self, source: CaptureSource, changes: list[CapturedChange]) -> list[CapturedChange]:
        """The changes AWS DMS would deliver: those a source marks `lost` are dropped, each with a warning,
        unless the task is lenient."""
        if self.options.lenient:
            return changes
        kept = []
        for change in changes:
            if change.lost is None:
                kept.append(change)
            elif change.table in self.table_statistics:
                LOG.warning(
                    "DMS capture: %s of %s.%s at %s dropped, as AWS DMS drops it: %s (LOCALAWS_DMS_LENIENT=1"
                    " writes it)",
                    {"I": "INSERT", "U": "UPDATE", "D": "DELETE"}[change.op],
                    self.source_settings.schema,
                    change.table,
                    source.describe_position(change.seq),
                    change.lost,
                )
        return kept

    def _write_cdc_files(self, source: CaptureSource, changes: list[CapturedChange]) -> None:
        """One file per table and column set (a schema change starts a new file), in change order."""
        schema = self.source_settings.schema
        groups: dict[tuple[str, tuple[str, ...]], list[CapturedChange]] = {}
        for change in changes:
            groups.setdefault((change.table, tuple(change.values)), []).append(change)
        for (table, columns), group in sorted(groups.items(), key=lambda item: item[1][0].seq):
            layout = FileLayout(
                include_op=True,
                timestamp_column=self.target.timestamp_column_name,
                data_columns=columns,
                before_image_columns=self._before_image_columns(source, table, columns),
                added_columns=tuple(self.mapping.added_columns_for(schema, table)),
            )
            rows = [ChangeRow(c.op, c.seq, c.committed_at, c.values, c.before_image) for c in group]
            for body, _ in self._file_bodies(source, table, layout, rows, None):
                name = self._next_cdc_name(table)
                self.put_object(
                    self.target.bucket_name, object_key(self.target.bucket_folder, schema, table, name), body
                )
            statistics = self.table_statistics[table]
            statistics.inserts += sum(1 for c in group if c.op == "I")
            statistics.updates += sum(1 for c in group if c.op == "U")
            statistics.deletes += sum(1 for c in group if c.op == "D")
            statistics.last_update = datetime.now(UTC)
            if statistics.state != "Table completed":
                statistics.state = "Table completed"

    def _next_cdc_name(self, table: str) -> str:
        """Names by time, strictly increasing per table, so the files sort in change order."""
        moment = datetime.now(UTC).replace(tzinfo=None)
        name = cdc_file_name(moment, self.target.extension)
        while name <= self._last_cdc_name.get(table, ""):
            moment += timedelta(milliseconds=1)
            name = cdc_file_name(moment, self.target.extension)
        self._last_cdc_name[table] = name
        return name

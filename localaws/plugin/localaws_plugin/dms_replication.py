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

The run's settings are in `dms_task_settings`, its table statistics in `dms_table_statistics`, and the
writing of its files in `dms_target_files`.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime

from lake_contracts.dms_files import object_key

from localaws_plugin.dms_format import S3TargetSettings, TableMapping
from localaws_plugin.dms_sqlite import CapturedChange
from localaws_plugin.dms_table_statistics import TableStatistics
from localaws_plugin.dms_target_files import DeletePrefix, PutObject, TargetFileWriter
from localaws_plugin.dms_task_settings import CaptureSource, SourceSettings, TaskOptions

LOG = logging.getLogger(__name__)

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
CDC_TYPES = ("cdc", "full-load-and-cdc")


class ReplicationRun(TargetFileWriter):
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

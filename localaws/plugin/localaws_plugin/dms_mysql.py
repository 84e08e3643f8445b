"""Change capture on a MySQL or MariaDB source, the way DMS reads one: the binary log (ROW format, full images).

- The server must write `binlog_format=ROW` and `binlog_row_image=FULL` with a `server_id` (DMS's
  prerequisites); the task refuses a server that does not, naming the setting. `binlog_row_metadata=FULL`
  (MySQL 8.0.14+, MariaDB 10.5+) is needed too here: row events are decoded with the column names, signedness
  and ENUM/SET values their table map carries, so an event written before an ALTER TABLE keeps its columns.
- The full load reads every table in one consistent snapshot (`START TRANSACTION WITH CONSISTENT SNAPSHOT`)
  whose binlog position is taken with it (MariaDB's `binlog_snapshot_file/position`; on MySQL under a brief
  `FLUSH TABLES WITH READ LOCK`); CDC reads the binlog from that position: a transaction committed before it is
  in the LOAD files, a later one in the CDC stream, none in both or neither. A reload reads its table in a new
  snapshot at its own position.
- One binlog connection (a replica's `COM_BINLOG_DUMP`, as DMS's) stays open while the task runs, read by a
  thread of its own. Changes come out per committed transaction (the XID event); a transaction half read when
  the connection breaks (a killed dump thread, a server restart) is thrown away and the connection opened again
  at the end of the last whole transaction: nothing lost, nothing twice.
- `AR_H_CHANGE_SEQ` derives from the binlog position: the number of the binlog file, the position just after the
  transaction's commit in it, then an 8-digit ordinal of the change within the transaction. LOAD rows carry the
  snapshot's position with ordinal 0. A restarted task resumes from the position its sequence names.
- Values are spelled alike in LOAD and CDC files (both go through `dms_text`): DECIMAL with its scale's digits
  (DECIMAL(65,30) whole), unsigned BIGINT in full (above 2^63 - 1 too), TINYINT(1) and BIT(1) as 0/1, BIT(n) as
  its unsigned integer, ENUM as its label, SET as its labels in definition order joined by commas, JSON as its
  text, DATETIME as stored (no time zone), TIMESTAMP in UTC (whatever the writer's session time zone), with
  the column's fractional digits, TIME as `[-]HH:MM:SS[.ffffff]`, BLOB/BINARY as upper-case hex digits. A zero
  or partly zero date (`0000-00-00`, `2026-00-00 …`), which no date type holds, is written NULL.
- What AWS DMS does not replicate from MySQL is not written here either, each with a warning naming table and
  position: TRUNCATE TABLE (a statement, no row events) and partition maintenance that removes rows
  (`ALTER TABLE … TRUNCATE|DROP|REORGANIZE … PARTITION`). Rows changed by a foreign key's ON DELETE/UPDATE
  CASCADE are not in the binlog at all, so they are missed as DMS misses them. DDL otherwise takes effect: a
  column added mid-stream appears in the next CDC file of its table.

This module holds the endpoint's settings and the source (its catalog, the full load's snapshot, the capture
interface a replication run calls); values are spelled in `dms_mysql_values`, the binlog read in
`dms_mysql_binlog`.
"""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass, field
from typing import Any

from localaws_plugin.dms_mysql_binlog import (
    HEARTBEAT_TABLE,
    BinlogReader,
    change_seq,
    file_number,
    position_of,
)
from localaws_plugin.dms_mysql_values import ColumnKind, dms_text, standard_type
from localaws_plugin.dms_sqlite import CapturedChange, SourceError

LOG = logging.getLogger(__name__)

REQUIRED = {"binlog_format": "ROW", "binlog_row_image": "FULL"}


def _quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


# settings and the source -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MysqlSettings:
    """The endpoint: ServerName (a host, or a local server's Unix socket path), Port, Username, Password, and
    the database replicated (DMS's schema: the files' schema folder)."""

    host: str
    port: int
    user: str
    password: str | None
    database: str
    server_id: int = field(default_factory=lambda: random.randint(100_000, 4_000_000_000))

    def connect_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "user": self.user,
            "password": self.password or "",
            "autocommit": True,
            "charset": "utf8mb4",
        }
        if self.host.startswith("/"):
            kwargs["unix_socket"] = self.host
        else:
            kwargs |= {"host": self.host, "port": self.port}
        return kwargs

    @property
    def identity(self) -> str:
        return f"mysql://{self.host}:{self.port}/{self.database}"


class MysqlSource:
    """The same interface as `SqliteSource` and `PostgresSource`, over the binlog (see the module docstring)."""

    def __init__(self, settings: MysqlSettings) -> None:
        import pymysql

        self.settings = settings
        self.path = settings.identity  # the key of this capture's positions (dms_replication)
        try:
            self.connection = pymysql.connect(**settings.connect_kwargs())
            with self.connection.cursor() as cursor:
                cursor.execute("SET time_zone = '+00:00'")
                cursor.execute(
                    "SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@server_id, @@log_bin_basename"
                )
                log_bin, binlog_format, row_image, server_id, basename = cursor.fetchone()
                cursor.execute("SHOW VARIABLES LIKE 'binlog_row_metadata'")
                metadata = (cursor.fetchone() or ("", "unsupported"))[1]
        except pymysql.Error as error:
            raise SourceError(f"cannot connect to the MySQL source {settings.identity}: {error}") from error
        problems = []
        if not log_bin:
            problems.append("log_bin is off (the binary log must be on)")
        for name, found in (("binlog_format", binlog_format), ("binlog_row_image", row_image)):
            if str(found).upper() != REQUIRED[name]:
                problems.append(f"{name}={found} (DMS needs {REQUIRED[name]})")
        if not server_id:
            problems.append("server_id is 0 (DMS needs 1 or more)")
        if str(metadata).upper() != "FULL":
            problems.append(
                f"binlog_row_metadata={metadata} (the local DMS decodes a row event with the columns its table"
                " map names: FULL, MySQL 8.0.14+ or MariaDB 10.5+)"
            )
        if problems:
            raise SourceError(
                f"the MySQL source {settings.identity} can't be captured: " + "; ".join(problems)
            )
        self._basename = str(basename).rsplit("/", 1)[-1]
        self._snapshot: Any = None  # the full load's connection, in its consistent-snapshot transaction
        self._snapshot_seq: int | None = None
        self._kinds: dict[str, dict[str, ColumnKind]] = {}
        self._known_columns: dict[str, list[str]] = {}
        self._reader: BinlogReader | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._reader is not None:
            self._reader.stop()
            self._reader = None
        self._release_snapshot()
        self.connection.close()

    def _query(self, sql: str, args: Any = None) -> list[tuple]:
        with self._lock, self.connection.cursor() as cursor:  # the binlog thread reads the catalog too
            cursor.execute(sql, args)
            return list(cursor.fetchall())

    # catalog -------------------------------------------------------------------------------------------
    def tables(self) -> list[str]:
        rows = self._query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
            " AND table_type = 'BASE TABLE' AND table_name <> %s ORDER BY table_name",
            (self.settings.database, HEARTBEAT_TABLE),
        )
        return [name for (name,) in rows]

    def _catalog(self, table: str) -> list[tuple[str, str, str, int | None]]:
        rows = self._query(
            "SELECT column_name, data_type, column_type, datetime_precision FROM information_schema.columns"
            " WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
            (self.settings.database, table),
        )
        if not rows:
            raise SourceError(f"table {self.settings.database}.{table} not found in {self.settings.identity}")
        return rows

    def columns(self, table: str) -> list[str]:
        return [name for name, *_ in self._catalog(table)]

    def declared_types(self, table: str) -> dict[str, str]:
        return {
            name: standard_type(data_type, column_type)
            for name, data_type, column_type, _ in self._catalog(table)
        }

    def kinds(self, table: str, refresh: bool = False) -> dict[str, ColumnKind]:
        if refresh or table not in self._kinds:
            self._kinds[table] = {
                name: ColumnKind.from_catalog(data_type, column_type, precision)
                for name, data_type, column_type, precision in self._catalog(table)
            }
        return self._kinds[table]

    def primary_key(self, table: str) -> list[str]:
        rows = self._query(
            "SELECT column_name FROM information_schema.key_column_usage WHERE table_schema = %s"
            " AND table_name = %s AND constraint_name = 'PRIMARY' ORDER BY ordinal_position",
            (self.settings.database, table),
        )
        return [name for (name,) in rows]

    def count_rows(self, table: str) -> int:
        ((count,),) = self._query(f"SELECT count(*) FROM {_quote(self.settings.database)}.{_quote(table)}")
        return int(count)

    def last_seq(self) -> int:
        log_file, position, *_ = self._query("SHOW MASTER STATUS")[0]
        return change_seq(file_number(log_file), int(position), 0)

    # capture -------------------------------------------------------------------------------------------
    def install_capture(self, tables: list[str], resume: bool = False) -> int:
        """A fresh start opens the full load's consistent snapshot and returns its binlog position; a resume
        returns the oldest position the server still has (the run resumes from its own, later one)."""
        if resume:
            first = self._query("SHOW BINARY LOGS")[0]
            return change_seq(file_number(first[0]), 4, 0)
        self._snapshot, self._snapshot_seq = self._open_snapshot()
        LOG.info("DMS capture: MySQL snapshot at %s", self.describe_position(self._snapshot_seq))
        return self._snapshot_seq

    def _open_snapshot(self) -> tuple[Any, int]:
        """A connection in a REPEATABLE READ transaction WITH CONSISTENT SNAPSHOT, and the snapshot's binlog
        position: MariaDB reports it with the snapshot; MySQL's is taken under FLUSH TABLES WITH READ LOCK."""
        import pymysql

        reader = pymysql.connect(**self.settings.connect_kwargs())
        with reader.cursor() as cursor:
            cursor.execute("SET time_zone = '+00:00'")
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            mariadb = bool(cursor.fetchall())
            if mariadb:
                cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
                cursor.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
                status = {name.lower(): value for name, value in cursor.fetchall()}
                log_file, position = status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])
            else:
                cursor.execute("FLUSH TABLES WITH READ LOCK")
                try:
                    cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
                    cursor.execute("SHOW MASTER STATUS")
                    log_file, position, *_ = cursor.fetchone()
                finally:
                    cursor.execute("UNLOCK TABLES")
        return reader, change_seq(file_number(log_file), int(position), 0)

    def _release_snapshot(self) -> None:
        if self._snapshot is not None:
            try:
                self._snapshot.close()
            finally:
                self._snapshot = None

    def refresh_triggers(self, tables: list[str]) -> list[str]:
        """No triggers (the binlog has every column); the tables whose columns changed or that are new since
        the last call, as the SQLite capture reports them."""
        changed = []
        for table in tables:
            columns = self.columns(table)
            if self._known_columns.get(table) != columns:
                changed.append(table)
                self._known_columns[table] = columns
                self._kinds.pop(table, None)
        return changed

    def snapshot(self, table: str, batch_size: int = 10000) -> tuple[int, list[str], list[tuple]]:
        """The table read in a snapshot consistent with the binlog position returned: the full load's, or for
        a reload one of its own."""
        if self._snapshot is not None and self._snapshot_seq is not None:
            reader, seq, own = self._snapshot, self._snapshot_seq, False
        else:
            (reader, seq), own = self._open_snapshot(), True
        try:
            kinds = self.kinds(table, refresh=True)
            columns = list(kinds)
            # a FLOAT as the double it widens to: the server's text of a FLOAT has 6 significant digits
            select = ", ".join(
                f"{_quote(c)} + 0" if kinds[c].data_type == "float" else _quote(c) for c in columns
            )
            rows: list[tuple] = []
            with reader.cursor() as cursor:
                cursor.execute(f"SELECT {select} FROM {_quote(self.settings.database)}.{_quote(table)}")
                while batch := cursor.fetchmany(batch_size):
                    rows.extend(
                        tuple(dms_text(v, kinds[c]) for c, v in zip(columns, row, strict=True))
                        for row in batch
                    )
        finally:
            if own:
                reader.close()
        return seq, columns, rows

    def changes_after(self, seq: int, limit: int = 50000) -> list[CapturedChange]:
        """The changes after `seq`, whole transactions in commit order (about `limit` changes at most)."""
        self._release_snapshot()  # the full load is over once the stream is read
        if self._reader is None or self._reader.failed is not None:
            if self._reader is not None:
                failure = self._reader.failed
                self._reader = None
                raise SourceError(f"the binlog reader of {self.settings.identity} failed: {failure}")
            number, position = position_of(seq)
            self._reader = BinlogReader(self, f"{self._basename}.{number:06d}", max(position, 4))
            self._reader.start()
        changes: list[CapturedChange] = []
        for change in self._reader.take(limit):
            if change.seq > seq:
                changes.append(change)
        return changes

    @property
    def reconnects(self) -> int:
        """How often the binlog connection was opened again after it broke (tests, logs)."""
        return self._reader.reconnects if self._reader is not None else 0

    def describe_position(self, seq: int) -> str:
        number, position = position_of(seq)
        return f"binlog {self._basename}.{number:06d}:{position}"

    def prune(self, up_to_seq: int) -> None:
        """Nothing to confirm to the server: the binlog is the server's (its expiry is the DBA's: keep it
        longer than the task may stay stopped); the run resumes from its own position."""

    def drop_capture(self) -> None:
        """Nothing is left on the server by a capture (no slot)."""

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
"""

from __future__ import annotations

import contextlib
import logging
import queue
import random
import re
import struct
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from localaws_plugin.dms_sqlite import CapturedChange, SourceError

LOG = logging.getLogger(__name__)

ORDINAL_DIGITS = 8
ORDINAL_SPAN = 10**ORDINAL_DIGITS
HEARTBEAT_TABLE = "awsdms_heartbeat"
REQUIRED = {"binlog_format": "ROW", "binlog_row_image": "FULL"}
DATE_TYPES = ("date", "datetime", "timestamp")
BINARY_TYPES = ("binary", "varbinary", "blob", "tinyblob", "mediumblob", "longblob")
_DROPPED_DDL = re.compile(
    r"^\s*(?:truncate\s+(?:table\s+)?(?P<truncated>\S+)"
    r"|alter\s+(?:online\s+|ignore\s+)*table\s+(?P<altered>\S+)\s+.*\b(?:truncate|drop|reorganize|exchange)"
    r"\s+partition\b)",
    re.IGNORECASE | re.DOTALL,
)


def change_seq(file_number: int, position: int, ordinal: int) -> int:
    """The change sequence of the `ordinal`-th change (1-based) of the transaction whose commit ends at
    `position` of binlog file number `file_number`; ordinal 0 is a snapshot taken at that position."""
    if not 0 <= ordinal < ORDINAL_SPAN:
        raise SourceError(f"a transaction with more than {ORDINAL_SPAN - 1} changes is not supported")
    return ((file_number << 32) | position) * ORDINAL_SPAN + ordinal


def position_of(seq: int) -> tuple[int, int]:
    """(binlog file number, position) a change sequence names."""
    packed = seq // ORDINAL_SPAN
    return packed >> 32, packed & 0xFFFFFFFF


def file_number(log_file: str) -> int:
    """`binlog.000042` → 42."""
    suffix = log_file.rsplit(".", 1)[-1]
    if not suffix.isdigit():
        raise SourceError(f"binlog file {log_file!r} has no numeric suffix")
    return int(suffix)


def _quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


# values ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ColumnKind:
    """What spelling a column's values need: its DATA_TYPE, fractional digits, SET labels in order, a
    BINARY(n)'s length n."""

    data_type: str
    fraction_digits: int = 0
    members: tuple[str, ...] = ()
    length: int = 0

    @classmethod
    def from_catalog(cls, data_type: str, column_type: str, precision: int | None) -> ColumnKind:
        members: tuple[str, ...] = ()
        if data_type.lower() == "set":
            members = tuple(m.replace("''", "'") for m in re.findall(r"'((?:[^']|'')*)'", column_type))
        length = re.fullmatch(r"\s*binary\((\d+)\)\s*", column_type.lower())
        return cls(data_type.lower(), int(precision or 0), members, int(length[1]) if length else 0)


def float_text(value: float) -> str:
    """A FLOAT (single precision) in the fewest significant digits that read back as the same single: the
    server's own text of a FLOAT has 6 (16777216 is `1.67772e+07`), too few to hold it."""
    single = struct.unpack("<f", struct.pack("<f", value))[0]
    for digits in range(6, 9):
        text = f"{single:.{digits}g}"
        if struct.unpack("<f", struct.pack("<f", float(text)))[0] == single:
            return text
    return f"{single:.9g}"  # 9 significant digits always read back as the same single


def _fraction(micro: int, digits: int) -> str:
    return f".{micro:06d}"[: digits + 1] if digits else ""


def dms_text(value: Any, kind: ColumnKind) -> str | None:
    """A value as the local DMS writes it for a MySQL source, from either path (pymysql's full-load value or
    the binlog decoder's): None for NULL and for dates no date type holds."""
    if value is None:
        return None
    data_type = kind.data_type
    if data_type in DATE_TYPES:
        if isinstance(value, str | bytes):  # pymysql hands back what it can't parse: zero dates
            return None
        if isinstance(value, datetime):
            if data_type == "timestamp" and value == datetime(1970, 1, 1):  # the zero TIMESTAMP (epoch 0)
                return None
            text = value.strftime("%Y-%m-%d %H:%M:%S")
            return (
                (text + _fraction(value.microsecond, kind.fraction_digits))
                if data_type != "date"
                else text[:10]
            )
        if isinstance(value, date):
            return value.isoformat()
    if data_type == "time" and isinstance(value, timedelta):
        sign = "-" if value < timedelta(0) else ""
        micros = abs(value) // timedelta(microseconds=1)
        seconds, micro = divmod(micros, 1_000_000)
        hours, rest = divmod(seconds, 3600)
        return f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}{_fraction(micro, kind.fraction_digits)}"
    if data_type == "bit":
        if isinstance(value, bytes):
            return str(int.from_bytes(value, "big"))
        if isinstance(value, str):
            return str(int(value, 2))  # the binlog decoder's '0101'
        return str(int(value))
    if data_type == "year":  # 1901..2155, or 0000 (which the binlog decoder reads as 1900)
        year = int(value)
        return "0000" if year in (0, 1900) else f"{year:04d}"
    if data_type == "set":
        labels = set(value.split(",")) if isinstance(value, str) else set(value)
        labels.discard("")
        ordered = [m for m in kind.members if m in labels] if kind.members else sorted(labels)
        return ",".join(ordered)
    if data_type in BINARY_TYPES:
        raw = value if isinstance(value, bytes) else str(value).encode("latin-1")
        # a BINARY(n) holds n bytes, zero-padded; the binlog's row image drops the trailing zeros
        return raw.ljust(kind.length, b"\x00").hex().upper()
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return float_text(value) if data_type == "float" else repr(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def standard_type(data_type: str, column_type: str) -> str:
    """A MySQL column type in the SQL-standard spelling the Parquet writer maps (dms_parquet.arrow_type)."""
    name, text = data_type.lower(), column_type.lower()
    unsigned = "unsigned" in text
    if (name == "tinyint" and text.startswith("tinyint(1)")) or (name == "bit" and text == "bit(1)"):
        return "BOOLEAN"
    if name == "bigint":
        return "NUMERIC(20,0)" if unsigned else "BIGINT"
    if name == "bit":
        return "BIGINT"
    if name in ("int", "integer"):
        return "BIGINT" if unsigned else "INTEGER"
    if name in ("tinyint", "smallint", "mediumint"):
        return "INTEGER"
    if name in ("decimal", "numeric"):
        match = re.search(r"\((\d+)(?:,(\d+))?\)", text)
        precision, scale = (int(match.group(1)), int(match.group(2) or 0)) if match else (10, 0)
        return f"NUMERIC({precision},{scale})" if precision <= 38 else "VARCHAR"
    if name in ("float", "double", "real"):
        return "DOUBLE"
    if name in ("datetime", "timestamp"):
        return "TIMESTAMP"
    if name == "date":
        return "DATE"
    if name in BINARY_TYPES:
        return "BLOB"
    return "VARCHAR"


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


@dataclass
class _Transaction:
    changes: list[tuple[str, str, dict[str, Any], dict[str, Any] | None, Any]] = field(default_factory=list)


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
        self._reader: _BinlogReader | None = None
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
            self._reader = _BinlogReader(self, f"{self._basename}.{number:06d}", max(position, 4))
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


def _time2(self: Any, column: Any) -> timedelta:
    """MySQL's TIME2 binlog value, decoded as the server does (`my_time_packed_from_binary`): 3 bytes of
    h:m:s offset by 0x800000, then the fraction, which for a negative time is stored as its complement.
    mysql-replication 1.0.17 reads a negative time with a fraction wrongly (`-838:59:59.99` as `…59.01`)."""
    fsp = getattr(column, "fsp", 0) or 0
    raw = self.packet.read(3 + (fsp + 1) // 2)
    if fsp >= 5:
        packed = int.from_bytes(raw[:6], "big") - 0x800000000000
    else:
        intpart = int.from_bytes(raw[:3], "big") - 0x800000
        frac = int.from_bytes(raw[3:], "big") if fsp else 0
        span = 1 << (8 * len(raw[3:]))
        if intpart < 0 and frac:
            intpart, frac = intpart + 1, frac - span
        packed = (intpart << 24) + frac * (10000 if fsp <= 2 else 100)
    sign, packed = (-1, -packed) if packed < 0 else (1, packed)
    hms, micro = packed >> 24, packed % (1 << 24)
    hours, minutes, seconds = (hms >> 12) % (1 << 10), (hms >> 6) % (1 << 6), hms % (1 << 6)
    return sign * timedelta(hours=hours, minutes=minutes, seconds=seconds, microseconds=micro)


def _with_empty_sets(values: dict[str, Any], none_sources: dict[str, Any] | None) -> dict[str, Any]:
    """The decoder hands an empty SET over as None (naming why in `none_sources`): the empty set, not NULL."""
    if not none_sources:
        return values
    return {c: (set() if v is None and none_sources.get(c) == "empty set" else v) for c, v in values.items()}


def _patch_decoder() -> None:
    """Our TIME2 decoder in place of mysql-replication's (see `_time2`)."""
    from pymysqlreplication.row_event import RowsEvent

    RowsEvent._RowsEvent__read_time2 = _time2  # type: ignore[attr-defined]


class _BinlogReader:
    """One binlog connection read by a thread: whole transactions into a queue of `CapturedChange`."""

    def __init__(self, source: MysqlSource, log_file: str, position: int) -> None:
        self.source = source
        self.settings = source.settings
        self.log_file, self.position = log_file, position  # the end of the last whole transaction
        self.queue: queue.Queue[list[CapturedChange]] = queue.Queue()  # one item per transaction
        self.reconnects = 0
        self.failed: str | None = None
        self._stop = threading.Event()
        self._stream: Any = None
        self._thread = threading.Thread(target=self._run, name="dms-binlog", daemon=True)
        self._warned: set[tuple[str, int]] = set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            with contextlib.suppress(Exception):  # the reader thread may be closing it too
                stream.close()
        self._thread.join(timeout=10)

    def take(self, limit: int) -> list[CapturedChange]:
        taken: list[CapturedChange] = []
        while len(taken) < limit:
            try:
                taken += self.queue.get_nowait()
            except queue.Empty:
                break
        return taken

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            at = (self.log_file, self.position)
            try:
                self._read_stream()
                failures = 0
            except Exception as error:  # a broken connection: open it again at the position
                if self._stop.is_set():
                    return
                failures = (
                    1 if (self.log_file, self.position) != at else failures + 1
                )  # in a row, no progress
                if failures > 20:
                    self.failed = f"{type(error).__name__}: {error}"
                    LOG.error(
                        "DMS capture: binlog reader gave up at %s:%d: %s", self.log_file, self.position, error
                    )
                    return
                LOG.warning(
                    "DMS capture: binlog connection lost (%s: %s); reading again from %s:%d",
                    type(error).__name__,
                    error,
                    self.log_file,
                    self.position,
                )
                time.sleep(min(2.0, 0.1 * failures))
            if not self._stop.is_set():
                self.reconnects += 1

    def _open(self) -> Any:
        _patch_decoder()
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import QueryEvent, RotateEvent, XidEvent
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

        return BinLogStreamReader(
            connection_settings=self.settings.connect_kwargs() | {"autocommit": True},
            server_id=self.settings.server_id,
            log_file=self.log_file,
            log_pos=self.position,
            resume_stream=True,
            blocking=True,
            only_events=[RotateEvent, QueryEvent, XidEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
            slave_heartbeat=1,
            enable_logging=False,
        )

    def _read_stream(self) -> None:
        """Read until the connection breaks or the reader stops. A second fake rotate (pymysqlreplication's
        own reconnect) or an error in a transaction drops that transaction; the caller opens the stream
        again at the end of the last whole one."""
        from pymysqlreplication.event import QueryEvent, RotateEvent, XidEvent
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

        stream = self._stream = self._open()
        current_file = self.log_file
        transaction: _Transaction | None = None
        fake_rotates = 0
        try:
            for event in stream:
                if self._stop.is_set():
                    return
                if isinstance(event, RotateEvent):
                    if event.timestamp == 0:
                        fake_rotates += 1
                        if fake_rotates > 1:  # the library reconnected by itself, maybe mid-transaction
                            raise ConnectionError("the binlog stream was reconnected by the library")
                    current_file = event.next_binlog
                    if transaction is None:
                        self.log_file, self.position = current_file, int(event.position)
                    continue
                end = int(event.packet.log_pos)
                if isinstance(event, QueryEvent):
                    query = (
                        event.query.decode(errors="replace")
                        if isinstance(event.query, bytes)
                        else event.query
                    )
                    statement = query.strip().upper()
                    if statement == "BEGIN":
                        transaction = _Transaction()
                        continue
                    if statement == "COMMIT" and transaction is not None:  # a non-transactional engine's
                        self._commit(transaction, current_file, end, event.timestamp)
                        transaction = None
                        continue
                    self._ddl(event, query, current_file, end)
                    if transaction is None:
                        self.log_file, self.position = current_file, end
                    continue
                if isinstance(event, XidEvent):
                    if transaction is not None:
                        self._commit(transaction, current_file, end, event.timestamp)
                    else:
                        self.log_file, self.position = current_file, end
                    transaction = None
                    continue
                if isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
                    if event.schema != self.settings.database or event.table == HEARTBEAT_TABLE:
                        continue
                    if transaction is None:  # a row event outside BEGIN … COMMIT: its own transaction
                        transaction = _Transaction()
                    op = {WriteRowsEvent: "I", UpdateRowsEvent: "U", DeleteRowsEvent: "D"}[type(event)]
                    for row in event.rows:
                        if op == "U":
                            after = _with_empty_sets(row["after_values"], row.get("after_none_sources"))
                            before = _with_empty_sets(row["before_values"], row.get("before_none_sources"))
                            transaction.changes.append((event.table, op, after, before, event))
                        else:
                            values = _with_empty_sets(row["values"], row.get("none_sources"))
                            transaction.changes.append((event.table, op, values, None, event))
        finally:
            self._stream = None
            stream.close()

    def _commit(self, transaction: _Transaction, log_file: str, end: int, timestamp: int) -> None:
        number = file_number(log_file)
        committed_at = datetime.fromtimestamp(timestamp, UTC).replace(tzinfo=None)
        changes: list[CapturedChange] = []
        for ordinal, (table, op, values, before, _event) in enumerate(transaction.changes, start=1):
            kinds = self.source.kinds(table)
            if any(column not in kinds for column in values):
                kinds = self.source.kinds(table, refresh=True)
            text = {c: dms_text(v, kinds.get(c, ColumnKind("varchar"))) for c, v in values.items()}
            seq = change_seq(number, end, ordinal)
            if op == "D":
                changes.append(CapturedChange(seq, table, "D", committed_at, text, text))
            elif op == "I":
                changes.append(CapturedChange(seq, table, "I", committed_at, text, {}))
            else:
                old = {c: dms_text(v, kinds.get(c, ColumnKind("varchar"))) for c, v in (before or {}).items()}
                changes.append(CapturedChange(seq, table, "U", committed_at, text, old))
        if changes:
            self.queue.put(changes)
        self.log_file, self.position = log_file, end

    def _ddl(self, event: Any, query: str, log_file: str, end: int) -> None:
        match = _DROPPED_DDL.match(query)
        if not match:
            return
        name = (match.group("truncated") or match.group("altered") or "").strip("`;")
        schema, _, table = name.rpartition(".")
        schema = schema.strip("`") or (
            event.schema.decode() if isinstance(event.schema, bytes) else event.schema
        )
        if schema != self.settings.database or (log_file, end) in self._warned:
            return
        self._warned.add((log_file, end))
        LOG.warning(
            "DMS capture: %s at binlog %s:%d dropped, as AWS DMS drops it from a MySQL source (no row events):"
            " the lake keeps the rows; reload the table %s.%s",
            query.split()[0].upper() + (" PARTITION" if match.group("altered") else ""),
            log_file,
            end,
            schema,
            table.strip("`"),
        )

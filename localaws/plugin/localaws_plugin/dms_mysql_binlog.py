"""The binary log of a MySQL or MariaDB source read as DMS reads it: its positions, and the thread reading it.

- `AR_H_CHANGE_SEQ` derives from the binlog position (`change_seq`): the number of the binlog file, the
  position just after the transaction's commit in it, then an 8-digit ordinal of the change within the
  transaction.
- One binlog connection (a replica's `COM_BINLOG_DUMP`) is read by a thread of its own (`BinlogReader`).
  Changes come out per committed transaction (the XID event) as `CapturedChange`s, their values spelled by
  `dms_text`; a transaction half read when the connection breaks is thrown away and the connection opened
  again at the end of the last whole transaction.
- Statements that remove rows without row events (TRUNCATE TABLE, partition maintenance) are not written,
  each with a warning naming table and position, as AWS DMS does not replicate them.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from localaws_plugin.dms_mysql_values import ColumnKind, dms_text
from localaws_plugin.dms_sqlite import CapturedChange, SourceError

if TYPE_CHECKING:
    from localaws_plugin.dms_mysql import MysqlSource

LOG = logging.getLogger(__name__)

ORDINAL_DIGITS = 8
ORDINAL_SPAN = 10**ORDINAL_DIGITS
HEARTBEAT_TABLE = "awsdms_heartbeat"
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


@dataclass
class _Transaction:
    changes: list[tuple[str, str, dict[str, Any], dict[str, Any] | None, Any]] = field(default_factory=list)


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

    RowsEvent._RowsEvent__read_time2 = _time2


class BinlogReader:
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

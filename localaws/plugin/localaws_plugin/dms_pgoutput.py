"""PostgreSQL's logical replication messages (the pgoutput plugin, protocol version 1) decoded in Python.

`decode_message` turns one message of `pg_logical_slot_peek_binary_changes` into a `Relation` (a table's
columns, key and replica identity), `Begin`, `Commit`, `RowChange` (an INSERT, UPDATE or DELETE as text
values, `UNCHANGED` for a TOASTed value the WAL does not carry) or `Truncate`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from localaws_plugin.dms_sqlite import SourceError

POSTGRES_EPOCH = datetime(2000, 1, 1)
PROTO_VERSION = "1"

# pgoutput, protocol version 1 (https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html)


@dataclass(frozen=True)
class Relation:
    oid: int
    schema: str
    table: str
    replica_identity: str  # d(efault), n(othing), f(ull), i(ndex)
    columns: tuple[str, ...]
    key_columns: tuple[str, ...]
    type_oids: tuple[int, ...]


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    commit_time: datetime
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int


@dataclass(frozen=True)
class RowChange:
    op: str  # I, U, D
    relation_oid: int
    new: tuple[Any, ...] | None  # text values, None for NULL, UNCHANGED for an unchanged TOASTed value
    old: tuple[Any, ...] | None
    old_is_key_only: bool


@dataclass(frozen=True)
class Truncate:
    relation_oids: tuple[int, ...]


class _Unchanged:
    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED = _Unchanged()


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> Any:
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return values[0] if len(values) == 1 else values

    def string(self) -> str:
        end = self.data.index(b"\0", self.at)
        text = self.data[self.at : end].decode()
        self.at = end + 1
        return text

    def tuple_data(self) -> tuple[Any, ...]:
        values: list[Any] = []
        for _ in range(self.take("!H")):
            kind = self.take("!c")
            if kind == b"n":
                values.append(None)
            elif kind == b"u":
                values.append(UNCHANGED)
            elif kind in (b"t", b"b"):
                length = self.take("!I")
                raw = self.data[self.at : self.at + length]
                self.at += length
                values.append(raw.decode() if kind == b"t" else bytes(raw))
            else:
                raise SourceError(f"pgoutput: unknown tuple value kind {kind!r}")
        return tuple(values)


def decode_message(data: bytes) -> Relation | Begin | Commit | RowChange | Truncate | None:
    """One pgoutput message; None for those the capture does not need (origin, type, logical message)."""
    reader = _Reader(bytes(data))
    kind = reader.take("!c")
    if kind == b"B":
        final_lsn, micros, xid = reader.take("!QqI")
        return Begin(final_lsn, POSTGRES_EPOCH + timedelta(microseconds=micros), xid)
    if kind == b"C":
        _flags, commit_lsn, end_lsn, _micros = reader.take("!BQQq")
        return Commit(commit_lsn, end_lsn)
    if kind == b"R":
        oid = reader.take("!I")
        schema, table = reader.string(), reader.string()
        identity = reader.take("!c").decode()
        columns, keys, types = [], [], []
        for _ in range(reader.take("!H")):
            flags = reader.take("!B")
            name = reader.string()
            type_oid, _modifier = reader.take("!Ii")
            columns.append(name)
            types.append(type_oid)
            if flags & 1:
                keys.append(name)
        return Relation(oid, schema, table, identity, tuple(columns), tuple(keys), tuple(types))
    if kind == b"I":
        oid = reader.take("!I")
        reader.take("!c")  # N
        return RowChange("I", oid, reader.tuple_data(), None, False)
    if kind == b"U":
        oid = reader.take("!I")
        marker = reader.take("!c")
        old, key_only = None, False
        if marker in (b"K", b"O"):
            old, key_only = reader.tuple_data(), marker == b"K"
            marker = reader.take("!c")
        if marker != b"N":
            raise SourceError(f"pgoutput: UPDATE without a new tuple ({marker!r})")
        return RowChange("U", oid, reader.tuple_data(), old, key_only)
    if kind == b"D":
        oid = reader.take("!I")
        marker = reader.take("!c")
        return RowChange("D", oid, None, reader.tuple_data(), marker == b"K")
    if kind == b"T":
        count = reader.take("!I")
        reader.take("!B")
        return Truncate(tuple(reader.take("!I") for _ in range(count)))
    return None

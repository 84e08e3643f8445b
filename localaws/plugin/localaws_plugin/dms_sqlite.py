"""Change capture on an SQLite source: triggers write every change into a change-log table in the same file.

The triggers record op, commit time and the row as JSON (the new image; the old one for deletes, and the old
one as before-image for updates). Sequence numbers come from an AUTOINCREMENT key: monotonic, never reused.
Triggers name the columns they copy, so after `ALTER TABLE … ADD COLUMN` they are rebuilt (the capture
compares each table's columns every cycle).

The triggers see every change, more than AWS DMS delivers from the database SQLite stands in for: an UPDATE or
DELETE of a table without a primary key comes out marked `lost` (AWS DMS ignores them for PostgreSQL), and the
replication run drops it unless the emulator is lenient (`LOCALAWS_DMS_LENIENT=1`).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

CHANGES_TABLE = "localaws_dms_changes"
TRIGGER_PREFIX = "localaws_dms_"


class SourceError(Exception):
    """The source database cannot be read (missing file, not SQLite, missing table)."""


@dataclass(frozen=True)
class CapturedChange:
    seq: int
    table: str
    op: str
    committed_at: datetime
    values: dict[str, Any]
    before_image: dict[str, Any]
    lost: str | None = None  # why AWS DMS would not deliver this change (the run drops it unless lenient)


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _json_of_row(alias: str, columns: list[str]) -> str:
    # BLOBs cannot go into JSON; hex keeps the trigger from failing the user's statement.
    pairs = ", ".join(
        f"{_literal(c)}, CASE WHEN typeof({alias}.{_quote(c)}) = 'blob' THEN hex({alias}.{_quote(c)}) "
        f"ELSE {alias}.{_quote(c)} END"
        for c in columns
    )
    return f"json_object({pairs})"


def parse_sqlite_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f")


class SqliteSource:
    def __init__(self, path: str) -> None:
        if not path or not Path(path).is_file():
            raise SourceError(f"source database file not found: {path!r}")
        self.path = path
        self.connection = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        try:
            self.connection.execute("PRAGMA journal_mode=WAL")  # readers and the user's writers don't block
        except sqlite3.DatabaseError as error:
            raise SourceError(f"{path}: not an SQLite database ({error})") from error
        self._trigger_columns: dict[str, list[str]] = {}

    def close(self) -> None:
        self.connection.close()

    def tables(self) -> list[str]:
        rows = self.connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name != ?"
            " ORDER BY name",
            (CHANGES_TABLE,),
        ).fetchall()
        return [name for (name,) in rows]

    def columns(self, table: str) -> list[str]:
        rows = self.connection.execute(f"PRAGMA table_info({_quote(table)})").fetchall()
        if not rows:
            raise SourceError(f"table {table!r} not found in {self.path}")
        return [row[1] for row in rows]

    def declared_types(self, table: str) -> dict[str, str]:
        """Each column's type as its DDL declares it (`DECIMAL(7,2)`, `DATE`, …)."""
        rows = self.connection.execute(f"PRAGMA table_info({_quote(table)})").fetchall()
        return {row[1]: str(row[2] or "") for row in rows}

    def primary_key(self, table: str) -> list[str]:
        rows = self.connection.execute(f"PRAGMA table_info({_quote(table)})").fetchall()
        return [row[1] for row in sorted((r for r in rows if r[5] > 0), key=lambda r: r[5])]

    def install_capture(self, tables: list[str], resume: bool = False) -> int:
        """Create the change log and the triggers (kept by a resume); returns the sequence number before the
        first captured change."""
        self.connection.execute("BEGIN IMMEDIATE")
        try:
            self.connection.execute(
                f"CREATE TABLE IF NOT EXISTS {CHANGES_TABLE} (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
                " table_name TEXT NOT NULL, op TEXT NOT NULL, committed_at TEXT NOT NULL,"
                " row_json TEXT NOT NULL, before_json TEXT)"
            )
            for table in tables:
                self._create_triggers(table, self.columns(table))
            position = self.last_seq()
            self.connection.execute("COMMIT")
        except BaseException:
            self.connection.execute("ROLLBACK")
            raise
        return position

    def refresh_triggers(self, tables: list[str]) -> list[str]:
        """Rebuild the triggers of tables whose columns changed (or that are new); returns those tables."""
        changed = [t for t in tables if self._trigger_columns.get(t) != self.columns(t)]
        if changed:
            self.connection.execute("BEGIN IMMEDIATE")
            try:
                for table in changed:
                    self._create_triggers(table, self.columns(table))
                self.connection.execute("COMMIT")
            except BaseException:
                self.connection.execute("ROLLBACK")
                raise
        return changed

    def _create_triggers(self, table: str, columns: list[str]) -> None:
        images = {
            "I": ("INSERT", _json_of_row("NEW", columns), "NULL"),
            "U": ("UPDATE", _json_of_row("NEW", columns), _json_of_row("OLD", columns)),
            "D": ("DELETE", _json_of_row("OLD", columns), _json_of_row("OLD", columns)),
        }
        for op, (event, row_json, before_json) in images.items():
            trigger = _quote(f"{TRIGGER_PREFIX}{table}_{op}")
            self.connection.execute(f"DROP TRIGGER IF EXISTS {trigger}")
            self.connection.execute(
                f"CREATE TRIGGER {trigger} AFTER {event} ON {_quote(table)} BEGIN "
                f"INSERT INTO {CHANGES_TABLE} (table_name, op, committed_at, row_json, before_json) VALUES "
                f"({_literal(table)}, '{op}', strftime('%Y-%m-%d %H:%M:%f', 'now'), {row_json}, {before_json}); END"
            )
        self._trigger_columns[table] = list(columns)

    def last_seq(self) -> int:
        (seq,) = self.connection.execute(f"SELECT coalesce(max(seq), 0) FROM {CHANGES_TABLE}").fetchone()
        if seq == 0:
            row = self.connection.execute(
                "SELECT seq FROM sqlite_sequence WHERE name = ?", (CHANGES_TABLE,)
            ).fetchone()
            seq = row[0] if row else 0
        return int(seq)

    def count_rows(self, table: str) -> int:
        (count,) = self.connection.execute(f"SELECT count(*) FROM {_quote(table)}").fetchone()
        return int(count)

    def snapshot(self, table: str, batch_size: int = 10000) -> tuple[int, list[str], list[tuple]]:
        """A consistent read of the table and the change-log position it corresponds to."""
        self.connection.execute("BEGIN")
        try:
            position = self.last_seq()
            cursor = self.connection.execute(f"SELECT * FROM {_quote(table)}")
            columns = [d[0] for d in cursor.description]
            rows: list[tuple] = []
            while batch := cursor.fetchmany(batch_size):
                rows.extend(batch)
        finally:
            self.connection.execute("COMMIT")
        return position, columns, rows

    def describe_position(self, seq: int) -> str:
        return f"change-log seq {seq}"

    def changes_after(self, seq: int, limit: int = 50000) -> list[CapturedChange]:
        rows = self.connection.execute(
            f"SELECT seq, table_name, op, committed_at, row_json, before_json FROM {CHANGES_TABLE}"
            " WHERE seq > ? ORDER BY seq LIMIT ?",
            (seq, limit),
        ).fetchall()
        keyless = {t for t in {row[1] for row in rows if row[2] in ("U", "D")} if not self.primary_key(t)}
        return [
            CapturedChange(
                seq=row[0],
                table=row[1],
                op=row[2],
                committed_at=parse_sqlite_time(row[3]),
                values=json.loads(row[4]),
                before_image=json.loads(row[5]) if row[5] else {},
                lost=(
                    f"{row[1]} has no primary key: AWS DMS ignores UPDATE and DELETE of such a table"
                    if row[1] in keyless and row[2] in ("U", "D")
                    else None
                ),
            )
            for row in rows
        ]

    def prune(self, up_to_seq: int) -> None:
        self.connection.execute(f"DELETE FROM {CHANGES_TABLE} WHERE seq <= ?", (up_to_seq,))

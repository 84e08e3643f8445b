"""Change capture on a PostgreSQL source, the way DMS reads one: a logical replication slot with `pgoutput`.

- The slot (DMS's `slotName`) and a publication over the source schema are created when the task starts. The
  slot is created with an exported snapshot, and the full load reads every table in that snapshot: every
  transaction that committed before the slot's consistent point is in the LOAD files, every later one is in
  the CDC stream, none in both or neither. A table reload reads its table in the snapshot of a temporary slot
  made for it, with the same guarantee at its own point.
- Changes come out in commit order (`pg_logical_slot_peek_binary_changes`, decoded here from the pgoutput
  protocol, version 1) and the slot is advanced past a transaction only once its files are written
  (`prune`), so a task killed before writing them replays them on restart: at least once, as DMS.
- `AR_H_CHANGE_SEQ` derives from the LSN: the transaction's commit LSN, then an 8-digit ordinal of the
  change within it. LOAD rows carry the consistent point's LSN with ordinal 0: every change the snapshot
  lacks has a higher sequence, every change it holds a lower one.
- Values are PostgreSQL's text output (what pgoutput sends), in the full load too (`col::text`), so LOAD and
  CDC files spell a value alike; `timestamptz` is written in UTC without an offset and `bytea` as upper-case
  hex digits (without PostgreSQL's `\\x`), as DMS writes them.
- A DELETE carries the replica identity: the key columns under the default identity (the other columns are
  null, as in DMS's files), the whole old row under REPLICA IDENTITY FULL. An UPDATE that leaves a TOASTed
  value unchanged does not carry it; without REPLICA IDENTITY FULL to take it from, the task fails and says so,
  rather than write a null the source never had.
- What AWS DMS loses from PostgreSQL is lost here too, each with a warning naming table and LSN: TRUNCATE is
  never written; an UPDATE or DELETE of a table without a primary key comes out marked `lost` (dropped by the
  run unless `LOCALAWS_DMS_LENIENT=1`) unless the table has REPLICA IDENTITY FULL, DMS's documented workaround.
  Under the default identity PostgreSQL itself refuses such a statement while the table is in the publication;
  REPLICA IDENTITY USING INDEX lets it through, and DMS, which needs a primary key, ignores it. An UPDATE that
  moves a primary key is written, with the old key as before-image, as DMS writes it to an S3 target.

This module holds the endpoint's settings and the source (its catalog, the slot, the full load's snapshot, the
change stream read and confirmed, the heartbeat); the pgoutput messages are decoded in `dms_pgoutput`, and
`dms_postgres_rows` spells sequences and values as DMS writes them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from localaws_plugin.dms_pgoutput import (
    PROTO_VERSION,
    Begin,
    Commit,
    Relation,
    RowChange,
    Truncate,
    decode_message,
)
from localaws_plugin.dms_postgres_rows import (
    ORDINAL_SPAN,
    captured_change,
    change_seq,
    format_lsn,
    parse_lsn,
    quote_identifier,
    standard_type,
    text_of,
)
from localaws_plugin.dms_sqlite import CapturedChange, SourceError

if TYPE_CHECKING:
    import psycopg

LOG = logging.getLogger(__name__)

HEARTBEAT_TABLE = "awsdms_heartbeat"


@dataclass(frozen=True)
class PostgresSettings:
    """Where the source is and what the capture is called: the endpoint's ServerName (a host, or the socket
    directory of a local server), Port, DatabaseName, Username, Password, and its extra connection attributes
    `slotName`, `PluginName` (pgoutput only) and `publicationName`."""

    host: str
    port: int
    database: str
    user: str
    password: str | None
    schema: str
    slot: str
    publication: str
    heartbeat_schema: str | None = None  # HeartbeatEnable: where the heartbeat table is; None = off

    def conninfo(self, replication: bool = False) -> str:
        from psycopg.conninfo import make_conninfo

        parts: dict[str, str | int] = {
            "host": self.host,
            "port": self.port,
            "dbname": self.database,
            "user": self.user,
        }
        if self.password:
            parts["password"] = self.password
        if replication:
            parts["replication"] = "database"
        return make_conninfo("", **parts, application_name="localaws-dms")

    @property
    def identity(self) -> str:
        return f"postgresql://{self.host}:{self.port}/{self.database}#{self.slot}"


class PostgresSource:
    """The same interface as `SqliteSource`, over a logical replication slot (see the module docstring)."""

    def __init__(self, settings: PostgresSettings) -> None:
        import psycopg

        self.settings = settings
        self.path = settings.identity  # the key of this capture's positions (dms_replication)
        try:
            self.connection = psycopg.connect(settings.conninfo(), autocommit=True)
            self.connection.execute("SET TimeZone = 'UTC'")
            (level,) = _only_row(self.connection.execute("SHOW wal_level"))
        except psycopg.Error as error:
            raise SourceError(
                f"cannot connect to the PostgreSQL source {settings.identity}: {error}"
            ) from error
        if level != "logical":
            raise SourceError(
                f"the PostgreSQL source has wal_level={level}; logical replication needs wal_level=logical"
                " (rds.logical_replication=1 on RDS)"
            )
        self._export: tuple[Any, str, int] | None = None  # (replication connection, snapshot, consistent LSN)
        self._known_columns: dict[str, list[str]] = {}
        self._transaction_ends: list[tuple[int, int]] = []  # (last seq of a transaction, its end LSN)
        self._index_identity_has_key: dict[int, bool] = {}  # REPLICA IDENTITY USING INDEX: has a primary key?
        self._truncates_reported: set[tuple[int, tuple[int, ...]]] = set()  # (commit LSN, tables) warned

    def close(self) -> None:
        self._release_export()
        self.connection.close()

    # catalog -------------------------------------------------------------------------------------------
    def tables(self) -> list[str]:
        rows = self.connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
            f" AND table_type = 'BASE TABLE' AND table_name <> '{HEARTBEAT_TABLE}' ORDER BY table_name",
            (self.settings.schema,),
        ).fetchall()
        return [name for (name,) in rows]

    def _attributes(self, table: str) -> list[tuple[str, str]]:
        rows = self.connection.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"
            " JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped"
            " ORDER BY a.attnum",
            (self.settings.schema, table),
        ).fetchall()
        if not rows:
            raise SourceError(f"table {self.settings.schema}.{table} not found in {self.settings.identity}")
        return [(name, declared) for name, declared in rows]

    def columns(self, table: str) -> list[str]:
        return [name for name, _ in self._attributes(table)]

    def declared_types(self, table: str) -> dict[str, str]:
        """Each column's type in SQL-standard spelling (`NUMERIC(7,2)`, `TIMESTAMP`, `VARCHAR(60)`, …)."""
        return {name: standard_type(declared) for name, declared in self._attributes(table)}

    def primary_key(self, table: str) -> list[str]:
        rows = self.connection.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
            " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary"
            " ORDER BY array_position(i.indkey::int2[], a.attnum)",
            (f"{quote_identifier(self.settings.schema)}.{quote_identifier(table)}",),
        ).fetchall()
        return [name for (name,) in rows]

    def count_rows(self, table: str) -> int:
        (count,) = _only_row(
            self.connection.execute(
                f"SELECT count(*) FROM {quote_identifier(self.settings.schema)}.{quote_identifier(table)}"
            )
        )
        return int(count)

    def last_seq(self) -> int:
        (lsn,) = _only_row(self.connection.execute("SELECT pg_current_wal_lsn()::text"))
        return change_seq(parse_lsn(lsn), 0)

    # capture -------------------------------------------------------------------------------------------
    def install_capture(self, tables: list[str], resume: bool = False) -> int:
        """The publication and the slot; returns the position the capture starts from. A fresh start makes a
        new slot (an old one of the same name is dropped) with an exported snapshot for the full load; a
        resume keeps the slot, whose unconfirmed changes are replayed."""
        settings = self.settings
        exists = self.connection.execute(
            "SELECT 1 FROM pg_publication WHERE pubname = %s", (settings.publication,)
        ).fetchone()
        if not exists:
            self.connection.execute(
                f"CREATE PUBLICATION {quote_identifier(settings.publication)}"
                f" FOR TABLES IN SCHEMA {quote_identifier(settings.schema)}"
            )
        slot = self.connection.execute(
            "SELECT confirmed_flush_lsn::text, active FROM pg_replication_slots WHERE slot_name = %s",
            (settings.slot,),
        ).fetchone()
        if resume:
            if slot is None:
                raise SourceError(
                    f"replication slot {settings.slot!r} does not exist: its changes are gone; reload the target"
                )
            return change_seq(parse_lsn(slot[0]), 0)
        if slot is not None:
            if slot[1]:
                raise SourceError(f"replication slot {settings.slot!r} is in use by another process")
            self.connection.execute("SELECT pg_drop_replication_slot(%s)", (settings.slot,))
        replication, snapshot, point = self._create_slot(settings.slot, temporary=False)
        self._export = (replication, snapshot, point)
        LOG.info("DMS capture: slot %s created at %s", settings.slot, format_lsn(point))
        return change_seq(point, 0)

    def _create_slot(self, name: str, temporary: bool) -> tuple[Any, str, int]:
        """A logical slot with an exported snapshot: (the replication connection that keeps the snapshot
        importable while it stays open and idle, the snapshot's name, the consistent point)."""
        import psycopg

        replication = psycopg.connect(self.settings.conninfo(replication=True), autocommit=True)
        kind = "TEMPORARY " if temporary else ""
        result = replication.pgconn.exec_(
            f"CREATE_REPLICATION_SLOT {quote_identifier(name)} {kind}LOGICAL pgoutput (SNAPSHOT 'export')".encode()
        )
        if result.status != 2:  # TUPLES_OK
            message = (result.error_message or b"").decode(errors="replace").strip()
            replication.close()
            raise SourceError(f"cannot create replication slot {name!r}: {message}")
        consistent_point, snapshot_name = result.get_value(0, 1), result.get_value(0, 2)
        assert consistent_point is not None and snapshot_name is not None  # TUPLES_OK: the slot's row
        point = parse_lsn(consistent_point.decode())
        snapshot = snapshot_name.decode()
        return replication, snapshot, point

    def _release_export(self) -> None:
        if self._export is not None:
            self._export[0].close()
            self._export = None

    def refresh_triggers(self, tables: list[str]) -> list[str]:
        """No triggers to rebuild (the WAL has every column); returns the tables whose columns changed or that
        are new since the last call, as the SQLite capture does."""
        changed = []
        for table in tables:
            columns = self.columns(table)
            if self._known_columns.get(table) != columns:
                changed.append(table)
                self._known_columns[table] = columns
        return changed

    def snapshot(self, table: str, batch_size: int = 10000) -> tuple[int, list[str], list[tuple]]:
        """The table read in a snapshot consistent with the change stream, and that snapshot's position: the
        full load's exported snapshot, or for a reload a temporary slot's."""
        import psycopg

        if self._export is not None:
            replication, snapshot, point = self._export
            temporary = None
        else:
            replication, snapshot, point = self._create_slot(f"{self.settings.slot}_reload", temporary=True)
            temporary = replication
        try:
            columns = self.columns(table)
            with psycopg.connect(self.settings.conninfo(), autocommit=True) as reader:
                reader.execute("SET TimeZone = 'UTC'")
                reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                reader.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
                types = dict(self._attributes(table))
                select = ", ".join(text_of(column, types[column]) for column in columns)
                cursor = reader.execute(
                    f"SELECT {select} FROM {quote_identifier(self.settings.schema)}.{quote_identifier(table)}"
                )
                rows: list[tuple] = []
                while batch := cursor.fetchmany(batch_size):
                    rows.extend(batch)
                reader.execute("COMMIT")
        finally:
            if temporary is not None:
                temporary.close()  # the temporary slot goes with its connection
        return change_seq(point, 0), columns, rows

    def changes_after(self, seq: int, limit: int = 50000) -> list[CapturedChange]:
        """The changes after `seq`, in commit order (whole transactions; about `limit` changes at most)."""
        self._release_export()  # the full load is over once the stream is read
        changes: list[CapturedChange] = []
        for change in self._decode(limit):
            if change.seq > seq:
                changes.append(change)
        return changes

    def _decode(self, limit: int) -> Iterator[CapturedChange]:
        settings = self.settings
        rows = self.connection.execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, %s,"
            " 'proto_version', %s, 'publication_names', %s)",
            (settings.slot, limit, PROTO_VERSION, settings.publication),
        ).fetchall()
        relations: dict[int, Relation] = {}
        begin: Begin | None = None
        ordinal = 0
        for (data,) in rows:
            message = decode_message(bytes(data))
            if isinstance(message, Relation):
                relations[message.oid] = message
                if message.replica_identity == "i" and message.schema == settings.schema:
                    self._index_identity_has_key[message.oid] = bool(self.primary_key(message.table))
            elif isinstance(message, Begin):
                begin, ordinal = message, 0
            elif isinstance(message, Commit):
                if begin is not None:  # a transaction with no change of ours still moves the slot on
                    self._note_transaction_end(change_seq(begin.final_lsn, ordinal), message.end_lsn)
                begin = None
            elif isinstance(message, Truncate):
                names = [
                    f"{relations[o].schema}.{relations[o].table}"
                    for o in message.relation_oids
                    if o in relations and relations[o].schema == settings.schema
                ]
                at = begin.final_lsn if begin is not None else 0
                if names and (at, message.relation_oids) not in self._truncates_reported:
                    self._truncates_reported.add((at, message.relation_oids))
                    LOG.warning(
                        "DMS capture: TRUNCATE of %s at LSN %s dropped, as AWS DMS drops it (it does not capture"
                        " TRUNCATE from PostgreSQL): the lake keeps the rows; reload the table",
                        ", ".join(names),
                        format_lsn(at),
                    )
            elif isinstance(message, RowChange):
                if begin is None:
                    raise SourceError("pgoutput: a change outside a transaction")
                relation = relations[message.relation_oid]
                if relation.schema != settings.schema:
                    continue
                ordinal += 1
                seq = change_seq(begin.final_lsn, ordinal)
                captured = captured_change(relation, message, seq, begin.commit_time)
                if message.op != "I" and not self._has_key(relation):
                    identity = {"d": "DEFAULT", "n": "NOTHING", "i": "USING INDEX"}[relation.replica_identity]
                    captured = replace(
                        captured,
                        lost=f"{relation.schema}.{relation.table} has no primary key (REPLICA IDENTITY {identity}):"
                        " AWS DMS ignores UPDATE and DELETE of such a table unless it has REPLICA IDENTITY FULL",
                    )
                yield captured

    def _has_key(self, relation: Relation) -> bool:
        """Whether DMS can identify a row of this table: a primary key, or REPLICA IDENTITY FULL."""
        if relation.replica_identity == "f":
            return True
        if relation.replica_identity == "i":
            return self._index_identity_has_key.get(relation.oid, False)
        return relation.replica_identity == "d" and bool(relation.key_columns)

    def describe_position(self, seq: int) -> str:
        return f"LSN {format_lsn(seq // ORDINAL_SPAN)}"

    def _note_transaction_end(self, last_seq: int, end_lsn: int) -> None:
        if not self._transaction_ends or self._transaction_ends[-1][0] < last_seq:
            self._transaction_ends.append((last_seq, end_lsn))

    def prune(self, up_to_seq: int) -> None:
        """Confirm to the slot every transaction whose changes are all at or below `up_to_seq` (written to
        files): PostgreSQL may then recycle their WAL, and a restart resumes after them."""
        confirmed = [end for last, end in self._transaction_ends if last <= up_to_seq]
        if not confirmed:
            return
        self._transaction_ends = [(last, end) for last, end in self._transaction_ends if last > up_to_seq]
        self._truncates_reported = {t for t in self._truncates_reported if change_seq(t[0], 0) > up_to_seq}
        self.connection.execute(
            "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
            (self.settings.slot, format_lsn(max(confirmed))),
        )

    def heartbeat(self) -> None:
        """HeartbeatEnable: a dummy transaction (a row of `<HeartbeatSchema>.awsdms_heartbeat`), then, as DMS's
        feedback on the replication stream does, the slot confirmed up to it when the slot holds no change
        of the publication before it. Without it an idle slot keeps every WAL segment written since its last
        change: other tables, other databases, until the disk fills. Called by the capture with nothing
        pending; a transaction of the task's still unconfirmed is left to the capture (`prune`)."""
        if self.settings.heartbeat_schema is None or self._transaction_ends:
            return
        table = f"{quote_identifier(self.settings.heartbeat_schema)}.{HEARTBEAT_TABLE}"
        self.connection.execute(
            f"CREATE TABLE IF NOT EXISTS {table} (id integer PRIMARY KEY, heartbeat_at timestamptz NOT NULL)"
        )
        self.connection.execute(
            f"INSERT INTO {table} VALUES (1, now()) ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()"
        )
        (lsn,) = _only_row(self.connection.execute("SELECT pg_current_wal_lsn()::text"))
        (undecoded,) = _only_row(
            self.connection.execute(
                "SELECT count(*) FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL,"
                " 'proto_version', %s, 'publication_names', %s)",
                (self.settings.slot, lsn, PROTO_VERSION, self.settings.publication),
            )
        )
        if undecoded == 0:  # nothing of the publication up to the heartbeat: nothing is skipped
            self.connection.execute(
                "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.settings.slot, lsn)
            )

    def drop_capture(self) -> None:
        """The slot and the publication removed (a deleted task): an abandoned slot keeps WAL forever."""
        self._release_export()
        self.connection.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
            (self.settings.slot,),
        )
        self.connection.execute(f"DROP PUBLICATION IF EXISTS {quote_identifier(self.settings.publication)}")


def _only_row(cursor: psycopg.Cursor[Any]) -> tuple[Any, ...]:
    """The row of a query that always returns one (SHOW, an aggregate, a function's value)."""
    row = cursor.fetchone()
    assert row is not None, "a query of one value returns a row"
    return row

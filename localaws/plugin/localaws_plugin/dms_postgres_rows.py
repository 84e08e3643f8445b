"""From PostgreSQL to the rows the local DMS writes: change sequences from LSNs, values spelled as DMS does.

- `AR_H_CHANGE_SEQ` derives from the LSN (`change_seq`): the transaction's commit LSN, then an 8-digit ordinal
  of the change within it; ordinal 0 is a snapshot at that LSN.
- The full load reads each column as PostgreSQL's text output (`text_of`), and a decoded pgoutput change
  becomes a `CapturedChange` (`captured_change`) with the same spelling: `timestamptz` in UTC without an
  offset, `bytea` as upper-case hex digits.
- `standard_type` gives a column's type in the SQL-standard spelling the file writer maps to Parquet types.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from localaws_plugin.dms_pgoutput import UNCHANGED, Relation, RowChange
from localaws_plugin.dms_sqlite import CapturedChange, SourceError

ORDINAL_DIGITS = 8
ORDINAL_SPAN = 10**ORDINAL_DIGITS
TIMESTAMPTZ_OID = 1184
BYTEA_OID = 17


def change_seq(commit_lsn: int, ordinal: int) -> int:
    """The change sequence of the `ordinal`-th change (1-based) of the transaction committed at `commit_lsn`;
    ordinal 0 is a snapshot taken at that LSN."""
    if not 0 <= ordinal < ORDINAL_SPAN:
        raise SourceError(f"a transaction with more than {ORDINAL_SPAN - 1} changes is not supported")
    return commit_lsn * ORDINAL_SPAN + ordinal


def parse_lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def quote_identifier(identifier: str) -> str:
    """A PostgreSQL identifier in double quotes."""
    return '"' + identifier.replace('"', '""') + '"'


def text_of(column: str, declared: str) -> str:
    """A column as the full load reads it: PostgreSQL's text output, timestamptz in UTC without offset."""
    if declared == "timestamp with time zone":
        return f"to_char({quote_identifier(column)} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')"
    if declared == "bytea":
        return f"upper(encode({quote_identifier(column)}, 'hex'))"  # DMS writes a BLOB as hex digits
    if declared == "character" or declared.startswith("character("):
        return quote_identifier(column)  # as stored, padded (a cast to text drops the padding pgoutput keeps)
    return f"{quote_identifier(column)}::text"


def _utc_text(value: Any) -> Any:
    """pgoutput's timestamptz text in a UTC session (`2026-01-01 08:00:00.5+00`) as the full load spells it."""
    if not isinstance(value, str):
        return value
    text = value.removesuffix("+00")
    date_part, _, time_part = text.partition(" ")
    clock, _, fraction = time_part.partition(".")
    return f"{date_part} {clock}.{fraction.ljust(6, '0')}"


def captured_change(
    relation: Relation, change: RowChange, seq: int, committed_at: datetime
) -> CapturedChange:
    """A decoded row change of `relation` as the change the run writes: a TOASTed value left unchanged is
    taken from the old row, and refused when the WAL does not carry it."""
    columns = relation.columns

    def as_dict(values: tuple[Any, ...]) -> dict[str, Any]:
        row = dict(zip(columns, values, strict=True))
        for column, type_oid in zip(columns, relation.type_oids, strict=True):
            if type_oid == TIMESTAMPTZ_OID:
                row[column] = _utc_text(row[column])
            elif type_oid == BYTEA_OID and isinstance(row[column], str):
                row[column] = (
                    row[column].removeprefix("\\x").upper()
                )  # `\x00ff` → `00FF`, as DMS writes BLOBs
        return row

    old = as_dict(change.old) if change.old is not None else None
    if change.op == "D":
        assert old is not None
        return CapturedChange(seq, relation.table, "D", committed_at, old, old)
    assert change.new is not None
    new = as_dict(change.new)
    for column, value in new.items():
        if value is UNCHANGED:
            if old is None or change.old_is_key_only or old.get(column) is UNCHANGED:
                raise SourceError(
                    f"{relation.schema}.{relation.table}.{column}: an UPDATE left this TOASTed value unchanged"
                    " and the WAL does not carry it; set REPLICA IDENTITY FULL on the table"
                )
            new[column] = old[column]
    if change.op == "I":
        return CapturedChange(seq, relation.table, "I", committed_at, new, {})
    before = old if old is not None else {c: new[c] for c in relation.key_columns}
    return CapturedChange(seq, relation.table, "U", committed_at, new, before)


def standard_type(declared: str) -> str:
    """PostgreSQL's `format_type` spelling in the SQL-standard one the file writer maps to Parquet types."""
    text = declared.lower()
    for postgres, standard in (
        ("timestamp with time zone", "TIMESTAMP"),
        ("timestamp without time zone", "TIMESTAMP"),
        ("timestamp", "TIMESTAMP"),
        ("character varying", "VARCHAR"),
        ("character", "CHAR"),
        ("double precision", "DOUBLE"),
        ("numeric", "NUMERIC"),
    ):
        if text.startswith(postgres):
            modifier = text[len(postgres) :].split(" ")[0] if standard != "TIMESTAMP" else ""
            return standard + modifier.upper()
    return {"integer": "INTEGER", "bigint": "BIGINT", "smallint": "SMALLINT", "real": "REAL"}.get(
        text, text.upper()
    )

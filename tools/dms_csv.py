"""A writer of DMS-format CSV (what the tests, the demo's generator and the benchmarks use to produce files
exactly as DMS does). The file contract itself (names, columns) is `lake_contracts.dms_files`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lake_contracts.dms_files import CHANGE_SEQ_COLUMN, DEFAULT_TIMESTAMP_COLUMN, OP_COLUMN


@dataclass(frozen=True)
class CsvFormat:
    """The S3 target settings that shape the CSV (the names are DMS's)."""

    csv_null_value: str | None = None  # None: DMS's default, null written as an empty field
    timestamp_column: str = DEFAULT_TIMESTAMP_COLUMN
    add_change_seq: bool = True


def format_value(value: Any, fmt: CsvFormat) -> str | None:
    """A value as DMS writes it; None is an empty field."""
    if value is None:
        return fmt.csv_null_value
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="microseconds")
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex().upper()
    return str(value)


def write_dms_csv(
    columns: Sequence[str],
    rows: Iterable[tuple[str, str | None, datetime | None, Sequence[Any]]],
    fmt: CsvFormat = CsvFormat(),
) -> str:
    """DMS CSV text: a header (AddColumnName), then `Op, <timestamp>, <AR_H_CHANGE_SEQ>, columns…`.

    Each row is (op, change_seq, commit_time, values). Values holding quotes, commas or newlines are
    quoted with doubled quotes (RFC 4180, DMS's default)."""
    header = [OP_COLUMN, fmt.timestamp_column]
    if fmt.add_change_seq:
        header.append(CHANGE_SEQ_COLUMN)
    lines = [_csv_line([*header, *columns], fmt)]
    for op, seq, moment, values in rows:
        record: list[str | None] = [op, format_value(moment, fmt)]
        if fmt.add_change_seq:
            record.append(seq or "")
        record.extend(format_value(v, fmt) for v in values)
        lines.append(_csv_line(record, fmt))
    return "".join(lines)


def _csv_line(fields: Sequence[str | None], fmt: CsvFormat) -> str:
    return ",".join(_csv_field(field, fmt) for field in fields) + "\n"


def _csv_field(value: str | None, fmt: CsvFormat) -> str:
    """RFC 4180 quoting. With a CsvNullValue marker an empty string is written quoted (`""`), so that
    it stays distinct from null."""
    if value is None:
        return ""
    if any(ch in value for ch in '",\n\r') or (value == "" and fmt.csv_null_value is not None):
        return '"' + value.replace('"', '""') + '"'
    return value

"""The DMS S3 file contract, without Spark: key layout, LOAD counters, and a writer of DMS-format CSV.

Full load: `<prefix>/<schema>/<table>/LOAD00000001.csv` with a HEX counter (…09, …0A).
CDC: `<prefix>/<schema>/<table>/<YYYYMMDD-HHMMSSmmm>.csv`, ordered by name.
The writer is what our tests, demo and benchmarks use to produce files exactly as DMS does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

OP_COLUMN = "Op"
CHANGE_SEQ_COLUMN = "AR_H_CHANGE_SEQ"
DEFAULT_TIMESTAMP_COLUMN = "dms_timestamp"
CHANGE_SEQ_DIGITS = 35

_LOAD_NAME = re.compile(r"^LOAD([0-9A-Fa-f]{8})\.csv(\.gz)?$")
_CDC_NAME = re.compile(r"^(\d{8}-\d{6,9})\.csv(\.gz)?$")


class NotADmsFileError(ValueError):
    """A key that does not follow the DMS layout (`<schema>/<table>/<file>.csv`)."""


@dataclass(frozen=True, order=True)
class DmsFile:
    """One DMS output object, located and classified from its key alone."""

    source_schema: str
    table: str
    is_full_load: bool
    order_key: str
    uri: str
    size: int = 0

    @property
    def name(self) -> str:
        return self.uri.rsplit("/", 1)[-1]

    @property
    def qualified_table(self) -> str:
        return f"{self.source_schema}.{self.table}"


def parse_dms_key(uri: str, size: int = 0) -> DmsFile:
    """Classify `…/<schema>/<table>/<LOADxxxxxxxx|YYYYMMDD-HHMMSSmmm>.csv`."""
    parts = uri.rstrip("/").split("/")
    if len(parts) < 3:
        raise NotADmsFileError(f"{uri}: expected …/<schema>/<table>/<file>.csv")
    source_schema, table, name = parts[-3], parts[-2], parts[-1]
    load = _LOAD_NAME.match(name)
    if load:
        return DmsFile(source_schema, table, True, f"{int(load.group(1), 16):010d}", uri, size)
    cdc = _CDC_NAME.match(name)
    if cdc:
        return DmsFile(source_schema, table, False, cdc.group(1), uri, size)
    raise NotADmsFileError(f"{uri}: {name!r} is neither a LOAD file nor a timestamp-named CDC file")


def load_file_name(counter: int) -> str:
    """`LOAD00000001.csv`, `…0A`: DMS counts full-load files in upper-case hex."""
    return f"LOAD{counter:08X}.csv"


def cdc_file_name(moment: datetime) -> str:
    return moment.strftime("%Y%m%d-%H%M%S") + f"{moment.microsecond // 1000:03d}.csv"


def change_seq(number: int) -> str:
    """An `AR_H_CHANGE_SEQ` value: 35 digits, zero-padded, increasing."""
    return f"{number:0{CHANGE_SEQ_DIGITS}d}"


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

"""How the local DMS spells a MySQL or MariaDB value in its files, and how it types a MySQL column.

Both the full load (pymysql's values) and the binlog decoder's values go through `dms_text`, so LOAD and CDC
files spell a value alike; `standard_type` gives a column's type in the SQL-standard spelling the Parquet
writer maps.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

DATE_TYPES = ("date", "datetime", "timestamp")
BINARY_TYPES = ("binary", "varbinary", "blob", "tinyblob", "mediumblob", "longblob")


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

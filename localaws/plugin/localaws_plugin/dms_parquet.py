"""DMS's Parquet output (S3 endpoint `DataFormat=parquet`): the same columns as the CSV files, typed.

As DMS writes it: `Op`, the TimestampColumnName column and the added `AR_H_CHANGE_SEQ` as strings, each data
and before-image column with the Parquet type of its source type (INTEGER → INT32, BIGINT → INT64,
DECIMAL(p,s) → DECIMAL(p,s), DATE → DATE, TIMESTAMP/DATETIME → TIMESTAMP(µs), REAL/DOUBLE → DOUBLE,
BOOLEAN → BOOLEAN, BLOB → BINARY, text → STRING), nulls as Parquet nulls (no CsvNullValue). pyarrow is
imported only when a task writes Parquet.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from localaws_plugin.dms_format import ChangeRow, FileLayout, S3TargetSettings

_DECIMAL = re.compile(r"^(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)$")


def arrow_type(declared: str) -> Any:
    """The Arrow type DMS's Parquet output uses for a source column declared as `declared` (SQLite DDL)."""
    import pyarrow as pa

    text = declared.strip().upper()
    decimal = _DECIMAL.match(text)
    if decimal:
        return pa.decimal128(int(decimal.group(1)), int(decimal.group(2) or 0))
    base = text.split("(")[0].strip()
    if base in ("BIGINT", "INT8"):
        return pa.int64()
    if base in ("INTEGER", "INT", "INT4", "MEDIUMINT"):
        return pa.int32()
    if base in ("SMALLINT", "INT2", "TINYINT"):
        return pa.int16()
    if base in ("REAL", "DOUBLE", "DOUBLE PRECISION", "FLOAT"):
        return pa.float64()
    if base in ("BOOLEAN", "BOOL"):
        return pa.bool_()
    if base == "DATE":
        return pa.date32()
    if base in ("TIMESTAMP", "DATETIME"):
        return pa.timestamp("us")
    if base in ("BLOB", "BINARY", "VARBINARY", "BYTEA"):
        return pa.binary()
    return pa.string()


def _typed(value: Any, kind: Any) -> Any:
    """A SQLite value as the Arrow type wants it (SQLite keeps dates as text, decimals as REAL or text)."""
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_decimal(kind):
        return Decimal(str(value)).quantize(Decimal(1).scaleb(-kind.scale))
    if pa.types.is_integer(kind):
        return int(value)
    if pa.types.is_floating(kind):
        return float(value)
    if pa.types.is_boolean(kind):
        return bool(int(value)) if not isinstance(value, str) else value.strip().lower() in ("1", "true", "t")
    if pa.types.is_date(kind):
        return value if isinstance(value, date) else date.fromisoformat(str(value)[:10])
    if pa.types.is_timestamp(kind):
        return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if pa.types.is_binary(kind):
        if isinstance(
            value, str
        ):  # the captures hand a BLOB over as hex digits (SQLite's hex(), bytea's \x…)
            return bytes.fromhex(value.removeprefix("\\x"))
        return bytes(value)
    return str(value)


def parquet_files(
    layout: FileLayout,
    rows: Sequence[ChangeRow],
    settings: S3TargetSettings,
    declared_types: dict[str, str],
    max_rows: int | None = None,
) -> list[bytes]:
    """Parquet files of `rows` (at most `max_rows` rows each, and about MaxFileSize), DMS's columns typed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = layout.header()
    text_columns = (
        len(names) - len(layout.data_columns) - len(layout.before_image_columns) - len(layout.added_columns)
    )
    sources = [*layout.data_columns, *(source for _, source in layout.before_image_columns)]
    types = [pa.string()] * text_columns + [arrow_type(declared_types.get(s, "TEXT")) for s in sources]
    types += [pa.string()] * len(layout.added_columns)
    schema = pa.schema([pa.field(name, kind) for name, kind in zip(names, types, strict=True)])
    per_file = max_rows or max(1, settings.max_file_size_kb * 1024 // 64)  # ~64 bytes a row on disk
    files = []
    for start in range(0, len(rows), per_file):
        records = [layout.record(row) for row in rows[start : start + per_file]]
        columns = [
            pa.array([_typed(record[index], kind) for record in records], type=kind)
            for index, kind in enumerate(types)
        ]
        buffer = io.BytesIO()
        pq.write_table(pa.Table.from_arrays(columns, schema=schema), buffer)
        files.append(buffer.getvalue())
    return files

"""How the local DMS writes its S3 target files, pure Python (no LocalStack import): CSV, settings, table
mappings; the names and columns are the file contract's (lake_contracts.dms_files).

Used by the local DMS and unit-tested in the project's venv.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lake_contracts.dms_files import OP_COLUMN, change_seq


def dms_timestamp(moment: datetime) -> str:
    """TimestampColumnName values: `yyyy-MM-dd HH:mm:ss.SSSSSS`."""
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")


@dataclass(frozen=True)
class S3TargetSettings:
    """The S3 endpoint settings the local DMS honours (names as in DMS's S3Settings)."""

    bucket_name: str
    bucket_folder: str = ""
    add_column_name: bool = True
    include_op_for_full_load: bool = False
    timestamp_column_name: str = ""
    csv_null_value: str | None = None
    csv_delimiter: str = ","
    csv_row_delimiter: str = "\n"
    cdc_max_batch_interval_seconds: float = 60.0
    cdc_min_file_size_kb: int = 32000
    max_file_size_kb: int = 1048576
    data_format: str = "csv"  # DataFormat: csv or parquet

    @property
    def extension(self) -> str:
        return "parquet" if self.data_format == "parquet" else "csv"

    @classmethod
    def from_endpoint(
        cls, s3_settings: dict[str, Any] | None, extra_connection_attributes: str | None
    ) -> S3TargetSettings:
        """S3Settings, with ExtraConnectionAttributes (`key=value;…`, case-insensitive) as a fallback."""
        merged: dict[str, Any] = {}
        for part in (extra_connection_attributes or "").split(";"):
            if "=" in part:
                key, value = part.split("=", 1)
                merged[key.strip().lower()] = value.strip()
        merged.update({key.lower(): value for key, value in (s3_settings or {}).items()})
        if not merged.get("bucketname"):
            raise ValueError("the S3 target endpoint has no BucketName")
        defaults = cls(bucket_name="")

        def flag(name: str, default: bool) -> bool:
            value = merged.get(name.lower(), default)
            return value if isinstance(value, bool) else str(value).lower() in ("true", "y", "yes", "1")

        return cls(
            bucket_name=str(merged["bucketname"]),
            bucket_folder=str(merged.get("bucketfolder", "")),
            add_column_name=flag("AddColumnName", defaults.add_column_name),
            include_op_for_full_load=flag("IncludeOpForFullLoad", defaults.include_op_for_full_load),
            timestamp_column_name=str(merged.get("timestampcolumnname", "")),
            csv_null_value=merged.get("csvnullvalue"),
            csv_delimiter=str(merged.get("csvdelimiter", ",")),
            csv_row_delimiter=str(merged.get("csvrowdelimiter", "\n")).replace("\\n", "\n"),
            cdc_max_batch_interval_seconds=float(merged.get("cdcmaxbatchinterval", 60)),
            cdc_min_file_size_kb=int(merged.get("cdcminfilesize", 32000)),
            max_file_size_kb=int(merged.get("maxfilesize", 1048576)),
            data_format=_data_format(merged.get("dataformat", "csv")),
        )


def _data_format(value: Any) -> str:
    data_format = str(value).lower()
    if data_format not in ("csv", "parquet"):
        raise ValueError(f"DataFormat {value!r}: the local DMS writes csv or parquet")
    return data_format


@dataclass(frozen=True)
class AddedColumn:
    name: str
    expression: str
    schema_pattern: str = "%"
    table_pattern: str = "%"


@dataclass(frozen=True)
class TableMapping:
    """Selection rules (include/exclude, `%` wildcards) and the transformations the local DMS applies."""

    includes: tuple[tuple[str, str], ...] = (("%", "%"),)
    excludes: tuple[tuple[str, str], ...] = ()
    added_columns: tuple[AddedColumn, ...] = ()
    before_image_prefix: str | None = None
    before_image_suffix: str = ""
    before_image_pk_only: bool = True

    @classmethod
    def parse(cls, table_mappings: str | dict[str, Any] | None) -> TableMapping:
        document = json.loads(table_mappings) if isinstance(table_mappings, str) else (table_mappings or {})
        includes: list[tuple[str, str]] = []
        excludes: list[tuple[str, str]] = []
        added: list[AddedColumn] = []
        before_image: dict[str, Any] | None = None
        for rule in document.get("rules", []):
            locator = rule.get("object-locator", {})
            schema, table = locator.get("schema-name", "%"), locator.get("table-name", "%")
            action = rule.get("rule-action")
            if rule.get("rule-type") == "selection":
                (excludes if action == "exclude" else includes).append((schema, table))
            elif action == "add-column":
                expression = rule.get("expression", "")
                added.append(AddedColumn(rule["value"], expression, schema, table))
            elif action == "add-before-image-columns":
                before_image = rule.get("before-image-def", {})
        return cls(
            includes=tuple(includes) or (("%", "%"),),
            excludes=tuple(excludes),
            added_columns=tuple(added),
            before_image_prefix=None if before_image is None else before_image.get("column-prefix", "BI_"),
            before_image_suffix="" if before_image is None else before_image.get("column-suffix", ""),
            before_image_pk_only=before_image is None
            or before_image.get("column-filter", "pk-only") == "pk-only",
        )

    def selects(self, schema: str, table: str) -> bool:
        def matches(rules: Iterable[tuple[str, str]]) -> bool:
            return any(_like(schema, s) and _like(table, t) for s, t in rules)

        return matches(self.includes) and not matches(self.excludes)

    def added_columns_for(self, schema: str, table: str) -> list[AddedColumn]:
        return [
            c for c in self.added_columns if _like(schema, c.schema_pattern) and _like(table, c.table_pattern)
        ]


def _like(value: str, pattern: str) -> bool:
    """DMS object-locator wildcards: `%` any run of characters, `_` one character (case-insensitive)."""
    glob = pattern.replace("[", "[[]").replace("%", "*").replace("_", "?")
    return fnmatch.fnmatchcase(value.lower(), glob.lower())


@dataclass
class ChangeRow:
    """One row of a DMS file before formatting: op (I/U/D, or None for full load without Op)."""

    op: str | None
    seq: int
    committed_at: datetime
    values: dict[str, Any]
    before_image: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FileLayout:
    """The columns of one file: [Op], [timestamp], data columns, [before-image columns], added columns."""

    include_op: bool
    timestamp_column: str
    data_columns: tuple[str, ...]
    before_image_columns: tuple[tuple[str, str], ...] = ()  # (header name, source column)
    added_columns: tuple[AddedColumn, ...] = ()

    def header(self) -> list[str]:
        names = [OP_COLUMN] if self.include_op else []
        if self.timestamp_column:
            names.append(self.timestamp_column)
        names += list(self.data_columns)
        names += [name for name, _ in self.before_image_columns]
        names += [column.name for column in self.added_columns]
        return names

    def record(self, row: ChangeRow) -> list[Any]:
        record: list[Any] = [row.op or "I"] if self.include_op else []
        if self.timestamp_column:
            record.append(dms_timestamp(row.committed_at))
        record += [row.values.get(name) for name in self.data_columns]
        record += [row.before_image.get(source) for _, source in self.before_image_columns]
        for column in self.added_columns:
            record.append(_added_value(column.expression, row))
        return record


def _added_value(expression: str, row: ChangeRow) -> str:
    token = expression.strip().upper()
    if token == "$AR_H_CHANGE_SEQ":
        return change_seq(row.seq)
    if token in ("$AR_H_TIMESTAMP", "$AR_H_COMMIT_TIMESTAMP"):
        return dms_timestamp(row.committed_at)
    if token in ("$AR_H_OPERATION",):
        return {"I": "INSERT", "U": "UPDATE", "D": "DELETE"}.get(row.op or "", "LOAD")
    return expression


def format_value(value: Any, null_value: str | None) -> str | None:
    if value is None:
        return null_value
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex().upper()
    return str(value)


def csv_field(value: str | None, settings: S3TargetSettings) -> str:
    """RFC 4180 quoting of values holding quotes, delimiters or line breaks. With a CsvNullValue marker an
    empty string is written quoted (`""`) so it stays distinct from null."""
    if value is None:
        return ""
    needs_quotes = any(ch in value for ch in ('"', "\n", "\r", settings.csv_delimiter))
    if needs_quotes or (value == "" and settings.csv_null_value is not None):
        return '"' + value.replace('"', '""') + '"'
    return value


def csv_line(values: Sequence[Any], settings: S3TargetSettings) -> str:
    fields = (csv_field(format_value(v, settings.csv_null_value), settings) for v in values)
    return settings.csv_delimiter.join(fields) + settings.csv_row_delimiter


def header_line(layout: FileLayout, settings: S3TargetSettings) -> str:
    return csv_line(layout.header(), settings) if settings.add_column_name else ""


def split_into_files(
    layout: FileLayout, rows: Sequence[ChangeRow], settings: S3TargetSettings, max_rows: int | None = None
) -> list[str]:
    """CSV texts for `rows`, each at most MaxFileSize (and `max_rows` rows), every one with the header."""
    max_bytes = settings.max_file_size_kb * 1024
    header = header_line(layout, settings)
    files: list[str] = []
    current: list[str] = []
    size = len(header.encode())
    for row in rows:
        line = csv_line(layout.record(row), settings)
        line_size = len(line.encode())
        full = (max_rows is not None and len(current) >= max_rows) or (
            current and size + line_size > max_bytes
        )
        if full:
            files.append(header + "".join(current))
            current, size = [], len(header.encode())
        current.append(line)
        size += line_size
    if current:
        files.append(header + "".join(current))
    return files

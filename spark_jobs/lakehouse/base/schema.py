"""The schema file: each source table's columns, source types and primary key (docs/CONTRACTS.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import types as T

from lakehouse.base.names import check_column_names, check_table_name, qualified, table_name
from lakehouse.base.types import spark_type


@dataclass(frozen=True)
class ColumnSpec:
    name: str
    source_type: str
    nullable: bool = True


@dataclass(frozen=True)
class TableSpec:
    """One source table: `schema.table` as DMS names its folders."""

    source_schema: str
    name: str
    columns: tuple[ColumnSpec, ...]
    primary_key: tuple[str, ...]
    dialect: str
    # The clean table's layout (docs/CONTRACTS.md, "Schema file"): Iceberg partition transforms, each as
    # `bucket(N, col)`, `years|months|days|hours(col)` or `col` (identity), columns in lower case; and the
    # target size of its data files (the writes' and maintenance's). partition_by None: the table keeps
    # the spec it has (a new table: unpartitioned); () unpartitioned. target_file_size_mb None: 128 MB.
    partition_by: tuple[str, ...] | None = None
    target_file_size_mb: int | None = None
    # Keep every version of every row in `<clean table>_history` (lakehouse.apply.history; the schema file's
    # `"history": true` or the jobs' --history_tables).
    history: bool = False

    @property
    def qualified_name(self) -> str:
        return f"{self.source_schema}.{self.name}"

    @property
    def iceberg_name(self) -> str:
        """Clean-zone table name: `<schema>_<table>`, lower case, `_` for any character Glue and Athena
        don't take in a table name."""
        return table_name(self.source_schema, self.name)

    @property
    def has_primary_key(self) -> bool:
        return bool(self.primary_key)

    def column(self, name: str) -> ColumnSpec | None:
        lowered = name.lower()
        return next((c for c in self.columns if c.name.lower() == lowered), None)

    def spark_type_of(self, name: str) -> T.DataType | None:
        spec = self.column(name)
        return spark_type(spec.source_type, self.dialect) if spec else None

    def spark_schema(self) -> T.StructType:
        return T.StructType(
            [T.StructField(c.name, spark_type(c.source_type, self.dialect), True) for c in self.columns]
        )


@dataclass(frozen=True)
class SchemaFile:
    dialect: str
    tables: dict[str, TableSpec]
    # Tables the lake can't hold as the schema file describes them: `schema.table` -> why (each names the
    # table). Only a schema file loaded with `per_table=True` has any; the jobs report each as a failed
    # table and go on with the others.
    refused: dict[str, str] = field(default_factory=dict)

    def find(self, source_schema: str, table: str) -> TableSpec | None:
        key = qualified(source_schema, table).lower()
        return next((spec for name, spec in self.tables.items() if name.lower() == key), None)

    def refusal(self, qualified_name: str) -> str | None:
        """Why the schema file's table `schema.table` (any case) was refused, if it was."""
        key = qualified_name.lower()
        return next((why for name, why in self.refused.items() if name.lower() == key), None)

    @classmethod
    def from_dict(cls, document: dict[str, Any], per_table: bool = False) -> SchemaFile:
        """The schema file, checked: every name one the lake can hold (lakehouse.base.names), every type one it
        can map, every primary key among its table's columns, no two tables with one clean name. Any
        problem is a ValueError naming the table; with `per_table`, that table (both tables of a pair
        that would share a clean name) is refused instead (`refused`) and the others stand."""
        if not isinstance(document, dict) or not isinstance(document.get("tables"), dict):
            raise ValueError("schema file: expected an object with a 'tables' object (docs/CONTRACTS.md)")
        dialect = document.get("dialect", "mysql")
        tables: dict[str, TableSpec] = {}
        refused: dict[str, str] = {}
        for name, body in document["tables"].items():
            try:
                tables[name] = _table_spec(name, body, dialect)
            except ValueError as error:
                if not per_table:
                    raise
                refused[name] = str(error)
        by_clean: dict[str, list[str]] = {}
        for name, spec in tables.items():
            by_clean.setdefault(spec.iceberg_name, []).append(name)
        for clean, names in by_clean.items():
            if len(names) < 2:
                continue
            why = (
                f"schema file: {' and '.join(repr(n) for n in names)} would both be the clean table {clean} "
                "(names differing only in case or in characters that become '_'); exclude or rename all but "
                "one in the DMS task's table mappings"
            )
            if not per_table:
                raise ValueError(why)
            for name in names:
                refused[name] = why
                del tables[name]
        return cls(dialect, tables, refused)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": 1,
            "dialect": self.dialect,
            "tables": {
                qualified: {
                    **({"schema": spec.source_schema, "table": spec.name} if "." in spec.name else {}),
                    "primary_key": list(spec.primary_key),
                    "columns": [
                        {"name": c.name, "type": c.source_type, "nullable": c.nullable} for c in spec.columns
                    ],
                    **({"partition_by": list(spec.partition_by)} if spec.partition_by is not None else {}),
                    **(
                        {"target_file_size_mb": spec.target_file_size_mb}
                        if spec.target_file_size_mb is not None
                        else {}
                    ),
                    **({"history": True} if spec.history else {}),
                }
                for qualified, spec in self.tables.items()
            },
        }


_TRANSFORM = re.compile(
    r"^\s*(?:(bucket)\s*\(\s*(\d+)\s*,\s*(.+?)\s*\)|(years|months|days|hours)\s*\(\s*(.+?)\s*\)|(.+?))\s*$",
    re.IGNORECASE,
)
_TIME_TRANSFORMS = {
    "years": (T.DateType, T.TimestampType, T.TimestampNTZType),
    "months": (T.DateType, T.TimestampType, T.TimestampNTZType),
    "days": (T.DateType, T.TimestampType, T.TimestampNTZType),
    "hours": (T.TimestampType, T.TimestampNTZType),
}
MAX_BUCKETS = 65536


def partition_transforms(
    name: str, value: Any, columns: tuple[ColumnSpec, ...], dialect: str
) -> tuple[str, ...] | None:
    """The schema file's `partition_by` of table `name`, checked and normalised (`bucket(16, id)`,
    `days(sold_at)`, `region`): each transform one Iceberg has, of one of the table's columns (lower
    case, as in the clean table), of a type it applies to. A ValueError says what is wrong."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(
            f"schema file: {name!r} partition_by must be a list of transforms such as "
            '["bucket(16, id)"] or ["days(created_at)"], not ' + repr(value)
        )
    by_name = {c.name.lower(): c for c in columns}
    transforms: list[str] = []
    for text in value:
        match = _TRANSFORM.match(text)
        _bucket, buckets, bucket_column, time_unit, time_column, identity = (
            match.groups() if match else (None,) * 6
        )
        column = (bucket_column or time_column or identity or "").lower()
        if not match or column not in by_name:
            raise ValueError(
                f"schema file: {name!r} partition_by {text!r}: expected bucket(N, column), years(column), "
                "months(column), days(column), hours(column) or a column, of one of the table's columns"
            )
        data_type = spark_type(by_name[column].source_type, dialect)
        if buckets is not None:  # bucket(N, column)
            if not 1 <= int(buckets) <= MAX_BUCKETS:
                raise ValueError(
                    f"schema file: {name!r} partition_by {text!r}: between 1 and {MAX_BUCKETS} buckets"
                )
            transforms.append(f"bucket({int(buckets)}, {column})")
        elif time_unit:
            time_unit = time_unit.lower()
            if not isinstance(data_type, _TIME_TRANSFORMS[time_unit]):
                raise ValueError(
                    f"schema file: {name!r} partition_by {text!r}: {time_unit} applies to a "
                    f"{'timestamp' if time_unit == 'hours' else 'date or timestamp'} column, and {column} is "
                    f"{data_type.simpleString()}"
                )
            transforms.append(f"{time_unit}({column})")
        else:
            transforms.append(column)
    if len({t for t in transforms}) != len(transforms):
        raise ValueError(f"schema file: {name!r} partition_by {value!r} names one transform twice")
    return tuple(transforms)


def parse_transform(text: str) -> tuple[str | None, int | None, str]:
    """A normalised transform (`partition_transforms`) as (transform or None for identity, bucket count
    or None, column)."""
    match = _TRANSFORM.match(text)
    if match is None:
        raise ValueError(f"not a partition transform: {text!r}")
    bucket, buckets, bucket_column, time_unit, time_column, identity = match.groups()
    if bucket:
        return "bucket", int(buckets), bucket_column
    if time_unit:
        return time_unit.lower(), None, time_column
    return None, None, identity


def target_file_size(name: str, value: Any) -> int | None:
    """The schema file's `target_file_size_mb` of table `name`: a whole number of MB, 1 to 4096."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
        raise ValueError(
            f"schema file: {name!r} target_file_size_mb must be a whole number of MB from 1 to 4096, "
            f"not {value!r}"
        )
    return value


def _schema_and_table(name: str, body: Any) -> tuple[str, str]:
    """`schema.table` split at its last `.`, unless the entry says both (`"schema"`, `"table"`: a table
    name holding a `.`, which the key alone can't tell from a schema name holding one)."""
    if isinstance(body, dict) and ("schema" in body or "table" in body):
        source_schema, table = body.get("schema"), body.get("table")
        if (
            not isinstance(source_schema, str)
            or not isinstance(table, str)
            or f"{source_schema}.{table}" != name
        ):
            raise ValueError(
                f"schema file: {name!r}: its 'schema' {source_schema!r} and 'table' {table!r} must both be given "
                "and spell its name as schema.table"
            )
        return source_schema, table
    source_schema, _, table = name.rpartition(".")
    return source_schema, table


def _table_spec(name: str, body: Any, dialect: str) -> TableSpec:
    """One entry of the schema file, checked; a ValueError names the table."""
    source_schema, table = _schema_and_table(name, body)
    if not source_schema:
        raise ValueError(f"schema file: table {name!r} must be named schema.table")
    try:
        check_table_name(source_schema, table)
        columns = tuple(
            ColumnSpec(c["name"], c["type"], bool(c.get("nullable", True))) for c in body["columns"]
        )
        check_column_names(name, [c.name for c in columns])
        names = {c.name.lower() for c in columns}
        primary_key = tuple(body.get("primary_key") or ())
        missing = [k for k in primary_key if not isinstance(k, str) or k.lower() not in names]
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(
            f"schema file: {name!r}: malformed entry ({type(error).__name__}: {error})"
        ) from None
    except ValueError as error:
        raise ValueError(f"schema file: {error}") from None
    if missing:
        raise ValueError(f"schema file: {name!r} primary key {missing} is not among its columns")
    spec = TableSpec(source_schema, table, columns, primary_key, body.get("dialect", dialect))
    for column in columns:
        try:
            spark_type(column.source_type, spec.dialect)
        except ValueError as error:
            raise ValueError(f"schema file: {name}.{column.name}: {error}") from None
    return replace(
        spec,
        partition_by=partition_transforms(name, body.get("partition_by"), columns, spec.dialect),
        target_file_size_mb=target_file_size(name, body.get("target_file_size_mb")),
        history=history_flag(name, body.get("history")),
    )


def history_flag(name: str, value: Any) -> bool:
    """The schema file's `history` of table `name`: true or false (absent: false)."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ValueError(f"schema file: {name!r} history must be true or false, not {value!r}")
    return value

"""The schema file: each source table's columns, source types and primary key (docs/CONTRACTS.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import types as T

from lakehouse.names import check_column_names, check_source_name, table_name
from lakehouse.types import spark_type


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

    def find(self, source_schema: str, table: str) -> TableSpec | None:
        key = f"{source_schema}.{table}".lower()
        return next((spec for name, spec in self.tables.items() if name.lower() == key), None)

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> SchemaFile:
        """The schema file, checked: every name one the lake can hold, every type one it can map, every
        primary key among its table's columns. Any problem is a ValueError naming the table."""
        if not isinstance(document, dict) or not isinstance(document.get("tables"), dict):
            raise ValueError("schema file: expected an object with a 'tables' object (docs/CONTRACTS.md)")
        dialect = document.get("dialect", "mysql")
        tables: dict[str, TableSpec] = {}
        clean_names: dict[str, str] = {}
        for qualified, body in document["tables"].items():
            source_schema, _, name = qualified.rpartition(".")
            if not source_schema:
                raise ValueError(f"schema file: table {qualified!r} must be named schema.table")
            try:
                check_source_name(source_schema, "schema")
                check_source_name(name, "table")
                columns = tuple(
                    ColumnSpec(c["name"], c["type"], bool(c.get("nullable", True))) for c in body["columns"]
                )
                check_column_names(qualified, [c.name for c in columns])
            except (KeyError, TypeError) as error:
                raise ValueError(
                    f"schema file: {qualified}: malformed entry ({type(error).__name__}: {error})"
                ) from None
            except ValueError as error:
                raise ValueError(f"schema file: {error}") from None
            names = {c.name.lower() for c in columns}
            primary_key = tuple(body.get("primary_key") or ())
            missing = [k for k in primary_key if k.lower() not in names]
            if missing:
                raise ValueError(f"schema file: {qualified} primary key {missing} is not among its columns")
            spec = TableSpec(source_schema, name, columns, primary_key, body.get("dialect", dialect))
            for column in columns:
                try:
                    spark_type(column.source_type, spec.dialect)
                except ValueError as error:
                    raise ValueError(f"schema file: {qualified}.{column.name}: {error}") from None
            if spec.iceberg_name in clean_names:
                raise ValueError(
                    f"schema file: {clean_names[spec.iceberg_name]} and {qualified} would both be the clean "
                    f"table {spec.iceberg_name}"
                )
            clean_names[spec.iceberg_name] = qualified
            tables[qualified] = spec
        return cls(dialect, tables)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": 1,
            "dialect": self.dialect,
            "tables": {
                qualified: {
                    "primary_key": list(spec.primary_key),
                    "columns": [
                        {"name": c.name, "type": c.source_type, "nullable": c.nullable} for c in spec.columns
                    ],
                }
                for qualified, spec in self.tables.items()
            },
        }

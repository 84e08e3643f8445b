"""The schema file: each source table's columns, source types and primary key (docs/CONTRACTS.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import types as T

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
        """Clean-zone table name: `<schema>_<table>`, lower case (Glue/Athena names are lower case)."""
        return f"{self.source_schema}_{self.name}".lower()

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
        dialect = document.get("dialect", "mysql")
        tables: dict[str, TableSpec] = {}
        for qualified, body in document["tables"].items():
            source_schema, _, name = qualified.rpartition(".")
            if not source_schema:
                raise ValueError(f"schema file: table {qualified!r} must be named schema.table")
            columns = tuple(
                ColumnSpec(c["name"], c["type"], bool(c.get("nullable", True))) for c in body["columns"]
            )
            names = {c.name.lower() for c in columns}
            primary_key = tuple(body.get("primary_key") or ())
            missing = [k for k in primary_key if k.lower() not in names]
            if missing:
                raise ValueError(f"schema file: {qualified} primary key {missing} is not among its columns")
            tables[qualified] = TableSpec(
                source_schema, name, columns, primary_key, body.get("dialect", dialect)
            )
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

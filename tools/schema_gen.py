"""Generate the schema file from the source database's catalog (SQLAlchemy reflection).

    python -m tools.schema_gen --url 'mysql+pymysql://user:pw@host/db' --schema sales --out schema.json
    python -m tools.schema_gen --url sqlite:///var/source.db --schema main --out schema.json

Run it again after DDL on the source: the CDC job reads the schema file on every run, so added
columns get their real types and widened types are widened.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

DIALECT_NAMES = {
    "mysql": "mysql",
    "mariadb": "mysql",
    "mssql": "mssql",
    "postgresql": "postgresql",
    "sqlite": "sqlite",
}


def _type_text(column_type: Any, dialect: Any) -> str:
    """A column's type as the catalog spells it; an enum as `enum` (PostgreSQL names its enum types freely,
    and DMS writes their labels as text)."""
    from sqlalchemy import Enum

    if isinstance(column_type, Enum) and dialect.name == "postgresql":
        return "enum"
    return column_type.compile(dialect=dialect).lower()


def reflect_schema(url: str, schemas: Sequence[str], tables: Sequence[str] = ()) -> dict[str, Any]:
    """Read columns, types and primary keys of every table in `schemas` from the live catalog."""
    from sqlalchemy import create_engine, inspect

    engine = create_engine(url)
    try:
        dialect = DIALECT_NAMES.get(engine.dialect.name)
        if dialect is None:
            raise ValueError(f"unsupported source dialect {engine.dialect.name!r}")
        inspector = inspect(engine)
        document: dict[str, Any] = {"version": 1, "dialect": dialect, "tables": {}}
        for schema in schemas:
            reflect_from = None if dialect == "sqlite" and schema == "main" else schema
            for table in sorted(inspector.get_table_names(schema=reflect_from)):
                if tables and f"{schema}.{table}" not in tables and table not in tables:
                    continue
                columns = [
                    {
                        "name": column["name"],
                        "type": _type_text(column["type"], engine.dialect),
                        "nullable": bool(column.get("nullable", True)),
                    }
                    for column in inspector.get_columns(table, schema=reflect_from)
                ]
                primary_key = (
                    inspector.get_pk_constraint(table, schema=reflect_from).get("constrained_columns") or []
                )
                # a name holding a "." says its parts: the key alone splits at its last "."
                parts = {"schema": schema, "table": table} if "." in table else {}
                document["tables"][f"{schema}.{table}"] = parts | {
                    "primary_key": primary_key,
                    "columns": columns,
                }
        return document
    finally:
        engine.dispose()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", required=True, help="SQLAlchemy URL of the source database")
    parser.add_argument("--schema", action="append", required=True, help="source schema (repeatable)")
    parser.add_argument("--table", action="append", default=[], help="only these tables (repeatable)")
    parser.add_argument("--out", default="-", help="output file, or - for standard output")
    args = parser.parse_args(argv)
    document = reflect_schema(args.url, args.schema, args.table)
    text = json.dumps(document, indent=2) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        from lakehouse.io.storage import write_text

        write_text(args.out, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A deterministic TPC-DS-like source database (PostgreSQL or SQLite, no Spark) and a realistic change workload.

    python -m tools.sample_data --db var/source.db --scale 1 --seed 42
    python -m tools.sample_data --db postgresql://postgres@/postgres?host=/tmp/pg --workload 500 --seed 7

Tables (schema `public` in PostgreSQL, `main` in SQLite; the TPC-DS web channel subset): `web_sales` (primary key ws_item_sk +
ws_order_number, like TPC-DS), `customer`, `customer_address`, `item`, `date_dim`, `time_dim`.
Types are declared as a real source would (`DECIMAL(7,2)`, `VARCHAR(50)`, `DATE`, `TIMESTAMP`), so
schema reflection (`tools.schema_gen`) yields the right Iceberg types. Values are realistic: skewed
item popularity, a seasonal sales curve, TPC-DS price arithmetic, nullable columns with realistic null
rates, and unicode names holding commas, quotes and newlines (they exercise the DMS CSV format).

Scale 1 is about 20,000 web_sales rows (the demo, a few minutes on 2 cores); larger scales grow every
table but `date_dim` and `time_dim` linearly. The same `seed` and `scale` give byte-identical data.

The database stays plain: the local DMS reads PostgreSQL through a replication slot and adds its own capture
triggers to SQLite. For
tests and benchmarks without the emulator, `run_workload` also returns the row changes it made, and
`write_full_load_files` / `write_cdc_files` render them as DMS files.
"""

# The package by concern: `schema` (tables, columns, primary keys), `rows` (the seeded row generator), `workload`
# (the change stream run on the source), `writer` (the source database, its schema file and DMS files), and
# `__main__` (the command line). Importers use the names below.

from __future__ import annotations

from tools.sample_data.rows import CLOCK_START, DATE_DIM_DAYS, Sizes, date_sk, sk_date
from tools.sample_data.schema import DDL, PRIMARY_KEYS, SOURCE_SCHEMA, TABLES, Source
from tools.sample_data.workload import DEFAULT_MIX, RowChange, WorkloadResult, run_workload
from tools.sample_data.writer import (
    create_source_database,
    read_rows,
    schema_document,
    write_cdc_files,
    write_full_load_files,
)

__all__ = [
    "CLOCK_START",
    "DATE_DIM_DAYS",
    "DDL",
    "DEFAULT_MIX",
    "PRIMARY_KEYS",
    "SOURCE_SCHEMA",
    "TABLES",
    "RowChange",
    "Sizes",
    "Source",
    "WorkloadResult",
    "create_source_database",
    "date_sk",
    "read_rows",
    "run_workload",
    "schema_document",
    "sk_date",
    "write_cdc_files",
    "write_full_load_files",
]

"""Writing the demo source: the database itself (created and filled), its schema file by reflection, its
rows read back, and its full load and row changes rendered as DMS files without the emulator."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from lake_contracts.dms_files import cdc_file_name, change_seq, load_file_name

from tools.dms_csv import CsvFormat, write_dms_csv
from tools.sample_data.rows import CLOCK_START, RowGenerator, Sizes, date_rows, sales_rows, time_rows
from tools.sample_data.schema import DDL, PRIMARY_KEYS, SOURCE_SCHEMA, TABLES, Source
from tools.sample_data.workload import RowChange
from tools.source_db import SourceConnection, SourceDatabase


def _insert(db: SourceConnection, table: str, rows: Iterable[Sequence[Any]]) -> int:
    columns = db.columns(table)
    statement = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    count = 0
    for chunk in _chunks(rows, 5000):
        db.executemany(statement, chunk)
        count += len(chunk)
    return count


def _chunks(rows: Iterable[Sequence[Any]], size: int) -> Iterator[list[Sequence[Any]]]:
    iterator = iter(rows)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def create_source_database(source: Source, scale: float = 1.0, seed: int = 42) -> dict[str, int]:
    """Write the source tables (replacing an SQLite file, or the tables of a PostgreSQL database, that are
    there) and return each table's row count. Deterministic: the same (scale, seed) gives the same rows."""
    database = SourceDatabase.of(source)
    if database.dialect == "sqlite":
        target = Path(database.location)
        target.parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)
    sizes = Sizes.at(scale)
    gen = RowGenerator(seed)
    counts: dict[str, int] = {}
    with database.connect() as db:
        db.begin()
        for table, ddl in DDL.items():
            db.drop_table(table)
            db.execute(ddl)
        counts["date_dim"] = _insert(db, "date_dim", date_rows())
        counts["time_dim"] = _insert(db, "time_dim", time_rows())
        counts["customer_address"] = _insert(
            db, "customer_address", (gen.address(sk) for sk in range(1, sizes.addresses + 1))
        )
        counts["customer"] = _insert(
            db,
            "customer",
            (
                gen.customer(sk, sizes.addresses, CLOCK_START - timedelta(days=gen.random.randint(1, 900)))
                for sk in range(1, sizes.customers + 1)
            ),
        )
        items = [gen.item(sk) for sk in range(1, sizes.items + 1)]
        counts["item"] = _insert(db, "item", items)
        counts["web_sales"] = _insert(db, "web_sales", sales_rows(gen, sizes, items))
        db.commit()
    return counts


def schema_document(source: Source) -> dict[str, Any]:
    """The schema file (docs/CONTRACTS.md) of the source database, by catalog reflection."""
    from tools.schema_gen import reflect_schema

    database = SourceDatabase.of(source)
    return reflect_schema(database.sqlalchemy_url, [database.schema])


def read_rows(source: Source, table: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """A table's columns and rows (ordered by primary key) as the database returns them."""
    with SourceDatabase.of(source).connect() as db:
        columns = db.columns(table)
        rows = db.execute(f"SELECT * FROM {table} ORDER BY {', '.join(PRIMARY_KEYS[table])}").fetchall()
    return columns, rows


def write_full_load_files(
    db_path: str | Path,
    out_dir: str | Path,
    rows_per_file: int = 50_000,
    fmt: CsvFormat | None = None,
    load_time: datetime = CLOCK_START,
    tables: Sequence[str] = TABLES,
) -> list[str]:
    """Each table as DMS full-load files `out_dir/main/<table>/LOAD00000001.csv` (HEX counter, `Op` = I,
    no change sequence), `rows_per_file` rows each. Returns the paths written."""
    fmt = fmt or CsvFormat()
    written: list[str] = []
    for table in tables:
        columns, rows = read_rows(db_path, table)
        folder = Path(out_dir) / SOURCE_SCHEMA / table
        folder.mkdir(parents=True, exist_ok=True)
        for counter, chunk in enumerate(_chunks(rows, rows_per_file), start=1):
            path = folder / load_file_name(counter)
            path.write_text(
                write_dms_csv(columns, [("I", "", load_time, r) for r in chunk], fmt), encoding="utf-8"
            )
            written.append(str(path))
    return written


def write_cdc_files(
    db_path: str | Path,
    changes: Sequence[RowChange],
    out_dir: str | Path,
    first_change_seq: int = 1,
    changes_per_file: int = 10_000,
    fmt: CsvFormat | None = None,
) -> list[str]:
    """Render row changes (in commit order) as DMS CDC files, `out_dir/main/<table>/<time>.csv`, with
    increasing `AR_H_CHANGE_SEQ` from `first_change_seq`. A file holds one table's consecutive changes;
    file names follow the changes' commit times, so a later file never sorts before an earlier one."""
    fmt = fmt or CsvFormat()
    columns = {}
    with sqlite3.connect(db_path) as db:
        for table in {c.table for c in changes}:
            columns[table] = _columns(db, table)
    pending: dict[str, list[tuple[int, RowChange]]] = {}
    written: list[str] = []
    used_names: set[Path] = set()

    def flush(table: str) -> None:
        batch = pending.pop(table, [])
        if not batch:
            return
        folder = Path(out_dir) / SOURCE_SCHEMA / table
        folder.mkdir(parents=True, exist_ok=True)
        moment = batch[-1][1].commit_time
        path = folder / cdc_file_name(moment)
        while path in used_names or path.exists():
            moment += timedelta(milliseconds=1)
            path = folder / cdc_file_name(moment)
        used_names.add(path)
        rows = [(c.op, change_seq(seq), c.commit_time, c.values) for seq, c in batch]
        path.write_text(write_dms_csv(columns[table], rows, fmt), encoding="utf-8")
        written.append(str(path))

    for seq, change in enumerate(changes, start=first_change_seq):
        pending.setdefault(change.table, []).append((seq, change))
        if len(pending[change.table]) >= changes_per_file:
            flush(change.table)
    for table in sorted(pending):
        flush(table)
    return sorted(written, key=lambda p: Path(p).name)

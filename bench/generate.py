"""Fast generator of DMS-format CSV files for the benchmarks (pyarrow, vectorised, cached on disk).

Layout exactly as DMS writes it (docs/CONTRACTS.md, lake_contracts.dms_files): a header row
`Op,dms_timestamp,AR_H_CHANGE_SEQ,<columns…>`, RFC 4180 quoting only where needed, null as an empty
field, 35-digit zero-padded change sequences (empty in LOAD files), LOAD files with a hex counter and
CDC files named by time. Or, with `fmt="parquet"`, DMS's Parquet output (DataFormat=parquet): the same
columns, Op / timestamp / sequence as strings, the data typed as DMS maps it. Two tables:

- `bench.orders` (narrow, 8 columns, primary key `order_id`): full load and CDC.
- `bench.wide_sales` (wide, 40 columns, primary key `ws_id`): full load only.

The same arguments give byte-identical files (seeded numpy).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SOURCE_SCHEMA = "bench"
NARROW = "orders"
WIDE = "wide_sales"
BASE_TIME = datetime(2026, 11, 22, 10, 0, 0)
SEQ_DIGITS = 35
STATUSES = np.array(["NEW", "PAID", "SHIPPED", "DELIVERED", "RETURNED", "CANCELLED"])
NOTES = np.array(["", "gift wrap", 'says "fragile"', "leave at door, ring twice", "Zoë's order", "rush"])

NARROW_COLUMNS: list[tuple[str, str]] = [
    ("order_id", "bigint"),
    ("customer_id", "int"),
    ("status", "varchar(16)"),
    ("quantity", "int"),
    ("amount", "decimal(12,2)"),
    ("note", "varchar(120)"),
    ("created_at", "datetime"),
    ("updated_at", "datetime"),
]


def wide_columns() -> list[tuple[str, str]]:
    columns = [("ws_id", "bigint")]
    columns += [(f"ws_int_{i:02d}", "int") for i in range(12)]
    columns += [(f"ws_amount_{i:02d}", "decimal(7,2)") for i in range(12)]
    columns += [(f"ws_text_{i:02d}", "varchar(40)") for i in range(8)]
    columns += [(f"ws_date_{i:02d}", "date") for i in range(3)]
    columns += [(f"ws_time_{i:02d}", "datetime") for i in range(4)]
    return columns


def schema_document() -> dict:
    return {
        "version": 1,
        "dialect": "mysql",
        "tables": {
            f"{SOURCE_SCHEMA}.{NARROW}": {
                "primary_key": ["order_id"],
                "columns": [{"name": n, "type": t, "nullable": n != "order_id"} for n, t in NARROW_COLUMNS],
            },
            f"{SOURCE_SCHEMA}.{WIDE}": {
                "primary_key": ["ws_id"],
                "columns": [{"name": n, "type": t, "nullable": n != "ws_id"} for n, t in wide_columns()],
            },
        },
    }


def _timestamps(rng: np.random.Generator, n: int, start: datetime, span_seconds: int) -> pa.Array:
    micros = rng.integers(0, span_seconds * 1_000_000, n, dtype=np.int64)
    base = np.datetime64(start, "us")
    return pa.array(base + micros.astype("timedelta64[us]"), pa.timestamp("us"))


def _ts_text(values: pa.Array) -> pa.Array:
    return pc.strftime(values, format="%Y-%m-%d %H:%M:%S")  # microseconds included for timestamp[us]


def _money(rng: np.random.Generator, n: int, high: float) -> pa.Array:
    cents = rng.integers(0, int(high * 100), n)
    return pa.array((cents / 100).round(2)).cast(pa.string())


def _with_nulls(rng: np.random.Generator, values: pa.Array, rate: float) -> pa.Array:
    mask = pa.array(rng.random(len(values)) < rate)
    return pc.if_else(mask, pa.scalar(None, values.type), values)


def narrow_rows(rng: np.random.Generator, keys: np.ndarray, moment: datetime) -> dict[str, pa.Array]:
    n = len(keys)
    created = _timestamps(rng, n, moment - timedelta(days=365), 365 * 86400)
    return {
        "order_id": pa.array(keys.astype(np.int64)).cast(pa.string()),
        "customer_id": pa.array(rng.integers(1, 2_000_000, n)).cast(pa.string()),
        "status": pa.array(STATUSES[rng.integers(0, len(STATUSES), n)]),
        "quantity": pa.array(rng.integers(1, 100, n)).cast(pa.string()),
        "amount": _money(rng, n, 100_000),
        "note": _with_nulls(rng, pa.array(NOTES[rng.integers(0, len(NOTES), n)]), 0.3),
        "created_at": _ts_text(created),
        "updated_at": _ts_text(_timestamps(rng, n, moment, 3600)),
    }


def wide_rows(rng: np.random.Generator, keys: np.ndarray, moment: datetime) -> dict[str, pa.Array]:
    n = len(keys)
    rows: dict[str, pa.Array] = {}
    for name, source_type in wide_columns():
        if name == "ws_id":
            rows[name] = pa.array(keys.astype(np.int64)).cast(pa.string())
        elif source_type == "int":
            rows[name] = _with_nulls(rng, pa.array(rng.integers(0, 1_000_000, n)).cast(pa.string()), 0.05)
        elif source_type.startswith("decimal"):
            rows[name] = _with_nulls(rng, _money(rng, n, 99_999), 0.05)
        elif source_type.startswith("varchar"):
            rows[name] = _with_nulls(rng, pa.array(NOTES[rng.integers(0, len(NOTES), n)]), 0.1)
        elif source_type == "date":
            days = rng.integers(0, 3650, n).astype("timedelta64[D]") + np.datetime64("2020-01-01", "D")
            rows[name] = pa.array(days, pa.date32()).cast(pa.string())
        else:
            rows[name] = _ts_text(_timestamps(rng, n, moment - timedelta(days=30), 30 * 86400))
    return rows


def _csv_field(values: pa.Array) -> pa.Array:
    """RFC 4180 quoting only where needed (as DMS does); null stays null (an empty field)."""
    needs = pc.match_substring_regex(values, '[",\\r\\n]')
    quoted = pc.binary_join_element_wise('"', pc.replace_substring(values, '"', '""'), '"', "")
    return pc.if_else(needs, quoted, values)


def _write(path: Path, op: pa.Array, ts: pa.Array, seq: pa.Array, rows: dict[str, pa.Array]) -> int:
    """One DMS CSV file: header, then one line per row, built column-wise in Arrow and written in one go."""
    columns = {"Op": op, "dms_timestamp": ts, "AR_H_CHANGE_SEQ": seq, **rows}
    fields = [_csv_field(values.cast(pa.string())) for values in columns.values()]
    lines = pc.binary_join_element_wise(
        *fields, pa.scalar("", pa.string()), ",", null_handling="replace", null_replacement=""
    )
    # Each row joined with a trailing "," before the empty last element: strip it, add the newline.
    lines = pc.binary_join_element_wise(pc.utf8_slice_codeunits(lines, 0, -1), "", "\n")
    chunks = lines.chunks if isinstance(lines, pa.ChunkedArray) else [lines]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as out:
        out.write((",".join(columns) + "\n").encode())
        for chunk in chunks:  # string data is contiguous: write the bytes between the first and last offset
            offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32, count=len(chunk) + chunk.offset + 1)
            first, last = int(offsets[chunk.offset]), int(offsets[-1])
            out.write(memoryview(chunk.buffers()[2])[first:last])
    tmp.rename(path)
    return path.stat().st_size


_ARROW_TYPES = {"bigint": pa.int64(), "int": pa.int32(), "datetime": pa.timestamp("us"), "date": pa.date32()}


def _arrow_type(source_type: str) -> pa.DataType:
    """The Parquet type DMS writes for a source type (INT4 → INT32, NUMERIC → DECIMAL, …)."""
    if source_type.startswith("decimal"):
        precision, scale = source_type[len("decimal(") : -1].split(",")
        return pa.decimal128(int(precision), int(scale))
    return _ARROW_TYPES.get(source_type, pa.string())


def _write_parquet(
    path: Path, op: pa.Array, ts: pa.Array, seq: pa.Array, rows: dict[str, pa.Array], table: str
) -> int:
    """One DMS Parquet file: the text the generator makes for a column cast to the column's type."""
    import pyarrow.parquet as pq

    types = dict(NARROW_COLUMNS if table == NARROW else wide_columns())
    seq_text = pc.if_else(pc.equal(seq, ""), pa.scalar(None, pa.string()), seq)
    data = {"Op": op, "dms_timestamp": ts, "AR_H_CHANGE_SEQ": seq_text}
    data |= {name: values.cast(_arrow_type(types[name])) for name, values in rows.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(data), path)
    return path.stat().st_size


def _emit(folder: Path, stem: str, op, ts, seq, rows: dict[str, pa.Array], table: str, fmt: str) -> Path:
    if fmt == "parquet":
        path = folder / f"{stem}.parquet"
        _write_parquet(path, op, ts, seq, rows, table)
    else:
        path = folder / f"{stem}.csv"
        _write(path, op, ts, seq, rows)
    return path


def _seq_text(first: int, n: int) -> pa.Array:
    numbers = pa.array(np.arange(first, first + n, dtype=np.int64)).cast(pa.string())
    return pc.utf8_lpad(numbers, width=SEQ_DIGITS, padding="0")


@dataclass(frozen=True)
class FullLoadSpec:
    table: str
    rows: int
    rows_per_file: int = 1_000_000
    seed: int = 1


def write_full_load(raw: Path, spec: FullLoadSpec, fmt: str = "csv") -> list[Path]:
    """LOAD00000001.csv … (hex counter): every row an `I` with an empty change sequence."""
    rng = np.random.default_rng(spec.seed)
    make = narrow_rows if spec.table == NARROW else wide_rows
    folder = raw / SOURCE_SCHEMA / spec.table
    paths = []
    for counter, start in enumerate(range(0, spec.rows, spec.rows_per_file), start=1):
        n = min(spec.rows_per_file, spec.rows - start)
        keys = np.arange(start + 1, start + n + 1)
        op = pa.array(np.full(n, "I"))
        ts = pa.array(np.full(n, BASE_TIME.isoformat(sep=" ", timespec="microseconds")))
        seq = pa.array(np.full(n, ""))
        paths.append(
            _emit(folder, f"LOAD{counter:08X}", op, ts, seq, make(rng, keys, BASE_TIME), spec.table, fmt)
        )
    return paths


@dataclass(frozen=True)
class CdcSpec:
    table_rows: int  # keys 1..table_rows exist after the full load
    changes: int
    files: int = 200
    delete_rate: float = 0.10
    insert_rate: float = 0.15
    hot_keys: float = 0.05  # share of existing keys that get most updates (repeated keys in one batch)
    seed: int = 7


def cdc_ops_and_keys(spec: CdcSpec) -> tuple[np.ndarray, np.ndarray]:
    """Ops and keys of the batch, in change order: 10% deletes, inserts of new keys, updates with
    repeated (hot) keys; some deletes are followed by updates of the same key (an upsert)."""
    rng = np.random.default_rng(spec.seed)
    n = spec.changes
    draw = rng.random(n)
    ops = np.where(
        draw < spec.delete_rate, "D", np.where(draw < spec.delete_rate + spec.insert_rate, "I", "U")
    )
    hot = max(1, int(spec.table_rows * spec.hot_keys))
    keys = np.where(
        rng.random(n) < 0.5,
        rng.integers(1, hot + 1, n),  # hot: repeated within the batch
        rng.integers(1, spec.table_rows + 1, n),
    )
    inserts = ops == "I"
    keys[inserts] = spec.table_rows + 1 + np.arange(int(inserts.sum()))
    return ops, keys


def write_cdc(raw: Path, spec: CdcSpec, table: str = NARROW, fmt: str = "csv") -> list[Path]:
    ops, keys = cdc_ops_and_keys(spec)
    rng = np.random.default_rng(spec.seed + 1)
    make = narrow_rows if table == NARROW else wide_rows
    folder = raw / SOURCE_SCHEMA / table
    per_file = -(-spec.changes // spec.files)
    paths = []
    for index in range(spec.files):
        lo, hi = index * per_file, min(spec.changes, (index + 1) * per_file)
        if lo >= hi:
            break
        moment = BASE_TIME + timedelta(days=1, seconds=index)
        ts = _ts_text(_timestamps(rng, hi - lo, moment, 1))
        rows = make(rng, keys[lo:hi], moment)
        stem = moment.strftime("%Y%m%d-%H%M%S") + f"{moment.microsecond // 1000:03d}"
        seq = _seq_text(10**12 + lo + 1, hi - lo)
        paths.append(_emit(folder, stem, pa.array(ops[lo:hi]), ts, seq, rows, table, fmt))
    return paths


def ensure_dataset(folder: Path, build) -> Path:
    """Build `folder` once (a `.done` marker makes it reusable across runs)."""
    done = folder / ".done"
    if not done.exists():
        folder.mkdir(parents=True, exist_ok=True)
        build(folder)
        done.write_text("ok\n")
    return folder


def write_schema(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(schema_document(), indent=2))
    return path

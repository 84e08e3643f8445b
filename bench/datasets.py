"""The cached benchmark datasets under bench/data/ (built once, reused across runs)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from generate import (
    NARROW,
    SOURCE_SCHEMA,
    WIDE,
    CdcSpec,
    FullLoadSpec,
    ensure_dataset,
    write_cdc,
    write_full_load,
)

DATA = Path(__file__).resolve().parent / "data"
ROWS_PER_LOAD_FILE = 500_000


@dataclass(frozen=True)
class Dataset:
    """Full-load files of `bench.orders` (rows) and one batch of CDC files (changes in `files` files)."""

    rows: int
    changes: int
    files: int = 200
    fmt: str = "csv"  # or "parquet": DMS's DataFormat
    mix: str = "mixed"  # or "inserts": every change an insert of a new key (a serial key's table)

    @property
    def suffix(self) -> str:
        return "" if self.fmt == "csv" else f"-{self.fmt}"

    @property
    def cdc_spec(self) -> CdcSpec:
        if self.mix == "inserts":
            return CdcSpec(self.rows, self.changes, self.files, delete_rate=0.0, insert_rate=1.0)
        return CdcSpec(self.rows, self.changes, self.files)

    @property
    def name(self) -> str:
        mix = "" if self.mix == "mixed" else f"-{self.mix}"
        return f"orders-{self.rows}-{self.changes}-{self.files}{mix}{self.suffix}"

    @property
    def load_raw(self) -> Path:
        return (
            ensure_dataset(
                DATA / f"load-orders-{self.rows}{self.suffix}",
                lambda folder: write_full_load(
                    folder / "raw",
                    FullLoadSpec(NARROW, self.rows, rows_per_file=ROWS_PER_LOAD_FILE),
                    self.fmt,
                ),
            )
            / "raw"
        )

    @property
    def cdc_files(self) -> list[Path]:
        folder = ensure_dataset(
            DATA / f"cdc-{self.name}",
            lambda folder: write_cdc(folder / "raw", self.cdc_spec, fmt=self.fmt),
        )
        return sorted(
            p for p in (folder / "raw" / "bench" / NARROW).iterdir() if p.suffix in (".csv", ".parquet")
        )


def wide_load_raw(rows: int) -> Path:
    return (
        ensure_dataset(
            DATA / f"load-wide-{rows}",
            lambda folder: write_full_load(
                folder / "raw", FullLoadSpec(WIDE, rows, rows_per_file=ROWS_PER_LOAD_FILE)
            ),
        )
        / "raw"
    )


def wide_cdc_files(rows: int, changes: int, files: int = 200) -> list[Path]:
    """A CDC batch of `bench.wide_sales` (40 columns) against keys 1..rows, shaped like the narrow one."""
    folder = ensure_dataset(
        DATA / f"cdc-wide-{rows}-{changes}-{files}",
        lambda folder: write_cdc(folder / "raw", CdcSpec(rows, changes, files), WIDE),
    )
    return sorted((folder / "raw" / SOURCE_SCHEMA / WIDE).glob("*.csv"))

"""Test helpers: write DMS files exactly as DMS does, apply them, read tables back in key order."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from lake_contracts.dms_files import change_seq, load_file_name
from lake_contracts.documents import Manifest, ManifestFile
from lakehouse.base.schema import SchemaFile

from tools.dms_csv import CsvFormat, write_dms_csv

BASE_TIME = datetime(2026, 11, 22, 10, 0, 0, 123456)


def schema_of(
    tables: dict[str, tuple[Sequence[str], Sequence[tuple[str, str]]]], dialect: str = "mysql"
) -> SchemaFile:
    """tables: {"sales.customer": (primary_key, [(column, source type), …])}."""
    return SchemaFile.from_dict(
        {
            "dialect": dialect,
            "tables": {
                name: {"primary_key": list(pk), "columns": [{"name": c, "type": t} for c, t in columns]}
                for name, (pk, columns) in tables.items()
            },
        }
    )


@dataclass
class DmsWriter:
    """Writes DMS-format files under `root/<schema>/<table>/`, with increasing change sequences and
    CDC file names that sort in arrival order. With `parquet_types` ({column: pyarrow type}) it writes
    DMS's Parquet output (DataFormat=parquet) instead of CSV."""

    root: Path
    fmt: CsvFormat = field(default_factory=CsvFormat)
    parquet_types: dict[str, Any] | None = None
    _seq: itertools.count = field(default_factory=lambda: itertools.count(1))
    _clock: itertools.count = field(default_factory=lambda: itertools.count(1))

    def table_dir(self, qualified: str) -> Path:
        schema, table = qualified.split(".")
        path = self.root / schema / table
        path.mkdir(parents=True, exist_ok=True)
        return path

    def load(
        self,
        qualified: str,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        counter: int = 1,
        snapshot_seq: int | None = None,
        moment: datetime = BASE_TIME,
    ) -> str:
        """LOAD rows carry no change sequence, unless DMS stamps them with the snapshot's position; their
        timestamp column is when DMS read them (`moment`)."""
        seq = change_seq(snapshot_seq) if snapshot_seq is not None else ""
        path = self.table_dir(qualified) / load_file_name(counter)
        records = [("I", seq, moment, r) for r in rows]
        if self.parquet_types is not None:
            return self._parquet(path.with_suffix(".parquet"), columns, records)
        path.write_text(write_dms_csv(columns, records, self.fmt), encoding="utf-8")
        return str(path)

    def _parquet(self, path: Path, columns: Sequence[str], records: Sequence[tuple]) -> str:
        """DMS's Parquet: Op, the timestamp column and AR_H_CHANGE_SEQ as strings, the data typed."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        assert self.parquet_types is not None
        data = {
            "Op": pa.array([op for op, _, _, _ in records], pa.string()),
            self.fmt.timestamp_column: pa.array(
                [m.isoformat(sep=" ", timespec="microseconds") for _, _, m, _ in records], pa.string()
            ),
        }
        if self.fmt.add_change_seq:
            data["AR_H_CHANGE_SEQ"] = pa.array([seq or None for _, seq, _, _ in records], pa.string())
        for index, column in enumerate(columns):
            data[column] = pa.array(
                [values[index] for _, _, _, values in records], self.parquet_types[column]
            )
        pq.write_table(pa.table(data), path)
        return str(path)

    def cdc(
        self,
        qualified: str,
        columns: Sequence[str],
        changes: Sequence[tuple[str, Sequence[Any]]],
        seqs: Sequence[int | None] | None = None,
        name: str | None = None,
        folder: str | None = None,
    ) -> str:
        """changes: [(op, values)]; sequences rise unless given. Files are named by a rising time unless
        `name` is given; `folder` puts the file below date folders (DatePartitionEnabled)."""
        moment = BASE_TIME + timedelta(seconds=next(self._clock))
        name = name or moment.strftime("%Y%m%d-%H%M%S") + f"{moment.microsecond // 1000:03d}.csv"
        numbers = list(seqs) if seqs is not None else [next(self._seq) for _ in changes]
        rows = [
            (op, change_seq(n) if n is not None else "", moment, values)
            for (op, values), n in zip(changes, numbers, strict=True)
        ]
        directory = self.table_dir(qualified) / folder if folder else self.table_dir(qualified)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / name
        if self.parquet_types is not None:
            return self._parquet(path.with_suffix(".parquet"), columns, rows)
        path.write_text(write_dms_csv(columns, rows, self.fmt), encoding="utf-8")
        return str(path)


def manifest(*paths: str, run_id: str = "test-run") -> Manifest:
    return Manifest(run_id, [ManifestFile(p) for p in paths])


def rows_of(spark, table: str, columns: Sequence[str] | None = None) -> list[tuple]:
    """The whole table as tuples ordered by its columns (first column first): easy to assert on."""
    from lakehouse.base.names import quote
    from pyspark.sql import functions as F

    frame = spark.table(table)
    chosen = [F.col(quote(c)) for c in (columns or [c for c in frame.columns if not c.startswith("dms_")])]
    return [tuple(row) for row in frame.select(*chosen).orderBy(*chosen).collect()]


def snapshot_count(spark, table: str) -> int:
    return spark.sql(f"SELECT count(*) AS n FROM {table}.snapshots").first()["n"]


def last_execution(spark) -> int:
    """The id of the newest SQL execution of the session (-1: none yet)."""
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    return max((executions.apply(i).executionId() for i in range(executions.size())), default=-1)


def scan_metric(spark, after: int, name: str) -> int:
    """The figure `name` of the scans (an Iceberg scan metric: "number of result data files", "number of file
    splits read") summed over the SQL executions after `after`, one scan an execution: adaptive execution
    lists a scan node once for every plan it made, so an execution counts its largest figure."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(30_000)
    store = spark._jsparkSession.sharedState().statusStore()
    executions, total = store.executionsList(), 0
    for i in range(executions.size()):
        execution = executions.apply(i)
        if execution.executionId() <= after:
            continue
        values, metrics, largest = store.executionMetrics(execution.executionId()), execution.metrics(), 0
        for j in range(metrics.size()):
            metric, value = metrics.apply(j), values.get(metrics.apply(j).accumulatorId())
            if metric.name() == name and value.isDefined():
                largest = max(largest, int(str(value.get()).replace(",", "")))
        total += largest
    return total

"""How a replication run writes its files to the S3 target: LOAD files of a table's snapshot, CDC files of
captured changes, their names (a HEX counter, a time strictly increasing per table) and bodies (CSV, or
Parquet typed from the source's DDL), through `put_object(bucket, key, body)`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from lake_contracts.dms_files import cdc_file_name, load_file_name, object_key

from localaws_plugin.dms_format import (
    ChangeRow,
    FileLayout,
    S3TargetSettings,
    TableMapping,
    split_into_files,
)
from localaws_plugin.dms_sqlite import CapturedChange
from localaws_plugin.dms_table_statistics import TableStatistics
from localaws_plugin.dms_task_settings import CaptureSource, SourceSettings, TaskOptions

PutObject = Callable[[str, str, bytes], None]
DeletePrefix = Callable[[str, str], None]  # (bucket, key prefix): delete every object below it


class TargetFileWriter:
    """The file writing of `ReplicationRun`, which sets these attributes."""

    target: S3TargetSettings
    mapping: TableMapping
    source_settings: SourceSettings
    options: TaskOptions
    put_object: PutObject
    table_statistics: dict[str, TableStatistics]
    _load_counters: dict[str, int]
    _last_cdc_name: dict[str, str]

    def _file_bodies(
        self,
        source: CaptureSource,
        table: str,
        layout: FileLayout,
        rows: list[ChangeRow],
        max_rows: int | None,
    ) -> list[tuple[bytes, int]]:
        """(body, rows) of the files holding `rows`: CSV, or Parquet typed from the source's DDL."""
        if self.target.data_format == "parquet":
            from localaws_plugin.dms_parquet import parquet_files

            per_file = max_rows or len(rows) or 1
            bodies = parquet_files(layout, rows, self.target, source.declared_types(table), per_file)
            return [(body, min(per_file, len(rows) - i * per_file)) for i, body in enumerate(bodies)]
        header = 1 if self.target.add_column_name else 0
        return [
            (body.encode(), body.count(self.target.csv_row_delimiter) - header)
            for body in split_into_files(layout, rows, self.target, max_rows)
        ]

    def _snapshot_rows(self, source: CaptureSource, table: str) -> tuple[FileLayout, list[ChangeRow]]:
        """The table read in one snapshot: its full-load layout, and an `I` row per source row carrying the
        snapshot's change-log position (every later change has a higher one)."""
        snapshot_seq, columns, rows = source.snapshot(table)
        loaded_at = datetime.now(UTC).replace(tzinfo=None)
        layout = FileLayout(
            include_op=self.target.include_op_for_full_load,
            timestamp_column=self.target.timestamp_column_name,
            data_columns=tuple(columns),
            before_image_columns=self._before_image_columns(source, table, columns),
            added_columns=tuple(self.mapping.added_columns_for(self.source_settings.schema, table)),
        )
        return layout, [
            ChangeRow("I", snapshot_seq, loaded_at, dict(zip(columns, row, strict=True))) for row in rows
        ]

    def _write_load_files(
        self, source: CaptureSource, table: str, layout: FileLayout, rows: list[ChangeRow]
    ) -> Any:
        """Write LOAD files of `rows`, numbered on from the table's counter; yields each file's row count."""
        schema = self.source_settings.schema
        for body, count in self._file_bodies(
            source, table, layout, rows, self.options.max_rows_per_load_file
        ):
            self._load_counters[table] = self._load_counters.get(table, 0) + 1
            name = load_file_name(self._load_counters[table], self.target.extension)
            self.put_object(
                self.target.bucket_name, object_key(self.target.bucket_folder, schema, table, name), body
            )
            yield count

    def _before_image_columns(
        self, source: CaptureSource, table: str, columns: list[str] | tuple[str, ...]
    ) -> tuple[tuple[str, str], ...]:
        if self.mapping.before_image_prefix is None:
            return ()
        chosen = source.primary_key(table) if self.mapping.before_image_pk_only else list(columns)
        prefix, suffix = self.mapping.before_image_prefix, self.mapping.before_image_suffix
        return tuple((f"{prefix}{c}{suffix}", c) for c in chosen if c in columns)

    def _write_cdc_files(self, source: CaptureSource, changes: list[CapturedChange]) -> None:
        """One file per table and column set (a schema change starts a new file), in change order."""
        schema = self.source_settings.schema
        groups: dict[tuple[str, tuple[str, ...]], list[CapturedChange]] = {}
        for change in changes:
            groups.setdefault((change.table, tuple(change.values)), []).append(change)
        for (table, columns), group in sorted(groups.items(), key=lambda item: item[1][0].seq):
            layout = FileLayout(
                include_op=True,
                timestamp_column=self.target.timestamp_column_name,
                data_columns=columns,
                before_image_columns=self._before_image_columns(source, table, columns),
                added_columns=tuple(self.mapping.added_columns_for(schema, table)),
            )
            rows = [ChangeRow(c.op, c.seq, c.committed_at, c.values, c.before_image) for c in group]
            for body, _ in self._file_bodies(source, table, layout, rows, None):
                name = self._next_cdc_name(table)
                self.put_object(
                    self.target.bucket_name, object_key(self.target.bucket_folder, schema, table, name), body
                )
            statistics = self.table_statistics[table]
            statistics.inserts += sum(1 for c in group if c.op == "I")
            statistics.updates += sum(1 for c in group if c.op == "U")
            statistics.deletes += sum(1 for c in group if c.op == "D")
            statistics.last_update = datetime.now(UTC)
            if statistics.state != "Table completed":
                statistics.state = "Table completed"

    def _next_cdc_name(self, table: str) -> str:
        """Names by time, strictly increasing per table, so the files sort in change order."""
        moment = datetime.now(UTC).replace(tzinfo=None)
        name = cdc_file_name(moment, self.target.extension)
        while name <= self._last_cdc_name.get(table, ""):
            moment += timedelta(milliseconds=1)
            name = cdc_file_name(moment, self.target.extension)
        self._last_cdc_name[table] = name
        return name

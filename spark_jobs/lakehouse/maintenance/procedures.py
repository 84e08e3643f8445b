"""The Iceberg maintenance procedures a pass calls on one table, each only when its part is due, each fenced
(lakehouse.io.fence: never by a run that lost the pipeline lease). Rewrites run with partial progress: a
group whose commit loses to a concurrent commit (a MERGE that added deletes to its files meanwhile) is given
up whole, nothing of it committed, and counted; its files are due again at the next pass."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from pyspark.sql import SparkSession

from lakehouse.base.names import sql_string
from lakehouse.io.fence import check_before_commit
from lakehouse.io.frames import one_row
from lakehouse.io.iceberg import iceberg_table
from lakehouse.io.jvm import java_dict
from lakehouse.maintenance.due import Slice, TableState
from lakehouse.maintenance.inspect import TOMBSTONE_TIME, rewrite_options, target_file_size
from lakehouse.maintenance.options import MaintenanceOptions

log = logging.getLogger(__name__)

PARTIAL_PROGRESS = {"partial-progress.enabled": "true"}


@dataclass(frozen=True)
class Rewritten:
    files: int
    bytes: int
    lost_files: int  # files of groups given up: their commit lost to a concurrent one


@dataclass(frozen=True)
class Totals:
    """Live files and snapshots of the table's current metadata."""

    data_files: int
    delete_files: int
    live_rows: int
    snapshots: int


def totals(spark: SparkSession, table: str) -> Totals:
    java_table = iceberg_table(spark, table)
    snapshot = java_table.currentSnapshot()
    summary = java_dict(snapshot.summary()) if snapshot is not None else {}

    def total(name: str) -> int:
        return int(summary.get(name, "0") or 0)

    rows = total("total-records") - total("total-position-deletes")
    return Totals(
        total("total-data-files"), total("total-delete-files"), rows, int(java_table.snapshots().size())
    )


def rewrite_data_files(
    spark: SparkSession,
    catalog: str,
    table: str,
    state: TableState,
    share: Slice,
    options: MaintenanceOptions,
) -> Rewritten:
    """Rewrite the data files found due (the same selection options), no more than the slice's files. Files
    found due and not rewritten were in a group whose commit lost to a concurrent one (partial progress gives
    such a group up and commits the others) or whose rewrite failed."""
    java_table = iceberg_table(spark, table)
    chosen = rewrite_options(options, target_file_size(java_table, options), state.old_spec_files)
    if share.max_files is not None:
        chosen["max-files-to-rewrite"] = str(share.max_files)
    planned = share.max_files if share.max_files is not None else state.due_files
    row = _call(spark, catalog, "rewrite_data_files", table, chosen | PARTIAL_PROGRESS)
    files = int(row["rewritten_data_files_count"])
    done = Rewritten(files, int(row["rewritten_bytes_count"]), max(0, planned - files))
    if done.lost_files:
        log.warning(
            "%s: %d of the %d data files found due not compacted: their group lost to a concurrent commit or "
            "failed (due again next pass)",
            table,
            done.lost_files,
            planned,
        )
    return done


def rewrite_delete_files(
    spark: SparkSession, catalog: str, table: str, every: bool, options: MaintenanceOptions
) -> int:
    """Merge a data file's delete files into one and drop those whose data file is gone. `every`: all of
    them (after a data rewrite, whose replaced files' deletes are left dangling)."""
    chosen = {"rewrite-all": "true"} if every else {"min-input-files": str(options.min_input_files)}
    row = _call(spark, catalog, "rewrite_position_delete_files", table, chosen | PARTIAL_PROGRESS)
    return int(row["rewritten_delete_files_count"])


def rewrite_manifests(spark: SparkSession, catalog: str, table: str) -> None:
    check_before_commit()
    spark.sql(f"CALL {catalog}.system.rewrite_manifests(table => {_name(table)})").collect()


def expire_snapshots(
    spark: SparkSession, catalog: str, table: str, cutoff: datetime, options: MaintenanceOptions
) -> None:
    check_before_commit()
    spark.sql(
        f"CALL {catalog}.system.expire_snapshots(table => {_name(table)}, "
        f"older_than => TIMESTAMP '{cutoff:%Y-%m-%d %H:%M:%S.%f}', retain_last => {int(options.retain_last)})"
    ).collect()


def remove_orphan_files(
    spark: SparkSession, catalog: str, table: str, moment: datetime, options: MaintenanceOptions
) -> int:
    older = moment - timedelta(hours=options.orphan_file_age_hours)
    check_before_commit()
    return len(
        spark.sql(
            f"CALL {catalog}.system.remove_orphan_files(table => {_name(table)}, "
            f"older_than => TIMESTAMP '{older:%Y-%m-%d %H:%M:%S}')"
        ).collect()
    )


def expire_tombstones(spark: SparkSession, table: str, cutoff: datetime) -> int:
    """Delete the tombstones recorded before `cutoff`; returns how many (from the snapshots' totals)."""
    before = totals(spark, table).live_rows
    check_before_commit()
    spark.sql(f"DELETE FROM {table} WHERE {TOMBSTONE_TIME} < TIMESTAMP '{cutoff:%Y-%m-%d %H:%M:%S}'")
    return before - totals(spark, table).live_rows


def _call(spark: SparkSession, catalog: str, procedure: str, table: str, options: dict[str, str]):
    check_before_commit()
    pairs = ", ".join(f"{sql_string(k)}, {sql_string(v)}" for k, v in options.items())
    return one_row(
        spark.sql(f"CALL {catalog}.system.{procedure}(table => {_name(table)}, options => map({pairs}))")
    )


def _name(table: str) -> str:
    return sql_string(table.split(".", 1)[1])

"""A table whose full load committed its rows and never its facts (lakehouse.apply.single_pass_load): not
loaded, and said so where operators look (the run report's `pending_loads`, `lakectl status`).

Pending is a property of the table (`LOAD_PENDING_SINCE`, set with the rows, removed by the facts commit),
not of its newest snapshot: a CDC batch, a compaction or a snapshot expiry committed in between does not
hide it. Such a table is not loaded, but its floor is known: the lowest sequence of the pending rows, what the
facts commit would have set (`pending_floor`), so CDC ignores the changes the load rules out as it would
once loaded. The next full load replaces the pending rows as new when only compactions followed them, or
merges them as a reload does when anything else changed them (no change applied meanwhile lost; a table
without a primary key merges what was appended since, `pending_rows`, not its pending rows a second time).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.base.names import CHANGE_SEQ_COLUMN, quote, sql_string
from lakehouse.io.fence import check_before_commit
from lakehouse.io.frames import one_row
from lakehouse.io.iceberg import (
    FULL_LOAD_DONE,
    FULL_LOAD_PENDING,
    LOAD_DONE,
    lineage_of,
    load_table,
    snapshot_properties,
    table_properties,
)
from lakehouse.io.jvm import java_dict

# Table property of a table whose load committed its rows and not yet its facts: when it committed them (UTC).
LOAD_PENDING_SINCE = "dms.full-load.pending-since"
COMPACTION = "replace"  # Iceberg's operation of a rewrite: the same rows in other files


@dataclass(frozen=True)
class PendingLoad:
    """A table whose full load committed its rows and never its facts: not loaded."""

    since: datetime  # when the rows were committed (UTC)
    rows_changed_since: bool  # a commit other than a compaction followed (or the rows' snapshot expired)
    snapshot_id: int | None  # the pending rows' snapshot, None once expired


def pending_load(spark: SparkSession, table: str, java_table: Any = None) -> PendingLoad | None:
    """The table's load whose facts commit never came (None: no such table, loaded, or never so loaded), from
    its properties and, only when it is pending, its lineage back to the pending rows' snapshot (metadata
    only). A table pending since before `LOAD_PENDING_SINCE` existed is found by its current snapshot."""
    java_table = load_table(spark, table) if java_table is None else java_table
    if java_table is None:
        return None
    properties = table_properties(spark, table, java_table)
    marked = properties.get(LOAD_PENDING_SINCE)
    if LOAD_DONE in properties or (
        marked is None and FULL_LOAD_PENDING not in next(snapshot_properties(spark, table, java_table), {})
    ):
        return None
    changed = False
    for snapshot in lineage_of(java_table):
        summary = java_dict(snapshot.summary())
        if FULL_LOAD_DONE in summary:  # loaded since (a reload, a repair's emptying)
            return None
        if FULL_LOAD_PENDING in summary:
            committed = datetime.fromtimestamp(snapshot.timestampMillis() / 1000, UTC)
            since = datetime.fromisoformat(marked) if marked else committed
            return PendingLoad(since, changed, int(snapshot.snapshotId()))
        changed = changed or snapshot.operation() != COMPACTION
    return PendingLoad(datetime.fromisoformat(marked), True, None) if marked else None


def clear_pending_mark(spark: SparkSession, table: str) -> None:
    """Remove the mark of a load left pending from a table loaded (or emptied by a repair) otherwise: a
    replace keeps the table's properties. A metadata commit without a snapshot, fenced; none without a mark."""
    if LOAD_PENDING_SINCE not in table_properties(spark, table):
        return
    check_before_commit()
    spark.sql(f"ALTER TABLE {table} UNSET TBLPROPERTIES IF EXISTS ({sql_string(LOAD_PENDING_SINCE)})")


def pending_rows(spark: SparkSession, table: str, pending: PendingLoad | None) -> DataFrame | None:
    """The rows the pending load committed (time travel to its snapshot), None when it expired or none."""
    if pending is None or pending.snapshot_id is None:
        return None
    return spark.read.option("snapshot-id", str(pending.snapshot_id)).table(table)


def pending_floor(spark: SparkSession, table: str, java_table: Any = None) -> Decimal | None:
    """The floor a pending load's facts commit would have set (the lowest sequence of its rows); None when the
    table is not pending, its rows' snapshot expired, or they carry no sequence."""
    rows = pending_rows(spark, table, pending_load(spark, table, java_table))
    lowest = one_row(rows.agg(F.min(F.col(quote(CHANGE_SEQ_COLUMN)))))[0] if rows is not None else None
    return Decimal(lowest) if lowest is not None else None


def pending_loads(pending: Mapping[str, PendingLoad], now: datetime) -> list[dict[str, Any]]:
    """The run report's `pending_loads`: each table of `pending` (source table -> its load left pending, as the
    run's jobs found them), since when and for how long at `now` (UTC), in the order of their names."""
    found = []
    for source, load in sorted(pending.items()):
        found.append(
            {
                "table": source,
                "pending_since": load.since.isoformat(),
                "pending_seconds": round((now - load.since).total_seconds()),
                "rows_changed_since": load.rows_changed_since,
            }
        )
    return found

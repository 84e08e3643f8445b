"""What a reconcile repair must know before it deletes or replaces rows (docs/CONTRACTS.md, "Reconcile"):

- a second signal, independent of the rows the reconcile's reader saw: the source's own statistics
  (`SourceStatistics`) agree, and nothing hides rows from the reader (PostgreSQL row-level security, a view).
  Emptying a clean table needs the statistics to count no row; a reload asked of DMS needs them to count about
  the rows the reader saw. Otherwise the repair is refused, with the check named.
- a reload asked of DMS and not yet applied is pending: it is not asked again (`pending_reloads`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta

from pyspark.sql import SparkSession

from lakehouse.io.iceberg import LOAD_STARTED, table_exists, table_properties
from lakehouse.reconcile.plan import SourceStatistics

log = logging.getLogger(__name__)

ROW_SLACK = 10  # rows the statistics may be off by on top of their tolerance (a small table's churn)
CLOCK_SKEW = timedelta(seconds=60)  # DMS's clock (a load's start) against the reconcile's (the request)


class RepairRefused(RuntimeError):
    """A repair would delete or replace rows without a second signal that it is right."""


def refusal_to_empty(table: str, statistics: SourceStatistics) -> str | None:
    """Why the clean table must not be emptied although the reader saw no source row (None: it may)."""
    if statistics.hidden_by:
        return f"{table}: emptying refused by the visibility check: {statistics.hidden_by}"
    if statistics.estimated_rows is None:
        return (
            f"{table}: emptying refused by the source-statistics check: the source keeps no row count"
            f" ({statistics.estimated_from}) to confirm the reader's empty table"
        )
    counted = max(statistics.estimated_rows, statistics.highest_recorded or 0)
    if counted > 0:
        return (
            f"{table}: emptying refused by the source-statistics check: the reader saw no row, the source's"
            f" statistics ({statistics.estimated_from}) count {counted}"
        )
    return None


def refusal_to_reload(table: str, rows_read: int, statistics: SourceStatistics) -> str | None:
    """Why DMS must not be asked to reload the table on what the reader saw (None: it may). A reader that saw
    far fewer rows than the source's statistics count sees a part of the table: its differences (rows
    "extra" in the lake) are the rows hidden from it, and a reload would come back every cycle."""
    if statistics.hidden_by:
        return f"{table}: reload refused by the visibility check: {statistics.hidden_by}"
    estimate = statistics.estimated_rows
    if estimate is not None and rows_read < estimate * (1 - statistics.tolerance) - ROW_SLACK:
        return (
            f"{table}: reload refused by the source-statistics check: the reader saw {rows_read} rows, the"
            f" source's statistics ({statistics.estimated_from}) count {estimate}"
        )
    return None


def reload_applied_since(spark: SparkSession, table: str, requested_at: datetime) -> bool:
    """Has the clean table applied a (re)load DMS started after the request (its LOAD_STARTED)?"""
    if not table_exists(spark, table):
        return False
    started = table_properties(spark, table).get(LOAD_STARTED)
    return started is not None and datetime.fromisoformat(started) >= requested_at - CLOCK_SKEW


def pending_reloads(
    spark: SparkSession,
    lake_tables: Mapping[str, str],
    requested: Mapping[str, datetime],
    now: datetime,
    patience: timedelta,
) -> dict[str, datetime]:
    """The reloads asked of DMS (table -> when) still pending: not applied by the lake since, and asked less
    than `patience` ago (a reload that never came is asked again, logged). `lake_tables`: each source table's
    clean table; a table no longer reconciled keeps its request as it was."""
    pending: dict[str, datetime] = {}
    for name, at in requested.items():
        table = lake_tables.get(name)
        if table is None:
            pending[name] = at
        elif reload_applied_since(spark, table, at):
            log.info("%s: the reload asked at %s is applied", name, at)
        elif now - at >= patience:
            log.warning("%s: the reload asked at %s never reached the lake; asking again", name, at)
        else:
            pending[name] = at
    return pending

"""The full load of a table that holds no rows, in one pass over its LOAD files: the commit's own pass
observes the figures the load's facts need, and a metadata-only commit right after sets those facts.

The rows are committed first, marked pending (`FULL_LOAD_PENDING` in their snapshot's summary, the table
property `LOAD_PENDING_SINCE`, no `LOAD_DONE`); the facts commit then sets the table properties a full load
sets (`LOAD_DONE`, its floor and times), removes the mark, and adds a snapshot without data files whose
summary says what the load's single commit said (`FULL_LOAD_DONE`, the run id, the source times). A crash
between the two leaves a table that is not loaded and pending, whatever commits to it next: what CDC, the
reconcile and the next full load then do is lakehouse.apply.pending_load's.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lake_contracts.dms_files import DmsFile
from lake_contracts.run_report import ApplyFigures, BatchFigures, CommitFigures
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from lakehouse.apply.clean_table import aligned, target_schema, with_metadata
from lakehouse.apply.pending_load import LOAD_PENDING_SINCE, PendingLoad
from lakehouse.apply.run import ApplyRun
from lakehouse.apply.typed_batch import PASS_REFUSED, batch_counts, guarded_batch, observed_figures
from lakehouse.audit.freshness import previous_newest, source_time_summary
from lakehouse.base.schema import TableSpec
from lakehouse.dms import changes as C
from lakehouse.dms.reader import RawRead
from lakehouse.io.fence import check_before_commit
from lakehouse.io.iceberg import (
    FULL_LOAD_DONE,
    FULL_LOAD_PENDING,
    LOAD_DONE,
    LOAD_ENDED,
    LOAD_FLOOR,
    LOAD_STARTED,
    RUN_ID,
    SOURCE_TABLE,
    current_snapshot_id,
    file_size_properties,
    iceberg_table,
    replace_table,
)

Found = list[tuple[DmsFile, datetime | None]]


def load_facts(
    spec: TableSpec, files: list[DmsFile], found: Found, figures: dict[str, Any]
) -> tuple[dict[str, str], datetime | None, list[datetime]]:
    """The table properties a (re)load sets (the floor aside), when DMS started it and the times it wrote."""
    started_at = min([t for t in (figures["oldest"], *(m for _, m in found)) if t is not None], default=None)
    # The rows' timestamps say when DMS transferred them (the same clock as CDC file names); the files' own
    # times only when the rows carry none.
    written = [t for t in (figures["oldest"], figures["newest"]) if t is not None] or [
        m for _, m in found if m
    ]
    properties = {LOAD_DONE: str(len(files)), SOURCE_TABLE: spec.qualified_name}
    properties |= file_size_properties(spec.target_file_size_mb)
    if started_at is not None:
        properties[LOAD_STARTED] = started_at.isoformat()
    if written:
        properties[LOAD_ENDED] = max(written).isoformat()
    return properties, started_at, written


def load_in_one_pass(
    run: ApplyRun, spec: TableSpec, table: str, raw: RawRead, found: Found, exists: bool
) -> tuple[BatchFigures, ApplyFigures, CommitFigures] | None:
    """Load a table that holds no rows and is not loaded in one pass over its files; None, with nothing
    committed, when a record is not plain valid (the two-pass load then quarantines, widens or stops)."""
    spark = run.spark
    files = [f for f, _ in found]
    rows, observation, types = guarded_batch(run, spec, table, raw, exists)
    previous = previous_newest(spark, table) if exists else None
    result = aligned(
        with_metadata(rows.drop(C.REASON, C.MISMATCH, C.WIDEN, C.RAW)),
        target_schema(spark, table, spec, types),
    )
    pending_since = datetime.now(UTC)
    try:
        replace_table(
            spark,
            table,
            result,
            {SOURCE_TABLE: spec.qualified_name, LOAD_PENDING_SINCE: pending_since.isoformat()}
            | file_size_properties(spec.target_file_size_mb),
            {FULL_LOAD_PENDING: str(len(files)), RUN_ID: run.run_id},
            f"DMS replica of {spec.qualified_name}",
            spec.partition_by,
        )
    except Py4JJavaError as error:
        if PASS_REFUSED in str(error):
            return None
        raise
    run.note_pending(
        spec.qualified_name, PendingLoad(pending_since, False, current_snapshot_id(spark, table))
    )
    figures = observed_figures(observation, spark.table(table))
    properties, _, written = load_facts(spec, files, found, figures)
    if figures["min_seq"] is not None:
        properties[LOAD_FLOOR] = str(figures["min_seq"])
    summary = {FULL_LOAD_DONE: str(len(files)), RUN_ID: run.run_id}
    # the rows may differ from the table's in any change: the oldest is unbounded (lakehouse.audit.consistent)
    summary |= source_time_summary(previous, datetime.min, max(written) if written else None)
    commit_load_facts(spark, table, properties, summary)
    run.note_pending(spec.qualified_name, None)
    applied = ApplyFigures(inserted_or_updated=figures["records"])
    return batch_counts(figures, 0), applied, CommitFigures(current_snapshot_id(spark, table))


def commit_load_facts(
    spark: SparkSession, table: str, properties: dict[str, str], summary: dict[str, str]
) -> None:
    """Set `properties` (the load no longer pending) and add a snapshot of the same rows whose summary is
    `summary`, in ONE metadata commit (an Iceberg transaction: no data file read or written), the run's lease
    checked right before."""
    transaction = iceberg_table(spark, table).newTransaction()
    update = transaction.updateProperties().remove(LOAD_PENDING_SINCE)
    for key, value in properties.items():
        update = update.set(key, value)
    update.commit()
    append = transaction.newAppend()
    for key, value in (summary | check_before_commit()).items():
        append = append.set(key, value)
    append.commit()
    transaction.commitTransaction()

"""A batch's first pass: its records typed (widening a column a value needs), its figures observed, the
records the commit needs kept, the rejected ones sent to quarantine."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from lake_contracts.run_report import BatchFigures
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.apply.clean_table import SchemaChangeError, layout_and_types
from lakehouse.apply.run import ApplyRun
from lakehouse.base.names import CHANGE_SEQ_COLUMN, COMMIT_TS_COLUMN
from lakehouse.base.schema import TableSpec
from lakehouse.base.types import can_widen
from lakehouse.dms import changes as C
from lakehouse.dms.reader import RawRead
from lakehouse.io.frames import one_row
from lakehouse.io.jvm import observed_metrics

log = logging.getLogger(__name__)


# The message that stops a single-pass commit's job at a record the pass can't commit (guarded_batch).
PASS_REFUSED = "lakehouse: a record that is not plain valid stops the single-pass commit"


class TypeMismatchError(RuntimeError):
    """Values that don't fit their column's type: the schema file is out of date, or the data is wrong."""


@dataclass
class Batch:
    """A batch's typed records after its first pass: the product the pass checkpointed, the figures it
    observed, and what the batch reports (`counts`)."""

    typed: DataFrame
    product: DataFrame
    figures: dict[str, Any]
    types: dict[str, T.DataType]
    counts: BatchFigures


def typed_batch(
    run: ApplyRun,
    spec: TableSpec,
    table: str,
    raw: RawRead,
    floor: Decimal | None,
    build: Callable[[DataFrame, Column], DataFrame],
    replacing: bool = False,
    keep: Callable[[DataFrame], DataFrame] | None = None,
    exists: bool | None = None,
) -> Batch:
    """Type the batch and run its first pass: `build(typed, usable)` makes the product to checkpoint from
    the records that are `usable` (valid, newer than the floor) while the batch's figures are observed.
    A value that a wider type holds (int → bigint, decimal precision, float → double) widens the column
    and the batch is typed again; a value that fits no type stops the table (or is quarantined)."""
    layout, types = layout_and_types(run.spark, spec, table, raw, run.options.names, replacing, exists)
    for _ in range(4):
        typed = C.typed_changes(
            raw, spec, layout, types, run.options.names, run.options.reader.csv_null_value
        )
        usable = F.col(C.REASON).isNull() & F.col(C.MISMATCH).isNull() & F.col(C.WIDEN).isNull()
        newer = F.lit(True)
        if floor is not None:  # a record without a sequence (a LOAD row) is not older than anything
            newer = F.col(C.SEQ).isNull() | (F.col(C.SEQ) > F.lit(str(floor)).cast(C.SEQ_TYPE))
        observation = Observation(f"batch_{spec.iceberg_name}_{id(typed)}")
        observed = typed.observe(observation, *_batch_figures(usable, newer))
        product = (keep or _checkpointed)(build(observed, usable & newer))
        figures = observed_metrics(observation)
        if "records" not in figures:  # metrics not delivered: count instead (one more pass)
            figures = one_row(typed.agg(*_batch_figures(usable, newer))).asDict()
        figures = _read_figures(figures)
        wider = _widened(types, figures["widen"])
        if not wider:
            break
        product.unpersist()
        log.warning("%s: values need wider types: %s; typing the batch again", spec.qualified_name, wider)
        types = types | wider
    else:
        raise SchemaChangeError(f"{spec.qualified_name}: column types kept widening: {figures['widen']}")
    if figures["mismatched"] and run.options.type_mismatch == "fail":
        raise TypeMismatchError(
            f"{spec.qualified_name}: {figures['mismatched']} value(s) don't fit their column's type, e.g. "
            f"{figures['example']}. The source changed the column's type and the schema file is out of date "
            "(regenerate it: python -m tools.schema_gen; if Iceberg can't promote the old type to the new "
            f"one, reload the table: full_load_job.py --tables {spec.qualified_name} --reload true), or the "
            "files are wrong. The batch stays pending. To go on and quarantine such records instead, run the "
            "CDC job with --type_mismatch quarantine."
        )
    rejected = F.col(C.REASON).isNotNull() | (
        F.col(C.MISMATCH).isNotNull() if run.options.type_mismatch == "quarantine" else F.lit(False)
    )
    bad = figures["bad"] + (figures["mismatched"] if run.options.type_mismatch == "quarantine" else 0)
    if bad:
        reasons = typed.where(rejected).withColumn(C.REASON, F.coalesce(C.REASON, C.MISMATCH))
        run.quarantine_records(spec, reasons, raw)
    return Batch(typed, product, figures, types, batch_counts(figures, bad))


def guarded_batch(
    run: ApplyRun, spec: TableSpec, table: str, raw: RawRead, exists: bool
) -> tuple[DataFrame, Observation, dict[str, T.DataType]]:
    """The batch typed for a commit that is its only pass, and the observation of the figures that pass
    sees (`observed_figures`). A record that is not plain valid (malformed, a value that fits no type or
    needs a wider one) fails the commit's job with PASS_REFUSED, so nothing is committed: the caller then
    takes `typed_batch`'s two passes, which quarantine, widen or stop as they always did."""
    layout, types = layout_and_types(run.spark, spec, table, raw, run.options.names, True, exists)
    typed = C.typed_changes(raw, spec, layout, types, run.options.names, run.options.reader.csv_null_value)
    usable = F.col(C.REASON).isNull() & F.col(C.MISMATCH).isNull() & F.col(C.WIDEN).isNull()
    guarded = typed.where(F.when(usable, F.lit(True)).otherwise(F.raise_error(F.lit(PASS_REFUSED))))
    observation = Observation(f"load_{spec.iceberg_name}_{id(typed)}")
    return guarded.observe(observation, *_load_figures()), observation, types


def observed_figures(observation: Observation, committed: DataFrame) -> dict[str, Any]:
    """The figures of a single-pass commit (as `typed_batch`'s, every record usable), as observed; counted
    on the `committed` rows (their metadata columns) when the metrics were not delivered."""
    figures = observed_metrics(observation)
    if "records" not in figures:
        figures = one_row(
            committed.select(
                F.col(COMMIT_TS_COLUMN).alias(C.COMMIT_TS), F.col(CHANGE_SEQ_COLUMN).alias(C.SEQ)
            ).agg(*_load_figures())
        ).asDict()
    return _read_figures(figures | {"bad": 0, "mismatched": 0, "older": 0, "widen": ""})


def _load_figures() -> list[Column]:
    return [
        F.count(F.lit(1)).alias("records"),
        F.unix_micros(F.max(C.COMMIT_TS)).alias("newest"),
        F.unix_micros(F.min(C.COMMIT_TS)).alias("oldest"),
        F.min(C.SEQ).cast("string").alias("min_seq"),
        F.count(F.when(F.col(C.SEQ).isNull(), 1)).alias("without_seq"),
    ]


def batch_counts(figures: dict[str, Any], quarantined: int) -> BatchFigures:
    newest = figures["newest"]
    return BatchFigures(
        records=figures["records"],
        quarantined_records=quarantined,
        ignored_older=figures["older"],
        newest_commit_ts=newest.isoformat() if newest is not None else None,
    )


def _checkpointed(frame: DataFrame) -> DataFrame:
    """The batch's first pass, run now and kept: its figures decide what is committed, and the commit
    reads the kept rows instead of reading and typing the files again. A CDC batch (one row per key) is
    kept as a local checkpoint: its MERGE then plans on a plain scan (runtime Bloom filter included)."""
    return frame.localCheckpoint(eager=True)


def cached(frame: DataFrame) -> DataFrame:
    """A full load's first pass kept in Spark's columnar cache: every row of the table passes through it,
    and a local checkpoint keeps rows as objects (10M rows: 20 s and 4 s of GC, against 11 s and 1 s
    here; bench/RESULTS.md §7). On disk only: once a table's cache outgrew the storage memory, caching
    in memory ran out of heap (100M rows: Java heap space at 2 and 4 GB of driver), while on disk it
    needs 2.3 GB at 100M rows, loads as fast at 10M and faster at 100M (bench/RESULTS.md, "Cost growth").
    The caller unpersists it after its commit."""
    kept = frame.persist(StorageLevel.DISK_ONLY)
    kept.count()
    return kept


def counted(frame: DataFrame) -> DataFrame:
    """A full load's first pass run for its figures only, its rows not kept: the commit reads and types
    the files again. From Parquet that costs less than keeping them: the pass reads only the columns the
    figures need, and nothing is written to disk and read back (10M rows: 19 against 32 task-CPU s,
    bench/RESULTS.md, "The full load reads its Parquet files twice")."""
    frame.count()
    return frame


def _batch_figures(usable: Column, newer: Column) -> list[Column]:
    """The batch's figures, observed on its first pass. Strings and numbers only: observed metrics come
    back through py4j. (A stage Spark runs again could only inflate the counts; extremes are extremes.)"""
    return [
        F.count(F.lit(1)).alias("records"),
        F.count(C.REASON).alias("bad"),
        F.count(F.when(F.col(C.REASON).isNull(), F.col(C.MISMATCH))).alias("mismatched"),
        F.first(
            F.when(
                F.col(C.REASON).isNull() & F.col(C.MISMATCH).isNotNull(),
                F.concat_ws(" in ", C.MISMATCH, C.FILE_URI),
            ),
            ignorenulls=True,
        ).alias("example"),
        F.concat_ws(C.WIDEN_SEPARATOR, F.collect_set(C.WIDEN)).alias("widen"),
        F.count(F.when(usable & ~newer, 1)).alias("older"),
        F.unix_micros(F.max(F.when(usable & newer, F.col(C.COMMIT_TS)))).alias("newest"),
        F.unix_micros(F.min(F.when(usable, F.col(C.COMMIT_TS)))).alias("oldest"),
        F.min(F.when(usable, F.col(C.SEQ))).cast("string").alias("min_seq"),
        F.count(F.when(usable & F.col(C.SEQ).isNull(), 1)).alias("without_seq"),
    ]


def _read_figures(values: dict[str, Any]) -> dict[str, Any]:
    def moment(micros: int | None) -> datetime | None:
        return datetime(1970, 1, 1) + timedelta(microseconds=micros) if micros is not None else None

    return values | {
        "newest": moment(values["newest"]),
        "oldest": moment(values["oldest"]),
        "min_seq": Decimal(values["min_seq"]) if values["min_seq"] is not None else None,
    }


def _widened(types: dict[str, T.DataType], needs: str | None) -> dict[str, T.DataType]:
    """The widest type each column's values asked for (`column<sep>type` entries)."""
    wider: dict[str, T.DataType] = {}
    for entry in filter(None, (needs or "").split(C.WIDEN_SEPARATOR)):
        column, _, type_text = entry.partition(C.WIDEN_TYPE_SEPARATOR)
        wanted = C.type_named(type_text)
        current = wider.get(column, types[column])
        if can_widen(current, wanted):
            wider[column] = wanted
    return wider

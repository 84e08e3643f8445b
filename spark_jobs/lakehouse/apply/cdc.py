"""CDC apply: a manifest's files → typed changes → one Iceberg commit per table.

Exactly once and in any order (docs/CONTRACTS.md): a CDC file a table applied before is skipped (its
commit named it, and the ledger keeps the name); every row keeps the change sequence of the change it
holds and only a newer change replaces or deletes it; a deleted key keeps a tombstone, so an older change
arriving late can't bring it back; a (re)load sets the table's floor, below which no change applies.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from lake_contracts.dms_files import DmsFile
from lake_contracts.documents import Manifest
from lake_contracts.run_report import ApplyFigures, CommitFigures, FileFigures, LayoutFigures, RunReport
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.apply.clean_table import KEY, TOMB_SEQ, clean_schema, load_floor, with_metadata, with_tomb_seq
from lakehouse.apply.history import keeps_history, record_changes
from lakehouse.apply.ledger import LedgerEntry, RecordedFile, applied_files
from lakehouse.apply.pending_load import pending_load
from lakehouse.apply.quarantine import ReappliedFile
from lakehouse.apply.recorded_source import guard_recorded_source
from lakehouse.apply.run import DEFAULT_OPTIONS, ApplyOptions, ApplyRun, Record, check_options
from lakehouse.apply.typed_batch import typed_batch
from lakehouse.audit.freshness import commit_properties
from lakehouse.base.config import LakeConfig
from lakehouse.base.names import CHANGE_SEQ_COLUMN, COMMIT_TS_COLUMN, INTERNAL_PREFIX, quote
from lakehouse.base.schema import SchemaFile, TableSpec
from lakehouse.dms import changes as C
from lakehouse.dms.reader import RawRead
from lakehouse.io.frames import empty_frame
from lakehouse.io.iceberg import (
    APPLIED_FILES,
    RUN_ID,
    SOURCE_TABLE,
    align_layout,
    append_rows,
    commit_of_run,
    create_table,
    ensure_namespace,
    evolve_schema,
    file_size_properties,
    iceberg_table,
    key_upper_bound,
    load_table,
    merge_changes,
)
from lakehouse.io.jvm import observed_metrics
from lakehouse.io.write_split import merge_advisory_bytes

log = logging.getLogger(__name__)


def apply_cdc(
    spark: SparkSession,
    config: LakeConfig,
    schema: SchemaFile,
    manifest: Manifest,
    options: ApplyOptions = DEFAULT_OPTIONS,
    reapply: Mapping[str, ReappliedFile] | None = None,
) -> RunReport:
    """Apply every file of the manifest: per table one change set and ONE commit, tables in parallel.
    A table that fails does not stop the others; its error is in the report (and the run fails).
    `reapply` (file URI → the attempt's ledger tag and records; tools.reapply_quarantined) applies those
    files again although the ledger names them: once per tag (docs/CONTRACTS.md, "What each recovery
    command guarantees")."""
    check_options(options)
    started = time.monotonic()
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    run = ApplyRun(spark, config, schema, options, manifest.run_id, "cdc", reapply)
    run.state.ensure()
    by_table = run.classify([(f.uri, f.size) for f in manifest.files])
    recorded = run.state.recorded(
        [run.ledger_name(f) for files in by_table.values() for f in files if not f.is_full_load]
    )

    def apply(spec: TableSpec, files: list[DmsFile], record: Record) -> Iterator[None]:
        record(FileFigures(files=len(files)))
        loads = [f for f in files if f.is_full_load]
        if loads:
            raise ValueError(
                f"{spec.qualified_name}: the manifest lists LOAD file(s) ({loads[0].uri}): a table's (re)load is "
                f"applied by the full-load job (full_load_job.py --tables {spec.qualified_name} --reload true), "
                "never as CDC"
            )
        yield from _apply_table_changes(run, spec, sorted(files, key=lambda f: f.order_key), recorded, record)

    # Every table's first pass, then the run's one quarantine write and one tombstone append, then every
    # table's commit (run_tables), then the run's one ledger append (finish).
    tables = run.run_tables(list(by_table.items()), apply, run.before_commits)
    return run.finish(tables + run.unknown_table_reports(), started)


def _apply_table_changes(
    run: ApplyRun,
    spec: TableSpec,
    files: list[DmsFile],
    recorded: dict[str, list[RecordedFile]],
    record: Record,
) -> Iterator[None]:
    """A table's apply: everything before its commit, a `yield` (the run's shared writes happen there:
    ApplyRun.before_commits), then its commit."""
    spark, config = run.spark, run.config
    table, loaded, layout = _ensure_table(spark, config, spec)  # the table's one load before its commit
    record(layout)
    pending = pending_load(spark, table, loaded)
    run.note_pending(spec.qualified_name, pending)
    known = applied_files(
        spark,
        table,
        spec.qualified_name,
        [(run.ledger_name(f), f.uri, f.written_at) for f in files],
        recorded.get(spec.qualified_name, []),
        loaded,
    )
    run.remember(known.to_record, [(spec.qualified_name, f) for f in known.to_forget])
    fresh_files = [f for f in files if run.ledger_name(f) not in known.applied]
    record(FileFigures(skipped_already_applied=len(files) - len(fresh_files)))
    if not fresh_files:
        log.info("%s: every file of the batch was applied before", spec.qualified_name)
        return
    raw, read = run.read_raw(spec, fresh_files)
    record(read)
    applied_names = [run.ledger_name(f) for f in fresh_files]
    properties = {APPLIED_FILES: json.dumps(applied_names), RUN_ID: run.run_id}
    floor = load_floor(spark, table, loaded)
    if raw.rows is None:
        # every file unreadable (quarantined) or superseded: the table holds what it held (freshness)
        properties |= commit_properties(spark, table, None, None, loaded)
        yield
        _commit_nothing(spark, table, properties)
    elif spec.has_primary_key:
        yield from _apply_keyed(run, spec, table, loaded, raw, floor, properties, record)
    else:
        yield from _apply_without_key(run, spec, table, loaded, raw, floor, properties, record)
    snapshot = commit_of_run(spark, table, run.run_id)
    record(CommitFigures(snapshot))
    if pending is not None and snapshot is not None:  # the pending rows changed since, by this commit
        run.note_pending(spec.qualified_name, replace(pending, rows_changed_since=True))
    run.remember(
        [
            LedgerEntry(spec.qualified_name, run.ledger_name(f), f.uri, run.run_id, snapshot)
            for f in fresh_files
        ]
        if snapshot is not None
        else []
    )


def _ensure_table(spark: SparkSession, config: LakeConfig, spec: TableSpec) -> tuple[str, Any, LayoutFigures]:
    """The table, created with the schema file's layout, or given it (`iceberg.align_layout`), and its Java
    table as loaded once (existence, properties, spec, snapshots and key bounds of the apply are its)."""
    table = config.clean_table(spec.iceberg_name)
    loaded = load_table(spark, table)
    if loaded is None:
        create_table(
            spark,
            table,
            clean_schema(spec),
            f"DMS replica of {spec.qualified_name}",
            {SOURCE_TABLE: spec.qualified_name} | file_size_properties(spec.target_file_size_mb),
            spec.partition_by or (),
        )
        return table, iceberg_table(spark, table), LayoutFigures()
    guard_recorded_source(spark, table, spec.qualified_name, loaded)
    changes = align_layout(spark, table, spec.partition_by, spec.target_file_size_mb, loaded)
    return table, loaded, LayoutFigures(tuple(changes))


def _apply_keyed(
    run: ApplyRun,
    spec: TableSpec,
    table: str,
    loaded: Any,
    raw: RawRead,
    floor: Decimal | None,
    properties: dict[str, str],
    record: Record,
) -> Iterator[None]:
    spark = run.spark
    key = [k.lower() for k in spec.primary_key]
    tombstones = run.state.tombstones_of(spec.qualified_name)
    outcomes: list[Observation] = []  # one per typing of the batch (a widening types it again)
    append_key = _integral_key(spark, table, key)

    def latest_changes(typed: DataFrame, usable: Column) -> DataFrame:
        outcome = Observation(f"outcome_{spec.iceberg_name}_{len(outcomes)}")
        outcomes.append(outcome)
        fresh = typed.where(usable).drop(C.REASON, C.MISMATCH, C.WIDEN, C.RAW)
        latest = one_change_per_key(fresh, key, tombstones)
        buried = (F.col(C.OP) != "D") & F.col(TOMB_SEQ).isNotNull() & (F.col(C.SEQ) < F.col(TOMB_SEQ))
        figures = [
            F.count(F.when(~buried & (F.col(C.OP) == "D"), 1)).alias("deletes"),
            F.count(F.when(~buried & (F.col(C.OP) != "D"), 1)).alias("upserts"),
            F.count(F.when(buried, 1)).alias("buried"),
        ]
        if append_key is not None:
            figures.append(F.min(quote(append_key)).cast("string").alias("lowest_key"))
            figures.append(F.max(quote(append_key)).cast("string").alias("highest_key"))
        return commit_rows(latest.observe(outcome, *figures).where(~buried))

    batch = typed_batch(run, spec, table, raw, floor, latest_changes, exists=True)
    record(batch.counts)
    properties |= commit_properties(spark, table, batch.figures["oldest"], batch.figures["newest"], loaded)
    counts = observed_metrics(outcomes[-1])
    if "deletes" not in counts:
        counts = {
            "deletes": batch.product.where(F.col(C.OP) == "D").count(),
            "upserts": batch.product.where(F.col(C.OP) != "D").count(),
            "buried": 0,
        }
    if counts["deletes"]:
        # Written before the MERGE (ApplyRun.before_commits): a crash between the two leaves a tombstone
        # for a row the retry deletes.
        run.bury(spec.qualified_name, tombstone_rows(batch.product, key))
    changes = evolve_schema(spark, table, batch.types)
    record(
        ApplyFigures(
            inserted_or_updated=counts["upserts"],
            deleted=counts["deletes"],
            ignored_older=counts["buried"],
            schema_changes=tuple(changes),
        )
    )
    yield  # the run's quarantine write and tombstone append (before_commits), then the commits
    if keeps_history(spec):  # before the clean commit: a retry splices the same versions again, no change
        record_changes(spark, run.config, spec, table, batch.typed, floor, batch.types, run.run_id)
    if append_key is not None and _keys_all_new(spark, table, loaded, append_key, counts.get("lowest_key")):
        # No key of the batch can be in the table: the MERGE would insert every upsert and match nothing.
        log.info("%s: every key of the batch is above the table's highest; appending", table)
        append_rows(spark, table, batch.product.where(F.col(C.OP) != "D"), properties)
        return
    key_range = None
    if append_key is not None and counts.get("lowest_key") is not None:
        key_range = (append_key, int(counts["lowest_key"]), int(counts["highest_key"]))
    merge_changes(
        spark,
        table,
        batch.product,
        key,
        properties,
        order_column=CHANGE_SEQ_COLUMN,
        key_range=key_range,
        advisory_bytes=merge_advisory_bytes(spark, loaded, counts["upserts"]),
    )


# A typed change's columns the first pass needs and the commit does not, not kept: the tie rule's file and record
# order, the file's URI (a rejected record's only), the key's text (the tombstones' join; a delete's tombstone
# writes it again from the key, tombstone_rows), the sequence and time under their change names (the commit reads
# their copies, the table's metadata columns). Each read of the kept batch (the tombstones, the Bloom filter of
# its keys, the MERGE) then reads the table's columns and the Op alone (bench/RESULTS.md, "The CDC apply
# against the engine's floor").
_FIRST_PASS_ONLY = (C.FILE_ORDER, C.POSITION, C.FILE_URI, KEY, C.SEQ, C.COMMIT_TS, TOMB_SEQ)


def commit_rows(latest: DataFrame) -> DataFrame:
    """The latest changes (`one_change_per_key`) as the commit reads them: the table's columns and the Op."""
    return latest.drop(*_FIRST_PASS_ONLY)


def tombstone_rows(kept: DataFrame, key: Sequence[str]) -> DataFrame:
    """The tombstones of the deletes among the kept rows (`commit_rows`): the key's text (changes.key_json, as
    `one_change_per_key` named it), the delete's sequence and time."""
    return kept.where(F.col(C.OP) == "D").select(
        C.key_json(key).alias("key"),
        F.col(CHANGE_SEQ_COLUMN).alias("change_seq"),
        F.col(COMMIT_TS_COLUMN).alias("commit_ts"),
    )


def one_change_per_key(fresh: DataFrame, key: Sequence[str], tombstones: DataFrame) -> DataFrame:
    """A batch's usable typed changes, one per key (`changes.last_change_per_key`), with the key's text (KEY)
    and the sequence of its newest tombstone (TOMB_SEQ). Grouped by the key's text and its hash: the join with
    the tombstones (grouped alike, `StateTables.tombstones_of`) reads the batch as it is partitioned and sorted,
    and the sorts compare the hash, not the texts' common prefix (changes.key_hash)."""
    keyed = C.expand_key_changes(fresh, key).withColumn(KEY, C.key_json(key))
    keyed = keyed.withColumn(C.KEY_HASH, C.key_hash(F.col(KEY)))
    latest = with_metadata(C.last_change_per_key(keyed, [C.KEY_HASH, KEY]))
    # An upsert older than the key's last delete would bring a deleted row back: with_tomb_seq finds it.
    types = {f.name: f.dataType for f in latest.schema.fields}
    return with_tomb_seq(latest, tombstones, key, types)


def _integral_key(spark: SparkSession, table: str, key: Sequence[str]) -> str | None:
    """The table's key column if the key is one integer column (its file metrics bound it exactly)."""
    if len(key) != 1:
        return None
    fields = {f.name: f.dataType for f in spark.table(table).schema.fields}
    is_integral = isinstance(fields.get(key[0]), T.ByteType | T.ShortType | T.IntegerType | T.LongType)
    return key[0] if is_integral else None


def _keys_all_new(spark: SparkSession, table: str, loaded: Any, column: str, lowest: str | None) -> bool:
    """Whether the batch's lowest key is above every key the table's data files may hold: then the
    batch (inserts of new keys, typically a serial key's table) is an append, no scan of the table.
    A table whose files lack the key's metrics is never assumed so."""
    if lowest is None:
        return False
    known, highest = key_upper_bound(spark, table, column, java_table=loaded)
    return known and (highest is None or int(lowest) > int(highest))


def _apply_without_key(
    run: ApplyRun,
    spec: TableSpec,
    table: str,
    loaded: Any,
    raw: RawRead,
    floor: Decimal | None,
    properties: dict[str, str],
    record: Record,
) -> Iterator[None]:
    """A table without a primary key can't be merged. "append": inserts are appended (exactly once per
    file: the ledger) and updates and deletes go to quarantine, nothing lost; "skip": all its changes go
    to quarantine."""
    mode = run.options.no_primary_key
    log.warning("%s has no primary key: CDC mode %r", spec.qualified_name, mode)
    batch = typed_batch(run, spec, table, raw, floor, lambda typed, usable: typed.where(usable), exists=True)
    record(batch.counts)
    figures = batch.figures
    properties |= commit_properties(run.spark, table, figures["oldest"], figures["newest"], loaded)
    fresh = batch.product.drop(C.REASON, C.MISMATCH, C.WIDEN, C.RAW)
    appendable = fresh.where(F.col(C.OP) == "I") if mode == "append" else fresh.limit(0)
    rest = fresh.where(F.col(C.OP) != "I") if mode == "append" else fresh
    reason = (
        f"table has no primary key: {'updates and deletes' if mode == 'append' else 'changes'} "
        f"can't be applied (mode {mode})"
    )
    rejected = rest.withColumn(C.REASON, F.lit(reason)).withColumn(
        C.RAW,
        F.to_json(F.struct(*[F.col(quote(c)) for c in rest.columns if not c.startswith(INTERNAL_PREFIX)])),
    )
    n_rest = rejected.count()
    if n_rest:
        run.quarantine_records(spec, rejected, raw)
    changes = evolve_schema(run.spark, table, batch.types)
    yield  # the run's quarantine write (before_commits), then the commit
    append_rows(run.spark, table, with_metadata(appendable), properties)
    applied = batch.figures["records"] - batch.figures["bad"] - batch.figures["mismatched"]
    record(
        ApplyFigures(
            inserted_or_updated=applied - n_rest - batch.figures["older"],
            quarantined_records=n_rest,
            schema_changes=tuple(changes),
        )
    )


def _commit_nothing(spark: SparkSession, table: str, properties: dict[str, str]) -> None:
    """A commit without rows that still names the files it processed (all unreadable or superseded)."""
    schema = spark.table(table).schema
    append_rows(spark, table, empty_frame(spark, schema), properties)

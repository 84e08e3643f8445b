"""Full load and reload: a table's DMS LOAD files → its rows and its load facts, in one Iceberg commit (a
table holding no rows loaded from Parquet: its rows, then its facts in a metadata-only commit, see
`single_pass_load`).

A reload is order-independent (docs/CONTRACTS.md): a change newer than the reload survives it, a change
older than it can't undo it (see `_reloaded`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal

from lake_contracts.dms_files import DmsFile, NotADmsFileError, parse_dms_key
from lake_contracts.run_report import (
    ApplyFigures,
    CommitFigures,
    FileFigures,
    LayoutFigures,
    RunReport,
    TableReport,
)
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.apply.clean_table import (
    KEY,
    TOMB_SEQ,
    aligned,
    check_sequences_comparable,
    clean_schema,
    sequence_at,
    target_schema,
    with_metadata,
    with_tomb_seq,
)
from lakehouse.apply.history import keeps_history, record_load
from lakehouse.apply.pending_load import clear_pending_mark, pending_load, pending_rows
from lakehouse.apply.recorded_source import guard_recorded_source
from lakehouse.apply.run import DEFAULT_OPTIONS, ApplyOptions, ApplyRun, Record, check_options
from lakehouse.apply.single_pass_load import load_facts, load_in_one_pass
from lakehouse.apply.typed_batch import Batch, cached, counted, typed_batch
from lakehouse.audit.freshness import commit_properties
from lakehouse.base.config import LakeConfig
from lakehouse.base.names import CHANGE_SEQ_COLUMN, properties_sql, quote, table_folder
from lakehouse.base.schema import SchemaFile, TableSpec
from lakehouse.dms import changes as C
from lakehouse.io.fence import check_before_commit
from lakehouse.io.frames import empty_frame
from lakehouse.io.iceberg import (
    FULL_LOAD_DONE,
    LOAD_DONE,
    LOAD_FLOOR,
    REPLACED_SNAPSHOT,
    RUN_ID,
    SOURCE_TABLE,
    align_layout,
    current_snapshot_id,
    ensure_namespace,
    file_size_properties,
    replace_table,
    snapshot_properties,
    table_exists,
    table_properties,
)
from lakehouse.io.storage import list_folders, list_objects

log = logging.getLogger(__name__)


def full_load(
    spark: SparkSession,
    config: LakeConfig,
    schema: SchemaFile,
    raw_path: str,
    tables: Sequence[str] = (),
    reload: bool = False,
    run_id: str = "full-load",
    options: ApplyOptions = DEFAULT_OPTIONS,
) -> RunReport:
    """Load every table's LOAD files into its Iceberg table, rows and properties in one commit. A table
    loaded before is left alone (its CDC changes stay), unless `reload`: then its rows are replaced by the
    LOAD files' in an order-independent way (changes newer than the reload survive it, see `_reloaded`)."""
    check_options(options)
    started = time.monotonic()
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    run = ApplyRun(spark, config, schema, options, run_id, "full-load")
    run.state.ensure()
    wanted = {t.lower() for t in tables}
    refused = [
        TableReport(name, error=f"RefusedName: {why}")
        for name, why in sorted(schema.refused.items())
        if not wanted or name.lower() in wanted
    ]
    unknown = sorted(wanted - {s.qualified_name.lower() for s in schema.tables.values()})
    unknown = [t for t in unknown if schema.refusal(t) is None]
    if unknown:
        raise ValueError(f"--tables names tables the schema file does not have: {unknown}")
    specs = [s for s in schema.tables.values() if not wanted or s.qualified_name.lower() in wanted]
    base = raw_path.rstrip("/")
    files = {spec: _load_files(table_folder(base, spec.source_schema, spec.name), config) for spec in specs}
    misplaced = {spec: _misplaced(base, spec, config) for spec in specs if not files[spec]}
    if specs and not any(files.values()) and not any(misplaced.values()):
        raise FileNotFoundError(
            f"no DMS LOAD files under {raw_path} for any of the {len(specs)} table(s) of the schema file "
            f"(expected {base}/<schema>/<table>/LOAD00000001.csv): check --raw_path and that DMS's full load "
            "has written its files"
        )

    def load(spec: TableSpec, found: list[tuple[DmsFile, datetime | None]], record: Record) -> None:
        _refuse_misplaced(misplaced.get(spec))
        _load_table(run, spec, found, reload, record)

    reports = run.run_tables([(spec, files[spec]) for spec in specs], load)
    return run.finish(reports + refused, started)


def _misplaced(base: str, spec: TableSpec, config: LakeConfig) -> str | None:
    """Why a table without LOAD files has none when DMS wrote them to a folder whose name differs from the
    schema file's only in case (`sales/orders/` for `Sales.Orders`): the folder that exists, named. None
    when there is no such folder (DMS writes none for an empty table)."""
    split_otherwise = _other_splits(spec)
    if split_otherwise:
        elsewhere = [table_folder(base, *pair) for pair in split_otherwise]
        holding = [folder for folder in elsewhere if list_objects(folder, config.s3_endpoint_url)]
        if holding:
            return (
                f"{spec.qualified_name}: no LOAD files under {table_folder(base, spec.source_schema, spec.name)}, "
                f"but {', '.join(holding)} holds files: the schema file's name splits at its last '.' (schema "
                f"{spec.source_schema!r}, table {spec.name!r}) and DMS's folders split it elsewhere. Say the "
                'parts in its entry ("schema": ..., "table": ...; tools.schema_gen writes them); the table is '
                "not loaded until then."
            )
    schemas = [
        s for s in list_folders(base, config.s3_endpoint_url) if s.lower() == spec.source_schema.lower()
    ]
    folders = [
        f"{base}/{s}/{t}/"
        for s in schemas
        for t in list_folders(f"{base}/{s}/", config.s3_endpoint_url)
        if t.lower() == spec.name.lower() and (s, t) != (spec.source_schema, spec.name)
    ]
    if not folders:
        return None
    return (
        f"{spec.qualified_name}: no LOAD files under {table_folder(base, spec.source_schema, spec.name)}, but "
        f"{', '.join(folders)} exists: the schema file and the DMS folders spell the name in different case "
        "(S3 keys are case-sensitive). Regenerate the schema file from the source catalog (python -m "
        "tools.schema_gen) so that it names the table as DMS does; the table is not loaded until then."
    )


def _other_splits(spec: TableSpec) -> list[tuple[str, str]]:
    """The other (schema, table) readings of a qualified name holding more than one `.`."""
    name = spec.qualified_name
    readings = [(name[:i], name[i + 1 :]) for i, character in enumerate(name) if character == "."]
    return [
        (schema, table) for schema, table in readings if (schema, table) != (spec.source_schema, spec.name)
    ]


def _refuse_misplaced(problem: str | None) -> None:
    if problem:
        raise FileNotFoundError(problem)


def _load_files(prefix: str, config: LakeConfig) -> list[tuple[DmsFile, datetime | None]]:
    found = []
    for info in list_objects(prefix, config.s3_endpoint_url):
        try:
            file = parse_dms_key(info.uri, info.size)
        except NotADmsFileError:
            continue
        if file.is_full_load:
            found.append((file, info.last_modified))
    return sorted(found, key=lambda item: item[0].order_key)


def _load_table(
    run: ApplyRun,
    spec: TableSpec,
    found: list[tuple[DmsFile, datetime | None]],
    reload: bool,
    record: Record,
) -> None:
    spark, config = run.spark, run.config
    table = config.clean_table(spec.iceberg_name)
    exists = table_exists(spark, table)
    if exists:
        guard_recorded_source(spark, table, spec.qualified_name)
    done = exists and (
        LOAD_DONE in table_properties(spark, table)
        or any(FULL_LOAD_DONE in s for s in snapshot_properties(spark, table))
    )
    files = [f for f, _ in found]
    record(FileFigures(files=len(files)))
    if done and not reload:
        log.info("%s: full load committed already; not reloading", table)
        run.skip(files)
        return
    if not files:
        if reload:
            raise FileNotFoundError(f"{spec.qualified_name}: no LOAD files to reload the table from")
        # DMS writes no folder for an empty source table: an empty, loaded table (or, if CDC created it
        # already, the table as it is, marked loaded: its rows are changes made since).
        log.warning("%s: no LOAD files (an empty source table?)", spec.qualified_name)
        if exists:
            marks = {LOAD_DONE: "0", SOURCE_TABLE: spec.qualified_name}
            check_before_commit()
            spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({properties_sql(marks)})")
            changes = align_layout(spark, table, spec.partition_by, spec.target_file_size_mb)
            record(LayoutFigures(tuple(changes)))
            return
        empty = empty_frame(spark, clean_schema(spec))
        replace_table(
            spark,
            table,
            empty,
            {LOAD_DONE: "0", SOURCE_TABLE: spec.qualified_name}
            | file_size_properties(spec.target_file_size_mb),
            # no row: it holds no source time (freshness, lakehouse.audit.consistent)
            {FULL_LOAD_DONE: "0", RUN_ID: run.run_id}
            | commit_properties(spark, table, datetime.min, datetime.min),
            f"DMS replica of {spec.qualified_name}",
            spec.partition_by,
        )
        return
    raw, read = run.read_raw(spec, files)
    record(read)
    if raw.rows is None:
        raise ValueError(f"{spec.qualified_name}: none of its {len(files)} LOAD file(s) could be read")
    # a load interrupted between its rows and its facts (single_pass_load) is replaced as a new table, unless
    # something other than a compaction changed its rows since: then they are merged as a reload's
    pending = pending_load(spark, table) if exists else None
    run.note_pending(spec.qualified_name, pending)
    as_new = pending is not None and not pending.rows_changed_since
    has_rows = exists and not as_new and spark.table(table).limit(1).count() > 0
    # Parquet files are read again by the commit rather than kept, when the commit reads the rows once (a
    # table keeping history writes them twice); CSV's parsing costs more than keeping the rows.
    rereads = not raw.csv_groups and not keeps_history(spec)
    if rereads and not has_rows and not done:
        run.flush_quarantine(spec.qualified_name)  # before the commit
        steps = load_in_one_pass(run, spec, table, raw, found, exists)
        if steps is not None:
            for step in steps:
                record(step)
            return
        log.info("%s: records the single pass can't commit: loading in two passes", spec.qualified_name)
    batch = typed_batch(
        run,
        spec,
        table,
        raw,
        None,
        lambda typed, usable: typed.where(usable),
        replacing=True,
        keep=counted if rereads else cached,
    )
    record(batch.counts)
    run.flush_quarantine(spec.qualified_name)  # before the commit
    # a table without a key merges what CDC appended to its pending rows, not those rows a second time
    leaving = pending_rows(spark, table, pending) if has_rows and not spec.has_primary_key else None
    try:
        for step in _replace_with_load(run, spec, table, found, files, has_rows, batch, leaving):
            record(step)
    finally:
        batch.product.unpersist()
    if pending is not None:  # loaded now
        clear_pending_mark(spark, table)
    run.note_pending(spec.qualified_name, None)


def _replace_with_load(
    run: ApplyRun,
    spec: TableSpec,
    table: str,
    found: list[tuple[DmsFile, datetime | None]],
    files: list[DmsFile],
    has_rows: bool,
    batch: Batch,
    leaving: DataFrame | None = None,
) -> tuple[ApplyFigures, CommitFigures]:
    """Commit a (re)load's rows and its facts (table properties, snapshot summary) in one replace; `leaving`:
    rows of the table the LOAD rows stand for (`_reloaded`)."""
    spark = run.spark
    rows = batch.product.drop(C.REASON, C.MISMATCH, C.WIDEN, C.RAW)
    figures = batch.figures
    properties, started_at, written = load_facts(spec, files, found, figures)
    target = target_schema(spark, table, spec, batch.types)
    if has_rows:
        floor = figures["min_seq"]
        by_time: tuple[Decimal, Decimal] | None = None
        if figures["without_seq"]:
            # LOAD rows without AR_H_CHANGE_SEQ: the reload is placed by the time DMS started it.
            if started_at is None:
                raise ValueError(f"{spec.qualified_name}: can't place the reload in time (no timestamps)")
            # DMS read each row after `started_at` (the earliest row's transfer time), so the LOAD rows hold
            # every change committed before it, but the CDC sequences' clock (the source's commit times)
            # may run up to the margin apart from DMS's. Two placements close the gap both ways: changes
            # arriving after the reload are older than it only up to `placed` (the margin before: a change
            # above it applies again; a full row image, its newer changes follow it); a row the table holds
            # now is newer than the LOAD rows only above `settled` (the margin after: a change committed
            # before the read whose successor's file the reload removed would otherwise stay).
            margin = timedelta(seconds=run.options.reload_margin_seconds)
            placed, settled = sequence_at(started_at - margin), sequence_at(started_at + margin)
            check_sequences_comparable(spark, table, spec, placed)
            rows = rows.withColumn(C.SEQ, F.coalesce(F.col(C.SEQ), F.lit(str(placed)).cast(C.SEQ_TYPE)))
            floor = placed if floor is None else min(floor, placed)
            by_time = (placed, settled)
        tombstones = run.state.tombstones_of(spec.qualified_name)
        result = _reloaded(spark, spec, table, rows, floor, target, tombstones, by_time, leaving)
        summary_extra = {REPLACED_SNAPSHOT: str(current_snapshot_id(spark, table))}
    else:
        floor = figures["min_seq"]
        result = aligned(with_metadata(rows), target)
        summary_extra = {}
    if floor is not None:
        properties[LOAD_FLOOR] = str(floor)
    if keeps_history(spec):  # before the replace: a retry finds these versions and adds none
        record_load(spark, run.config, spec, table, result, floor, started_at, run.run_id)
    replace_table(
        spark,
        table,
        result,
        properties,
        {FULL_LOAD_DONE: str(len(files)), RUN_ID: run.run_id}
        | summary_extra
        # the rows may differ from the table's in any change: the oldest is unbounded (lakehouse.audit.consistent)
        | commit_properties(spark, table, datetime.min, max(written) if written else None),
        f"DMS replica of {spec.qualified_name}",
        spec.partition_by,
    )
    applied = ApplyFigures(inserted_or_updated=figures["records"] - figures["bad"] - figures["mismatched"])
    return applied, CommitFigures(current_snapshot_id(spark, table))


def _reloaded(
    spark: SparkSession,
    spec: TableSpec,
    table: str,
    load: DataFrame,
    floor: Decimal | None,
    target: T.StructType,
    tombstones: DataFrame,
    by_time: tuple[Decimal, Decimal] | None = None,
    leaving: DataFrame | None = None,
) -> DataFrame:
    """A reload's rows, whatever CDC the table applied before it and whatever arrives after:

    - a key in both the table and the LOAD files keeps the table's row only if it holds a newer change
      than the LOAD row; otherwise the LOAD row;
    - a key only in the table stays only if its row holds a change newer than the reload's floor (it was
      changed after DMS read the table; a newer change of it follows); otherwise it goes (deleted before);
    - a key only in the LOAD files is added, unless a newer delete of it is known (a tombstone).
    A table without a primary key keeps its rows newer than the floor and adds every LOAD row.
    A reload placed by time (`by_time`: its LOAD rows' sequence `placed`, and `settled`) counts as at
    `settled` against the rows the table holds, and at `placed` against changes arriving later. `tombstones`:
    the table's (lakehouse.apply.ledger). `leaving`: rows of the table that the LOAD rows stand for (a pending
    load's own, lakehouse.apply.pending_load), taken out of it once each first."""
    existing = aligned(spark.table(table), target)
    if leaving is not None:
        existing = existing.exceptAll(aligned(leaving, target))
    against = max(floor, by_time[1]) if by_time is not None and floor is not None else floor

    def newer_than_floor(seq: str) -> Column:
        if against is None:
            return F.lit(False)
        return F.col(quote(seq)).isNotNull() & (F.col(quote(seq)) > F.lit(str(against)).cast(C.SEQ_TYPE))

    if not spec.has_primary_key:
        return existing.where(newer_than_floor(CHANGE_SEQ_COLUMN)).unionByName(
            aligned(with_metadata(load), target)
        )
    key = [k.lower() for k in spec.primary_key]
    latest = aligned(with_metadata(C.last_change_per_key(load, key)), target)
    kept, loaded, seq = "_dms_t_", "_dms_l_", CHANGE_SEQ_COLUMN
    ours = existing.select(
        *[F.col(quote(c)).alias(kept + c) for c in existing.columns], F.lit(True).alias(kept)
    )
    theirs = latest.select(
        *[F.col(quote(c)).alias(loaded + c) for c in latest.columns], F.lit(True).alias(loaded)
    )
    joined = ours.join(
        theirs, [F.col(quote(kept + k)) == F.col(quote(loaded + k)) for k in key], "full_outer"
    )
    values = {k: F.coalesce(F.col(quote(kept + k)), F.col(quote(loaded + k))) for k in key}
    joined = with_tomb_seq(
        joined.withColumn(KEY, C.key_json(key, values)),
        tombstones,
        key,
        {f.name: f.dataType for f in latest.schema.fields},
        values,
    )
    in_table, in_load = F.col(kept).isNotNull(), F.col(loaded).isNotNull()
    load_seq = F.col(quote(loaded + seq))
    if by_time is not None:  # LOAD rows placed by time count as at `settled`
        placed, settled = (F.lit(str(s)).cast(C.SEQ_TYPE) for s in by_time)
        load_seq = F.when(load_seq == placed, settled).otherwise(load_seq)
    table_newer = F.col(kept + seq).isNotNull() & load_seq.isNotNull() & (F.col(kept + seq) > load_seq)
    deleted_later = F.col(TOMB_SEQ).isNotNull() & load_seq.isNotNull() & (F.col(TOMB_SEQ) > load_seq)
    take_load = in_load & ((in_table & ~table_newer) | (~in_table & ~deleted_later))
    keep_table = in_table & ((in_load & table_newer) | (~in_load & newer_than_floor(kept + seq)))
    return joined.where(take_load | keep_table).select(
        *[
            F.when(take_load, F.col(quote(loaded + f.name)))
            .otherwise(F.col(quote(kept + f.name)))
            .alias(f.name)
            for f in target.fields
        ]
    )

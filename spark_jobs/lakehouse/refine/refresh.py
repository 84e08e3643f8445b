"""Refined zone: one Iceberg table per model of the models folder (lakehouse.refine.models), kept up to date
incrementally.

    clean zone (one Iceberg table per source table, CDC-applied)
        │  rows changed since the snapshots each model consumed last time
        ▼
    models/<name>.sql  →  refined table <name>   (a model may ref() another: refreshed after it)

Each refined table records, in the snapshot summary of the very commit that writes it, the snapshot ids of its
inputs it has consumed (`refine.consumed.<input>`: a source's table name, `<schema>.<table>` when the model
names the schema, or the ref'd model's name) and a hash of the model's text (`refine.model`). The next run
reads the inputs as of their current snapshots (or the newest consistent point, `read_at="consistent"`):

- none of them moved: the table is unchanged and gets no commit;
- an incremental model (a `unique_key`): each moved input's changed rows are found by comparing its two
  snapshots (Iceberg 1.10's changelog scan refuses merge-on-read delete files and its incremental read skips
  overwrite snapshots, so a snapshot comparison it is, on the rows' hashes, of the rows in the data files that
  differ: lakehouse.refine.consumed.file_changes); the keys they reach are traced along the model's join
  conditions where they link the input to its key's (lakehouse.refine.lineage), else through the model
  (lakehouse.refine.changes), recomputed from the inputs as they are now (from the keys' rows alone where the
  key is an input's columns: lakehouse.refine.incremental), and MERGEd: changed rows updated, new ones
  inserted, keys that no longer come out deleted. Untouched rows are not rewritten;
- otherwise the model is rebuilt, and its report says why: new table, model or inputs changed, a consumed
  snapshot left its input's history (expired, or the input was rolled back), no unique_key,
  materialized='table', a plan whose changes cannot be traced to its keys, a rebuild cheaper by the inputs'
  metadata, or (once counted) affected keys over `rebuild_above_affected_fraction` of the model's rows.

A model with an error (in the file, in its SQL, or at run time) fails alone, its report naming the file and
line; the others still refresh (a model that refs it waits). Because each table records its own inputs, a run
that fails between two commits is completed by the next run. With no model at all, the run does nothing.

This module is the job (plan, writes, report); the models' files in `lakehouse.refine.models`, the change
tracing in `lakehouse.refine.changes`, the consumed snapshots in `lakehouse.refine.consumed`."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from lakehouse.apply.run import tables_at_once
from lakehouse.audit.consistent import POINT_AT, last_point
from lakehouse.base.config import LakeConfig
from lakehouse.base.names import properties_sql, quote, sql_string, table_name
from lakehouse.io.iceberg import (
    TABLE_PROPERTIES,
    current_snapshot_id,
    ensure_namespace,
    iceberg_table,
    overwrite_rows,
    replace_table,
    table_exists,
)
from lakehouse.io.storage import list_objects, read_text
from lakehouse.refine.changes import ReadOnUse, affected_keys, incremental_blocker, null_safe_join
from lakehouse.refine.consumed import (
    CONSUMED_PREFIX,
    REFINE_RUN_ID,
    FileChanges,
    SharedChanges,
    StagedReads,
    changed_rows_between,
    consumed_snapshots,
    file_changes,
    input_size,
    is_in_history,
    live_rows,
    newest_summary_value,
    on_columns,
    read_as_of,
    rows_refreshed,
    schema_of,
    seconds_since_commit,
)
from lakehouse.refine.incremental import kept_keys, merge_by_key, rows_of_input_keys
from lakehouse.refine.lineage import columns_read, columns_wanted, key_origin, key_traces
from lakehouse.refine.models import Model, ModelFolder, Reference, load_folder, reads_of
from lakehouse.refine.plans import cheaper_to_rebuild, model_hash_of, most_keys_affected, rebuild_reason
from lakehouse.refine.schedule import refresh_after_refs

log = logging.getLogger(__name__)

# The example models, beside the library in a checkout (a deployed job is given its folder: --models_uri).
EXAMPLE_MODELS = str(Path(__file__).resolve().parents[3] / "models")
MODEL_HASH = "refine.model"


@dataclass(frozen=True)
class RefineOptions:
    """Where the source tables are in the clean zone (`<source_schema>_<table>`, lower case), where new
    refined tables go (a location prefix, for the Glue catalog; None: the catalog's default), the bounded
    cadence (a run within `min_interval_seconds` of the last refine commit does nothing), and the models
    folder (a local folder or an s3:// prefix; None: the example models)."""

    source_schema: str = "main"
    refined_location: str | None = None
    min_interval_seconds: float = 0.0
    # "current": the clean tables' current snapshots; "consistent": their snapshots at the newest recorded
    # consistent point (lakehouse.audit.consistent), so the refined zone never holds half a source transaction.
    read_at: str = "current"
    models_uri: str | None = None
    # An incremental refresh pays a fixed cost per moved input before any row (lakehouse.refine.plans,
    # cheaper_to_rebuild): a model whose inputs hold fewer rows, or of whose rows a larger share changed, is
    # rebuilt instead. Off here (every model that can be is refreshed incrementally); the refine job's
    # arguments give the deployed defaults (lakehouse.jobs.refine; bench/RESULTS.md, "Refined models").
    rebuild_below_rows: int = 0
    rebuild_above_changed_fraction: float = 1.0
    # A model whose affected keys are over this share of its rows is rebuilt once they are counted
    # (lakehouse.refine.plans, most_keys_affected); off here too, on in the refine job.
    rebuild_above_affected_fraction: float = 1.0
    # Models refreshed at once (lakehouse.refine.schedule): 0, from the run's cores (apply.run.tables_at_once);
    # 1, one at a time in the folder's order.
    models_at_once: int = 0

    def clean_name(self, table: str, schema: str | None = None) -> str:
        """The clean table the full load and CDC write for `<schema>.<table>` (names.table_name)."""
        return table_name(schema or self.source_schema, table)


@dataclass
class RefinedTableReport:
    table: str
    mode: str = "unchanged"  # "built" (full), "incremental", "unchanged", "failed", "waiting"
    # input → the rows its commits since the consumed snapshot added and deleted (their summaries: an update
    # counts its before and after images)
    changed_inputs: dict[str, int] = field(default_factory=dict)
    affected: int = 0  # keys recomputed (incremental), or found before a rebuild chosen for their number
    untraced: list[str] = field(
        default_factory=list
    )  # changed inputs whose keys were found by running the model
    snapshot_id: int | None = None
    seconds: float = 0.0
    reason: str | None = None  # why it was rebuilt, or why it waits
    error: str | None = None  # why it failed: <model file>:<line>: <message>


@dataclass
class RefineReport:
    run_id: str
    batch: int
    # "done"; "waiting" when no model's inputs have data (or a consistent point) yet; "too-soon"; "no-models"
    status: str = "done"
    consistent_point: str | None = None  # the source moment its inputs were read at (read_at consistent)
    tables: list[RefinedTableReport] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[RefinedTableReport]:
        return [t for t in self.tables if t.mode == "failed"]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_models(uri: str | None = None, endpoint_url: str | None = None) -> ModelFolder:
    """The `.sql` files of the models folder (a missing folder has none), parsed and ordered."""
    try:
        files = [o.uri for o in list_objects(uri or EXAMPLE_MODELS, endpoint_url) if o.uri.endswith(".sql")]
    except FileNotFoundError:
        files = []
    return load_folder((f, read_text(f, endpoint_url)) for f in files)


class _Refiner:
    def __init__(self, spark: SparkSession, config: LakeConfig, options: RefineOptions, run_id: str) -> None:
        self.spark = spark
        self.config = config
        self.options = options
        self.run_id = run_id
        self.batch = time.time_ns() // 1_000_000
        self.report = RefineReport(run_id, self.batch)
        self.source_snapshots: dict[Reference, int] = {}
        self.refreshed: dict[str, int] = {}  # model → its refined table's snapshot after this run
        self.shared = SharedChanges({})  # the changed rows two models read, found once
        self.models: list[Model] = []  # the run's models
        self.wanted: dict[str, frozenset[str] | None] = {}  # input → the columns its readers read
        self.columns_of: dict[str, dict[str, frozenset[str]] | None] = {}  # model → columns_read, once a run
        self.wanted_lock = threading.Lock()  # models refreshed at once find an input's wanted columns once

    def refined(self, name: str) -> str:
        return self.config.table(self.config.refined_database, name)

    def input_table(self, reference: Reference) -> str:
        if reference.kind == "ref":
            return self.refined(reference.name)
        return self.config.clean_table(self.options.clean_name(reference.name, reference.schema))

    def inputs_of(self, model: Model) -> dict[Reference, int] | str:
        """Each input's snapshot to read, or why the model waits."""
        inputs: dict[Reference, int] = {}
        for reference in model.references:
            snapshot = (
                self.refreshed.get(reference.name)
                if reference.kind == "ref"
                else self.source_snapshots.get(reference)
            )
            if snapshot is None:
                return f"{self.input_table(reference)} has no data yet"
            inputs[reference] = snapshot
        return inputs

    def cheaper_rebuild(
        self,
        inputs: Mapping[Reference, int],
        sizes: Mapping[Reference, tuple[int, int]],
        loaded: Mapping[Reference, Any],
        differing: Mapping[Reference, FileChanges | None],
    ) -> str | None:
        """Why rebuilding the model costs less than refreshing it from its inputs' changes (consumed,
        rows_refreshed: what each reads), or None."""
        fraction = self.options.rebuild_above_changed_fraction
        rows, read = rows_refreshed(inputs, sizes, loaded, differing, fraction < 1)
        return cheaper_to_rebuild(read, rows, self.options.rebuild_below_rows, fraction)

    def commit_properties(self, model: Model, inputs: Mapping[Reference, int]) -> dict[str, str]:
        point = {POINT_AT: self.report.consistent_point} if self.report.consistent_point else {}
        consumed = {f"{CONSUMED_PREFIX}{r.input_name}": str(s) for r, s in inputs.items()}
        return consumed | {REFINE_RUN_ID: self.run_id, MODEL_HASH: model_hash_of(model)} | point

    def evaluator(self, model: Model, views: dict[str, str]) -> Any:
        """A function of the inputs (input name → DataFrame) giving the model's rows over them; the temporary
        views it makes are added to `views` (view → input name: Spark may resolve them again until the rows are
        written)."""

        def evaluate(frames: Mapping[str, DataFrame]) -> DataFrame:
            names = {}
            for name, frame in frames.items():
                names[name] = f"refine_in_{abs(hash((model.name, threading.get_ident())))}_{len(views)}"
                views[names[name]] = name
                frame.createOrReplaceTempView(names[name])
            return self.spark.sql(model.render(lambda r: names[r.input_name]))

        return evaluate

    def refresh(self, model: Model) -> RefinedTableReport:
        views: dict[str, str] = {}
        reads = StagedReads(self.spark)  # the model's own (models may be refreshed in parallel)
        try:
            return self._refresh(model, views, reads)
        finally:
            reads.release()
            for view in views:
                self.spark.catalog.dropTempView(view)

    # --- one model --------------------------------------------------------------------------------

    def _refresh(self, model: Model, views: dict[str, str], reads: StagedReads) -> RefinedTableReport:
        report = RefinedTableReport(model.name)
        inputs = self.inputs_of(model)
        if isinstance(inputs, str):
            report.mode, report.reason = "waiting", inputs
            return report
        table = self.refined(model.name)
        exists = table_exists(self.spark, table)
        consumed = consumed_snapshots(self.spark, table) if exists else None
        summary = newest_summary_value(self.spark, table, MODEL_HASH) if exists else None
        by_name = {r.input_name: s for r, s in inputs.items()}
        reason = rebuild_reason(model, exists, consumed, by_name, summary)
        if reason is None and consumed == by_name:
            report.snapshot_id = current_snapshot_id(self.spark, table)
            self.refreshed[model.name] = report.snapshot_id or 0
            return report
        # Each input's metadata, loaded once for the model (after the models it reads were refreshed):
        # its history, its size and the files that changed are all read from it.
        loaded = {r: iceberg_table(self.spark, self.input_table(r)) for r in inputs} if reason is None else {}
        if reason is None:
            assert consumed is not None
            for reference, snapshot in inputs.items():
                if not is_in_history(
                    self.spark,
                    self.input_table(reference),
                    consumed[reference.input_name],
                    snapshot,
                    loaded[reference],
                ):
                    reason = f"consumed snapshot {consumed[reference.input_name]} of {reference.input_name} is no longer in its history"
                    log.warning("%s: %s: rebuilding", table, reason)
                    break
        differing: dict[Reference, FileChanges | None] = {}  # each moved input's differing files
        sizes: dict[Reference, tuple[int, int]] = {}  # each input's rows, and rows changed since consumed
        if reason is None:
            assert consumed is not None
            for reference, snapshot in inputs.items():
                sizes[reference] = input_size(
                    self.spark,
                    self.input_table(reference),
                    consumed[reference.input_name],
                    snapshot,
                    loaded[reference],
                )
                if consumed[reference.input_name] != snapshot:
                    differing[reference] = file_changes(
                        self.spark,
                        self.input_table(reference),
                        consumed[reference.input_name],
                        snapshot,
                        loaded[reference],
                    )
            reason = self.cheaper_rebuild(inputs, sizes, loaded, differing)
        evaluate = self.evaluator(model, views)
        now = {r.input_name: read_as_of(self.spark, self.input_table(r), s) for r, s in inputs.items()}
        rows = evaluate(now)
        # The key's columns as the SELECT spells them (the lake's names are case-insensitive, as Spark's).
        selected = {c.lower(): c for c in rows.columns}
        missing = [k for k in model.unique_key if k.lower() not in selected]
        if missing:
            raise model.error(f"unique_key {missing} is not a column of the SELECT ({rows.columns})")
        model = replace(model, unique_key=tuple(selected[k.lower()] for k in model.unique_key))
        if reason is None:
            blocker = incremental_blocker(rows)
            if blocker is not None:
                reason = f"cannot be refreshed incrementally: {blocker}"
            elif exists and schema_of(self.spark.table(table).schema) != schema_of(rows.schema):
                reason = "its columns changed"
        properties = self.commit_properties(model, inputs)
        if reason is not None:
            report.mode, report.reason = "built", reason
            self._write_full(table, rows, properties)
        else:
            assert consumed is not None
            report.mode = "incremental"
            model_reads = reads_of(model)
            origin = key_origin(rows, views, model.unique_key, model_reads)
            traces = {} if origin is None else key_traces(rows, views, origin, model_reads)
            tables = {r.input_name: self.input_table(r) for r in inputs}
            before = ReadOnUse(tables, lambda name: read_as_of(self.spark, tables[name], consumed[name]))
            changes = {}
            read_columns = self.columns_of[model.name] = columns_read(rows, views, model_reads)
            for reference in inputs:
                name = reference.input_name
                if consumed[name] == by_name[name]:
                    continue
                report.changed_inputs[name] = sizes[reference][1]
                table_in, old, new = self.input_table(reference), consumed[name], by_name[name]
                files, java_table = differing[reference], loaded[reference]
                own = read_columns.get(name)
                own = None if own is None or own >= set(now[name].columns) else own
                if own is not None and self.shared.readers.get(name, 0) > 1:
                    with self.wanted_lock:
                        if name not in self.wanted:
                            self.wanted[name] = columns_wanted(
                                self.spark,
                                self.models,
                                name,
                                self.input_table,
                                self.evaluator,
                                self.columns_of,
                            )
                wanted = own if own is None else self.wanted.get(name, own)
                images = self.shared.changes(
                    name,
                    table_in,
                    old,
                    new,
                    partial(
                        changed_rows_between, self.spark, table_in, old, new, files, reads, java_table, wanted
                    ),
                )
                compared = files is None or not files.only_changes
                changes[name] = on_columns(images, own, compared, self.shared.one_task(images))
            keys = affected_keys(evaluate, before, now, changes, model.unique_key, traces)
            report.untraced = sorted(set(changes) - set(traces))
            assert keys is not None  # an input moved, or the table would be unchanged
            keys, keys_summary = kept_keys(keys)
            report.affected = keys_summary.count
            target = None  # the refined table's metadata, loaded once for its size and then its MERGE
            if self.options.rebuild_above_affected_fraction < 1:
                target = iceberg_table(self.spark, table)
                reason = most_keys_affected(
                    keys_summary.count, live_rows(target), self.options.rebuild_above_affected_fraction
                )
            if reason is not None:
                report.mode, report.reason = "built", reason
                self._write_full(table, rows, properties)
            else:
                if origin is None:
                    recomputed = null_safe_join(rows, keys, model.unique_key, "left_semi")
                else:
                    keyed = rows_of_input_keys(now[origin.input_name], keys, origin, keys_summary)
                    recomputed = evaluate({**now, origin.input_name: keyed})
                merge_by_key(
                    self.spark, table, keys, recomputed, model.unique_key, properties, keys_summary, target
                )
        report.snapshot_id = current_snapshot_id(self.spark, table)
        self.refreshed[model.name] = report.snapshot_id or 0
        return report

    # --- writes -----------------------------------------------------------------------------------

    def _write_full(self, table: str, rows: DataFrame, properties: dict[str, str]) -> None:
        if not table_exists(self.spark, table):
            location = self.options.refined_location
            name = table.rsplit(".", 1)[1]
            where = f"{location.rstrip('/')}/{self.config.refined_database}.db/{name}" if location else None
            create_refined_table(self.spark, table, rows.schema, where)
        elif schema_of(self.spark.table(table).schema) != schema_of(rows.schema):
            replace_table(
                self.spark, table, rows, {}, properties
            )  # the history stays: time travel still works
            return
        overwrite_rows(self.spark, table, rows, properties)


def create_refined_table(
    spark: SparkSession, table: str, schema: T.StructType, location: str | None = None
) -> None:
    columns = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in schema.fields)
    properties = properties_sql(TABLE_PROPERTIES)
    where = f" LOCATION {sql_string(location)}" if location else ""
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {table} ({columns}) USING iceberg{where} TBLPROPERTIES ({properties})"
    )


def refine(
    spark: SparkSession,
    config: LakeConfig,
    options: RefineOptions = RefineOptions(),
    run_id: str = "refine",
    models: ModelFolder | None = None,
) -> RefineReport:
    """Bring each model's refined table up to date with the clean zone (see the module doc)."""
    started = time.monotonic()
    refiner = _Refiner(spark, config, options, run_id)
    folder = models if models is not None else read_models(options.models_uri, config.s3_endpoint_url)
    for name, refused in folder.errors.items():
        log.error("refine: model %s: %s", name, refused)
    if not folder.models and not folder.errors:
        log.info("refine: no model in %s: nothing to refine", options.models_uri or EXAMPLE_MODELS)
        refiner.report.status = "no-models"
        return refiner.report
    sources = {r for m in folder.models for r in m.sources}
    if not _read_sources(spark, config, refiner, sources):
        return refiner.report
    tables = [refiner.refined(m.name) for m in folder.models]
    if (
        options.min_interval_seconds > 0
        and tables
        and min(seconds_since_commit(spark, t) for t in tables) < (options.min_interval_seconds)
    ):
        log.info("refine: last refine is younger than %ss; skipping this run", options.min_interval_seconds)
        refiner.report.status = "too-soon"
        return refiner.report
    ensure_namespace(spark, config.catalog_name, config.refined_database)
    refiner.shared = SharedChanges(Counter(r.input_name for m in folder.models for r in set(m.references)))
    refiner.models = list(folder.models)
    refiner.report.tables = refresh_after_refs(
        folder.models,
        refiner.refresh,
        lambda model, error: RefinedTableReport(model.name, "failed", error=str(error)),
        options.models_at_once or tables_at_once(spark.sparkContext.defaultParallelism),
        folder.errors,
        spark,
    )
    refiner.shared.release()
    for name, refused in folder.errors.items():
        refiner.report.tables.append(RefinedTableReport(name, "failed", error=str(refused)))
    if refiner.report.tables and all(t.mode == "waiting" for t in refiner.report.tables):
        refiner.report.status, refiner.report.tables = "waiting", []
    refiner.report.seconds = round(time.monotonic() - started, 3)
    return refiner.report


def _read_sources(
    spark: SparkSession, config: LakeConfig, refiner: _Refiner, sources: set[Reference]
) -> bool:
    """The snapshot of each source to read; False (the report waiting) when a consistent point is asked for
    and none covers every source yet."""
    options = refiner.options
    names = {r: options.clean_name(r.name, r.schema) for r in sources}
    if options.read_at == "consistent":
        point = last_point(spark, config)
        if point is None or any(clean not in point.snapshots for clean in names.values()):
            log.warning("refine: no consistent point of every clean table recorded yet; nothing to refine")
            refiner.report.status = "waiting"
            return False
        refiner.source_snapshots = {r: point.snapshots[clean] for r, clean in names.items()}
        refiner.report.consistent_point = point.at.isoformat()
        return True
    for reference in sources:
        table = refiner.input_table(reference)
        snapshot = current_snapshot_id(spark, table) if table_exists(spark, table) else None
        if snapshot is None:
            log.warning("refine: %s has no data yet", table)
        else:
            refiner.source_snapshots[reference] = snapshot
    return True

"""Refined zone: a denormalized sales table and daily business aggregates, kept up to date incrementally.

    clean zone (one Iceberg table per source table, CDC-applied)
        │  changed keys since the snapshots consumed last time
        ▼
    sales_enriched            web_sales ⟕ date_dim ⟕ time_dim ⟕ item ⟕ customer ⟕ customer_address
        │  changed rows since the sales_enriched snapshot consumed last time
        ▼
    daily_revenue_by_category, daily_revenue_by_state

Incremental, not a nightly rebuild. Each refined table records, in the snapshot summary of the very
commit that writes it, the snapshot ids of its inputs it has consumed (`refine.consumed.<table>`). The
next run reads the inputs as of their current snapshots and compares them with the consumed ones:

- Changed keys of a clean table = keys whose (key, dms_change_seq, dms_commit_ts) differ between the two
  snapshots, in either direction (an insert, an update, a delete, a reload). Iceberg 1.10's changelog
  scan refuses merge-on-read delete files ("Delete files are currently not supported in changelog
  scans") and its incremental read silently skips overwrite snapshots, so a snapshot comparison it is;
  it reads only the key and the two change columns of each version.
- Affected sales = changed web_sales keys, plus every sale whose item, customer, customer address,
  date or time row changed (a dimension update or delete changes the enriched rows that use it).
- Those sales are recomputed from the clean tables and MERGEd: changed rows updated, new ones
  inserted, vanished ones deleted. Untouched rows are not rewritten.
- The aggregates do the same one level up: the sales_enriched rows that changed since the consumed
  snapshot (each row carries the `refine_batch` that last wrote it) name the affected
  (day, category) and (day, state) groups, in their old and new versions; only those groups are
  recomputed and MERGEd (a group left without sales is deleted).

A re-run without clean-zone changes commits nothing. A refined table with no consumed state, or whose
consumed snapshot is no longer in its input's history (expired, or the input was rolled back), is
rebuilt in full, as is the first run. Because each level records its own inputs, a run that fails
between two commits is completed by the next run.

Dimension joins are left joins: a sale whose item or customer was deleted stays, with null attributes
(it is grouped under a null category or state), exactly what a recomputation from the clean tables gives.

This module is the job (plan, MERGE, report, entry point); the refined tables' names and pure DataFrame
steps are in `lakehouse.refine.tables`, the consumed snapshots and the reads as of a snapshot in
`lakehouse.refine.consumed`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.audit.consistent import POINT_AT, last_point
from lakehouse.base.config import LakeConfig
from lakehouse.base.names import (
    CHANGE_SEQ_COLUMN,
    COMMIT_TS_COLUMN,
    properties_sql,
    quote,
    sql_string,
    table_name,
)
from lakehouse.io.iceberg import (
    TABLE_PROPERTIES,
    current_snapshot_id,
    ensure_namespace,
    overwrite_rows,
    table_exists,
    with_commit_properties,
)
from lakehouse.refine.consumed import (
    CONSUMED_PREFIX,
    REFINE_RUN_ID,
    consumed_snapshots,
    is_in_history,
    read_as_of,
    seconds_since_commit,
)
from lakehouse.refine.tables import (
    AGGREGATE_DAY,
    AGGREGATES,
    BATCH_COLUMN,
    SALES_ENRICHED,
    SALES_KEY,
    SOURCE_KEYS,
    affected_sales,
    changed_keys,
    daily_revenue,
    enrich_sales,
    null_safe_join,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RefineOptions:
    """Where the source tables are in the clean zone (`<source_schema>_<table>`, lower case), where new
    refined tables go (a location prefix, for the Glue catalog; None: the catalog's default), and the
    bounded cadence: a run within `min_interval_seconds` of the last refine commit does nothing."""

    source_schema: str = "main"
    refined_location: str | None = None
    min_interval_seconds: float = 0.0
    # "current": the clean tables' current snapshots; "consistent": their snapshots at the newest recorded
    # consistent point (lakehouse.audit.consistent), so the refined zone never holds half a source transaction.
    read_at: str = "current"

    def clean_name(self, table: str) -> str:
        """The clean table the full load and CDC write for `<source_schema>.<table>` (names.table_name)."""
        return table_name(self.source_schema, table)


@dataclass
class RefinedTableReport:
    table: str
    mode: str = "unchanged"  # "built" (full), "incremental", "unchanged"
    changed_inputs: dict[str, int] = field(default_factory=dict)  # input → changed keys
    affected: int = 0  # sales (sales_enriched) or groups (aggregates) recomputed
    snapshot_id: int | None = None
    seconds: float = 0.0


@dataclass
class RefineReport:
    run_id: str
    batch: int
    status: str = "done"  # "done", or "waiting" when a clean table has no data (or no consistent point) yet
    consistent_point: str | None = None  # the source moment its inputs were read at (read_at consistent)
    tables: list[RefinedTableReport] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------------------------
# The job


class _Refiner:
    def __init__(self, spark: SparkSession, config: LakeConfig, options: RefineOptions, run_id: str) -> None:
        self.spark = spark
        self.config = config
        self.options = options
        self.run_id = run_id
        self.batch = time.time_ns() // 1_000_000
        self.report = RefineReport(run_id, self.batch)

    def refined(self, name: str) -> str:
        return self.config.table(self.config.refined_database, name)

    def clean(self, source: str) -> str:
        return self.config.clean_table(self.options.clean_name(source))

    def commit_properties(self, consumed: dict[str, int]) -> dict[str, str]:
        point = {POINT_AT: self.report.consistent_point} if self.report.consistent_point else {}
        return (
            {f"{CONSUMED_PREFIX}{name}": str(sid) for name, sid in consumed.items()}
            | {REFINE_RUN_ID: self.run_id}
            | point
        )

    def plan(self, table: str, inputs: dict[str, int]) -> tuple[str, dict[str, int] | None]:
        """ "build", "incremental" (with the consumed snapshots) or "unchanged"."""
        if not table_exists(self.spark, table):
            return "build", None
        consumed = consumed_snapshots(self.spark, table)
        if consumed is None or set(consumed) != set(inputs):
            return "build", None
        if consumed == inputs:
            return "unchanged", consumed
        for name, sid in consumed.items():
            if not is_in_history(self.spark, self._input_table(name), sid, inputs[name]):
                log.warning(
                    "%s: consumed snapshot %s of %s is gone from its history: rebuilding", table, sid, name
                )
                return "build", None
        return "incremental", consumed

    def _input_table(self, name: str) -> str:
        return self.refined(SALES_ENRICHED) if name == SALES_ENRICHED else self.clean(name)

    # --- sales_enriched -------------------------------------------------------------------------

    def refine_sales(self, inputs: dict[str, int]) -> RefinedTableReport:
        table = self.refined(SALES_ENRICHED)
        report = RefinedTableReport(SALES_ENRICHED)
        mode, consumed = self.plan(table, inputs)
        report.mode = "built" if mode == "build" else mode
        now = {name: read_as_of(self.spark, self.clean(name), sid) for name, sid in inputs.items()}
        if mode == "build":
            rows = self._enrich(now)
            self._write_full(table, rows, self.commit_properties(inputs))
        elif mode == "incremental":
            assert consumed is not None
            changed = {}
            for name, key in SOURCE_KEYS.items():
                if consumed[name] == inputs[name]:
                    changed[name] = now[name].select(*key).limit(0)
                    continue
                before = read_as_of(self.spark, self.clean(name), consumed[name])
                changed[name] = changed_keys(before, now[name], key, (CHANGE_SEQ_COLUMN, COMMIT_TS_COLUMN))
                changed[name] = changed[name].localCheckpoint()
                report.changed_inputs[name] = changed[name].count()
            affected = affected_sales(now["web_sales"], now["customer"], changed).localCheckpoint()
            report.affected = affected.count()
            rows = self._enrich(
                {**now, "web_sales": now["web_sales"].join(affected, list(SALES_KEY), "left_semi")}
            )
            self._merge(table, affected, rows, SALES_KEY, self.commit_properties(inputs))
        report.snapshot_id = current_snapshot_id(self.spark, table)
        return report

    def _enrich(self, tables: dict[str, DataFrame]) -> DataFrame:
        rows = enrich_sales(
            tables["web_sales"],
            tables["date_dim"],
            tables["time_dim"],
            tables["item"],
            tables["customer"],
            tables["customer_address"],
        )
        return rows.withColumn(BATCH_COLUMN, F.lit(self.batch).cast("bigint"))

    # --- aggregates -----------------------------------------------------------------------------

    def refine_aggregate(
        self, name: str, groups: Sequence[str], enriched_snapshot: int
    ) -> RefinedTableReport:
        table = self.refined(name)
        enriched = self.refined(SALES_ENRICHED)
        report = RefinedTableReport(name)
        inputs = {SALES_ENRICHED: enriched_snapshot}
        mode, consumed = self.plan(table, inputs)
        report.mode = "built" if mode == "build" else mode
        now = read_as_of(self.spark, enriched, enriched_snapshot)
        group_key = (AGGREGATE_DAY, *groups)
        if mode == "build":
            self._write_full(table, daily_revenue(now, groups), self.commit_properties(inputs))
        elif mode == "incremental":
            assert consumed is not None
            before = read_as_of(self.spark, enriched, consumed[SALES_ENRICHED])
            changed = changed_keys(before, now, SALES_KEY, (BATCH_COLUMN,)).localCheckpoint()
            report.changed_inputs[SALES_ENRICHED] = changed.count()
            touched = (
                before.join(changed, list(SALES_KEY), "left_semi")
                .select(*group_key)
                .unionByName(now.join(changed, list(SALES_KEY), "left_semi").select(*group_key))
                .distinct()
                .localCheckpoint()
            )
            report.affected = touched.count()
            values = daily_revenue(null_safe_join(now, touched, group_key, "left_semi"), groups)
            self._merge(table, touched, values, group_key, self.commit_properties(inputs), null_safe=True)
        report.snapshot_id = current_snapshot_id(self.spark, table)
        return report

    # --- writes ---------------------------------------------------------------------------------

    def _write_full(self, table: str, rows: DataFrame, properties: dict[str, str]) -> None:
        if not table_exists(self.spark, table):
            location = self.options.refined_location
            name = table.rsplit(".", 1)[1]
            where = f"{location.rstrip('/')}/{self.config.refined_database}.db/{name}" if location else None
            create_refined_table(self.spark, table, rows.schema, where)
        overwrite_rows(self.spark, table, _aligned(self.spark, table, rows), properties)

    def _merge(
        self,
        table: str,
        keys: DataFrame,
        rows: DataFrame,
        key: Sequence[str],
        properties: dict[str, str],
        null_safe: bool = False,
    ) -> None:
        """MERGE `rows` for exactly the `keys`: a key without a row is deleted from the table. One
        commit, carrying `properties`, even when nothing changed (the consumed snapshots advance)."""
        present = rows.withColumn("__present", F.lit(True))
        source = null_safe_join(keys.select(*key), present, key, "left").withColumn(
            "__present", F.coalesce(F.col("__present"), F.lit(False))
        )
        columns = [f.name for f in self.spark.table(table).schema.fields]
        view = f"refine_source_{abs(hash((table, threading.get_ident())))}"
        source.select(*[F.col(quote(c)) for c in columns], "__present").createOrReplaceTempView(view)
        equals = "<=>" if null_safe else "="
        on = " AND ".join(f"t.{quote(k)} {equals} s.{quote(k)}" for k in key)
        updates = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in columns if c not in key)
        statement = (
            f"MERGE INTO {table} t USING {view} s ON {on} "
            "WHEN MATCHED AND NOT s.__present THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {updates} "
            f"WHEN NOT MATCHED AND s.__present THEN INSERT ({', '.join(quote(c) for c in columns)}) "
            f"VALUES ({', '.join(f's.{quote(c)}' for c in columns)})"
        )
        try:
            with_commit_properties(self.spark, properties, lambda: self.spark.sql(statement))
        finally:
            self.spark.catalog.dropTempView(view)


def create_refined_table(
    spark: SparkSession, table: str, schema: T.StructType, location: str | None = None
) -> None:
    columns = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in schema.fields)
    properties = properties_sql(TABLE_PROPERTIES)
    where = f" LOCATION {sql_string(location)}" if location else ""
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {table} ({columns}) USING iceberg{where} TBLPROPERTIES ({properties})"
    )


def _aligned(spark: SparkSession, table: str, rows: DataFrame) -> DataFrame:
    target = spark.table(table).schema
    return rows.select(*[F.col(quote(f.name)).cast(f.dataType).alias(f.name) for f in target.fields])


def refine(
    spark: SparkSession,
    config: LakeConfig,
    options: RefineOptions = RefineOptions(),
    run_id: str = "refine",
) -> RefineReport:
    """Bring the refined zone up to date with the clean zone's current snapshots (see the module doc)."""
    started = time.monotonic()
    refiner = _Refiner(spark, config, options, run_id)
    ensure_namespace(spark, config.catalog_name, config.refined_database)
    inputs: dict[str, int] = {}
    if options.read_at == "consistent":
        point = last_point(spark, config)
        names = {name: options.clean_name(name) for name in SOURCE_KEYS}
        if point is None or any(clean not in point.snapshots for clean in names.values()):
            log.warning("refine: no consistent point of every clean table recorded yet; nothing to refine")
            refiner.report.status = "waiting"
            return refiner.report
        inputs = {name: point.snapshots[clean] for name, clean in names.items()}
        refiner.report.consistent_point = point.at.isoformat()
    for name in SOURCE_KEYS if not inputs else ():
        table = refiner.clean(name)
        snapshot = current_snapshot_id(spark, table) if table_exists(spark, table) else None
        if snapshot is None:
            log.warning("refine: %s has no data yet; nothing to refine", table)
            refiner.report.status = "waiting"
            return refiner.report
        inputs[name] = snapshot
    if options.min_interval_seconds > 0 and seconds_since_commit(spark, refiner.refined(SALES_ENRICHED)) < (
        options.min_interval_seconds
    ):
        log.info("refine: last refine is younger than %ss; skipping this run", options.min_interval_seconds)
        refiner.report.status = "too-soon"
        return refiner.report

    def timed(step: Any, *args: Any) -> RefinedTableReport:
        begun = time.monotonic()
        report = step(*args)
        report.seconds = round(time.monotonic() - begun, 3)
        log.info("refine: %s %s (%d affected)", report.table, report.mode, report.affected)
        return report

    sales = timed(refiner.refine_sales, inputs)
    refiner.report.tables.append(sales)
    assert sales.snapshot_id is not None
    for name, groups in AGGREGATES.items():
        refiner.report.tables.append(timed(refiner.refine_aggregate, name, groups, sales.snapshot_id))
    refiner.report.seconds = round(time.monotonic() - started, 3)
    return refiner.report

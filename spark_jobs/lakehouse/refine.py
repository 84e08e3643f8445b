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

from lakehouse.config import LakeConfig
from lakehouse.consistent import POINT_AT, last_point
from lakehouse.iceberg import (
    TABLE_PROPERTIES,
    current_snapshot_id,
    ensure_namespace,
    iceberg_table,
    overwrite_rows,
    snapshot_properties,
    table_exists,
    with_commit_properties,
)
from lakehouse.names import (
    CHANGE_SEQ_COLUMN,
    COMMIT_TS_COLUMN,
    properties_sql,
    quote,
    sql_string,
    table_name,
)

log = logging.getLogger(__name__)

CONSUMED_PREFIX = "refine.consumed."
REFINE_RUN_ID = "refine.run-id"
BATCH_COLUMN = "refine_batch"

SALES_ENRICHED = "sales_enriched"
SALES_KEY = ("ws_item_sk", "ws_order_number")
SOURCE_KEYS: dict[str, tuple[str, ...]] = {
    "web_sales": SALES_KEY,
    "date_dim": ("d_date_sk",),
    "time_dim": ("t_time_sk",),
    "item": ("i_item_sk",),
    "customer": ("c_customer_sk",),
    "customer_address": ("ca_address_sk",),
}
# aggregate table → its group columns besides the day
AGGREGATES: dict[str, tuple[str, ...]] = {
    "daily_revenue_by_category": ("category",),
    "daily_revenue_by_state": ("customer_state",),
}
AGGREGATE_DAY = "sold_date"


@dataclass(frozen=True)
class RefineOptions:
    """Where the source tables are in the clean zone (`<source_schema>_<table>`, lower case), where new
    refined tables go (a location prefix, for the Glue catalog; None: the catalog's default), and the
    bounded cadence: a run within `min_interval_seconds` of the last refine commit does nothing."""

    source_schema: str = "main"
    refined_location: str | None = None
    min_interval_seconds: float = 0.0
    # "current": the clean tables' current snapshots; "consistent": their snapshots at the newest recorded
    # consistent point (lakehouse.consistent), so the refined zone never holds half a source transaction.
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
# Pure DataFrame → DataFrame steps


def enrich_sales(
    sales: DataFrame,
    dates: DataFrame,
    times: DataFrame,
    items: DataFrame,
    customers: DataFrame,
    addresses: DataFrame,
) -> DataFrame:
    """web_sales with its day, time, item, customer and the customer's current address: one row per
    sale line, dimensions left-joined (a missing dimension row gives nulls, never drops the sale)."""
    day = dates.select(
        F.col("d_date_sk"),
        F.col("d_date").alias("sold_date"),
        F.col("d_year").alias("sold_year"),
        F.col("d_moy").alias("sold_month"),
        F.col("d_holiday").alias("sold_on_holiday"),
    )
    hour = times.select(F.col("t_time_sk"), F.col("t_hour").alias("sold_hour"))
    item = items.select(
        "i_item_sk",
        F.col("i_item_id").alias("item_id"),
        F.col("i_product_name").alias("product_name"),
        F.col("i_category").alias("category"),
        F.col("i_class").alias("item_class"),
        F.col("i_brand").alias("brand"),
    )
    address = addresses.select(
        "ca_address_sk", F.col("ca_state").alias("customer_state"), F.col("ca_city").alias("customer_city")
    )
    customer = (
        customers.select(
            "c_customer_sk",
            "c_current_addr_sk",
            F.col("c_first_name").alias("customer_first_name"),
            F.col("c_last_name").alias("customer_last_name"),
        )
        .join(address, F.col("c_current_addr_sk") == F.col("ca_address_sk"), "left")
        .drop("c_current_addr_sk", "ca_address_sk")
    )
    joined = (
        sales.join(day, sales["ws_sold_date_sk"] == day["d_date_sk"], "left")
        .join(hour, sales["ws_sold_time_sk"] == hour["t_time_sk"], "left")
        .join(item, sales["ws_item_sk"] == item["i_item_sk"], "left")
        .join(customer, sales["ws_bill_customer_sk"] == customer["c_customer_sk"], "left")
    )
    return joined.select(
        sales["ws_item_sk"],
        sales["ws_order_number"],
        "sold_date",
        "sold_year",
        "sold_month",
        "sold_hour",
        "sold_on_holiday",
        sales["ws_bill_customer_sk"].alias("customer_sk"),
        "customer_first_name",
        "customer_last_name",
        "customer_state",
        "customer_city",
        "item_id",
        "product_name",
        "category",
        "item_class",
        "brand",
        sales["ws_quantity"].alias("quantity"),
        sales["ws_list_price"].alias("list_price"),
        sales["ws_sales_price"].alias("sales_price"),
        sales["ws_ext_sales_price"].alias("revenue"),
        sales["ws_ext_discount_amt"].alias("discount"),
        sales["ws_coupon_amt"].alias("coupon"),
        sales["ws_net_paid"].alias("net_paid"),
        sales["ws_ext_wholesale_cost"].alias("wholesale_cost"),
        sales["ws_net_profit"].alias("profit"),
    )


def daily_revenue(enriched: DataFrame, group_columns: Sequence[str]) -> DataFrame:
    """Per day and group: revenue, profit, net paid, quantity, distinct orders and sale lines."""
    return enriched.groupBy(AGGREGATE_DAY, *group_columns).agg(
        F.sum("revenue").alias("revenue"),
        F.sum("profit").alias("profit"),
        F.sum("net_paid").alias("net_paid"),
        F.sum("quantity").cast("bigint").alias("quantity"),
        F.countDistinct("ws_order_number").cast("bigint").alias("orders"),
        F.count(F.lit(1)).cast("bigint").alias("lines"),
    )


def changed_keys(
    before: DataFrame, after: DataFrame, key: Sequence[str], versions: Sequence[str]
) -> DataFrame:
    """Distinct keys whose (key, version columns) rows differ between two versions of a table: inserted,
    updated (a new change sequence), deleted or reloaded rows. Set difference is null-safe."""
    columns = [*key, *versions]
    a, b = after.select(*columns), before.select(*columns)
    return a.subtract(b).unionByName(b.subtract(a)).select(*key).distinct()


def affected_sales(
    sales: DataFrame,
    customers: DataFrame,
    changed: dict[str, DataFrame],
) -> DataFrame:
    """Keys of the sales to recompute: changed sales, and sales (as they are now) whose item, customer,
    customer's address, day or time changed. `changed` maps each source table to its changed keys."""
    changed_customers = changed["customer"].unionByName(
        customers.join(
            changed["customer_address"].withColumnRenamed("ca_address_sk", "c_current_addr_sk"),
            "c_current_addr_sk",
            "left_semi",
        ).select("c_customer_sk")
    )
    by_reference = [
        ("ws_item_sk", changed["item"].withColumnRenamed("i_item_sk", "ws_item_sk")),
        ("ws_bill_customer_sk", changed_customers.withColumnRenamed("c_customer_sk", "ws_bill_customer_sk")),
        ("ws_sold_date_sk", changed["date_dim"].withColumnRenamed("d_date_sk", "ws_sold_date_sk")),
        ("ws_sold_time_sk", changed["time_dim"].withColumnRenamed("t_time_sk", "ws_sold_time_sk")),
    ]
    affected = changed["web_sales"].select(*SALES_KEY)
    for column, keys in by_reference:
        affected = affected.unionByName(sales.join(keys, column, "left_semi").select(*SALES_KEY))
    return affected.distinct()


def null_safe_join(left: DataFrame, right: DataFrame, columns: Sequence[str], how: str) -> DataFrame:
    """Join on columns that may be null (a group with a null category is still one group)."""
    renamed = right.select(*[F.col(c).alias(f"__r_{c}") if c in columns else F.col(c) for c in right.columns])
    condition = None
    for c in columns:
        term = left[c].eqNullSafe(renamed[f"__r_{c}"])
        condition = term if condition is None else condition & term
    joined = left.join(renamed, condition, how)
    return joined if how in ("left_semi", "left_anti") else joined.drop(*[f"__r_{c}" for c in columns])


# ------------------------------------------------------------------------------------------------
# Snapshots


def is_in_history(spark: SparkSession, table: str, snapshot_id: int, current_id: int) -> bool:
    """Whether `snapshot_id` is still readable and an ancestor of (or is) the current snapshot."""
    jtable = iceberg_table(spark, table)
    if jtable.snapshot(snapshot_id) is None:
        return False
    util = spark.sparkContext._jvm.org.apache.iceberg.util.SnapshotUtil
    return snapshot_id == current_id or bool(util.isAncestorOf(jtable, current_id, snapshot_id))


def consumed_snapshots(spark: SparkSession, table: str) -> dict[str, int] | None:
    """The input snapshot ids a refined table has consumed (newest refine commit on its lineage)."""
    for summary in snapshot_properties(spark, table):
        consumed = {
            k[len(CONSUMED_PREFIX) :]: int(v) for k, v in summary.items() if k.startswith(CONSUMED_PREFIX)
        }
        if consumed:
            return consumed
    return None


def read_as_of(spark: SparkSession, table: str, snapshot_id: int) -> DataFrame:
    """The table as of a snapshot. Through the `snapshot-id` read option, not `VERSION AS OF`: Spark
    treats two `VERSION AS OF` reads of one table as the same relation, so its optimizer may fold
    `distinct(old UNION new)` into `distinct(old)` (measured: Spark 3.5 + Iceberg 1.10.2); the option is
    part of the relation, which keeps the two versions apart."""
    return spark.read.format("iceberg").option("snapshot-id", str(snapshot_id)).load(table)


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
    if options.min_interval_seconds > 0 and _seconds_since_commit(spark, refiner.refined(SALES_ENRICHED)) < (
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


def _seconds_since_commit(spark: SparkSession, table: str) -> float:
    if not table_exists(spark, table):
        return float("inf")
    snapshot = iceberg_table(spark, table).currentSnapshot()
    return float("inf") if snapshot is None else time.time() - snapshot.timestampMillis() / 1000


def refine_main(argv: Sequence[str]) -> int:
    """The refine job (spark_jobs/refine_job.py): `--name value` arguments, as Glue passes them."""
    import argparse
    import json

    from lakehouse.config import parse_job_arguments
    from lakehouse.logs import configure_logging
    from lakehouse.session import build_session
    from lakehouse.storage import write_text

    configure_logging()
    parser = argparse.ArgumentParser(description="Refine the clean zone into the refined zone, incrementally")
    parser.add_argument("--source_schema", default="main", help="source schema of the clean tables' names")
    parser.add_argument("--refined_location", default=None, help="location prefix of new refined tables")
    parser.add_argument(
        "--min_interval_seconds", type=float, default=0.0, help="skip when refined this recently"
    )
    parser.add_argument(
        "--read_at",
        choices=["current", "consistent"],
        default="current",
        help="read the clean tables at their current snapshots, or at the newest consistent point the CDC "
        "runs recorded (never half a source transaction)",
    )
    parser.add_argument("--run_id", default="refine")
    parser.add_argument("--report_uri", default=None, help="where to write the run report (JSON)")
    config, args = parse_job_arguments(argv, parser)
    spark = build_session(config, "refine")
    options = RefineOptions(
        args.source_schema, args.refined_location, args.min_interval_seconds, args.read_at
    )
    report = refine(spark, config, options, args.run_id)
    text = json.dumps(report.to_dict(), indent=2, default=str)
    print(text)
    if args.report_uri:
        write_text(args.report_uri, text, config.s3_endpoint_url)
    return 0

"""The refined tables (lakehouse.refine.refresh): their names and keys, and the pure DataFrame steps that compute
them from the clean tables and find what an incremental run must recompute. Nothing here reads or writes a
table."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

BATCH_COLUMN = "refine_batch"  # sales_enriched: the refine batch that last wrote the row

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

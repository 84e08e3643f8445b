"""Prove a clean-zone table equals its source table: a checksum over canonical rows on both sides.

Both sides are read here, in Python, independently of the reconcile job's SQL and Spark readers, and reduced
to the same canonical text per value (by the column's Iceberg type); the table checksum is the reconcile's
(`lakehouse.reconcile.plan.table_checksum`: the order-free sum of row hashes, so row order and file layout
don't matter, but every value does).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from lakehouse.base.config import LakeConfig
from lakehouse.base.schema import SchemaFile, TableSpec
from lakehouse.reconcile.plan import table_checksum
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from tools.source_db import SourceDatabase


@dataclass(frozen=True)
class TableCheck:
    table: str
    source_rows: int
    clean_rows: int
    source_checksum: str
    clean_checksum: str

    @property
    def matches(self) -> bool:
        return self.source_rows == self.clean_rows and self.source_checksum == self.clean_checksum

    def line(self) -> str:
        verdict = "OK" if self.matches else "MISMATCH"
        return (
            f"{self.table:<28} source {self.source_rows:>8} rows {self.source_checksum}   "
            f"clean {self.clean_rows:>8} rows {self.clean_checksum}   {verdict}"
        )


def canonical(value: Any, data_type: T.DataType) -> str:
    """One value as text that is the same whether it came from the source database or from Iceberg."""
    if value is None:
        return "\\N"
    if isinstance(data_type, T.DecimalType | T.IntegerType | T.LongType | T.ShortType | T.ByteType):
        return format(Decimal(str(value)).normalize(), "f")
    if isinstance(data_type, T.FloatType | T.DoubleType):
        return repr(float(value))
    if isinstance(data_type, T.BooleanType):
        return "1" if (value in (1, "1", True) or str(value).lower() in ("true", "t")) else "0"
    if isinstance(data_type, T.DateType):
        return (value if isinstance(value, date) else date.fromisoformat(str(value)[:10])).isoformat()
    if isinstance(data_type, T.TimestampNTZType | T.TimestampType):
        moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
        return moment.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
    if isinstance(data_type, T.BinaryType):
        return bytes(value).hex()
    return str(value)


def check_table(
    spark: SparkSession, config: LakeConfig, spec: TableSpec, source_db: SourceDatabase | str | Path
) -> TableCheck:
    """Compare one table on the columns the source has now (columns dropped on the source stay in
    Iceberg as nulls and are not compared)."""
    with SourceDatabase.of(source_db).connect() as db:
        cursor = db.execute(f'SELECT * FROM "{spec.source_schema}"."{spec.name}"')
        columns = [d[0].lower() for d in cursor.description]
        source = cursor.fetchall()
    clean_table = config.clean_table(spec.iceberg_name)
    frame = spark.table(clean_table)
    types = {f.name: f.dataType for f in frame.schema.fields}
    clean = frame.select(*columns).collect()
    source_rows = [[canonical(v, types[c]) for v, c in zip(row, columns, strict=True)] for row in source]
    clean_rows = [[canonical(v, types[c]) for v, c in zip(row, columns, strict=True)] for row in clean]
    return TableCheck(
        spec.qualified_name,
        len(source_rows),
        len(clean_rows),
        table_checksum(source_rows),
        table_checksum(clean_rows),
    )


def check_all(
    spark: SparkSession, config: LakeConfig, schema: SchemaFile, source_db: SourceDatabase | str | Path
) -> list[TableCheck]:
    return [check_table(spark, config, spec, source_db) for spec in schema.tables.values()]


# The refined tables recomputed from the source database in plain SQL (independent of lakehouse.refine.refresh):
# the same joins and sums, so a refined zone that drifted from its source shows here.
_SALES_SQL = """
SELECT ws.ws_item_sk, ws.ws_order_number, d.d_date AS sold_date, d.d_year AS sold_year, d.d_moy AS sold_month,
       t.t_hour AS sold_hour, d.d_holiday AS sold_on_holiday, ws.ws_bill_customer_sk AS customer_sk,
       c.c_first_name AS customer_first_name, c.c_last_name AS customer_last_name,
       a.ca_state AS customer_state, a.ca_city AS customer_city, i.i_item_id AS item_id,
       i.i_product_name AS product_name, i.i_category AS category, i.i_class AS item_class, i.i_brand AS brand,
       ws.ws_quantity AS quantity, ws.ws_list_price AS list_price, ws.ws_sales_price AS sales_price,
       ws.ws_ext_sales_price AS revenue, ws.ws_ext_discount_amt AS discount, ws.ws_coupon_amt AS coupon,
       ws.ws_net_paid AS net_paid, ws.ws_ext_wholesale_cost AS wholesale_cost, ws.ws_net_profit AS profit
FROM web_sales ws
LEFT JOIN date_dim d ON ws.ws_sold_date_sk = d.d_date_sk
LEFT JOIN time_dim t ON ws.ws_sold_time_sk = t.t_time_sk
LEFT JOIN item i ON ws.ws_item_sk = i.i_item_sk
LEFT JOIN customer c ON ws.ws_bill_customer_sk = c.c_customer_sk
LEFT JOIN customer_address a ON c.c_current_addr_sk = a.ca_address_sk
"""
_DAILY_SQL = """
SELECT sold_date, {group}, sum(revenue) AS revenue, sum(profit) AS profit, sum(net_paid) AS net_paid,
       sum(quantity) AS quantity, count(DISTINCT ws_order_number) AS orders, count(*) AS "lines"
FROM ({sales}) AS sales GROUP BY sold_date, {group}
"""
REFINED_RECOMPUTATIONS = {
    "sales_enriched": _SALES_SQL,
    "daily_revenue_by_category": _DAILY_SQL.format(group="category", sales=_SALES_SQL),
    "daily_revenue_by_state": _DAILY_SQL.format(group="customer_state", sales=_SALES_SQL),
}


def _exact(value: Any, data_type: T.DataType) -> Any:
    """SQLite keeps decimals as REAL, and its sums carry binary fractions: round to the column's scale."""
    if value is not None and isinstance(data_type, T.DecimalType) and isinstance(value, float):
        return Decimal(repr(value)).quantize(Decimal(1).scaleb(-data_type.scale))
    return value


def check_refined(
    spark: SparkSession, refined_database: str, source_db: SourceDatabase | str | Path
) -> list[TableCheck]:
    """Each refined table against its recomputation from the source database (row checksums)."""
    checks = []
    for name, sql in REFINED_RECOMPUTATIONS.items():
        with SourceDatabase.of(source_db).connect() as db:
            cursor = db.execute(sql)
            columns = [d[0].lower() for d in cursor.description]
            source = cursor.fetchall()
        frame = spark.table(f"{refined_database}.{name}")
        types = {f.name: f.dataType for f in frame.schema.fields}
        refined = frame.select(*columns).collect()
        source_rows = [
            [canonical(_exact(v, types[c]), types[c]) for v, c in zip(row, columns, strict=True)]
            for row in source
        ]
        refined_rows = [
            [canonical(v, types[c]) for v, c in zip(row, columns, strict=True)] for row in refined
        ]
        checks.append(
            TableCheck(
                f"refined.{name}",
                len(source_rows),
                len(refined_rows),
                table_checksum(source_rows),
                table_checksum(refined_rows),
            )
        )
    return checks

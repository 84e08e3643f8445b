"""Fixtures of the refine tests: a clean zone loaded straight from a generated source database."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from lakehouse.apply.clean_table import clean_schema
from lakehouse.base.config import LakeConfig
from lakehouse.base.schema import SchemaFile
from lakehouse.io.iceberg import append_rows, create_table, ensure_namespace
from lakehouse.refine.refresh import read_models
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from tools import sample_data as S


def _typed(value: Any, data_type: T.DataType) -> Any:
    if value is None:
        return None
    if isinstance(data_type, T.DecimalType):
        return Decimal(str(value))
    if isinstance(data_type, T.DateType):
        return date.fromisoformat(value)
    if isinstance(data_type, T.TimestampType | T.TimestampNTZType):
        return datetime.fromisoformat(value)
    if isinstance(data_type, T.IntegerType | T.LongType):
        return int(value)
    return value


def load_clean_zone_directly(spark: SparkSession, config: LakeConfig, db: Path) -> SchemaFile:
    """Write the source tables into new clean tables as the full load would (same schema), without
    DMS files: quicker, for tests whose subject is downstream of the full load."""
    schema = SchemaFile.from_dict(S.schema_document(db))
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    for spec in schema.tables.values():
        table = config.clean_table(spec.iceberg_name)
        target = clean_schema(spec)
        create_table(spark, table, target)
        columns, rows = S.read_rows(db, spec.name)
        fields = [target[c.lower()] for c in columns]
        data = [tuple(_typed(v, f.dataType) for v, f in zip(row, fields, strict=True)) for row in rows]
        frame = spark.createDataFrame(data, T.StructType(fields))
        append_rows(spark, table, frame, {})
    return schema


# The example models (models/*.sql): the demo's star
SALES_ENRICHED = "sales_enriched"
SALES_KEY = ("ws_item_sk", "ws_order_number")
AGGREGATES: dict[str, tuple[str, ...]] = {
    "daily_revenue_by_category": ("category",),
    "daily_revenue_by_state": ("customer_state",),
}
SOURCE_KEYS: dict[str, tuple[str, ...]] = {
    "web_sales": SALES_KEY,
    "date_dim": ("d_date_sk",),
    "time_dim": ("t_time_sk",),
    "item": ("i_item_sk",),
    "customer": ("c_customer_sk",),
    "customer_address": ("ca_address_sk",),
}


def example_model_rows(spark: SparkSession, name: str, inputs: dict[str, DataFrame]) -> DataFrame:
    """An example model's SELECT run straight over the given input frames (source or model name → frame)."""
    model = next(m for m in read_models().models if m.name == name)
    for input_name, frame in inputs.items():
        frame.createOrReplaceTempView(f"example_input_{input_name}")
    return spark.sql(model.render(lambda reference: f"example_input_{reference.input_name}"))


def enrich_sales(*frames: DataFrame) -> DataFrame:
    """The example sales_enriched over web_sales, date_dim, time_dim, item, customer, customer_address."""
    spark = frames[0].sparkSession
    return example_model_rows(spark, SALES_ENRICHED, dict(zip(SOURCE_KEYS, frames, strict=True)))

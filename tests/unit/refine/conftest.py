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
from pyspark.sql import SparkSession
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

"""Prove a clean-zone table equals its source table, and a refined table its model's SQL over the source: a
checksum over canonical rows on both sides.

Both sides are read here, in Python, independently of the reconcile job's SQL and Spark readers, and reduced
to the same canonical text per value (by the column's Iceberg type); the table checksum is the reconcile's
(`lakehouse.reconcile.plan.table_checksum`: the order-free sum of row hashes, so row order and file layout
don't matter, but every value does).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Any

from lakehouse.base.config import LakeConfig
from lakehouse.base.names import table_name
from lakehouse.base.schema import SchemaFile, TableSpec
from lakehouse.reconcile.plan import table_checksum
from lakehouse.refine.models import ModelFolder, Reference
from lakehouse.refine.refresh import read_models
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from tools.source_db import SourceDatabase

MAX_DECIMAL_DIGITS = 38  # Spark's and Iceberg's widest decimal


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


def check_refined(
    spark: SparkSession,
    config: LakeConfig,
    source_db: SourceDatabase | str | Path,
    models: ModelFolder | None = None,
) -> list[TableCheck]:
    """Each model's refined table against the model's own SQL run over the source database's rows as they are
    now (typed as their clean tables hold them; a `ref()` reads the model recomputed so): a full recomputation
    from the source, whatever the models (by default the checkout's, the examples), independent of the
    incremental refresh. Row checksums, as `check_table`."""
    folder = models if models is not None else read_models()
    if folder.errors:
        raise ValueError("models that cannot run: " + "; ".join(str(e) for e in folder.errors.values()))
    source = SourceDatabase.of(source_db)
    views: dict[Reference, str] = {}
    cached: list[DataFrame] = []  # a model another refs is computed once
    checks = []
    try:
        for model in folder.models:
            for reference in model.sources:
                if reference not in views:
                    views[reference] = f"verify_source_{len(views)}"
                    _source_frame(spark, config, source, reference).createOrReplaceTempView(views[reference])
            recomputed = spark.sql(model.render(lambda r: views[r])).cache()
            cached.append(recomputed)
            views[Reference("ref", model.name)] = f"verify_model_{model.name}"
            recomputed.createOrReplaceTempView(views[Reference("ref", model.name)])
            refined = spark.table(config.table(config.refined_database, model.name))
            checks.append(_compare(f"refined.{model.name}", refined, recomputed))
    finally:
        for view in views.values():
            spark.catalog.dropTempView(view)
        for frame in cached:
            frame.unpersist()
    return checks


def _source_frame(
    spark: SparkSession, config: LakeConfig, source: SourceDatabase, reference: Reference
) -> DataFrame:
    """The rows of the source table a model's `source()` names, typed as its clean table holds them."""
    schema = reference.schema or source.schema
    with source.connect() as db:
        cursor = db.execute(f'SELECT * FROM "{schema}"."{reference.name}"')
        columns = [d[0].lower() for d in cursor.description]
        rows = cursor.fetchall()
    clean = spark.table(config.clean_table(table_name(schema, reference.name)))
    types = {f.name: f.dataType for f in clean.schema.fields}
    fields = [T.StructField(c, types.get(c, T.StringType())) for c in columns]
    data = [tuple(_spark_value(v, f.dataType) for v, f in zip(row, fields, strict=True)) for row in rows]
    return spark.createDataFrame(data, T.StructType(fields))


def _compare(name: str, refined: DataFrame, recomputed: DataFrame) -> TableCheck:
    columns = recomputed.columns
    types = {f.name.lower(): f.dataType for f in refined.schema.fields}
    column_types = [types[c.lower()] for c in columns]

    def canonical_rows(frame: DataFrame) -> list[list[str]]:
        return [
            [canonical(v, t) for v, t in zip(row, column_types, strict=True)]
            for row in frame.select(*columns).collect()
        ]

    source_rows, refined_rows = canonical_rows(recomputed), canonical_rows(refined)
    return TableCheck(
        name,
        len(source_rows),
        len(refined_rows),
        table_checksum(source_rows),
        table_checksum(refined_rows),
    )


def _spark_value(value: Any, data_type: T.DataType) -> Any:
    """A source value as Spark takes it into a column of `data_type` (SQLite gives decimals as floats, dates and
    times as text; the source connections read times in UTC)."""
    if value is None:
        return None
    if isinstance(data_type, T.DecimalType):
        exact = (
            value
            if isinstance(value, Decimal)
            else Decimal(repr(value) if isinstance(value, float) else str(value))
        )
        with localcontext() as context:
            context.prec = 2 * MAX_DECIMAL_DIGITS
            return exact.quantize(Decimal(1).scaleb(-data_type.scale))
    if isinstance(data_type, T.IntegerType | T.LongType | T.ShortType | T.ByteType):
        return int(value)
    if isinstance(data_type, T.FloatType | T.DoubleType):
        return float(value)
    if isinstance(data_type, T.BooleanType):
        return canonical(value, data_type) == "1"
    if isinstance(data_type, T.DateType):
        if isinstance(value, datetime):
            return value.date()
        return value if isinstance(value, date) else date.fromisoformat(str(value)[:10])
    if isinstance(data_type, T.TimestampNTZType | T.TimestampType):
        moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
        if isinstance(data_type, T.TimestampNTZType):
            return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    if isinstance(data_type, T.BinaryType):
        return bytes(value)
    if isinstance(data_type, T.StringType) and not isinstance(value, str):
        return str(value)
    return value

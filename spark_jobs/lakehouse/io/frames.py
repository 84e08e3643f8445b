"""Small DataFrames made on the driver, without Python workers."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T


def literal_frame(spark: SparkSession, rows: Sequence[dict[str, Any]], schema: str) -> DataFrame:
    """`rows` (dicts by column name) as a DataFrame of `schema` (`a string, b long`), from one JSON
    literal: `spark.createDataFrame` of Python rows starts Python workers to evaluate them (~1 s the
    first time), a literal per value costs a py4j call each (4 s for 200 values; bench/profile_*)."""
    return spark.range(1).select(
        F.inline(F.from_json(F.lit(json.dumps(list(rows), default=str)), f"array<struct<{_fields(schema)}>>"))
    )


def rows_frame(spark: SparkSession, rows: Sequence[Mapping[str, Any]], schema: T.StructType) -> DataFrame:
    """Small rows as a DataFrame of `schema` without Python workers (through literal_frame): timestamps
    travel as ISO text (naive UTC) and are cast in the session's time zone (UTC, as the jobs set it)."""
    as_text = {
        f.name: "string" if isinstance(f.dataType, T.TimestampType) else f.dataType.simpleString()
        for f in schema.fields
    }
    values = [
        {k: v.isoformat(sep=" ") if isinstance(v, datetime) else v for k, v in row.items()} for row in rows
    ]
    frame = literal_frame(spark, values, ", ".join(f"{n} {t}" for n, t in as_text.items()))
    return frame.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])


def empty_frame(spark: SparkSession, schema: T.StructType) -> DataFrame:
    """No rows, of `schema`. `spark.createDataFrame([], schema)` runs a job of Python workers even for no rows
    (a task per core, each started through PySpark's daemon: 0.4 s a call in a warm local session); an empty
    RDD has no partitions, so nothing runs (0.09 s)."""
    return spark.createDataFrame(spark.sparkContext.emptyRDD(), schema)


def one_row(frame: DataFrame) -> Row:
    """The first row of a frame that always has one: an aggregate without grouping (one row even over no
    rows), an Iceberg procedure's result."""
    row = frame.first()
    assert row is not None, "an aggregate without grouping, or a procedure's result, has a row"
    return row


def _fields(schema: str) -> str:
    """`a string, b long` → `a:string,b:long` (the struct syntax from_json takes)."""
    return ",".join(":".join(part.strip().split(None, 1)) for part in schema.split(","))

"""Small DataFrames made on the driver, without Python workers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


def literal_frame(spark: SparkSession, rows: Sequence[dict[str, Any]], schema: str) -> DataFrame:
    """`rows` (dicts by column name) as a DataFrame of `schema` (`a string, b long`), from one JSON
    literal: `spark.createDataFrame` of Python rows starts Python workers to evaluate them (~1 s the
    first time), a literal per value costs a py4j call each (4 s for 200 values; bench/profile_*)."""
    return spark.range(1).select(
        F.inline(F.from_json(F.lit(json.dumps(list(rows), default=str)), f"array<struct<{_fields(schema)}>>"))
    )


def _fields(schema: str) -> str:
    """`a string, b long` → `a:string,b:long` (the struct syntax from_json takes)."""
    return ",".join(":".join(part.strip().split(None, 1)) for part in schema.split(","))

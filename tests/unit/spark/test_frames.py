"""Small DataFrames made on the driver (lakehouse.io.frames) run no Python worker: `spark.createDataFrame` of Python
rows, even of none, runs a job of PySpark's Python workers (each task also re-reads the zip archives on their
path); the jobs' own rows (ledger, points, freshness, divergence keys) and empty tables do not need them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from lakehouse.io.frames import empty_frame, rows_frame
from pyspark.sql import types as T

pytestmark = pytest.mark.spark

SCHEMA = T.StructType(
    [
        T.StructField("run_id", T.StringType()),
        T.StructField("rows", T.LongType()),
        T.StructField("at", T.TimestampType()),
        T.StructField("share", T.DecimalType(9, 3)),
    ]
)


def python_workers_in(frame) -> bool:
    """Whether computing `frame` goes through PySpark's Python workers (a PythonRDD in its RDD lineage)."""
    return "PythonRDD" in frame._jdf.queryExecution().toRdd().toDebugString()


def test_an_empty_frame_has_the_schema_no_rows_and_no_partition_to_run(spark) -> None:
    """Given a schema,
    When an empty frame of it is made,
    Then it has that schema and no rows, and no partition: no task, no Python worker (createDataFrame of no
    rows has a partition per core, each a Python worker's task)."""
    frame = empty_frame(spark, SCHEMA)
    assert frame.schema == SCHEMA and frame.collect() == []
    assert frame._jdf.rdd().getNumPartitions() == 0
    assert spark.createDataFrame([], SCHEMA)._jdf.rdd().getNumPartitions() > 0  # why it exists


def test_rows_become_the_same_typed_rows_without_python_workers(spark) -> None:
    """Given rows with text, a number, a naive UTC time, an aware time and a decimal,
    When made into a frame of their schema,
    Then it holds exactly those values (times in UTC) and its lineage has no Python worker, where
    createDataFrame's has."""
    from decimal import Decimal

    rows = [
        {
            "run_id": "r-1",
            "rows": 3,
            "at": datetime(2026, 11, 27, 10, 0, 0, 123456),
            "share": Decimal("1.250"),
        },
        {"run_id": "r'2\"", "rows": None, "at": datetime(2026, 11, 27, 11, 0, tzinfo=UTC), "share": None},
    ]
    frame = rows_frame(spark, rows, SCHEMA)
    assert frame.schema == SCHEMA
    assert [r.asDict() for r in frame.orderBy("run_id").collect()] == [
        {"run_id": "r'2\"", "rows": None, "at": datetime(2026, 11, 27, 11, 0), "share": None},
        {
            "run_id": "r-1",
            "rows": 3,
            "at": datetime(2026, 11, 27, 10, 0, 0, 123456),
            "share": Decimal("1.250"),
        },
    ]
    assert not python_workers_in(frame)
    assert python_workers_in(spark.createDataFrame([tuple(r.values()) for r in rows], SCHEMA))

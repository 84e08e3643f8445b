"""A column's upper bound over a table's data files, read from their manifests' column metrics in the driver
(Iceberg's scan planning, no Spark job): what lakehouse.io.iceberg.key_upper_bound reads for a small table."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from lakehouse.io.jvm import java_class

DRIVER_BOUND_TYPES = ("INTEGER", "LONG", "DATE", "TIMESTAMP")


def bound_from_manifests(spark: SparkSession, java_table: Any, field: Any) -> tuple[bool, Any]:
    """key_upper_bound of the current snapshot's data files, read by Iceberg's scan planning in the driver."""
    to_value = java_class(spark, "org.apache.iceberg.types.Conversions").fromByteBuffer
    field_id, iceberg_type = field.fieldId(), field.type()
    tasks = java_table.newScan().includeColumnStats().planFiles()
    highest = None
    try:
        iterator = tasks.iterator()
        while iterator.hasNext():
            data_file = iterator.next().file()
            if data_file.recordCount() <= 0:
                continue
            bounds = data_file.upperBounds()
            raw = bounds.get(field_id) if bounds is not None else None
            if raw is None:
                return False, None
            value = int(to_value(iceberg_type, raw))
            highest = value if highest is None else max(highest, value)
    finally:
        tasks.close()
    return True, None if highest is None else as_spark_value(iceberg_type, highest)


def as_spark_value(iceberg_type: Any, internal: int) -> Any:
    """An integer, date (days) or timestamp (microseconds) bound as the value Spark's own read gives."""
    kind = iceberg_type.typeId().name()
    if kind == "DATE":
        return T.DateType().fromInternal(internal)
    if kind == "TIMESTAMP":
        spark_type = T.TimestampType() if iceberg_type.shouldAdjustToUTC() else T.TimestampNTZType()
        return spark_type.fromInternal(internal)
    return internal

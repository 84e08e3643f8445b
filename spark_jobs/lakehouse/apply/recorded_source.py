"""A clean table replicates one source table, the one it records (`dms.source-table`, set when the full load or
CDC creates it), and a job writes it only for that source (docs/CONTRACTS.md, "Names"). Two source tables
can reach one clean name over time (a schema file that drops `sales.order_details` and adds `sales.Order
Details`; a table made by hand in the clean namespace): the second is refused, never merged into the first.
A table that records no source (written by a release that did not record it) is adopted once: the source
asked for is recorded on it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession

from lakehouse.base.names import properties_sql
from lakehouse.io.fence import check_before_commit
from lakehouse.io.iceberg import SOURCE_TABLE, table_properties

REPLICA_COMMENT = "DMS replica of "  # the comment every clean table is created with, before its source


class SourceMismatchError(RuntimeError):
    """A clean table records another source table than the one a job was asked to write to it."""


def recorded_source(properties: Mapping[str, str]) -> str | None:
    """The `schema.table` a clean table records: its `dms.source-table` property, else the source its
    comment names (tables of releases before the property); None when it records none."""
    if SOURCE_TABLE in properties:
        return properties[SOURCE_TABLE]  # exactly: a name may begin or end with spaces
    comment = properties.get("comment", "")
    return comment.removeprefix(REPLICA_COMMENT) if comment.startswith(REPLICA_COMMENT) else None


def source_to_adopt(table: str, properties: Mapping[str, str], asked: str) -> dict[str, str]:
    """What must be recorded on `table` (with these properties) before it is written for the source table
    `asked`: nothing when it records `asked` already; `dms.source-table` when it records no property (adopted
    once); a SourceMismatchError naming the table, the recorded and the asked source otherwise."""
    recorded = recorded_source(properties)
    if recorded is not None and recorded != asked:
        raise SourceMismatchError(
            f"{table} replicates the source table {recorded!r}, not {asked!r}: refusing to write {asked!r} into "
            f"it. Two source tables reach one clean name (one was renamed or dropped in the schema file, or "
            f"the table was made by someone else): drop or rename the clean table if {recorded!r} is gone, or "
            f"exclude {asked!r} from the DMS task"
        )
    return {} if properties.get(SOURCE_TABLE) == asked else {SOURCE_TABLE: asked}


def guard_recorded_source(spark: SparkSession, table: str, asked: str, java_table: Any = None) -> None:
    """Refuse to write an existing clean table that replicates another source (SourceMismatchError); record
    the source on a table that records none (one fenced commit, once). Reads the properties of the table the
    apply has loaded already (the catalog's cache): no catalog call of its own."""
    adopt = source_to_adopt(table, table_properties(spark, table, java_table), asked)
    if adopt:
        check_before_commit()
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({properties_sql(adopt)})")

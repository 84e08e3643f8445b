"""The one-time move of a lake's own records into their namespace (lakehouse.base.names.records_database).

Releases before kept the ledger, tombstones, quarantine, freshness, consistent points and divergence in the
clean namespace, beside the replicas. Every job that reads or writes them first moves what it finds there
(`move_records`), so no job ever reads an empty ledger while the real one waits in the old place (a file
counted as not applied would be re-sent; a key without its tombstone could come back):

- a table of the clean namespace named like a record is one only if it is no replica: it records no source
  table (`dms.source-table`, or the "DMS replica of" comment of older releases) and lacks the columns every
  replica carries (`dms_commit_ts`, `dms_change_seq`). A source table named like a record (`dms.applied_files`
  is the clean table `dms_applied_files`) is a replica, and stays where it is;
- its rows the record in the records namespace lacks are appended to it (created like the old one if
  missing); the freshness table, replaced by every CDC run, is copied only while the new one has no row;
- the old table is dropped only once the new one holds every one of its rows.

Each step is a fenced commit (lakehouse.io.fence) and the whole is idempotent: a run stopped half-way leaves
rows in both places, and the next run appends none twice and drops the old table then. Once moved, a run
costs one table lookup per record name.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.apply.ledger import STATE_TABLE_PROPERTIES
from lakehouse.apply.recorded_source import recorded_source
from lakehouse.base.config import LakeConfig
from lakehouse.base.names import RESERVED_COLUMNS, quote
from lakehouse.io.fence import check_before_commit
from lakehouse.io.iceberg import create_table, ensure_namespace, fenced_writer, table_exists, table_properties

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MovedRecord:
    """One record table found in the clean namespace: where it went, how many rows were copied, whether the
    old table is gone."""

    old: str
    new: str
    rows_copied: int
    dropped: bool


def is_replica(properties: Mapping[str, str], columns: Sequence[str]) -> bool:
    """Whether a clean-namespace table is a source table's replica (never a record to move): it records a
    source table, or carries the metadata columns every replica has."""
    return recorded_source(properties) is not None or any(c.lower() in RESERVED_COLUMNS for c in columns)


def move_records(spark: SparkSession, config: LakeConfig) -> list[MovedRecord]:
    """Move every record still in the clean namespace into the records namespace (module docstring)."""
    moved = []
    for name in config.record_names:
        old = config.clean_table(name)
        if not table_exists(spark, old):
            continue
        if is_replica(table_properties(spark, old), spark.table(old).columns):
            continue
        ensure_namespace(spark, config.catalog_name, config.records_database)
        replaced_each_run = name == config.freshness_table
        moved.append(_move(spark, old, config.record_table(name), replaced_each_run))
        log.info("moved the record %s", moved[-1])
    return moved


def _move(spark: SparkSession, old: str, new: str, replaced_each_run: bool) -> MovedRecord:
    rows = spark.table(old)
    if not table_exists(spark, new):
        comment = table_properties(spark, old).get("comment", "")
        create_table(spark, new, rows.schema, comment, STATE_TABLE_PROPERTIES)
    columns = [quote(c) for c in rows.columns]
    held = spark.table(new)
    if replaced_each_run and not held.isEmpty():
        missing = rows.limit(0)  # the new table is newer than the old one: nothing of it is wanted
    else:
        missing = rows.exceptAll(held.select(*columns))
    wanted = [
        (F.col(quote(c)) if c in rows.columns else F.lit(None)).cast(held.schema[c].dataType).alias(c)
        for c in held.columns
    ]
    copied = missing.count()
    if copied:
        fenced_writer(missing.select(*wanted).writeTo(new)).append()
    left = 0 if replaced_each_run else rows.exceptAll(spark.table(new).select(*columns)).count()
    if left:
        log.warning("%s: %d row(s) are not in %s yet: the old table is kept", old, left, new)
        return MovedRecord(old, new, copied, dropped=False)
    check_before_commit()
    spark.sql(f"DROP TABLE IF EXISTS {old}")
    return MovedRecord(old, new, copied, dropped=True)

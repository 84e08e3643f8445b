"""A clean table's shape and the facts a (re)load leaves on it: its columns and their types, the load
properties (done, floor, started, ended), the sequence a reload placed by time gets, and the tombstone
join that keeps a deleted key deleted."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.apply.pending_load import pending_floor
from lakehouse.base.names import CHANGE_SEQ_COLUMN, COMMIT_TS_COLUMN, RESERVED_COLUMNS, quote
from lakehouse.base.schema import TableSpec
from lakehouse.base.types import can_widen
from lakehouse.dms import changes as C
from lakehouse.dms.reader import RawRead
from lakehouse.io.frames import one_row
from lakehouse.io.iceberg import (
    LOAD_ENDED,
    LOAD_FLOOR,
    LOAD_STARTED,
    load_table,
    table_exists,
    table_properties,
)

METADATA_FIELDS = [
    T.StructField(COMMIT_TS_COLUMN, T.TimestampType()),
    T.StructField(CHANGE_SEQ_COLUMN, C.SEQ_TYPE),
]
KEY = "_dms_key"
TOMB_SEQ = "_dms_tomb_seq"


class SchemaOutOfDateError(RuntimeError):
    """The files hold a column the schema file does not know: it must be regenerated."""


class SchemaChangeError(RuntimeError):
    """The source changed a column's type in a way Iceberg can't follow by promotion."""


def clean_schema(spec: TableSpec) -> T.StructType:
    fields = [T.StructField(f.name.lower(), f.dataType) for f in spec.spark_schema().fields]
    return T.StructType(fields + METADATA_FIELDS)


def with_metadata(changes: DataFrame) -> DataFrame:
    return changes.withColumn(COMMIT_TS_COLUMN, F.col(C.COMMIT_TS)).withColumn(
        CHANGE_SEQ_COLUMN, F.col(C.SEQ)
    )


def resolve_types(
    spec: TableSpec, columns: Sequence[str], table_types: dict[str, T.DataType], replacing: bool = False
) -> dict[str, T.DataType]:
    """The type each of the batch's columns is read as: the schema file's, or the table's where the table
    is wider (a widening the data proved earlier) or the schema file doesn't name the column (it did
    once). A column neither knows is a SchemaOutOfDateError; a type change Iceberg can't promote is a
    SchemaChangeError, unless the table is being replaced by a (re)load (`replacing`)."""
    types: dict[str, T.DataType] = {}
    unknown = []
    for column in columns:
        if column in RESERVED_COLUMNS:
            raise SchemaOutOfDateError(
                f"{spec.qualified_name}: the DMS files have a column {column}, the name of the clean table's own "
                "metadata column. If it is the endpoint's TimestampColumnName, pass --timestamp_column "
                f"{column}; otherwise rename the source column with a DMS table-mapping rule."
            )
        wanted, have = spec.spark_type_of(column), table_types.get(column)
        if wanted is None and have is None:
            unknown.append(column)
        elif wanted is None or have is None or wanted == have or replacing:
            kept = wanted or have
            assert kept is not None  # neither known: the branch above
            types[column] = kept
        elif can_widen(have, wanted):
            types[column] = wanted
        elif can_widen(wanted, have):
            types[column] = have  # the table is wider already
        else:
            raise SchemaChangeError(
                f"{spec.qualified_name}.{column} is {have.simpleString()} in the clean table but "
                f"{wanted.simpleString()} in the schema file, and Iceberg can't change one into the other. "
                f"Reload the table to take the new type (full_load_job.py --tables {spec.qualified_name} "
                "--reload true); the batch stays pending until then."
            )
    if unknown:
        raise SchemaOutOfDateError(
            f"{spec.qualified_name}: column(s) {', '.join(unknown)} are in the DMS files but not in the schema "
            "file (the source added them). Regenerate the schema file from the source catalog "
            "(python -m tools.schema_gen ...) and upload it where --schema_file points; the batch stays "
            "pending and is applied by the next run."
        )
    return types


def load_floor(spark: SparkSession, table: str, java_table: Any = None) -> Decimal | None:
    """The table's load floor (None: no table, or never loaded), or the floor of its load left pending
    (lakehouse.apply.pending_load); `java_table`: the table as loaded already."""
    java_table = load_table(spark, table) if java_table is None else java_table
    value = table_properties(spark, table, java_table).get(LOAD_FLOOR) if java_table is not None else None
    if value:
        return Decimal(value)
    return pending_floor(spark, table, java_table) if java_table is not None else None


def loaded_at(spark: SparkSession, table: str) -> datetime | None:
    """When the table's last (re)load was written by DMS (tables loaded before LOAD_ENDED: when it started)."""
    java_table = load_table(spark, table)
    properties = table_properties(spark, table, java_table) if java_table is not None else {}
    value = properties.get(LOAD_ENDED) or properties.get(LOAD_STARTED)
    return datetime.fromisoformat(value) if value else None


def table_types(spark: SparkSession, table: str, exists: bool | None = None) -> dict[str, T.DataType]:
    if not (table_exists(spark, table) if exists is None else exists):
        return {}
    return {f.name.lower(): f.dataType for f in spark.table(table).schema.fields}


def layout_and_types(
    spark: SparkSession,
    spec: TableSpec,
    table: str,
    raw: RawRead,
    names: C.ChangeColumns,
    replacing: bool,
    exists: bool | None = None,
) -> tuple[C.HeaderLayout, dict[str, T.DataType]]:
    """The batch's header layout and the type each of its columns is read as (`resolve_types`); `exists`:
    whether the table exists, if the caller knows."""
    layout = C.header_layout(raw.groups, spec, names)
    return layout, resolve_types(spec, layout.data_columns, table_types(spark, table, exists), replacing)


def with_tomb_seq(
    rows: DataFrame,
    tombstones: DataFrame,
    key: Sequence[str],
    types: dict[str, T.DataType],
    values: dict[str, Column] | None = None,
) -> DataFrame:
    """`rows` (with their key_json in KEY, and its hash in KEY_HASH if they are grouped by it) and TOMB_SEQ,
    the sequence of their key's newest tombstone (`tombstones`: StateTables.tombstones_of). Joined by the hash and
    the text: a batch grouped by both is joined as it is partitioned and sorted. A key with a timestamp also
    matches tombstones written in the millisecond form of older releases."""
    if C.KEY_HASH not in rows.columns:
        rows = rows.withColumn(C.KEY_HASH, C.key_hash(F.col(KEY)))
    rows = rows.join(
        tombstones.withColumnRenamed("key", KEY).withColumnRenamed("tomb_seq", TOMB_SEQ),
        [C.KEY_HASH, KEY],
        "left",
    ).drop(C.KEY_HASH)
    legacy = C.legacy_key_json(key, types, values)
    if legacy is None:
        return rows
    old_key, old_seq = "_dms_legacy_key", "_dms_legacy_tomb_seq"
    return (
        rows.withColumn(old_key, legacy)
        .join(
            tombstones.select(F.col("key").alias(old_key), F.col("tomb_seq").alias(old_seq)), old_key, "left"
        )
        .withColumn(TOMB_SEQ, F.greatest(F.col(TOMB_SEQ), F.col(old_seq)))
        .drop(old_key, old_seq)
    )


def sequence_at(moment: datetime) -> Decimal:
    """A change sequence shaped as DMS's AR_H_CHANGE_SEQ (YYYYMMDDHHmmSShh + 19 digits) for a time."""
    return Decimal(moment.strftime("%Y%m%d%H%M%S") + f"{moment.microsecond // 10000:02d}" + "0" * 19)


def highest_sequence_unless_time_shaped(spark: SparkSession, table: str) -> Decimal | None:
    """The table's highest change sequence if it is not AWS DMS's timestamp-prefixed AR_H_CHANGE_SEQ (None:
    it is, or the table holds none), so a placement by time can't order it."""
    highest = one_row(spark.table(table).agg(F.max(CHANGE_SEQ_COLUMN)))[0]
    if highest is None:
        return None
    text = str(highest)
    try:
        shaped = len(text) == 35 and datetime.strptime(text[:14], "%Y%m%d%H%M%S").year >= 1990
    except ValueError:
        shaped = False
    return None if shaped else Decimal(highest)


def check_sequences_comparable(spark: SparkSession, table: str, spec: TableSpec, placed: Decimal) -> None:
    """A reload placed by time compares DMS-shaped sequences: the table's must be such too."""
    highest = highest_sequence_unless_time_shaped(spark, table)
    if highest is not None:
        text = str(highest)
        raise ValueError(
            f"{spec.qualified_name}: its rows' change sequences (e.g. {text}) are not AWS DMS's timestamp-"
            "prefixed AR_H_CHANGE_SEQ and its LOAD files carry none, so the reload can't be ordered against "
            f"the changes applied so far (a reload placed at {placed})"
        )


def target_schema(
    spark: SparkSession, table: str, spec: TableSpec, types: dict[str, T.DataType]
) -> T.StructType:
    """The table's columns after the load: the table's (dropped source columns stay), the schema file's,
    with the batch's resolved types, then the metadata columns."""
    fields: dict[str, T.DataType] = {}
    if table_exists(spark, table):
        fields |= {
            f.name: f.dataType
            for f in spark.table(table).schema.fields
            if f.name not in (COMMIT_TS_COLUMN, CHANGE_SEQ_COLUMN)
        }
    for f in clean_schema(spec).fields:
        if f.name not in (COMMIT_TS_COLUMN, CHANGE_SEQ_COLUMN):
            fields[f.name] = types.get(f.name, fields.get(f.name, f.dataType))
    fields |= {name: data_type for name, data_type in types.items()}
    return T.StructType([T.StructField(n, t) for n, t in fields.items()] + METADATA_FIELDS)


def aligned(rows: DataFrame, target: T.StructType, prefix: str = "") -> DataFrame:
    return rows.select(
        *[
            (F.col(quote(prefix + f.name)) if prefix + f.name in rows.columns else F.lit(None))
            .cast(f.dataType)
            .alias(f.name)
            for f in target.fields
        ]
    )

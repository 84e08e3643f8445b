"""Row history (SCD type 2) of the clean tables that ask for it (docs/CONTRACTS.md, "Row history").

A table with `"history": true` in the schema file (or named by the jobs' `--history_tables`, `*` for all)
has a history table of the clean table's own name in the histories' namespace (`<clean database>_history`,
names.history_database; in the clean namespace any name could be another source table's clean name):
every version of every row, one per change the source made,

    the table's columns, valid_from, valid_to, change_seq, operation, is_current

`valid_from` is the source commit time of the change that made the version (DMS's timestamp column),
`valid_to` that of the key's next change (null while `is_current`), `change_seq` its AR_H_CHANGE_SEQ,
`operation` I, U, D (the key was deleted: its other columns are null) or LOAD (a full load's or a reload's
row). A version is identified by (key, change_seq), and the versions of a key are ordered by change_seq:

- every change of a batch is a version, not only each key's last (the clean table keeps the last);
- a late change is spliced where its sequence belongs: it ends the version before it and is ended by the
  one after it; a change the history holds already (a retry, a replay) changes nothing;
- a (re)load opens a LOAD version for each row it loaded and closes (a D version) each current row it
  removed.

The versions to write are a pure function of the batch's versions and the affected keys' stored versions
(`spliced`); one MERGE writes them, before the clean table's commit (so a retry after a failure between the
two writes them again, and finds them there: nothing changes twice).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from decimal import Decimal

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.base.config import LakeConfig
from lakehouse.base.names import (
    CHANGE_SEQ_COLUMN,
    COMMIT_TS_COLUMN,
    INTERNAL_PREFIX,
    history_database,
    parse_tables_argument,
    quote,
)
from lakehouse.base.schema import SchemaFile, TableSpec
from lakehouse.dms import changes as C
from lakehouse.io.iceberg import (
    RUN_ID,
    create_table,
    ensure_namespace,
    evolve_schema,
    replace_table,
    table_exists,
    table_properties,
    with_commit_properties,
)

log = logging.getLogger(__name__)

HISTORY_OF = "dms.history-of"  # table property of a history table: the `schema.table` whose rows it holds
VALID_FROM = "valid_from"
VALID_TO = "valid_to"
CHANGE_SEQ = "change_seq"
OPERATION = "operation"
IS_CURRENT = "is_current"
LOAD = "LOAD"
HISTORY_FIELDS = [
    T.StructField(VALID_FROM, T.TimestampType()),
    T.StructField(VALID_TO, T.TimestampType()),
    T.StructField(CHANGE_SEQ, C.SEQ_TYPE),
    T.StructField(OPERATION, T.StringType()),
    T.StructField(IS_CURRENT, T.BooleanType()),
]
HISTORY_COLUMNS = tuple(f.name for f in HISTORY_FIELDS)
_SOURCE = "_dms_h_source"  # 0: a stored version, 1: a version of this batch
_NEXT = "_dms_h_next"
_RANK = "_dms_h_rank"


# ---------------------------------------------------------------- which tables
def parse_history_tables(text: str | None) -> tuple[str, ...]:
    """`--history_tables`: empty (none), `*` (every table with a primary key), or `schema.table` names as
    a JSON array or a comma list (as `--tables`)."""
    text = (text or "").strip()
    if text == "*":
        return ("*",)
    return tuple(parse_tables_argument(text)) if text else ()


def with_history(schema: SchemaFile, names: Sequence[str]) -> SchemaFile:
    """The schema file with `history` set on the tables `names` names (any case; `*`: all of them). A name
    the schema file lacks is a ValueError: a typo must not leave a table without the history it wanted."""
    if not names:
        return schema
    everything = "*" in names
    wanted = {n.lower() for n in names if n != "*"}
    known = {name.lower() for name in schema.tables} | {name.lower() for name in schema.refused}
    unknown = sorted(wanted - known)
    if unknown:
        raise ValueError(f"--history_tables names tables the schema file does not have: {unknown}")
    tables = {
        name: replace(spec, history=True) if everything or name.lower() in wanted else spec
        for name, spec in schema.tables.items()
    }
    return SchemaFile(schema.dialect, tables, dict(schema.refused))


def keeps_history(spec: TableSpec) -> bool:
    """Whether the table keeps a history: asked for, and a primary key to tell its rows apart (a table
    without one is append-only: its clean table is its history)."""
    if spec.history and not spec.has_primary_key:
        log.warning(
            "%s: no primary key, so no row history (its clean table is append-only)", spec.qualified_name
        )
    return spec.history and spec.has_primary_key


def with_existing_histories(
    spark: SparkSession, config: LakeConfig, schema: SchemaFile, names: Sequence[str] | None = None
) -> SchemaFile:
    """The schema file with `history` set on every table (of `names`, `schema.table`; None: all) that has
    a history table already. For the repairs that change a table outside the loop (tools.reapply_quarantined,
    the reconcile's emptying of a table): they are not always given the stack's `--history_tables`, and a
    history that exists must follow every change of its table, or its current versions stop being the
    table."""
    chosen = schema.tables if names is None else {n: schema.tables[n] for n in names if n in schema.tables}
    found = {name for name, spec in chosen.items() if not spec.history and has_history(spark, config, spec)}
    if not found:
        return schema
    tables = {
        name: replace(spec, history=True) if name in found else spec for name, spec in schema.tables.items()
    }
    return SchemaFile(schema.dialect, tables, dict(schema.refused))


def has_history(spark: SparkSession, config: LakeConfig, spec: TableSpec) -> bool:
    """Whether the table's changes must go to a history: it keeps one, or (a primary key and) its history
    table exists already."""
    if keeps_history(spec):
        return True
    return spec.has_primary_key and table_exists(spark, history_table(config, spec))


def history_table(config: LakeConfig, spec: TableSpec) -> str:
    """The table's history: its clean name in the histories' namespace."""
    return config.table(history_database(config.clean_database), spec.iceberg_name)


def history_schema(clean: T.StructType) -> T.StructType:
    """The history table's columns: the clean table's (without its metadata columns), then the history's."""
    data = [f for f in clean.fields if f.name not in (COMMIT_TS_COLUMN, CHANGE_SEQ_COLUMN)]
    clash = [f.name for f in data if f.name in HISTORY_COLUMNS]
    if clash:
        raise ValueError(
            f"the table has column(s) {', '.join(clash)}, which its history table names itself "
            f"({', '.join(HISTORY_COLUMNS)}): rename them with a DMS table-mapping rule or keep no history"
        )
    return T.StructType([T.StructField(f.name, f.dataType) for f in data] + HISTORY_FIELDS)


# ---------------------------------------------------------------- pure DataFrame functions
def change_versions(changes: DataFrame, key: Sequence[str]) -> DataFrame:
    """The versions a batch's changes make: one per key and change sequence (every change of a key, not
    only its last). `changes`: typed changes after `changes.expand_key_changes` (data columns, `_dms_op`,
    `_dms_seq`, `_dms_commit_ts`, `_dms_file_order`, `_dms_pos`). Two changes of a key with one sequence
    are one version, by the tie rule of `changes.last_change_per_key` (the later file, then the later
    record, then an upsert over a delete). A delete's version holds the key only."""
    data = [c for c in changes.columns if not c.startswith(INTERNAL_PREFIX)]
    payload = [c for c in data if c not in key]
    ordering = [
        F.col(C.FILE_ORDER).alias("_dms_h_file"),
        F.col(C.POSITION).alias("_dms_h_pos"),
        F.when(F.col(C.OP) == "D", 0).otherwise(1).alias("_dms_h_op_rank"),
    ]
    last = changes.groupBy(*[F.col(quote(k)) for k in key], F.col(C.SEQ)).agg(
        F.max(
            F.struct(*ordering, F.col(C.OP), F.col(C.COMMIT_TS), *[F.col(quote(c)) for c in payload])
        ).alias("_dms_h_last")
    )
    deleted = F.col(f"_dms_h_last.{C.OP}") == "D"
    return last.select(
        *[F.col(quote(k)) for k in key],
        *[F.when(~deleted, F.col(f"_dms_h_last.{quote(c)}")).alias(c) for c in payload],
        F.col(C.SEQ).alias(CHANGE_SEQ),
        F.col(f"_dms_h_last.{C.COMMIT_TS}").alias(VALID_FROM),
        F.col(f"_dms_h_last.{C.OP}").alias(OPERATION),
    )


def load_versions(rows: DataFrame) -> DataFrame:
    """The versions a (re)load's rows open: one LOAD version per row (`rows`: the clean table's columns)."""
    data = [c for c in rows.columns if c not in (COMMIT_TS_COLUMN, CHANGE_SEQ_COLUMN)]
    return rows.select(
        *[F.col(quote(c)) for c in data],
        F.col(CHANGE_SEQ_COLUMN).cast(C.SEQ_TYPE).alias(CHANGE_SEQ),
        F.col(COMMIT_TS_COLUMN).alias(VALID_FROM),
        F.lit(LOAD).alias(OPERATION),
    )


def removal_versions(
    current: DataFrame, kept: DataFrame, key: Sequence[str], seq: Decimal | None, at: datetime | None
) -> DataFrame:
    """D versions for the keys whose `current` version (a stored history row) holds a row that `kept`
    (the reload's rows) no longer has: at the reload's sequence `seq` and time `at`, or just after the
    version they end when that is newer (a removed row is never older than the version it ends)."""
    gone = current.where(F.col(IS_CURRENT) & (F.col(OPERATION) != "D")).join(
        kept.select(*[quote(k) for k in key]), list(key), "left_anti"
    )
    after = F.col(CHANGE_SEQ) + F.lit(1).cast(C.SEQ_TYPE)
    at_seq = F.lit(str(seq)).cast(C.SEQ_TYPE) if seq is not None else after
    return gone.select(
        *[F.col(quote(k)) for k in key],
        F.when(F.col(CHANGE_SEQ).isNull() | (at_seq > F.col(CHANGE_SEQ)), at_seq)
        .otherwise(after)
        .cast(C.SEQ_TYPE)
        .alias(CHANGE_SEQ),
        # as text: read in the session's time zone (the jobs pin UTC), as the changes' commit times are
        F.lit(at.isoformat() if at is not None else None).cast(T.TimestampType()).alias(VALID_FROM),
        F.lit("D").alias(OPERATION),
    )


def spliced(existing: DataFrame, incoming: DataFrame, key: Sequence[str]) -> DataFrame:
    """The history rows to write (insert or update) when `incoming` versions meet the `existing` ones
    (every stored version of the keys `incoming` touches; the history table's columns).

    A key's versions are the union of both, one per change sequence (a stored version wins: the same
    change again changes nothing), ordered by sequence (null, a load without sequences, first); each ends
    where the next begins (`valid_to` the next one's `valid_from`) and only the last is current. Returned:
    the incoming versions the history lacks, and the stored ones whose `valid_to` or `is_current` changed."""
    columns = [f.name for f in existing.schema.fields]
    ours = existing.withColumn(_SOURCE, F.lit(0))
    theirs = aligned(incoming, existing.schema).withColumn(_SOURCE, F.lit(1))
    keys = [F.col(quote(k)) for k in key]
    both = ours.unionByName(theirs)
    one_per_change = Window.partitionBy(*keys, F.col(CHANGE_SEQ)).orderBy(F.col(_SOURCE))
    versions = both.withColumn(_RANK, F.row_number().over(one_per_change)).where(F.col(_RANK) == 1)
    in_order = Window.partitionBy(*keys).orderBy(F.col(CHANGE_SEQ).asc_nulls_first())
    nxt = F.lead(F.struct(F.col(VALID_FROM).alias("at")), 1).over(in_order)
    versions = versions.withColumn(_NEXT, nxt)
    valid_to = F.col(f"{_NEXT}.at")
    current = F.col(_NEXT).isNull()
    changed = (
        (F.col(_SOURCE) == 1) | ~F.col(VALID_TO).eqNullSafe(valid_to) | ~F.col(IS_CURRENT).eqNullSafe(current)
    )
    return versions.where(changed).select(
        *[
            valid_to.alias(c) if c == VALID_TO else current.alias(c) if c == IS_CURRENT else F.col(quote(c))
            for c in columns
        ]
    )


def aligned(rows: DataFrame, schema: T.StructType) -> DataFrame:
    """`rows` with exactly `schema`'s columns (null where `rows` lacks one), in its types."""
    return rows.select(
        *[
            (F.col(quote(f.name)) if f.name in rows.columns else F.lit(None)).cast(f.dataType).alias(f.name)
            for f in schema.fields
        ]
    )


# ---------------------------------------------------------------- I/O
def ensure_history(spark: SparkSession, config: LakeConfig, spec: TableSpec, clean: str, run_id: str) -> str:
    """The table's history table, created if it does not exist yet: with one LOAD version of every row
    the clean table holds (its history starts from the table as it is), in the create's one commit."""
    table = history_table(config, spec)
    if table_exists(spark, table):
        owner = table_properties(spark, table).get(HISTORY_OF)
        if owner != spec.qualified_name:
            raise ValueError(
                f"{table} exists but is not the history of {spec.qualified_name} (its {HISTORY_OF} is "
                f"{owner!r}): another source table has that clean name; keep no history for "
                f"{spec.qualified_name} or rename the other table with a DMS table-mapping rule"
            )
        return table
    ensure_namespace(spark, config.catalog_name, history_database(config.clean_database))  # once, at creation
    properties = {HISTORY_OF: spec.qualified_name}
    comment = f"Every version of every row of {spec.qualified_name}"
    if table_exists(spark, clean):
        seed = load_versions(spark.table(clean))
        schema = history_schema(spark.table(clean).schema)
        rows = aligned(seed.withColumn(IS_CURRENT, F.lit(True)), schema)
        replace_table(spark, table, rows, properties, {RUN_ID: run_id}, comment, ())
    else:
        create_table(spark, table, history_schema(_clean_schema(spec)), comment, properties)
    return table


def _clean_schema(spec: TableSpec) -> T.StructType:
    return T.StructType([T.StructField(f.name.lower(), f.dataType) for f in spec.spark_schema().fields])


def write_versions(
    spark: SparkSession, table: str, incoming: DataFrame, key: Sequence[str], run_id: str
) -> int:
    """Splice `incoming` versions into the history `table` in one MERGE (none when nothing changes): the
    stored versions of the keys `incoming` touches are read, the rows to write kept (a local checkpoint),
    then merged by (key, change_seq). Returns how many history rows were inserted or updated."""
    schema = spark.table(table).schema
    keys = incoming.select(*[quote(k) for k in key]).distinct()
    existing = spark.table(table).join(keys, list(key), "left_semi")
    rows = spliced(existing, aligned(incoming, schema), key).localCheckpoint(eager=True)
    written = rows.count()
    if not written:
        return 0
    view = f"history_{abs(hash((table, threading.get_ident())))}"
    rows.createOrReplaceTempView(view)
    columns = [f.name for f in schema.fields]
    on = " AND ".join([f"t.{quote(k)} = s.{quote(k)}" for k in key] + [f"t.{CHANGE_SEQ} <=> s.{CHANGE_SEQ}"])
    statement = (
        f"MERGE INTO {table} t USING {view} s ON {on} "
        f"WHEN MATCHED THEN UPDATE SET t.{VALID_TO} = s.{VALID_TO}, t.{IS_CURRENT} = s.{IS_CURRENT} "
        f"WHEN NOT MATCHED THEN INSERT ({', '.join(quote(c) for c in columns)}) "
        f"VALUES ({', '.join('s.' + quote(c) for c in columns)})"
    )
    try:
        with_commit_properties(spark, {RUN_ID: run_id}, lambda: spark.sql(statement))
    finally:
        spark.catalog.dropTempView(view)
    return written


def record_changes(
    spark: SparkSession,
    config: LakeConfig,
    spec: TableSpec,
    clean: str,
    typed: DataFrame,
    floor: Decimal | None,
    types: dict[str, T.DataType],
    run_id: str,
) -> int:
    """The CDC apply's hook, before the clean table's commit: every change of the batch the clean table's
    apply takes (`typed`, the batch's typed changes: valid, newer than the load `floor`) spliced into the
    history, a change older than its key's delete included (the clean table ignores it; the history keeps
    it where it belongs)."""
    key = [k.lower() for k in spec.primary_key]
    table = ensure_history(spark, config, spec, clean, run_id)
    evolve_schema(spark, table, types)
    usable = F.col(C.REASON).isNull() & F.col(C.MISMATCH).isNull() & F.col(C.WIDEN).isNull()
    if floor is not None:
        usable = usable & (F.col(C.SEQ).isNull() | (F.col(C.SEQ) > F.lit(str(floor)).cast(C.SEQ_TYPE)))
    fresh = typed.where(usable).drop(C.REASON, C.MISMATCH, C.WIDEN, C.RAW)
    versions = change_versions(C.expand_key_changes(fresh, key), key)
    written = write_versions(spark, table, versions, key, run_id)
    log.info("%s: %d history row(s) written", table, written)
    return written


def record_load(
    spark: SparkSession,
    config: LakeConfig,
    spec: TableSpec,
    clean: str,
    rows: DataFrame,
    floor: Decimal | None,
    started_at: datetime | None,
    run_id: str,
) -> int:
    """The (re)load's hook, before its replace: a LOAD version for each of `rows` (the table's rows after
    the load) the history lacks, and a D version for each current row the load removed."""
    key = [k.lower() for k in spec.primary_key]
    table = ensure_history(spark, config, spec, clean, run_id)
    evolve_schema(
        spark,
        table,
        {
            f.name: f.dataType
            for f in rows.schema.fields
            if f.name not in (COMMIT_TS_COLUMN, CHANGE_SEQ_COLUMN)
        },
    )
    loaded = load_versions(rows)
    current = spark.table(table).where(F.col(IS_CURRENT))
    removed = aligned(removal_versions(current, rows, key, floor, started_at), loaded.schema)
    written = write_versions(spark, table, loaded.unionByName(removed), key, run_id)
    log.info("%s: %d history row(s) written by the load", table, written)
    return written


def record_emptying(
    spark: SparkSession,
    config: LakeConfig,
    spec: TableSpec,
    clean: str,
    kept: DataFrame,
    floor: Decimal,
    at: datetime,
    run_id: str,
) -> int:
    """The reconcile's repair of a table whose source is empty (lakehouse.reconcile.run `empty_clean_table`),
    before its replace: what a reload with no LOAD row records, a D version (at the repair's `floor` and the
    check's time `at`) for each current row it removes (`kept`: the rows it keeps). For every table with a
    history (`has_history`: the reconcile job is not given --history_tables); none for the others."""
    if not has_history(spark, config, spec):
        return 0
    return record_load(spark, config, spec, clean, kept, floor, at, run_id)

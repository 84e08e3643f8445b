"""Quarantine: every rejected file or record, with where it came from and why, in an Iceberg table.

Nothing rejected is lost: the table keeps the raw record text, so it can be fixed and replayed.
A batch's rows are written before its data commit; a retry of the run quarantines the same record once
(keyed by run id, source file and record number). A file fixed and re-uploaded is applied again by
`python -m tools.reapply_quarantined` (docs/CONTRACTS.md, "What each recovery command guarantees").
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.dms.changes import RAW, REASON
from lakehouse.dms.reader import FILE_RECORDS, FILE_URI, RECORD
from lakehouse.io.frames import literal_frame, one_row
from lakehouse.io.iceberg import create_table, with_commit_properties

# How the ledger names a file applied again after a fix: `<file name><REAPPLIED_MARK><run id>`, the run id
# of the attempt whose quarantined records it applies (lakehouse.apply.reapply): each attempt's leftovers are
# applied once, however the file's bytes change (a fix, a re-compression).
REAPPLIED_MARK = "#reapplied:"

QUARANTINE_SCHEMA = T.StructType(
    [
        T.StructField("run_id", T.StringType()),
        T.StructField("quarantined_at", T.TimestampType()),
        T.StructField("job", T.StringType()),
        T.StructField("source_table", T.StringType()),
        T.StructField("source_uri", T.StringType()),
        T.StructField("record_number", T.LongType()),
        T.StructField("reason", T.StringType()),
        T.StructField("record", T.StringType()),
        # how many records the file had when this record was quarantined (null: a whole file)
        T.StructField("file_records", T.LongType()),
    ]
)
QUARANTINE_COLUMNS = (
    "source_table string, source_uri string, record_number long, reason string, record string"
)


@dataclass(frozen=True)
class ReappliedFile:
    """A file applied again (tools.reapply_quarantined): the ledger knows it as `<name>#reapplied:<tag>`;
    `records` (record numbers) narrows it to those records, None applies all of it."""

    tag: str
    records: frozenset[int] | None = None


@dataclass(frozen=True)
class FileProblem:
    source_table: str
    source_uri: str
    reason: str


def record_rejections(rows: DataFrame, source_table: str) -> DataFrame:
    """Rejected records (with `_record`, `_reason`, `_raw`) in the quarantine's shape, minus run fields."""
    return rows.select(
        F.lit(source_table).alias("source_table"),
        F.col(FILE_URI).alias("source_uri"),
        F.col(RECORD).alias("record_number"),
        F.col(REASON).alias("reason"),
        F.col(RAW).alias("record"),
        F.col(FILE_RECORDS).alias("file_records"),
    )


def file_rejections(spark: SparkSession, problems: Sequence[FileProblem]) -> DataFrame:
    return literal_frame(
        spark,
        [{"source_table": p.source_table, "source_uri": p.source_uri, "reason": p.reason} for p in problems],
        f"{QUARANTINE_COLUMNS}, file_records long",
    )


def write_quarantine(
    spark: SparkSession, table: str, run_id: str, job: str, parts: Sequence[DataFrame]
) -> int:
    """Add rejected files and records to the quarantine table, once per run id; returns how many were new."""
    if not parts:
        return 0
    rejected = parts[0]
    for part in parts[1:]:
        rejected = rejected.unionByName(part)
    rows = (
        rejected.select(
            F.lit(run_id).alias("run_id"),
            F.current_timestamp().alias("quarantined_at"),
            F.lit(job).alias("job"),
            "source_table",
            "source_uri",
            "record_number",
            "reason",
            "record",
            "file_records",
        )
        .dropDuplicates(["source_uri", "record_number"])
        .localCheckpoint()
    )
    count = rows.count()
    if count == 0:
        return 0
    create_table(spark, table, QUARANTINE_SCHEMA, "DMS files and records that could not be applied")
    if "file_records" not in spark.table(table).columns:  # a quarantine written before the column existed
        spark.sql(f"ALTER TABLE {table} ADD COLUMN file_records bigint")
    view = f"quarantine_{uuid.uuid4().hex}"  # never built from the run id: any text can be a run id
    rows.createOrReplaceTempView(view)
    before = spark.table(table).count()
    statement = (
        f"MERGE INTO {table} q USING {view} r "
        "ON q.run_id = r.run_id AND q.source_uri = r.source_uri AND q.record_number <=> r.record_number "
        "WHEN NOT MATCHED THEN INSERT *"
    )
    with_commit_properties(spark, {}, lambda: spark.sql(statement))
    spark.catalog.dropTempView(view)
    return spark.table(table).count() - before


def quarantined_in_run(spark: SparkSession, table: str, run_id: str) -> tuple[int, int]:
    """(records, files) the quarantine holds for a run, over all its attempts: a retried run skips what
    its first attempt applied, and so would not count again what that attempt quarantined."""
    if not spark.catalog.tableExists(table):
        return 0, 0
    counts = one_row(
        spark.table(table)
        .where(F.col("run_id") == F.lit(run_id))
        .agg(
            F.count(F.col("record_number")).alias("records"),
            F.count(F.when(F.col("record_number").isNull(), 1)).alias("files"),
        )
    )
    return int(counts["records"]), int(counts["files"])


@dataclass(frozen=True)
class QuarantinedFile:
    """What the quarantine holds of one source file: by run id, the records quarantined (None: the whole
    file) and how many records the file had then."""

    source_table: str
    source_uri: str
    attempts: dict[str, QuarantinedAttempt]

    @property
    def run_ids(self) -> tuple[str, ...]:
        return tuple(sorted(self.attempts))


@dataclass(frozen=True)
class QuarantinedAttempt:
    records: frozenset[int] | None  # None: the whole file
    file_records: int | None  # None: a whole file, or a row written before the count was kept


def quarantined_files(
    spark: SparkSession, table: str, uris: Sequence[str] = (), run_id: str | None = None
) -> list[QuarantinedFile]:
    """The quarantined files named by `uris`, or those a run quarantined anything of (`run_id`)."""
    if not spark.catalog.tableExists(table):
        return []
    rows = spark.table(table)
    if run_id is not None:
        wanted = rows.where(F.col("run_id") == F.lit(run_id)).select("source_uri").distinct()
        rows = rows.join(wanted, "source_uri", "left_semi")
    if uris:
        rows = rows.where(F.col("source_uri").isin(sorted(set(uris))))
    count = F.col("file_records") if "file_records" in rows.columns else F.lit(None).cast("long")
    found = (
        rows.groupBy("source_table", "source_uri", "run_id")
        .agg(
            F.max(F.col("record_number").isNull()).alias("whole_file"),
            F.sort_array(F.collect_set("record_number")).alias("records"),
            F.max(count).alias("file_records"),
        )
        .orderBy("source_uri", "run_id")
        .collect()
    )
    files: dict[tuple[str, str], dict[str, QuarantinedAttempt]] = {}
    for r in found:
        records = None if r["whole_file"] else frozenset(int(n) for n in r["records"])
        files.setdefault((r["source_table"], r["source_uri"]), {})[r["run_id"]] = QuarantinedAttempt(
            records, r["file_records"]
        )
    return [QuarantinedFile(table_name, uri, attempts) for (table_name, uri), attempts in files.items()]

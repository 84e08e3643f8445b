"""What the clean zone remembers besides its rows (docs/CONTRACTS.md, "Exactly once, in any order").

- Applied files. Every CDC commit names the files it applied in its own snapshot summary
  (`dms.applied-files`): that is the atomic record. Right after the commit the same names are copied into
  the ledger table `<clean_db>_records.dms_applied_files` (source table, file, run, snapshot id), where compaction
  and snapshot expiry can't reach them. A file counts as applied when an ancestor of the table's current
  snapshot names it, or when the ledger does and its snapshot is an ancestor or no longer held (expired).
  A ledger entry whose snapshot the table still holds but no longer descends from (a rollback) doesn't
  count, and is forgotten. A copy lost to a crash between the two commits is made again by the next run
  that meets one of its files (and by table maintenance before it expires snapshots).
- Tombstones. The delete of a key leaves `(table, key, change sequence)` in `<clean_db>_records.dms_tombstones`,
  written before the MERGE that deletes the row. An insert or update older than a key's tombstone is
  ignored, so a late or replayed file can't bring a deleted row back. Tombstones are appended (a retry may
  add one twice; the newest per key counts) and expire with table maintenance.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.base.config import LakeConfig
from lakehouse.base.names import properties_sql, sql_string
from lakehouse.dms.changes import KEY_HASH, SEQ_TYPE, key_hash
from lakehouse.io.fence import check_before_commit
from lakehouse.io.frames import literal_frame
from lakehouse.io.iceberg import (
    APPLIED_FILES,
    REPLACED_SNAPSHOT,
    create_table,
    current_snapshot_id,
    ensure_namespace,
    fenced_writer,
    iceberg_table,
    partition_sql,
    table_exists,
    with_commit_properties,
)

log = logging.getLogger(__name__)

LEDGER_SCHEMA = T.StructType(
    [
        T.StructField("source_table", T.StringType()),
        T.StructField("file_name", T.StringType()),
        T.StructField("file_uri", T.StringType()),
        T.StructField("run_id", T.StringType()),
        T.StructField("snapshot_id", T.LongType()),
        T.StructField("applied_at", T.TimestampType()),
    ]
)
TOMBSTONE_SCHEMA = T.StructType(
    [
        T.StructField("source_table", T.StringType()),
        T.StructField("key", T.StringType()),
        T.StructField("change_seq", SEQ_TYPE),
        T.StructField("commit_ts", T.TimestampType()),
        T.StructField("run_id", T.StringType()),
        T.StructField("recorded_at", T.TimestampType()),
    ]
)
# Parallel table applies append to the same state tables: let Iceberg retry a commit that lost the race.
STATE_TABLE_PROPERTIES = {"commit.retry.num-retries": "20", "commit.retry.min-wait-ms": "50"}
# The tombstones are bucketed by source table: a table's lookup reads its bucket's files only, not every
# table's deletes, and no source name reaches a path (a bucket is a number).
TOMBSTONE_PARTITIONING = ("bucket(64, source_table)",)
# The run's one append writes each task's rows into their buckets: no shuffle before it, no extra Spark job.
TOMBSTONE_WRITE = {"write.distribution-mode": "none", "write.spark.fanout.enabled": "true"}
# How far before its oldest candidate file's time a commit that applied it can be (clock skew).
CLOCK_SLACK = timedelta(hours=1)


@dataclass(frozen=True)
class LedgerEntry:
    source_table: str
    file_name: str
    file_uri: str | None  # None: recorded by maintenance from a commit's summary, which names files only
    run_id: str
    snapshot_id: int


@dataclass(frozen=True)
class RecordedFile:
    """A ledger row: a file of a table applied by the commit `snapshot_id`."""

    file_name: str
    snapshot_id: int | None


@dataclass
class AppliedFiles:
    """Which of a batch's files a table applied before, and what the ledger must learn or forget."""

    applied: set[str]
    to_record: list[LedgerEntry]  # applied by a commit the ledger does not name yet
    to_forget: list[RecordedFile]  # ledger rows of rolled-back commits


class StateTables:
    """The ledger and the tombstones of one clean namespace."""

    def __init__(self, spark: SparkSession, config: LakeConfig) -> None:
        self.spark = spark
        self.namespace = (config.catalog_name, config.records_database)
        self.ledger = config.ledger
        self.tombstones = config.tombstones

    def ensure(self) -> None:
        """Create both tables (once per run, before tables are applied in parallel)."""
        ensure_namespace(self.spark, *self.namespace)
        if not table_exists(self.spark, self.ledger):
            comment = "CDC files applied to each clean table (exactly once)"
            create_table(self.spark, self.ledger, LEDGER_SCHEMA, comment, STATE_TABLE_PROPERTIES)
        if not table_exists(self.spark, self.tombstones):
            comment = "Deleted keys and the change sequence of their delete"
            properties = STATE_TABLE_PROPERTIES | TOMBSTONE_WRITE
            create_table(
                self.spark, self.tombstones, TOMBSTONE_SCHEMA, comment, properties, TOMBSTONE_PARTITIONING
            )

    # ---------------------------------------------------------------- ledger
    def recorded(self, file_names: Collection[str]) -> dict[str, list[RecordedFile]]:
        """Ledger rows naming any of `file_names`, by source table (one query for the whole batch)."""
        if not file_names:
            return {}
        names = sorted(set(file_names))
        rows = (
            self.spark.table(self.ledger)
            .where(F.col("file_name").isin(names))
            .select("source_table", "file_name", "snapshot_id")
            .collect()
        )
        found: dict[str, list[RecordedFile]] = {}
        for row in rows:
            found.setdefault(row["source_table"], []).append(
                RecordedFile(row["file_name"], row["snapshot_id"])
            )
        return found

    def record(self, entries: Sequence[LedgerEntry], forget: Sequence[tuple[str, RecordedFile]] = ()) -> None:
        """Append ledger rows and drop rows of rolled-back commits. An append, not a MERGE: the callers
        add only names the ledger lacks, and a row that a crash makes appear twice changes no answer."""
        if entries:
            rows = literal_frame(
                self.spark,
                [asdict(e) for e in entries],
                "source_table string, file_name string, file_uri string, run_id string, snapshot_id long",
            ).withColumn("applied_at", F.current_timestamp())
            fenced_writer(rows.writeTo(self.ledger)).append()
        if forget:
            condition = " OR ".join(
                f"(source_table = {sql_string(table)} AND file_name = {sql_string(f.file_name)} "
                f"AND snapshot_id = {int(f.snapshot_id)})"
                for table, f in forget
                if f.snapshot_id is not None
            )
            if condition:
                statement = f"DELETE FROM {self.ledger} WHERE {condition}"
                with_commit_properties(self.spark, {}, lambda: self.spark.sql(statement))

    # ---------------------------------------------------------------- tombstones
    def tombstones_of(self, source_table: str) -> DataFrame:
        """The newest tombstone per key of one table: `_dms_key_hash` (changes.key_hash), `key`, `tomb_seq`;
        grouped by the hash and the key, as a CDC batch is, so their join shuffles neither again."""
        return (
            self.spark.table(self.tombstones)
            .where(F.col("source_table") == source_table)
            .groupBy(key_hash(F.col("key")).alias(KEY_HASH), F.col("key"))
            .agg(F.max("change_seq").alias("tomb_seq"))
        )

    def bury(self, deletes: Sequence[tuple[str, DataFrame]], run_id: str) -> None:
        """Append tombstones for each table's `deletes` (`key`, `change_seq`, `commit_ts`), in one commit."""
        parts = [
            frame.select(
                F.lit(source_table).alias("source_table"),
                "key",
                F.col("change_seq").cast(SEQ_TYPE).alias("change_seq"),
                "commit_ts",
                F.lit(run_id).alias("run_id"),
                F.current_timestamp().alias("recorded_at"),
            )
            for source_table, frame in deletes
        ]
        if parts:
            fenced_writer(reduce(DataFrame.unionByName, parts).writeTo(self.tombstones)).append()


def bucket_tombstones(spark: SparkSession, table: str) -> bool:
    """Give a tombstones table written by an older release (unpartitioned) its buckets by source table; True
    if it had none. Metadata only: new appends go to the buckets, and maintenance rewrites the older files into
    them (they are files of an older partition spec)."""
    if not iceberg_table(spark, table).spec().isUnpartitioned():
        return False
    check_before_commit()
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD {partition_sql(TOMBSTONE_PARTITIONING)}")
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({properties_sql(TOMBSTONE_WRITE)})")
    log.info("%s: bucketed by source table", table)
    return True


def applied_files(
    spark: SparkSession,
    table: str,
    source_table: str,
    candidates: Sequence[tuple[str, str, datetime | None]],
    recorded: Sequence[RecordedFile],
    java_table: Any = None,
) -> AppliedFiles:
    """Which of `candidates` (file name, URI, time DMS wrote it) `table` applied before.

    Reads the snapshots the table's metadata holds (`java_table`, the table as the caller loaded it, else
    loaded here; no Spark job), the applied files only of commits made after the oldest candidate was
    written (less an hour of clock slack): an older commit can't have applied it."""
    names = {name for name, _, _ in candidates}
    times = [moment for _, _, moment in candidates if moment is not None]
    since = (min(times) - CLOCK_SLACK) if len(times) == len(candidates) and times else None
    java_table = iceberg_table(spark, table) if java_table is None else java_table
    rows = held_snapshots(java_table, since)
    held = {row["snapshot_id"] for row in rows}
    ancestors = lineage(
        current_snapshot_id(spark, table, java_table),
        {row["snapshot_id"]: row["parent_id"] or _as_id(row["replaced"]) for row in rows},
    )
    by_summary: dict[str, int] = {}
    for row in rows:
        if row["snapshot_id"] in ancestors and row["applied"]:
            for name in json.loads(row["applied"]):
                if name in names:
                    by_summary[name] = row["snapshot_id"]
    applied = set(by_summary)
    forget = []
    ledgered: set[tuple[str, int | None]] = set()
    for entry in recorded:
        if entry.file_name not in names:
            continue
        ledgered.add((entry.file_name, entry.snapshot_id))
        if entry.snapshot_id is None or entry.snapshot_id not in held or entry.snapshot_id in ancestors:
            applied.add(entry.file_name)
        else:
            forget.append(entry)  # its commit was rolled back: the file is not applied any more
    uris = {name: uri for name, uri, _ in candidates}
    to_record = [
        LedgerEntry(source_table, name, uris[name], "reconciled", snapshot)
        for name, snapshot in sorted(by_summary.items())
        if (name, snapshot) not in ledgered
    ]
    return AppliedFiles(applied, to_record, forget)


def held_snapshots(java_table: Any, since: datetime | None) -> list[dict[str, Any]]:
    """Every snapshot the table holds: its id, parent, the snapshot a (re)load replaced, and, if committed
    at or after `since` (UTC), the files it applied (as the `snapshots` metadata table has them)."""
    since_ms = None if since is None else (since - datetime(1970, 1, 1)) / timedelta(milliseconds=1)
    rows = []
    iterator = java_table.snapshots().iterator()
    while iterator.hasNext():
        snapshot = iterator.next()
        summary = snapshot.summary()
        recent = since_ms is None or snapshot.timestampMillis() >= since_ms
        rows.append(
            {
                "snapshot_id": int(snapshot.snapshotId()),
                "parent_id": snapshot.parentId(),
                "replaced": summary.get(REPLACED_SNAPSHOT),
                "applied": summary.get(APPLIED_FILES) if recent else None,
            }
        )
    return rows


def lineage(current: int | None, parents: dict[int, int | None]) -> set[int]:
    """The current snapshot and its ancestors. A (re)load replaces the table in one commit without a
    parent; it names the snapshot it replaced (`dms.replaced-snapshot`), and the walk goes on there:
    what was applied before a reload stays applied."""
    found: set[int] = set()
    snapshot = current
    while snapshot is not None and snapshot not in found:
        found.add(snapshot)
        snapshot = parents.get(snapshot)
    return found


def _as_id(text: str | None) -> int | None:
    return int(text) if text else None

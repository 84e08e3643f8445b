"""Table maintenance between CDC runs: compaction, delete-file rewrite, manifest rewrite, snapshot expiry,
orphan-file removal, tombstone expiry — without losing what exactly-once needs.

Every CDC batch commits a merge-on-read snapshot with new position-delete files; nothing else ever
compacts or expires them, so reads slow down and metadata grows without bound. A maintenance pass, per
clean, history and refined table and each of the pipeline's own records:

1. **Ledger first.** Every applied-file name that only a snapshot summary holds is copied into the ledger
   (`dms_applied_files`), and ledger rows of rolled-back commits are dropped, *before* any snapshot is
   expired: expiry can then remove the summaries without a file ever counting as not applied (or a
   rolled-back one as applied).
2. `rewrite_data_files` (bin-pack; data files with delete files attached are rewritten with the deletes
   applied), then `rewrite_position_delete_files` (removes the deletes left dangling), `rewrite_manifests`.
3. `expire_snapshots` older than the retention (time travel reaches that far back), keeping at least
   `retain_last`, and never a snapshot a refined table's newest refine consumed (the refine job would
   rebuild in full; it still does, logged, if someone else expires it), nor one of the newest consistent
   point's (`consistent_points`: a refine `--read_at consistent` and a reader's query read the tables at
   those snapshots, however old the slowest table keeps the point).
4. `remove_orphan_files` older than the orphan age (files no snapshot references: failed writes).
5. Tombstones recorded longer ago than their retention are deleted (the retention must exceed the longest
   delivery delay of a CDC file: docs/CONTRACTS.md).

It runs between CDC runs (the state machine schedules it), so it never races a CDC commit; Iceberg's
optimistic commits would make a racing rewrite fail rather than lose data anyway. A failure is reported,
never fatal to CDC.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import SparkSession

from lakehouse.apply.ledger import LedgerEntry, RecordedFile, StateTables, lineage
from lakehouse.audit.consistent import last_point
from lakehouse.base.config import LakeConfig
from lakehouse.base.names import history_database, quote, sql_string
from lakehouse.io.fence import LeaseLostError, check_before_commit
from lakehouse.io.frames import one_row
from lakehouse.io.iceberg import (
    APPLIED_FILES,
    REPLACED_SNAPSHOT,
    RUN_ID,
    SOURCE_TABLE,
    TARGET_FILE_SIZE,
    current_snapshot_id,
    table_exists,
    table_properties,
)
from lakehouse.refine.consumed import CONSUMED_PREFIX, consumed_snapshots

log = logging.getLogger(__name__)
_PLAIN = re.compile(r"[a-z0-9_]+")


@dataclass(frozen=True)
class MaintenanceOptions:
    """What maintenance does, and why each default. The compaction settings are the ones bench/maintenance.py
    measured (bench/RESULTS.md, section 6: reads within 0.93-1.18x of a fresh table after 300 batches,
    a pass every 50 batches). The retentions are not read-cost settings (the bench expired everything
    but the last snapshots): they are chosen for time travel (3 days), for the orphan search never to
    touch a file a running job is writing, and for a tombstone to outlive any delivery delay."""

    target_file_size_mb: int = 128
    min_input_files: int = 5  # a group is compacted once it has this many small files
    delete_file_threshold: int = 1  # a data file with this many delete files is rewritten
    snapshot_retention_hours: float = 72.0  # time travel reaches this far back
    retain_last: int = 20  # snapshots kept whatever their age
    orphan_file_age_hours: float = 72.0  # files no snapshot references, older than this, are removed
    tombstone_retention_days: float = 35.0  # > queue retention (14 d) + dead-letter queue retention (14 d)
    remove_orphans: bool = True


@dataclass
class TableMaintenance:
    table: str
    data_files_before: int = 0
    delete_files_before: int = 0
    snapshots_before: int = 0
    data_files_after: int = 0
    delete_files_after: int = 0
    snapshots_after: int = 0
    rewritten_data_files: int = 0
    removed_delete_files: int = 0
    expired_snapshots: int = 0
    orphan_files_removed: int = 0
    ledger_entries_copied: int = 0
    tombstones_expired: int = 0
    seconds: float = 0.0
    error: str | None = None


@dataclass
class MaintenanceReport:
    run_id: str
    tables: list[TableMaintenance] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[TableMaintenance]:
        return [t for t in self.tables if t.error]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def maintain(
    spark: SparkSession,
    config: LakeConfig,
    options: MaintenanceOptions = MaintenanceOptions(),
    run_id: str = "maintenance",
    now: datetime | None = None,
) -> MaintenanceReport:
    """One maintenance pass over every table of the clean, histories', refined and records' namespaces."""
    if options.remove_orphans and options.orphan_file_age_hours < 24:
        raise ValueError(
            "orphan files younger than 24 hours may belong to a write in progress: "
            f"orphan_file_age_hours must be at least 24, not {options.orphan_file_age_hours}"
        )
    started = time.monotonic()
    moment = now or datetime.now(UTC).replace(tzinfo=None)
    report = MaintenanceReport(run_id)
    state = StateTables(spark, config)
    replicas = _tables(spark, config, config.clean_database)
    refined = _tables(spark, config, config.refined_database)
    histories = _tables(spark, config, history_database(config.clean_database))  # lakehouse.apply.history
    own = _tables(spark, config, config.records_database)  # the pipeline's records: never a replica
    consumed = _consumed_snapshots(spark, refined) | _consistent_point_snapshots(spark, config)
    # 1. the ledger learns every applied file a summary holds before any summary can be expired
    copied = _reconcile_ledger(spark, state, replicas) if table_exists(spark, state.ledger) else {}
    for table in [*replicas, *histories, *refined, *own]:
        entry = TableMaintenance(table, ledger_entries_copied=copied.get(table, 0))
        begun = time.monotonic()
        try:
            if table == state.tombstones:
                entry.tombstones_expired = _expire_tombstones(spark, table, moment, options)
            _maintain_table(spark, config, table, options, moment, consumed, entry)
        except LeaseLostError:
            raise  # the run's execution lost the pipeline lease: nothing more is committed (lakehouse.io.fence)
        except Exception as error:  # one table's failure is reported; the others go on
            log.exception("%s: maintenance failed", table)
            entry.error = f"{type(error).__name__}: {error}"[:2000]
        entry.seconds = round(time.monotonic() - begun, 3)
        report.tables.append(entry)
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _tables(spark: SparkSession, config: LakeConfig, database: str) -> list[str]:
    if not spark.catalog.databaseExists(f"{config.catalog_name}.{database}"):
        return []
    rows = spark.sql(f"SHOW TABLES IN {config.catalog_name}.{database}").collect()
    # The jobs' own tables are [a-z0-9_] (names.table_name); a table someone else created may be named
    # otherwise, and is then quoted wherever its name goes into SQL.
    return sorted(
        config.table(database, name if _PLAIN.fullmatch(name) else quote(name))
        for name in (row["tableName"] for row in rows)
    )


def _consumed_snapshots(spark: SparkSession, refined: Sequence[str]) -> set[int]:
    """Snapshot ids (unique across tables) the refine job needs: those the refined tables' newest refine
    commits consumed, and those commits themselves (a compaction on top of one carries no refine state)."""
    needed = {snapshot for table in refined for snapshot in (consumed_snapshots(spark, table) or {}).values()}
    for table in refined:
        newest = spark.sql(
            f"SELECT snapshot_id FROM {table}.snapshots "
            f"WHERE exists(map_keys(summary), k -> startswith(k, {sql_string(CONSUMED_PREFIX)})) "
            "ORDER BY committed_at DESC LIMIT 1"
        ).first()
        if newest is not None:
            needed.add(int(newest["snapshot_id"]))
    return needed


def _consistent_point_snapshots(spark: SparkSession, config: LakeConfig) -> set[int]:
    """The snapshots of the newest consistent point (lakehouse.audit.consistent), which readers time-travel to."""
    point = last_point(spark, config)
    return set(point.snapshots.values()) if point is not None else set()


def _reconcile_ledger(spark: SparkSession, state: StateTables, replicas: Sequence[str]) -> dict[str, int]:
    """Copy every applied-file name of every replica's snapshot summaries that the ledger lacks, and drop
    ledger rows of rolled-back commits. Returns how many names were copied, per table."""
    ledger = spark.table(state.ledger).select("source_table", "file_name", "snapshot_id").collect()
    recorded = {(r["source_table"], r["file_name"], r["snapshot_id"]) for r in ledger}
    entries: list[LedgerEntry] = []
    forget: list[tuple[str, RecordedFile]] = []
    copied: dict[str, int] = {}
    for table in replicas:
        rows = spark.sql(
            f"SELECT snapshot_id, parent_id, summary[{sql_string(REPLACED_SNAPSHOT)}] AS replaced, "
            f"summary[{sql_string(APPLIED_FILES)}] AS applied, summary[{sql_string(RUN_ID)}] AS run_id "
            f"FROM {table}.snapshots"
        ).collect()
        if not rows:
            continue
        parents = {
            r["snapshot_id"]: r["parent_id"] or (int(r["replaced"]) if r["replaced"] else None) for r in rows
        }
        ancestors = lineage(current_snapshot_id(spark, table), parents)
        source = _source_table(spark, table)
        for row in rows:
            if not row["applied"]:
                continue
            if row["snapshot_id"] not in ancestors:
                for name in json.loads(row["applied"]):
                    forget.append((source, RecordedFile(name, row["snapshot_id"])))
                continue
            for name in json.loads(row["applied"]):
                if (source, name, row["snapshot_id"]) not in recorded:
                    entries.append(
                        LedgerEntry(source, name, None, row["run_id"] or "maintenance", row["snapshot_id"])
                    )
                    copied[table] = copied.get(table, 0) + 1
    forget = [(t, f) for t, f in forget if (t, f.file_name, f.snapshot_id) in recorded]
    state.record(entries, forget)
    return copied


def _source_table(spark: SparkSession, table: str) -> str:
    """The `schema.table` a replica holds (its `dms.source-table` property; older tables: the comment)."""
    properties = table_properties(spark, table)
    if SOURCE_TABLE in properties:
        return properties[SOURCE_TABLE]  # exactly: a name may begin or end with spaces
    named = properties.get("comment", "").removeprefix("DMS replica of ")
    return named or table.rsplit(".", 1)[-1]


def _expire_tombstones(spark: SparkSession, table: str, moment: datetime, options: MaintenanceOptions) -> int:
    cutoff = moment - timedelta(days=options.tombstone_retention_days)
    before = spark.table(table).count()
    check_before_commit()
    spark.sql(f"DELETE FROM {table} WHERE recorded_at < TIMESTAMP '{cutoff:%Y-%m-%d %H:%M:%S}'")
    return before - spark.table(table).count()


def _live_files(spark: SparkSession, table: str) -> tuple[int, int]:
    row = one_row(
        spark.sql(
            f"SELECT count_if(content = 0) AS data, count_if(content <> 0) AS deletes FROM {table}.files"
        )
    )
    return int(row["data"] or 0), int(row["deletes"] or 0)


def _snapshots(spark: SparkSession, table: str) -> int:
    return int(one_row(spark.sql(f"SELECT count(*) AS n FROM {table}.snapshots"))["n"])


def _maintain_table(
    spark: SparkSession,
    config: LakeConfig,
    table: str,
    options: MaintenanceOptions,
    moment: datetime,
    consumed: set[int],
    entry: TableMaintenance,
) -> None:
    catalog, name = config.catalog_name, sql_string(table.split(".", 1)[1])
    entry.data_files_before, entry.delete_files_before = _live_files(spark, table)
    entry.snapshots_before = _snapshots(spark, table)
    if current_snapshot_id(spark, table) is None:
        return
    # A table's own target file size (the schema file's target_file_size_mb) wins over the pass's.
    target = table_properties(spark, table).get(TARGET_FILE_SIZE) or options.target_file_size_mb * 1024 * 1024
    rewrite_options = {
        "min-input-files": options.min_input_files,
        "delete-file-threshold": options.delete_file_threshold,
        "target-file-size-bytes": target,
        "partial-progress.enabled": "true",
    }
    check_before_commit()
    rewritten = one_row(
        spark.sql(
            f"CALL {catalog}.system.rewrite_data_files(table => {name}, options => map("
            + ", ".join(f"{sql_string(k)}, {sql_string(str(v))}" for k, v in rewrite_options.items())
            + "))"
        )
    )
    entry.rewritten_data_files = int(rewritten["rewritten_data_files_count"])
    check_before_commit()
    removed = one_row(
        spark.sql(
            f"CALL {catalog}.system.rewrite_position_delete_files(table => {name}, "
            "options => map('rewrite-all', 'true'))"
        )
    )
    entry.removed_delete_files = int(removed["rewritten_delete_files_count"])
    check_before_commit()
    spark.sql(f"CALL {catalog}.system.rewrite_manifests(table => {name})")
    cutoff = moment - timedelta(hours=options.snapshot_retention_hours)
    if consumed:
        # never expire a snapshot a refined table consumed last (nor anything after it)
        ids = ", ".join(str(int(i)) for i in consumed)
        oldest = one_row(
            spark.sql(f"SELECT min(committed_at) AS t FROM {table}.snapshots WHERE snapshot_id IN ({ids})")
        )["t"]
        if oldest is not None:
            cutoff = min(cutoff, oldest)
    held = _snapshots(spark, table)
    check_before_commit()
    spark.sql(
        f"CALL {catalog}.system.expire_snapshots(table => {name}, "
        f"older_than => TIMESTAMP '{cutoff:%Y-%m-%d %H:%M:%S.%f}', retain_last => {int(options.retain_last)})"
    ).collect()
    entry.expired_snapshots = held - _snapshots(spark, table)
    if options.remove_orphans:
        older = moment - timedelta(hours=options.orphan_file_age_hours)
        check_before_commit()
        orphans = spark.sql(
            f"CALL {catalog}.system.remove_orphan_files(table => {name}, "
            f"older_than => TIMESTAMP '{older:%Y-%m-%d %H:%M:%S}')"
        ).collect()
        entry.orphan_files_removed = len(orphans)
    entry.data_files_after, entry.delete_files_after = _live_files(spark, table)
    entry.snapshots_after = _snapshots(spark, table)

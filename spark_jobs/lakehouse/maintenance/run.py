"""Table maintenance between CDC runs, sized to what changed: compaction of the files that need it, delete-file
merging, manifest rewrite, snapshot expiry, orphan-file removal, tombstone expiry, without losing what
exactly-once needs.

Every CDC batch commits a merge-on-read snapshot with new position-delete files; left alone, reads slow down
and metadata grows without bound. A pass first reads every table's metadata (lakehouse.maintenance.inspect: no
Spark job) and decides what is due (lakehouse.maintenance.due); a table with nothing due is left alone. Then,
per clean, history, refined table and each of the pipeline's own records, only what is due:

1. Tombstones recorded longer ago than their retention are deleted (the retention must exceed the longest
   delivery delay of a CDC file: docs/CONTRACTS.md).
2. `rewrite_data_files` of the data files whose deleted share or delete-file count passes its threshold and of
   groups of small files, within the pass's byte budget (the slice; the rest is due again next pass), then
   `rewrite_position_delete_files` (merges a file's delete files, drops those left dangling).
3. `rewrite_manifests` above a count.
4. On the slower expiry cadence: the ledger learns first every applied-file name the snapshots about to expire
   hold, and forgets its rows of rolled-back commits among them (lakehouse.maintenance.ledger_check); then
   `expire_snapshots` older than the retention, keeping at least `retain_last` and every snapshot someone still
   reads and a pending load's rows (lakehouse.maintenance.kept); then `remove_orphan_files` older than the
   orphan age.

It runs between CDC runs (the state machine schedules it); a rewrite that still meets a concurrent commit
gives its group up (partial progress) and a MERGE that meets one re-plans (lakehouse.io.iceberg.merge_changes).
A failure is reported, never fatal to CDC.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import SparkSession

from lakehouse.apply.ledger import StateTables, bucket_tombstones
from lakehouse.base.config import LakeConfig
from lakehouse.base.names import history_database, quote
from lakehouse.io.fence import LeaseLostError
from lakehouse.io.iceberg import table_exists
from lakehouse.maintenance import procedures
from lakehouse.maintenance.due import (
    Slice,
    TableState,
    expiry_cutoff,
    expiry_due,
    manifests_due,
    nothing_due,
    slices,
)
from lakehouse.maintenance.inspect import inspect_table, snapshot_time
from lakehouse.maintenance.kept import kept_snapshots, pending_snapshots
from lakehouse.maintenance.ledger_check import reconcile_before_expiry
from lakehouse.maintenance.options import MaintenanceOptions

__all__ = ["MaintenanceOptions", "MaintenanceReport", "TableMaintenance", "maintain"]

log = logging.getLogger(__name__)
_PLAIN = re.compile(r"[a-z0-9_]+")
DEFAULTS = MaintenanceOptions()


@dataclass
class TableMaintenance:
    table: str
    nothing_due: bool = False  # left alone: no Spark job
    data_files_before: int = 0
    delete_files_before: int = 0
    snapshots_before: int = 0
    data_files_after: int = 0
    delete_files_after: int = 0
    snapshots_after: int = 0
    due_bytes: int = 0  # bytes of the data files found due
    rewritten_bytes: int = 0
    deferred_bytes: int = 0  # due, beyond this pass's budget: the next pass's
    rewritten_data_files: int = 0
    lost_data_files: int = 0  # due, not rewritten: their group's commit lost to a concurrent one (or failed)
    removed_delete_files: int = 0
    manifests_rewritten: bool = False
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
    spark_jobs: int = 0  # Spark jobs the pass started (a table with nothing due starts none)

    @property
    def failed(self) -> list[TableMaintenance]:
        return [t for t in self.tables if t.error]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Pass:
    spark: SparkSession
    config: LakeConfig
    options: MaintenanceOptions
    moment: datetime
    state: StateTables
    replicas: frozenset[str]
    ledger_exists: bool


def maintain(
    spark: SparkSession,
    config: LakeConfig,
    options: MaintenanceOptions = DEFAULTS,
    run_id: str = "maintenance",
    now: datetime | None = None,
) -> MaintenanceReport:
    """One maintenance pass over every table of the clean, histories', refined and records' namespaces."""
    options.check()
    started, jobs_before = time.monotonic(), _jobs_started(spark)
    moment = now or datetime.now(UTC).replace(tzinfo=None)
    report = MaintenanceReport(run_id)
    replicas = _tables(spark, config, config.clean_database)
    refined = _tables(spark, config, config.refined_database)
    histories = _tables(spark, config, history_database(config.clean_database))  # lakehouse.apply.history
    own = _tables(spark, config, config.records_database)  # the pipeline's records: never a replica
    state = StateTables(spark, config)
    tombstone_cutoff = moment - timedelta(days=options.tombstone_retention_days)
    entries: dict[str, TableMaintenance] = {}
    states: dict[str, TableState] = {}
    for table in [*replicas, *histories, *refined, *own]:
        entries[table] = TableMaintenance(table)
        with _reported(entries[table]):
            if table == state.tombstones:
                bucket_tombstones(spark, table)  # an older release's: its files are then of an old spec
            states[table] = inspect_table(
                spark, table, options, tombstone_cutoff if table == state.tombstones else None
            )
    cutoffs = _expiry_cutoffs(spark, config, refined, states, options, moment)
    shares = slices(list(states.values()), options.rewrite_bytes_per_pass)
    run = _Pass(spark, config, options, moment, state, frozenset(replicas), table_exists(spark, state.ledger))
    for table, entry in entries.items():
        if table in states:
            with _reported(entry):
                _maintain_table(run, states[table], shares.get(table), cutoffs.get(table), entry)
        report.tables.append(entry)
    report.seconds = round(time.monotonic() - started, 3)
    report.spark_jobs = _jobs_started(spark) - jobs_before
    return report


class _reported:
    """Times a table's part of the pass; one table's failure is reported and the others go on, but a lost
    lease stops the pass (nothing more is committed: lakehouse.io.fence)."""

    def __init__(self, entry: TableMaintenance) -> None:
        self.entry = entry

    def __enter__(self) -> None:
        self.begun = time.monotonic()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _: Any) -> bool:
        self.entry.seconds = round(self.entry.seconds + time.monotonic() - self.begun, 3)
        if error is None or isinstance(error, LeaseLostError) or not isinstance(error, Exception):
            return False
        log.error("%s: maintenance failed", self.entry.table, exc_info=error)
        self.entry.error = f"{type(error).__name__}: {error}"[:2000]
        return True


def _expiry_cutoffs(
    spark: SparkSession,
    config: LakeConfig,
    refined: list[str],
    states: dict[str, TableState],
    options: MaintenanceOptions,
    moment: datetime,
) -> dict[str, datetime]:
    """The expiry cutoff of each table whose expiry is due. Which snapshots someone still reads is looked up
    only when some table may be due (a Spark job or two)."""
    plain = expiry_cutoff(moment, options, None)
    candidates = [t for t, s in states.items() if expiry_due(s, options, plain)]
    if not candidates:
        return {}
    kept = kept_snapshots(spark, config, refined) | pending_snapshots(spark, candidates)
    cutoffs = {}
    for table in candidates:
        cutoff = expiry_cutoff(moment, options, snapshot_time(spark, table, kept) if kept else None)
        if expiry_due(states[table], options, cutoff):
            cutoffs[table] = cutoff
    return cutoffs


def _maintain_table(
    run: _Pass, state: TableState, share: Slice | None, cutoff: datetime | None, entry: TableMaintenance
) -> None:
    spark, options, catalog, table = run.spark, run.options, run.config.catalog_name, state.table
    entry.data_files_before, entry.delete_files_before = state.data_files, state.delete_files
    entry.snapshots_before = entry.snapshots_after = state.snapshots
    entry.data_files_after, entry.delete_files_after = state.data_files, state.delete_files
    entry.due_bytes = state.due_bytes
    if state.snapshot_id is None or nothing_due(state, options, cutoff is not None):
        entry.nothing_due = True
        return
    if state.tombstones_due:
        tombstone_cutoff = run.moment - timedelta(days=options.tombstone_retention_days)
        entry.tombstones_expired = procedures.expire_tombstones(spark, table, tombstone_cutoff)
    if share is not None:
        done = procedures.rewrite_data_files(spark, catalog, table, state, share, options)
        entry.rewritten_data_files, entry.rewritten_bytes = done.files, done.bytes
        entry.lost_data_files = done.lost_files
    entry.deferred_bytes = max(0, state.due_bytes - (share.bytes if share is not None else 0))
    if entry.rewritten_data_files or state.mergeable_deletes:
        entry.removed_delete_files = procedures.rewrite_delete_files(
            spark, catalog, table, bool(entry.rewritten_data_files), options
        )
    if manifests_due(state, options):
        procedures.rewrite_manifests(spark, catalog, table)
        entry.manifests_rewritten = True
    if cutoff is not None:
        if table in run.replicas and run.ledger_exists:
            # the ledger learns every applied file a summary holds before the summary can be expired
            entry.ledger_entries_copied = reconcile_before_expiry(spark, run.state, table, cutoff)
        held = procedures.totals(spark, table).snapshots
        procedures.expire_snapshots(spark, catalog, table, cutoff, options)
        entry.expired_snapshots = held - procedures.totals(spark, table).snapshots
        if options.remove_orphans:
            entry.orphan_files_removed = procedures.remove_orphan_files(
                spark, catalog, table, run.moment, options
            )
    after = procedures.totals(spark, table)
    entry.data_files_after, entry.delete_files_after, entry.snapshots_after = (
        after.data_files,
        after.delete_files,
        after.snapshots,
    )


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


def _jobs_started(spark: SparkSession) -> int:
    """The id the next Spark job will get: the jobs the application started so far (Iceberg's own included)."""
    return int(spark.sparkContext._jsc.sc().dagScheduler().nextJobId())

"""A clean table rolled back to an earlier snapshot of its lineage, and the DMS files to re-drive after it
(docs/CONTRACTS.md, "What each recovery command guarantees"; `lakectl rollback`).

The rollback is sure before it changes anything, and refuses (no commit, the reason in the report) when:

- the target is not an ancestor of the current snapshot (or the table has no such snapshot);
- a commit after the target is a (re)load (its summary names the snapshot it replaced, or the load's files):
  a load replaced the whole table, its rows can't be re-driven as files; reload the table instead
  (`lakectl reload`);
- a commit after the target changed rows without naming the DMS files it applied (not a CDC commit: a
  compaction, which keeps the rows, is no such commit);
- a commit after the target applied a quarantined file again (`<name>#reapplied:<run>`): re-driving the file
  would not redo that attempt;
- a file a rolled-back commit applied can't be re-driven safely: its URI is unknown (the ledger row was made
  from a commit's summary), its name has no time, or it was written at or before the re-send horizon
  (lake_contracts.resend_horizon: its later deletes' tombstones may be gone, and re-sent it could bring
  deleted rows back).

Otherwise the target becomes the current snapshot, as Iceberg's `rollback_to_snapshot` makes it, fenced by
the lease, and only if the current snapshot is still the one planned on (a commit made meanwhile refuses
the rollback instead of being undone unnamed). What the other records do then:

- the ledger rows of the rolled-back snapshots name snapshots the table holds but no longer descends from:
  the next CDC run that meets one of their files forgets them and applies the file again (maintenance drops
  them before it expires those snapshots), so each re-driven file applies exactly once, by its change
  sequences;
- the tombstones of the rolled-back deletes stay: a re-driven change older than a delete is ignored, as it
  was the first time, and the delete applies again;
- a row history keeps the rolled-back commits' versions: a version is identified by (key, change sequence),
  so the re-driven files write none twice;
- the refine job finds that the snapshot it consumed is no longer an ancestor and rebuilds the refined
  tables in full.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lake_contracts.dms_files import NotADmsFileError, parse_dms_key
from lake_contracts.resend_horizon import beyond_retention, resend_horizon
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.apply.quarantine import REAPPLIED_MARK
from lakehouse.base.config import LakeConfig
from lakehouse.base.schema import SchemaFile
from lakehouse.io.fence import check_before_commit
from lakehouse.io.iceberg import (
    APPLIED_FILES,
    FULL_LOAD_DONE,
    REPLACED_SNAPSHOT,
    iceberg_table,
    load_table,
)
from lakehouse.io.jvm import java_class, java_dict

log = logging.getLogger("lakehouse")

MAIN_BRANCH = "main"
REWRITE = "replace"  # Iceberg's operation of a compaction: the same rows in other files
_MOVED = (
    "{} moved on from snapshot {} while the rollback was being planned (a commit raced it): nothing was "
    "rolled back; run the rollback again"
)


@dataclass
class RollbackReport:
    table: str  # schema.table, as DMS spells it
    clean_table: str | None = None
    dry_run: bool = False
    current_snapshot_id: int | None = None
    target_snapshot_id: int | None = None
    rolled_back_snapshot_ids: list[int] = field(default_factory=list)  # newest first
    files_to_redrive: list[str] = field(default_factory=list)  # URIs, in the order they were applied
    resend_horizon: str | None = None
    rolled_back: bool = False  # committed (never on a dry run or a refusal)
    refused: str | None = None
    note: str | None = None

    @property
    def ok(self) -> bool:
        return self.refused is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"ok": self.ok}


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: int
    parent_id: int | None
    committed_at: datetime  # UTC, naive
    operation: str  # Iceberg's: append, overwrite, delete, replace (a rewrite: the same rows)
    summary: dict[str, str]


class RollbackRefused(Exception):
    """Why the rollback must not happen."""


def rollback_table(
    spark: SparkSession,
    config: LakeConfig,
    schema: SchemaFile,
    table: str,
    snapshot_id: int | None = None,
    before: datetime | None = None,
    retention_days: float = 35.0,
    dry_run: bool = False,
    now: datetime | None = None,
) -> RollbackReport:
    """Roll the clean table of `table` (schema.table) back to `snapshot_id`, or to the last snapshot of its
    lineage committed at or before `before` (UTC); `retention_days`: the deployment's TombstoneRetentionDays."""
    if (snapshot_id is None) == (before is None):
        raise ValueError("give the snapshot id or the time to roll back to, not both, not neither")
    report = RollbackReport(table, dry_run=dry_run)
    moment = now or datetime.now(UTC)
    report.resend_horizon = resend_horizon(moment, retention_days).isoformat()
    try:
        _plan(spark, config, schema, report, snapshot_id, before, retention_days, moment)
    except RollbackRefused as why:
        report.refused = str(why)
        return report
    if report.note or dry_run:
        return report
    try:
        _commit_rollback(spark, report)
    except RollbackRefused as why:
        report.refused = str(why)
        return report
    report.rolled_back = True
    log.info(
        "%s rolled back to %s (undone: %s); re-drive %s",
        report.clean_table,
        report.target_snapshot_id,
        report.rolled_back_snapshot_ids,
        report.files_to_redrive,
    )
    return report


def _commit_rollback(spark: SparkSession, report: RollbackReport) -> None:
    """Make the target the table's current snapshot, only if the current one is still the one planned on:
    a compare-and-swap of the table's metadata (Iceberg's `rollback_to_snapshot` would apply to whatever is
    current then, silently undoing a commit made since, whose files this report does not name)."""
    assert report.clean_table is not None and report.target_snapshot_id is not None
    java_table = iceberg_table(spark, report.clean_table)
    operations = java_table.operations()
    base = operations.current()
    current = base.currentSnapshot()
    if current is None or int(current.snapshotId()) != report.current_snapshot_id:
        raise RollbackRefused(_MOVED.format(report.clean_table, report.current_snapshot_id))
    metadata = java_class(spark, "org.apache.iceberg.TableMetadata")
    rolled = metadata.buildFrom(base).setBranchSnapshot(report.target_snapshot_id, MAIN_BRANCH).build()
    check_before_commit()
    try:
        operations.commit(base, rolled)
    except Py4JJavaError as error:
        if "CommitFailedException" not in str(error):
            raise
        raise RollbackRefused(_MOVED.format(report.clean_table, report.current_snapshot_id)) from None
    spark.catalog.refreshTable(report.clean_table)


def _plan(
    spark: SparkSession,
    config: LakeConfig,
    schema: SchemaFile,
    report: RollbackReport,
    snapshot_id: int | None,
    before: datetime | None,
    retention_days: float,
    now: datetime,
) -> None:
    """Fill the report with the target, the commits after it and their files; raise RollbackRefused."""
    source_schema, _, name = report.table.partition(".")
    spec = schema.find(source_schema, name) if name else None
    if spec is None:
        raise RollbackRefused(f"the schema file has no table {report.table!r} (name it <schema>.<table>)")
    report.table = spec.qualified_name
    report.clean_table = config.clean_table(spec.iceberg_name)
    java_table = load_table(spark, report.clean_table)
    if java_table is None or java_table.currentSnapshot() is None:
        raise RollbackRefused(f"{report.clean_table} does not exist or holds no snapshot")
    lineage = _lineage(java_table)  # newest first, the current snapshot first
    report.current_snapshot_id = lineage[0].snapshot_id
    target = _target(lineage, snapshot_id, before)
    report.target_snapshot_id = target
    if target == report.current_snapshot_id:
        report.note = f"{target} is the current snapshot: nothing to roll back"
        return
    undone = lineage[: [s.snapshot_id for s in lineage].index(target)]
    report.rolled_back_snapshot_ids = [s.snapshot_id for s in undone]
    for snapshot in undone:
        if snapshot.summary.get(REPLACED_SNAPSHOT) or FULL_LOAD_DONE in snapshot.summary:
            replaced = snapshot.summary.get(REPLACED_SNAPSHOT)
            raise RollbackRefused(
                f"snapshot {snapshot.snapshot_id} (committed {snapshot.committed_at}) is a "
                + (
                    f"reload of the table (it replaced snapshot {replaced})"
                    if replaced
                    else "load of the table"
                )
                + f": a load can't be re-driven as files; reload the table instead (`lakectl reload {report.table}`)"
            )
        if snapshot.operation != REWRITE and APPLIED_FILES not in snapshot.summary:
            raise RollbackRefused(
                f"snapshot {snapshot.snapshot_id} (committed {snapshot.committed_at}, {snapshot.operation}) changed "
                "the table's rows without naming the DMS files it applied (not a CDC commit): what it did can't "
                "be re-driven; roll back to a snapshot after it, or reload the table"
            )
    names = _applied_names(undone)
    reapplied = sorted(n for n in names if REAPPLIED_MARK in n)
    if reapplied:
        raise RollbackRefused(
            f"a rolled-back commit re-applied a quarantined file ({reapplied[0]}): re-driving the file would "
            "not redo that re-application; roll back to a snapshot after it"
        )
    uris = _ledger_uris(spark, config, spec.qualified_name, report.rolled_back_snapshot_ids)
    for file_name in names:
        uri = uris.get(file_name)
        if uri is None:
            raise RollbackRefused(
                f"the ledger does not know where {file_name} (applied by a rolled-back commit) is: "
                "it can't be re-driven; reload the table instead"
            )
        _require_within_horizon(uri, now, retention_days)
    report.files_to_redrive = [uris[n] for n in names]


def _lineage(java_table: Any) -> list[Snapshot]:
    """The current snapshot and its ancestors, newest first. A (re)load commits without a parent and names
    the snapshot it replaced: the walk goes on there, so that a target before a reload is found (and refused
    as a reload, not as a stranger)."""
    found: list[Snapshot] = []
    seen: set[int] = set()
    snapshot = java_table.currentSnapshot()
    while snapshot is not None and int(snapshot.snapshotId()) not in seen:
        summary = java_dict(snapshot.summary())
        parent = snapshot.parentId()
        seen.add(int(snapshot.snapshotId()))
        found.append(
            Snapshot(
                int(snapshot.snapshotId()),
                int(parent) if parent is not None else None,
                datetime(1970, 1, 1) + timedelta(milliseconds=int(snapshot.timestampMillis())),
                str(snapshot.operation()),
                summary,
            )
        )
        previous = int(parent) if parent is not None else _as_id(summary.get(REPLACED_SNAPSHOT))
        snapshot = java_table.snapshot(previous) if previous is not None else None
    return found


def _as_id(text: str | None) -> int | None:
    return int(text) if text else None


def _target(lineage: list[Snapshot], snapshot_id: int | None, before: datetime | None) -> int:
    if snapshot_id is not None:
        if snapshot_id not in {s.snapshot_id for s in lineage}:
            raise RollbackRefused(
                f"snapshot {snapshot_id} is not an ancestor of the current snapshot {lineage[0].snapshot_id} "
                "(unknown, expired, rolled back already, or before a reload): nothing to roll back to"
            )
        return snapshot_id
    assert before is not None
    moment = before.astimezone(UTC).replace(tzinfo=None) if before.tzinfo else before
    for snapshot in lineage:
        if snapshot.committed_at <= moment:
            return snapshot.snapshot_id
    raise RollbackRefused(
        f"no snapshot of the table's lineage was committed at or before {moment.isoformat()} "
        f"(the oldest held: {lineage[-1].committed_at.isoformat()})"
    )


def _applied_names(undone: list[Snapshot]) -> list[str]:
    """The files the commits applied, oldest commit first."""
    names: dict[str, None] = {}  # ordered, each name once
    for snapshot in reversed(undone):
        text = snapshot.summary.get(APPLIED_FILES)
        names |= dict.fromkeys(json.loads(text) if text else [])
    return list(names)


def _ledger_uris(
    spark: SparkSession, config: LakeConfig, source_table: str, snapshots: list[int]
) -> dict[str, str]:
    """File name → URI, from the ledger rows of the `snapshots`."""
    if not spark.catalog.tableExists(config.ledger):
        return {}
    rows = (
        spark.table(config.ledger)
        .where((F.col("source_table") == F.lit(source_table)) & F.col("snapshot_id").isin(snapshots))
        .where(F.col("file_uri").isNotNull())
        .select("file_name", "file_uri")
        .collect()
    )
    return {row["file_name"]: row["file_uri"] for row in rows}


def _require_within_horizon(uri: str, now: datetime, retention_days: float) -> None:
    try:
        written = parse_dms_key(uri).written_at
    except NotADmsFileError as error:
        raise RollbackRefused(f"{uri} is not a DMS file ({error}): it can't be re-driven") from None
    if written is None:
        raise RollbackRefused(
            f"{uri}: its name carries no time, so its age against the tombstones is unknown"
        )
    if beyond_retention(written, now, retention_days):
        raise RollbackRefused(
            f"{uri} was written {written}, at or before the re-send horizon {resend_horizon(now, retention_days)} "
            f"(TombstoneRetentionDays {retention_days:g}): re-driven, it could bring rows deleted since back; "
            "reload the table instead (`lakectl reload`)"
        )

"""Watch a local pipeline run: DMS progress, raw files, what the clean zone applied, and the lag.

Read without Spark: DMS through its API, the raw zone by listing the bucket, the clean zone from the
Iceberg metadata files of the local warehouse (hadoop catalog: `<warehouse>/<db>/<table>/metadata/`),
whose snapshot summaries name the CDC files each commit applied (a file's name is its UTC time) and
carry row totals.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from localaws import replication

APPLIED_FILES = "dms.applied-files"
FULL_LOAD_DONE = "dms.full-load.files"
LOAD_DONE_PROPERTY = "dms.full-load.done"


@dataclass(frozen=True)
class CleanTableState:
    """What the newest Iceberg metadata of one clean table says."""

    name: str
    snapshots: int
    live_rows: int
    full_load_done: bool
    applied_files: frozenset[str] = frozenset()

    @property
    def newest_applied_file(self) -> str | None:
        return max(self.applied_files, default=None)


def read_clean_table(table_dir: Path) -> CleanTableState | None:
    """The state of one hadoop-catalog table folder, or None if it has no committed metadata yet."""
    metadata_dir = table_dir / "metadata"
    try:
        version = int((metadata_dir / "version-hint.text").read_text().strip())
        metadata = json.loads((metadata_dir / f"v{version}.metadata.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    snapshots = metadata.get("snapshots") or []
    summaries = [s.get("summary", {}) for s in snapshots]
    current = next((s for s in snapshots if s["snapshot-id"] == metadata.get("current-snapshot-id")), None)
    totals = (current or {}).get("summary", {})
    applied = frozenset(
        name for s in summaries if APPLIED_FILES in s for name in json.loads(s[APPLIED_FILES])
    )
    return CleanTableState(
        name=table_dir.name,
        snapshots=len(snapshots),
        live_rows=int(totals.get("total-records", 0)) - int(totals.get("total-position-deletes", 0)),
        full_load_done=LOAD_DONE_PROPERTY in (metadata.get("properties") or {})
        or any(FULL_LOAD_DONE in s for s in summaries),
        applied_files=applied,
    )


def read_clean_zone(warehouse: Path, database: str) -> dict[str, CleanTableState]:
    """Every table of `database` in the local warehouse, by Iceberg table name."""
    folder = warehouse / database
    if not folder.is_dir():
        return {}
    # the pipeline's own records live in a namespace of their own (lakehouse.base.names.records_database)
    states = (read_clean_table(d) for d in sorted(folder.iterdir()) if d.is_dir())
    return {s.name: s for s in states if s is not None}


@dataclass
class RawZone:
    """The DMS files in the raw bucket: counts and each table's CDC file names."""

    load_files: int = 0
    cdc_files: int = 0
    bytes: int = 0
    cdc_file_names: dict[str, set[str]] = field(default_factory=dict)  # "<schema>_<table>" → file names

    @property
    def newest_cdc_file(self) -> dict[str, str]:
        return {table: max(names) for table, names in self.cdc_file_names.items() if names}


def list_raw_zone(s3: Any, bucket: str, prefix: str = "dms/") -> RawZone:
    zone = RawZone()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            parts = item["Key"].split("/")
            if len(parts) < 3:
                continue
            schema, table, name = parts[-3], parts[-2], parts[-1]
            zone.bytes += item["Size"]
            if name.upper().startswith("LOAD"):
                zone.load_files += 1
                continue
            zone.cdc_files += 1
            zone.cdc_file_names.setdefault(f"{schema}_{table}".lower(), set()).add(name)
    return zone


def cdc_file_time(name: str) -> datetime | None:
    """The UTC time in a DMS CDC file name (`YYYYMMDD-HHMMSSmmm.csv`)."""
    try:
        return datetime.strptime(name.split(".")[0], "%Y%m%d-%H%M%S%f").replace(tzinfo=UTC)
    except ValueError:
        return None


def pending_tables(
    raw: RawZone, clean: dict[str, CleanTableState], ignore_files: frozenset[str] = frozenset()
) -> list[str]:
    """Tables with a CDC file in the raw zone that no commit of theirs has applied yet."""
    pending = []
    for table, names in sorted(raw.cdc_file_names.items()):
        state = clean.get(table)
        applied = state.applied_files if state else frozenset()
        if names - ignore_files - applied:
            pending.append(table)
    return pending


@dataclass(frozen=True)
class ProgressSnapshot:
    """One line of progress."""

    elapsed_seconds: float
    dms_status: str
    full_load_percent: int
    source_changes: int
    raw: RawZone
    clean: dict[str, CleanTableState]
    pending: list[str]
    execution_status: str
    executions: int

    @property
    def applied_through(self) -> datetime | None:
        times = [cdc_file_time(s.newest_applied_file) for s in self.clean.values() if s.newest_applied_file]
        return max((t for t in times if t), default=None)

    def lag_seconds(self, now: datetime | None = None) -> float | None:
        """How old the newest applied change is (0 when no table has files waiting)."""
        if not self.pending:
            return 0.0
        newest = self.applied_through
        if newest is None:
            return None
        return max(0.0, ((now or datetime.now(UTC)) - newest).total_seconds())

    def line(self) -> str:
        lag = self.lag_seconds()
        loaded = sum(1 for s in self.clean.values() if s.full_load_done)
        rows = sum(s.live_rows for s in self.clean.values())
        return (
            f"[{self.elapsed_seconds:6.0f}s] DMS {self.dms_status} {self.full_load_percent:3d}% "
            f"{self.source_changes:6d} changes | raw {self.raw.load_files} load + {self.raw.cdc_files} cdc files | "
            f"clean {loaded} loaded, {rows} rows, "
            f"{sum(max(0, s.snapshots - 1) for s in self.clean.values())} commits | "
            f"waiting {len(self.pending)} tables | lag {'-' if lag is None else f'{lag:.0f}s'} | "
            f"execution {self.execution_status}" + (f" (#{self.executions})" if self.executions > 1 else "")
        )


@dataclass
class ProgressMonitor:
    """Collects `ProgressSnapshot`s of one run from the AWS APIs and the local warehouse."""

    aws: Any  # service name → boto3 client
    task_arn: str
    raw_bucket: str
    warehouse: Path
    clean_database: str
    state_machine_arn: str | None = None
    raw_prefix: str = "dms/"
    ignore_files: frozenset[str] = frozenset()
    started: float = field(default_factory=time.monotonic)

    def snapshot(self) -> ProgressSnapshot:
        dms = self.aws("dms")
        task = replication.describe_task(dms, self.task_arn)
        stats = replication.table_statistics(dms, self.task_arn) if task["Status"] != "ready" else {}
        changes = sum(s.get("Inserts", 0) + s.get("Updates", 0) + s.get("Deletes", 0) for s in stats.values())
        raw = list_raw_zone(self.aws("s3"), self.raw_bucket, self.raw_prefix)
        clean = read_clean_zone(self.warehouse, self.clean_database)
        status, executions = self.execution_status()
        return ProgressSnapshot(
            elapsed_seconds=time.monotonic() - self.started,
            dms_status=task["Status"],
            full_load_percent=int(task.get("ReplicationTaskStats", {}).get("FullLoadProgressPercent", 0)),
            source_changes=changes,
            raw=raw,
            clean=clean,
            pending=pending_tables(raw, clean, self.ignore_files),
            execution_status=status,
            executions=executions,
        )

    def execution_status(self) -> tuple[str, int]:
        """The newest execution's status and how many executions there were (rollover starts new ones)."""
        if not self.state_machine_arn:
            return "-", 0
        executions = self.aws("stepfunctions").list_executions(stateMachineArn=self.state_machine_arn)[
            "executions"
        ]
        if not executions:
            return "not started", 0
        newest = max(executions, key=lambda e: e["startDate"])
        return newest["status"], len(executions)

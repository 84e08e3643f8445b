"""What a run of the CDC or full-load job reports: per table, and the run as a whole (docs/CONTRACTS.md).
The one model of the document, for the Spark jobs that write it and the acknowledge Lambda that reads it.

Each step of a table's apply returns its own figures (a small frozen dataclass below); the table's report is
composed from them in one place (`table_report`), and the run's report from the tables' (`ApplyRun.finish`).
A reader takes a stored report as `RunSummary.from_document`: it trusts nothing of the document's shape.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class FileFigures:
    """The table's files in the batch, and how many of them it applied before."""

    files: int = 0
    skipped_already_applied: int = 0  # a retry, a replay, a duplicate


@dataclass(frozen=True)
class LayoutFigures:
    """What giving the table the schema file's layout (partitioning, file size) changed."""

    schema_changes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReadFigures:
    """Reading the files: those a later reload made unnecessary, and those quarantined as unreadable."""

    superseded_files: int = 0
    quarantined_files: int = 0


@dataclass(frozen=True)
class BatchFigures:
    """The batch's first pass (lakehouse.apply.typed_batch)."""

    records: int = 0
    quarantined_records: int = 0  # rejected (and, under --type_mismatch quarantine, not fitting)
    ignored_older: int = 0  # older than the table's (re)load
    newest_commit_ts: str | None = None


@dataclass(frozen=True)
class ApplyFigures:
    """What the commit does with the batch."""

    inserted_or_updated: int = 0
    deleted: int = 0
    ignored_older: int = 0  # upserts older than their key's delete (its tombstone)
    quarantined_records: int = 0  # changes a table without a primary key can't apply
    schema_changes: tuple[str, ...] = ()  # columns added or widened


@dataclass(frozen=True)
class CommitFigures:
    """The table's snapshot that holds the run's commit."""

    snapshot_id: int | None = None


RUN_REPORT_VERSION = 1
# The run's totals: each the sum of its tables' figure of the same name.
TOTALS = (
    "files",
    "skipped_already_applied",
    "superseded_files",
    "records",
    "inserted_or_updated",
    "deleted",
    "ignored_older",
    "quarantined_records",
    "quarantined_files",
)

StepFigures = FileFigures | LayoutFigures | ReadFigures | BatchFigures | ApplyFigures | CommitFigures
LATEST = ("newest_commit_ts", "snapshot_id")  # a later step's value replaces an earlier one's


@dataclass
class TableReport:
    table: str
    files: int = 0
    skipped_already_applied: int = 0  # files this table applied before (a retry, a replay, a duplicate)
    superseded_files: int = 0  # CDC files a later reload of the table made unnecessary (and DMS removed)
    records: int = 0
    inserted_or_updated: int = 0
    deleted: int = 0
    ignored_older: int = 0  # changes older than the table's (re)load or than the key's delete
    quarantined_records: int = 0
    quarantined_files: int = 0
    schema_changes: list[str] = field(default_factory=list)
    newest_commit_ts: str | None = None
    snapshot_id: int | None = None
    seconds: float = 0.0
    error: str | None = None


def table_report(
    table: str, steps: Sequence[StepFigures], seconds: float = 0.0, error: str | None = None
) -> TableReport:
    """A table's report from the figures of the steps it completed, in their order: counts add up, schema
    changes follow one another, and the newest commit time and snapshot id are the last step's that has one."""
    report = TableReport(table, seconds=seconds, error=error)
    for step in steps:
        for figure in fields(step):
            value = getattr(step, figure.name)
            if figure.name == "schema_changes":
                report.schema_changes += value
            elif figure.name in LATEST:
                if value is not None:
                    setattr(report, figure.name, value)
            else:
                setattr(report, figure.name, getattr(report, figure.name) + value)
    return report


@dataclass
class RunReport:
    run_id: str
    job: str
    tables: list[TableReport] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)
    quarantine_rows_added: int = 0
    # What the quarantine holds for this run id over all its attempts (a retry skips what the first applied).
    run_quarantined_records: int = 0
    run_quarantined_files: int = 0
    seconds: float = 0.0
    error: str | None = None  # a failure of the run itself (not of one table)
    # After a CDC run: each clean table's freshness and the newest consistent point (lakehouse.audit.freshness).
    freshness: dict[str, Any] | None = None
    # The run's tables whose full load committed its rows and not its facts (lakehouse.apply.pending_load):
    # {"table", "pending_since", "pending_seconds", "rows_changed_since"} each; not loaded until the next full load.
    pending_loads: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> list[TableReport]:
        return [t for t in self.tables if t.error]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.error

    @property
    def newest_commit_ts(self) -> str | None:
        return max((t.newest_commit_ts for t in self.tables if t.newest_commit_ts), default=None)

    def totals(self) -> dict[str, int]:
        return {k: sum(getattr(t, k) for t in self.tables) for k in TOTALS}

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": RUN_REPORT_VERSION,
            **asdict(self),
            "totals": self.totals(),
            "newest_commit_ts": self.newest_commit_ts,
        }


def count_of(document: Mapping[str, Any], name: str) -> int:
    """A figure of a stored report as a count: 0 where it is missing, not a finite number, or a boolean."""
    value = document.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0
    return max(int(value), 0)


@dataclass(frozen=True)
class RunSummary:
    """A stored run report as its reader takes it: whether the run applied its batch, its totals and run-wide
    quarantine counts, its newest commit time, and each clean table's freshness row, each read defensively (a
    figure that is not a count is 0, an entry of the wrong shape is passed over)."""

    error: str | None
    failed_tables: tuple[str, ...]
    totals: dict[str, int]
    run_quarantined_records: int
    run_quarantined_files: int
    newest_commit_ts: str | None
    ignoring_older: dict[str, int]  # table -> changes it skipped as older than its (re)load or delete
    freshness_rows: tuple[dict[str, Any], ...]  # lakehouse.audit.freshness's rows, as written
    pending_load_since: dict[str, str] = field(
        default_factory=dict
    )  # table -> since when its load is pending

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> RunSummary:
        listed = document.get("tables")
        tables = [t for t in listed if isinstance(t, dict)] if isinstance(listed, list) else []
        stored_totals = document.get("totals")
        totals: dict[str, Any] = stored_totals if isinstance(stored_totals, dict) else {}
        stored_freshness = document.get("freshness")
        freshness: dict[str, Any] = stored_freshness if isinstance(stored_freshness, dict) else {}
        stored_rows = freshness.get("tables")
        rows: list[Any] = stored_rows if isinstance(stored_rows, list) else []
        newest = document.get("newest_commit_ts")
        pending = document.get("pending_loads")
        return cls(
            error=str(document["error"]) if document.get("error") else None,
            failed_tables=tuple(sorted(str(t.get("table")) for t in tables if t.get("error"))),
            totals={name: count_of(totals, name) for name in TOTALS},
            run_quarantined_records=count_of(document, "run_quarantined_records"),
            run_quarantined_files=count_of(document, "run_quarantined_files"),
            newest_commit_ts=newest if isinstance(newest, str) and newest else None,
            ignoring_older={
                str(t.get("table")): count_of(t, "ignored_older")
                for t in tables
                if count_of(t, "ignored_older")
            },
            freshness_rows=tuple(r for r in rows if isinstance(r, dict)),
            pending_load_since={
                str(p["table"]): p["pending_since"]
                for p in (pending if isinstance(pending, list) else [])
                if isinstance(p, dict) and p.get("table") and isinstance(p.get("pending_since"), str)
            },
        )

"""What a run of the CDC or full-load job reports: per table, and the run as a whole (docs/CONTRACTS.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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
        keys = (
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
        return {k: sum(getattr(t, k) for t in self.tables) for k in keys}

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "totals": self.totals(), "newest_commit_ts": self.newest_commit_ts}

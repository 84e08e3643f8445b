"""What a table's maintenance pass has to do, decided from its metadata alone (lakehouse.maintenance.inspect
reads it): pure rules, so a table with nothing due costs no Spark job and the rules are tested without one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from lakehouse.maintenance.options import MaintenanceOptions


@dataclass(frozen=True)
class RewriteGroup:
    """A group of data files Iceberg's bin-pack planner would rewrite together, its files in its order."""

    file_bytes: tuple[int, ...]

    @property
    def bytes(self) -> int:
        return sum(self.file_bytes)


@dataclass(frozen=True)
class TableState:
    """A table's current snapshot as its metadata tells it (no data file read)."""

    table: str
    snapshot_id: int | None
    data_files: int = 0
    delete_files: int = 0
    records: int = 0
    position_deletes: int = 0
    files_bytes: int = 0
    manifests: int = 0
    snapshots: int = 0
    oldest_snapshot: datetime | None = None
    rewrite_groups: tuple[RewriteGroup, ...] = ()  # the data files due, as the rewrite would group them
    old_spec_files: bool = False  # files written before a partition-spec change: the rewrite moves them
    mergeable_deletes: bool = False  # a partition has enough delete files to merge them
    tombstones_due: bool = False  # a tombstone file may hold rows older than their retention

    @property
    def due_bytes(self) -> int:
        return sum(group.bytes for group in self.rewrite_groups)

    @property
    def due_files(self) -> int:
        return sum(len(group.file_bytes) for group in self.rewrite_groups)

    @property
    def due_share(self) -> float:
        return self.due_bytes / self.files_bytes if self.files_bytes else 0.0


@dataclass(frozen=True)
class Slice:
    """How much of a table's due rewrite this pass does: `max_files` None is all of it."""

    max_files: int | None
    bytes: int


def slices(states: Sequence[TableState], budget: int) -> dict[str, Slice]:
    """Share the pass's byte budget among the tables with data files due, the most degraded first (the
    largest share of its bytes due). A table gets its first groups that fit in what is left, whole, in the
    order the rewrite takes them (groups are at most the budget: inspect plans them so; the pass's first group
    goes whatever its size); a table the budget does not reach gets nothing this pass and is due again the next."""
    left = budget
    shares: dict[str, Slice] = {}
    for state in sorted(states, key=lambda s: (-s.due_share, s.table)):
        files, taken = _groups_within(state.rewrite_groups, left, at_least_one=left == budget)
        if files:
            shares[state.table] = Slice(None if files == state.due_files else files, taken)
            left -= taken
    return shares


def _groups_within(groups: Sequence[RewriteGroup], budget: int, at_least_one: bool) -> tuple[int, int]:
    """The files and bytes of the first groups within `budget` (Iceberg's `max-files-to-rewrite` takes the
    planned files in order: a count of whole groups takes exactly those groups)."""
    files, taken = 0, 0
    for group in groups:
        if taken + group.bytes > budget and (files or not at_least_one):
            break
        files, taken = files + len(group.file_bytes), taken + group.bytes
    return files, taken


def expiry_cutoff(moment: datetime, options: MaintenanceOptions, oldest_kept: datetime | None) -> datetime:
    """Snapshots committed before this may be expired: the retention, or earlier if a snapshot someone still
    reads (a refine's input, a consistent point's) is older."""
    cutoff = moment - timedelta(hours=options.snapshot_retention_hours)
    return min(cutoff, oldest_kept) if oldest_kept is not None else cutoff


def expiry_due(state: TableState, options: MaintenanceOptions, cutoff: datetime) -> bool:
    """Expiry (and orphan removal with it) runs once the table holds more snapshots than it keeps whatever
    their age and its oldest is `expire_every_hours` past the cutoff: each run then expires snapshots, and
    runs come at most that often, whatever the pass cadence."""
    if state.snapshot_id is None or state.oldest_snapshot is None or state.snapshots <= options.retain_last:
        return False
    return state.oldest_snapshot < cutoff - timedelta(hours=options.expire_every_hours)


def manifests_due(state: TableState, options: MaintenanceOptions) -> bool:
    return state.manifests > options.manifests_above


def nothing_due(state: TableState, options: MaintenanceOptions, expire: bool) -> bool:
    """Whether the pass leaves the table alone (it then costs no Spark job); `expire`: its expiry is due."""
    return not (
        expire
        or state.rewrite_groups
        or state.old_spec_files
        or state.mergeable_deletes
        or state.tombstones_due
        or manifests_due(state, options)
    )

"""What a maintenance pass may do, and why each default (docs/DEPLOY.md, "Table maintenance")."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True)
class MaintenanceOptions:
    """A pass rewrites what is due, never the whole table for its own sake: a data file once enough of its rows
    are deleted (or it carries too many delete files), small files once a group has enough of them, the delete
    files once several can be merged, and no more data than the pass's budget (the rest is due again next
    pass), so a pass is a bounded slice between two CDC runs. Manifests are rewritten above a count. Expiry and
    orphan removal run on their own, slower cadence: once the oldest snapshot a table could expire is
    `expire_every_hours` past the retention. The retentions are not read-cost settings: they are chosen for
    time travel (3 days), for the orphan search never to touch a file a running job is writing, and for a
    tombstone to outlive any delivery delay."""

    target_file_size_mb: int = 128
    min_input_files: int = 5  # a group is compacted once it has this many small files
    # A data file is rewritten once this share of its rows is deleted: the same changes rewrite the same
    # bytes whatever the table's size (Iceberg's delete-ratio-threshold; its own default is 0.3).
    delete_ratio_threshold: float = 0.2
    # ... or once this many delete files point at it. Each batch that touches a file adds one, and a pass
    # merges them into one a file (the delete files' rewrite): a backstop, not the rule that picks files.
    delete_file_threshold: int = 100
    rewrite_mb_per_pass: float = 4096  # data bytes one pass rewrites at most, over all tables: the slice
    manifests_above: int = 100  # a table's manifests are rewritten once its snapshot has more than this
    expire_every_hours: float = 24.0  # expiry (and orphan removal) once this much is expirable
    snapshot_retention_hours: float = 72.0  # time travel reaches this far back
    retain_last: int = 20  # snapshots kept whatever their age
    orphan_file_age_hours: float = 72.0  # files no snapshot references, older than this, are removed
    tombstone_retention_days: float = 35.0  # > queue retention (14 d) + dead-letter queue retention (14 d)
    remove_orphans: bool = True

    @property
    def rewrite_bytes_per_pass(self) -> int:
        return int(self.rewrite_mb_per_pass * MIB)

    def check(self) -> None:
        if self.remove_orphans and self.orphan_file_age_hours < 24:
            raise ValueError(
                "orphan files younger than 24 hours may belong to a write in progress: "
                f"orphan_file_age_hours must be at least 24, not {self.orphan_file_age_hours}"
            )
        if not 0 < self.delete_ratio_threshold <= 1:
            raise ValueError(f"delete_ratio_threshold must be in (0, 1], not {self.delete_ratio_threshold}")
        if self.rewrite_mb_per_pass <= 0:
            raise ValueError(f"rewrite_mb_per_pass must be above 0, not {self.rewrite_mb_per_pass}")

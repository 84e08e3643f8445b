"""A table's state as its Iceberg metadata tells it, read in the driver through the Java API (the current
snapshot's summary, its manifest list, the snapshot log, and the manifests Iceberg's own rewrite planners
read): no Spark job, no data file opened."""

from __future__ import annotations

from calendar import timegm
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession

from lakehouse.io.iceberg import TARGET_FILE_SIZE, iceberg_table
from lakehouse.io.jvm import java_class, java_dict, java_list
from lakehouse.maintenance.due import RewriteGroup, TableState
from lakehouse.maintenance.options import MaintenanceOptions

# The columns of the tombstones table (lakehouse.apply.ledger) that ages its rows.
TOMBSTONE_TIME = "recorded_at"


def target_file_size(java_table: Any, options: MaintenanceOptions) -> int:
    """A table's own target file size (the schema file's target_file_size_mb) wins over the pass's."""
    own = java_table.properties().get(TARGET_FILE_SIZE)
    return int(own) if own else options.target_file_size_mb * 1024 * 1024


# Iceberg's largest file group (RewriteDataFiles.MAX_FILE_GROUP_SIZE_BYTES_DEFAULT).
ICEBERG_MAX_GROUP_BYTES = 100 * 1024**3


def rewrite_options(options: MaintenanceOptions, target_bytes: int, rewrite_all: bool) -> dict[str, str]:
    """The options of Iceberg's data-file rewrite that choose and group the files: the same for its planner
    here and for the procedure, so what was found due is what is rewritten. A group is at most the pass's
    budget, so a slice of whole groups fits it."""
    group_bytes = min(options.rewrite_bytes_per_pass, ICEBERG_MAX_GROUP_BYTES)
    chosen = {
        "max-file-group-size-bytes": str(group_bytes),
        "min-input-files": str(options.min_input_files),
        "delete-file-threshold": str(options.delete_file_threshold),
        "delete-ratio-threshold": str(options.delete_ratio_threshold),
        "target-file-size-bytes": str(target_bytes),
    }
    return chosen | ({"rewrite-all": "true"} if rewrite_all else {})


def inspect_table(
    spark: SparkSession, table: str, options: MaintenanceOptions, tombstones_before: datetime | None = None
) -> TableState:
    """The table's state; `tombstones_before` (the tombstones table only): whether a data file may hold a row
    recorded before that moment (its column bounds say so)."""
    java_table = iceberg_table(spark, table)
    snapshot = java_table.currentSnapshot()
    if snapshot is None:
        return TableState(table, None)
    totals = java_dict(snapshot.summary())
    snapshots = java_table.snapshots()
    count = snapshots.size()
    old_spec = _has_old_spec_files(java_table, snapshot)
    return TableState(
        table,
        int(snapshot.snapshotId()),
        data_files=_total(totals, "total-data-files"),
        delete_files=_total(totals, "total-delete-files"),
        records=_total(totals, "total-records"),
        position_deletes=_total(totals, "total-position-deletes"),
        files_bytes=_total(totals, "total-files-size"),
        manifests=int(snapshot.allManifests(java_table.io()).size()),
        snapshots=count,
        oldest_snapshot=_utc(min(int(snapshots.get(i).timestampMillis()) for i in (0, count - 1))),
        rewrite_groups=_rewrite_groups(spark, java_table, options, old_spec),
        old_spec_files=old_spec,
        mergeable_deletes=_total(totals, "total-delete-files") > 1 and _mergeable(java_table),
        tombstones_due=tombstones_before is not None
        and _may_hold_before(spark, java_table, tombstones_before),
    )


def snapshot_time(spark: SparkSession, table: str, snapshot_ids: set[int]) -> datetime | None:
    """When the oldest of `snapshot_ids` the table holds was committed (ids are unique across tables)."""
    java_table = iceberg_table(spark, table)
    times = [s.timestampMillis() for s in (java_table.snapshot(i) for i in snapshot_ids) if s is not None]
    return _utc(min(times)) if times else None


def _total(summary: dict[str, str], name: str) -> int:
    value = summary.get(name)
    return int(value) if value and value.isdigit() else 0


def _utc(millis: int) -> datetime:
    return datetime.fromtimestamp(millis / 1000, UTC).replace(tzinfo=None)


def _rewrite_groups(
    spark: SparkSession, java_table: Any, options: MaintenanceOptions, rewrite_all: bool
) -> tuple[RewriteGroup, ...]:
    planner = java_class(spark, "org.apache.iceberg.actions.BinPackRewriteFilePlanner")(java_table)
    planner.init(
        _java_map(spark, rewrite_options(options, target_file_size(java_table, options), rewrite_all))
    )
    groups = []
    for group in _each(planner.plan().groups()):
        groups.append(RewriteGroup(tuple(int(task.length()) for task in java_list(group.fileScanTasks()))))
    return tuple(groups)


def _mergeable(java_table: Any) -> bool:
    """Whether a data file has two delete files or more (the delete files' rewrite merges them into one). Read
    from the scan's plan (the manifests, in the driver): the delete planner's own tasks carry no bounds to tell
    which data file a delete file is of. A data file's single delete file is left as it is, or every pass would
    rewrite the same delete files again."""
    tasks = java_table.newScan().planFiles()
    try:
        iterator = tasks.iterator()
        while iterator.hasNext():
            if iterator.next().deletes().size() > 1:
                return True
        return False
    finally:
        tasks.close()


def _has_old_spec_files(java_table: Any, snapshot: Any) -> bool:
    """Whether live data files were written under another partition spec than the table's current one."""
    if java_table.specs().size() <= 1:
        return False
    current = java_table.spec().specId()
    manifests = snapshot.dataManifests(java_table.io())
    for manifest in java_list(manifests):
        if manifest.partitionSpecId() != current and (
            manifest.hasAddedFiles() or manifest.hasExistingFiles()
        ):
            return True
    return False


def _may_hold_before(spark: SparkSession, java_table: Any, moment: datetime) -> bool:
    """Whether a data file's bounds of the tombstones' time column reach below `moment`."""
    micros = timegm(moment.timetuple()) * 1_000_000 + moment.microsecond
    expressions = java_class(spark, "org.apache.iceberg.expressions.Expressions")
    tasks = java_table.newScan().filter(expressions.lessThan(TOMBSTONE_TIME, micros)).planFiles()
    try:
        return bool(tasks.iterator().hasNext())
    finally:
        tasks.close()


def _each(iterable: Any) -> list[Any]:
    found = []
    iterator = iterable.iterator()
    while iterator.hasNext():
        found.append(iterator.next())
    return found


def _java_map(spark: SparkSession, values: dict[str, str]) -> Any:
    java_map = java_class(spark, "java.util.HashMap")()
    for key, value in values.items():
        java_map.put(key, value)
    return java_map

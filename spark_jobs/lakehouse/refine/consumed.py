"""What a refine has consumed (lakehouse.refine.refresh): each refined table's commits record, in their snapshot
summary, the input snapshot ids they consumed (`refine.consumed.<table>`); the next run compares them with
the inputs' current snapshots, reads both versions, and rebuilds when a consumed snapshot left its input's
history.

Between the consumed snapshot and the current one, only some data files differ (`file_changes`, from the
snapshots' metadata: no Spark job). A data file in both versions with no delete file added or removed holds
the same rows in both; so the rows that may have changed are those of the files added or removed (or whose
deletes were rewritten), and, in a file in both, the rows at the positions a new position delete file
names. `candidate_rows` reads just those, which the snapshot comparison (lakehouse.refine.changes) then
compares: its cost follows the change, not the table."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.base.names import quote
from lakehouse.io.iceberg import iceberg_table, snapshot_properties, table_exists
from lakehouse.io.jvm import java_class
from lakehouse.refine.changes import changed_rows
from lakehouse.refine.planning import bytes_setting

log = logging.getLogger(__name__)

FILE, POSITION = "_file", "_pos"
AFTER_SIDE = "__refine_after"  # in kept changes (MarkedChanges): true on the after images' rows

CONSUMED_PREFIX = "refine.consumed."
REFINE_RUN_ID = "refine.run-id"


def is_in_history(
    spark: SparkSession, table: str, snapshot_id: int, current_id: int, java_table: Any = None
) -> bool:
    """Whether `snapshot_id` is still readable and an ancestor of (or is) the current snapshot
    (`java_table`: the table as the caller loaded it, else loaded here)."""
    jtable = java_table if java_table is not None else iceberg_table(spark, table)
    if jtable.snapshot(snapshot_id) is None:
        return False
    util = java_class(spark, "org.apache.iceberg.util.SnapshotUtil")
    return snapshot_id == current_id or bool(util.isAncestorOf(jtable, current_id, snapshot_id))


def consumed_snapshots(spark: SparkSession, table: str) -> dict[str, int] | None:
    """The input snapshot ids a refined table has consumed (newest refine commit on its lineage)."""
    for summary in snapshot_properties(spark, table):
        consumed = {
            k[len(CONSUMED_PREFIX) :]: int(v) for k, v in summary.items() if k.startswith(CONSUMED_PREFIX)
        }
        if consumed:
            return consumed
    return None


def read_as_of(spark: SparkSession, table: str, snapshot_id: int) -> DataFrame:
    """The table as of a snapshot. Through the `snapshot-id` read option, not `VERSION AS OF`: Spark
    treats two `VERSION AS OF` reads of one table as the same relation, so its optimizer may fold
    `distinct(old UNION new)` into `distinct(old)` (measured: Spark 3.5 + Iceberg 1.10.2); the option is
    part of the relation, which keeps the two versions apart."""
    return spark.read.format("iceberg").option("snapshot-id", str(snapshot_id)).load(table)


def seconds_since_commit(spark: SparkSession, table: str) -> float:
    """Seconds since the table's current snapshot was committed (infinite: no table or no snapshot)."""
    if not table_exists(spark, table):
        return float("inf")
    snapshot = iceberg_table(spark, table).currentSnapshot()
    return float("inf") if snapshot is None else time.time() - snapshot.timestampMillis() / 1000


@dataclass(frozen=True)
class FileChanges:
    """The data files whose rows are compared in full (added, removed, or with a delete file removed) and the
    position delete files added to data files present in both versions."""

    rewritten: frozenset[str]
    deletes: frozenset[str]
    deleted_from: frozenset[str] = frozenset()  # the data files those delete files apply to
    # No data file or delete file was removed: the rows read are the rows added (the new files' live rows) and
    # the rows deleted (at the new deletes' positions), no row read on both sides; a compaction or a
    # copy-on-write rewrite removes files, whose rows are read on both sides, mostly unchanged.
    only_changes: bool = False

    @property
    def read(self) -> frozenset[str]:
        """The data files a refresh reads: those compared in full and those with new deletes."""
        return self.rewritten | self.deleted_from


def file_changes(
    spark: SparkSession, table: str, before_id: int, after_id: int, java_table: Any = None
) -> FileChanges | None:
    """What differs between two snapshots of the table's lineage (`before_id` an ancestor of `after_id`), or
    None where metadata cannot tell which rows: the schema changed, or a delete file is an equality delete, a
    deletion vector or a position delete file that names more than one data file.

    A commit that adds a position delete file to a data file may remove that file's older ones: Iceberg's
    file-scoped deletes are merged, the new file naming the old positions too, so the data file keeps only
    new deletes. A delete file removed with no new one for its data file makes that file compared in full.
    `java_table`: the table as the caller loaded it, else loaded here."""
    jtable = java_table if java_table is not None else iceberg_table(spark, table)
    if jtable.snapshot(before_id).schemaId() != jtable.snapshot(after_id).schemaId():
        return None
    io = jtable.io()
    util = java_class(spark, "org.apache.iceberg.util.SnapshotUtil")
    rewritten: set[str] = set()
    removed = False  # a data file removed, or a delete file with no new one for its data file
    live: dict[str, str] = {}  # position delete file added since `before_id` and still live → its data file
    targets: dict[str, str] | None = None  # delete file → data file, as of `before_id` (read when needed)
    for snapshot in reversed(_each(util.ancestorsBetween(jtable, after_id, before_id))):
        rewritten |= {str(f.location()) for f in _each(snapshot.addedDataFiles(io))}
        gone = {str(f.location()) for f in _each(snapshot.removedDataFiles(io))}
        rewritten |= gone
        removed = removed or bool(gone)
        added: set[str] = set()
        for delete in _each(snapshot.addedDeleteFiles(io)):
            target = _position_delete_target(spark, delete)
            if target is None:
                return None
            live[str(delete.location())] = target
            added.add(target)
        for delete in _each(snapshot.removedDeleteFiles(io)):
            location = str(delete.location())
            if location not in live and targets is None:
                targets = _delete_targets(jtable, before_id)
            target = live.pop(location, None) or (targets or {}).get(location)
            if target is None:
                return None
            if target not in added:
                rewritten.add(target)
                removed = True
    kept = {d: target for d, target in live.items() if target not in rewritten}
    return FileChanges(frozenset(rewritten), frozenset(kept), frozenset(kept.values()), not removed)


def _tasks_of(java_table: Any, snapshot_id: int, files: frozenset[str]) -> list[Any]:
    """The snapshot's scan tasks (a data file with its delete files) of the data files among `files`, planned
    from its manifests in the driver: no Spark job."""
    planned = java_table.newScan().useSnapshot(snapshot_id).planFiles()
    try:
        return [task for task in _each(planned) if str(task.file().location()) in files]
    finally:
        planned.close()


def rows_in_files(java_table: Any, snapshot_id: int, files: frozenset[str]) -> int:
    """The rows the snapshot's data files among `files` hold (their record counts, deleted rows not
    subtracted: what reading them costs)."""
    return sum(int(task.file().recordCount()) for task in _tasks_of(java_table, snapshot_id, files))


def rows_refreshed(
    inputs: Mapping[Any, int],
    sizes: Mapping[Any, tuple[int, int]],
    loaded: Mapping[Any, Any],
    differing: Mapping[Any, FileChanges | None],
    count_read: bool = True,
) -> tuple[int, int]:
    """(the rows a rebuild reads: every input's now, the rows a refresh reads: 0 unless `count_read`). What a
    refresh reads of a moved input (`differing`: its differing files) is the rows of its data files that differ
    (every row where metadata cannot tell), however few of them changed: a change spread over every file reads
    them all. `inputs`: each input's snapshot; `sizes`: its `input_size` since the consumed snapshot;
    `loaded`: its metadata."""
    rows, read = 0, 0
    for reference, snapshot in inputs.items():
        held, changed = sizes[reference]
        rows += held
        if reference in differing and count_read:
            files = differing[reference]
            touched = held if files is None else rows_in_files(loaded[reference], snapshot, files.read)
            read += max(changed, touched)
    return rows, read


class StagedReads:
    """Reads of chosen data files of a table as of one of its snapshots that open those files alone: their scan
    tasks (with the snapshot's delete files) staged for Iceberg's reader, as its own rewrites read the groups
    they compact. A filter on the `_file` column is no such read: Iceberg does not prune files by it, so every
    file of the table is opened. `release()` forgets what was staged, once the reads are no longer used."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.staged: list[tuple[Any, str]] = []

    def rows(self, java_table: Any, table: str, snapshot_id: int, files: frozenset[str]) -> DataFrame:
        """The live rows of `files` (and their `_file`, `_pos`) as of the snapshot, in the table's schema."""
        chosen = _tasks_of(java_table, snapshot_id, files)
        if not chosen:
            return read_as_of(self.spark, table, snapshot_id).where(F.lit(False))
        tasks = java_class(self.spark, "java.util.ArrayList")()
        for task in chosen:
            tasks.add(task)
        group = f"refine-{uuid.uuid4()}"
        _table_cache(self.spark).add(group, java_table)
        java_class(self.spark, "org.apache.iceberg.spark.ScanTaskSetManager").get().stageTasks(
            java_table, group, tasks
        )
        self.staged.append((java_table, group))
        return self.spark.read.format("iceberg").option("scan-task-set-id", group).load(group)

    def release(self) -> None:
        manager = java_class(self.spark, "org.apache.iceberg.spark.ScanTaskSetManager").get()
        for java_table, group in self.staged:
            manager.removeTasks(java_table, group)
            _table_cache(self.spark).remove(group)
        self.staged.clear()


class KeyedLocks:
    """A lock per key, made when first asked for: work on one key waits, work on others goes on."""

    def __init__(self) -> None:
        self.locks: dict[Any, threading.Lock] = {}
        self.guard = threading.Lock()

    @contextmanager
    def hold(self, key: Any) -> Iterator[None]:
        with self.guard:
            lock = self.locks.setdefault(key, threading.Lock())
        with lock:
            yield


class MarkedChanges(tuple[DataFrame, DataFrame]):
    """(before images, after images) kept in one frame, `marked` (AFTER_SIDE true on the after images' rows):
    on_columns reads it once for both sides, not once for each; `in_one_task`: it is in one partition."""

    marked: DataFrame
    in_one_task: bool

    def __new__(cls, marked: DataFrame, in_one_task: bool) -> MarkedChanges:
        after = F.col(AFTER_SIDE)
        images = super().__new__(cls, [marked.where(side).drop(AFTER_SIDE) for side in (~after, after)])
        images.marked, images.in_one_task = marked, in_one_task
        return images


class SharedChanges:
    """An input's changed rows between two snapshots, found once for every model of a run that reads them (the
    two aggregates of one refined table read its changes between the same snapshots): kept (checkpointed) when
    more than one model reads the input (`readers`: input name → how many models read it), else not kept;
    `release()` frees what was kept, once the run is over. Models refreshed at once (lakehouse.refine.schedule)
    that ask for the same changes together find them once: the second waits for the first's."""

    def __init__(self, readers: Mapping[str, int]) -> None:
        self.readers = readers
        self.kept: dict[tuple[str, int, int], tuple[DataFrame, DataFrame]] = {}
        self.frames: list[DataFrame] = []
        self.finding = KeyedLocks()

    def one_task(self, images: tuple[DataFrame, DataFrame]) -> bool:
        """Whether `images` are changes kept in one partition (few rows): a comparison of them needs no
        shuffle."""
        return isinstance(images, MarkedChanges) and images.in_one_task

    def changes(
        self,
        name: str,
        table: str,
        before_id: int,
        after_id: int,
        find: Callable[[], tuple[DataFrame, DataFrame]],
    ) -> tuple[DataFrame, DataFrame]:
        """(before images, after images) of input `name` (the table `table`), from `find` the first time."""
        version = (table, before_id, after_id)
        with self.finding.hold(version):
            return self._kept_changes(name, version, find)

    def _kept_changes(
        self, name: str, version: tuple[str, int, int], find: Callable[[], tuple[DataFrame, DataFrame]]
    ) -> tuple[DataFrame, DataFrame]:
        if version in self.kept:
            return self.kept[version]
        removed, added = find()
        if self.readers.get(name, 0) < 2 or removed.columns != added.columns:
            return removed, added
        both = removed.withColumn(AFTER_SIDE, F.lit(False)).unionByName(
            added.withColumn(AFTER_SIDE, F.lit(True))
        )
        observation = Observation(f"refine_changes_{uuid.uuid4().hex}")
        both = both.observe(observation, F.count(F.lit(1)).alias("rows")).localCheckpoint()
        self.frames.append(both)
        # Few enough for one task (counted as they were kept): each model's comparison of them on its columns,
        # and the distinct of their keys, then need no shuffle (a Spark job fewer a model).
        in_one_task = int(observation.get["rows"]) * (
            8 + int(both._jdf.schema().defaultSize())
        ) <= bytes_setting(both.sparkSession, "spark.sql.adaptive.advisoryPartitionSizeInBytes", "64MB")
        kept = MarkedChanges(both.coalesce(1) if in_one_task else both, in_one_task)
        self.kept[version] = kept
        return kept

    def release(self) -> None:
        for frame in self.frames:
            frame.unpersist()
        self.frames.clear()
        self.kept.clear()


def _table_cache(spark: SparkSession) -> Any:
    """Iceberg's SparkTableCache (`SparkTableCache.get()`, called by reflection: py4j takes the static `get()`
    for the instance `get(String)` beside it)."""
    gateway: Any = spark.sparkContext._gateway
    jvm: Any = spark._jvm
    loader = jvm.Thread.currentThread().getContextClassLoader()
    klass = jvm.java.lang.Class.forName("org.apache.iceberg.spark.SparkTableCache", True, loader)
    no_types = gateway.new_array(jvm.java.lang.Class, 0)
    return klass.getMethod("get", no_types).invoke(None, gateway.new_array(jvm.java.lang.Object, 0))


def candidate_rows(
    spark: SparkSession,
    table: str,
    before_id: int,
    after_id: int,
    changes: FileChanges,
    reads: StagedReads | None = None,
    java_table: Any = None,
    columns: Collection[str] | None = None,
) -> tuple[DataFrame, DataFrame]:
    """(rows of `before_id`, rows of `after_id`) that may differ (module doc): every other row is in both.
    With `reads` and the table as loaded (`java_table`), and the table's schema still the snapshots', only the
    files that differ are opened (StagedReads); else every file is, and its rows filtered by `_file`. The rows
    hold `columns` alone (the table's order; None: all), the only ones their files are read for."""
    before, after = read_as_of(spark, table, before_id), read_as_of(spark, table, after_id)
    selected = [F.col(quote(c)) for c in before.columns if columns is None or c in columns]
    rewritten = F.col(FILE).isin(sorted(changes.rewritten))
    if (
        reads is not None
        and java_table is not None
        and java_table.schema().schemaId() == java_table.snapshot(after_id).schemaId()
    ):
        after = reads.rows(java_table, table, after_id, changes.rewritten)
        before = reads.rows(java_table, table, before_id, changes.rewritten | changes.deleted_from)
    after_rows = after.where(rewritten).select(*selected)
    if not changes.deletes:
        return before.where(rewritten).select(*selected), after_rows
    positions = (
        spark.read.format("iceberg")
        .option("snapshot-id", str(after_id))
        .load(f"{table}.position_deletes")
        .where(F.col("delete_file_path").isin(sorted(changes.deletes)))
        .select(F.col("file_path").alias(FILE), F.col("pos").alias(POSITION), F.lit(True).alias("__deleted"))
    )
    before_rows = (
        before.select(F.col(FILE), F.col(POSITION), *selected)
        .join(F.broadcast(positions), [FILE, POSITION], "left")
        .where(F.col("__deleted").isNotNull() | rewritten)
        .select(*selected)
    )
    return before_rows, after_rows


def _position_delete_target(spark: SparkSession, delete: Any) -> str | None:
    """The one data file a position delete file (not a deletion vector) names, or None."""
    if str(delete.content().name()) != "POSITION_DELETES" or str(delete.format().name()) == "PUFFIN":
        return None
    target = java_class(spark, "org.apache.iceberg.util.ContentFileUtil").referencedDataFileLocation(delete)
    return None if target is None else str(target)


def _delete_targets(jtable: Any, snapshot_id: int) -> dict[str, str]:
    """Each delete file of the snapshot → the data file it applies to (a file-scoped delete names one)."""
    targets: dict[str, str] = {}
    tasks = jtable.newScan().useSnapshot(snapshot_id).planFiles()
    try:
        for task in _each(tasks):
            for delete in _each(task.deletes()):
                targets[str(delete.location())] = str(task.file().location())
    finally:
        tasks.close()
    return targets


def _each(iterable: Any) -> list[Any]:
    """A Java Iterable's items."""
    items, iterator = [], iterable.iterator()
    while iterator.hasNext():
        items.append(iterator.next())
    return items


# The snapshot summary fields that count a commit's rows in and out (a MERGE's rewritten rows count as both).
CHANGED_ROW_FIELDS = ("added-records", "deleted-records", "added-position-deletes", "added-equality-deletes")


def input_size(
    spark: SparkSession, table: str, consumed_id: int, current_id: int, java_table: Any = None
) -> tuple[int, int]:
    """(rows the current snapshot's data files hold: what a rebuild reads, deleted rows not subtracted; rows
    the commits since the consumed snapshot added and deleted: an upper bound of the rows that differ), from
    the snapshots' summaries: no Spark job (`java_table`: the table as the caller loaded it, else loaded)."""
    jtable = java_table if java_table is not None else iceberg_table(spark, table)
    current = jtable.snapshot(current_id)
    rows = int(current.summary().get("total-records") or 0) if current is not None else 0
    if consumed_id == current_id:
        return rows, 0
    util = java_class(spark, "org.apache.iceberg.util.SnapshotUtil")
    changed = sum(
        int(snapshot.summary().get(name) or 0)
        for snapshot in _each(util.ancestorsBetween(jtable, current_id, consumed_id))
        for name in CHANGED_ROW_FIELDS
    )
    return rows, changed


def live_rows(java_table: Any) -> int:
    """The rows of the table's current snapshot, from its summary (no Spark job): its data files' rows less
    its deletes (exact where no two deletes name one row, as a MERGE writes them)."""
    snapshot = java_table.currentSnapshot()
    if snapshot is None:
        return 0
    summary = snapshot.summary()
    fields = ("total-records", "total-position-deletes", "total-equality-deletes")
    held, *deleted = (int(summary.get(name) or 0) for name in fields)
    return max(held - sum(deleted), 0)


def changed_rows_between(
    spark: SparkSession,
    table: str,
    before_id: int,
    after_id: int,
    files: FileChanges | None,
    reads: StagedReads | None = None,
    java_table: Any = None,
    columns: Collection[str] | None = None,
) -> tuple[DataFrame, DataFrame]:
    """(before images, after images) of an input between two of its snapshots, on its `columns` alone (None:
    all): from the rows of the data files that differ (`files`, file_changes), or, where its metadata cannot
    tell (None), from both versions in full. Where the rows read are only rows added and rows deleted
    (`files.only_changes`), they are the images with no comparison (a row deleted and put back as it was, or
    updated to its own values, is in both: its keys are recomputed for nothing, never missed); else the rows
    read on both sides are compared, which shuffles them."""
    if files is None:
        log.info("refine: %s: comparing snapshots %s and %s in full", table, before_id, after_id)
        versions = [read_as_of(spark, table, snapshot) for snapshot in (before_id, after_id)]
        chosen = [F.col(quote(c)) for c in versions[0].columns if columns is None or c in columns]
        return changed_rows(versions[0].select(*chosen), versions[1].select(*chosen))
    candidates = candidate_rows(spark, table, before_id, after_id, files, reads, java_table, columns)
    return candidates if files.only_changes else changed_rows(*candidates)


def on_columns(
    images: tuple[DataFrame, DataFrame],
    columns: Collection[str] | None,
    compared: bool,
    one_task: bool = False,
) -> tuple[DataFrame, DataFrame]:
    """An input's (before images, after images) on the `columns` a model reads of it, fewer than the input's
    (None: it reads them all, the images are as they are), compared (lakehouse.refine.changes, changed_rows)
    unless they already are on those columns: a row whose columns the model reads are the same in both images
    cancels out, so a change of the columns it does not read reaches none of its keys. `compared`: whether
    the images are the net of a comparison on their columns already; `one_task`: they are few, each in one
    partition (SharedChanges.one_task), and are compared in that one task, with no shuffle."""
    removed, added = images
    if columns is None:
        return images
    kept = [F.col(quote(c)) for c in removed.columns if c in columns]
    if compared and len(kept) == len(removed.columns):
        return images
    side = "__refine_side"
    if isinstance(images, MarkedChanges):  # one read of the kept images for both sides, not one for each
        sides = images.marked.select(*kept, F.when(F.col(AFTER_SIDE), 1).otherwise(-1).alias(side))
    else:
        sides = removed.select(*kept, F.lit(-1).alias(side)).unionByName(
            added.select(*kept, F.lit(1).alias(side))
        )
    # Grouped by the columns themselves, not by the rows' hashes with the row carried (changed_rows): the model's
    # few columns are a small grouping key, and a sum alone as the aggregate keeps Spark's hash aggregate (a
    # carried row of strings makes it a sort aggregate).
    net = (
        (sides.coalesce(1) if one_task else sides)
        .groupBy(*kept)
        .agg(F.sum(side).alias(side))
        .where(F.col(side) != 0)
    )
    return net.where(F.col(side) < 0).drop(side), net.where(F.col(side) > 0).drop(side)


def schema_of(schema: T.StructType) -> list[tuple[str, str]]:
    """A table's columns as (name, type): what a refined table and its model's rows must agree on."""
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def newest_summary_value(spark: SparkSession, table: str, key: str) -> str | None:
    """`key` of the newest commit on the table's lineage that records it."""
    return next((summary[key] for summary in snapshot_properties(spark, table) if key in summary), None)

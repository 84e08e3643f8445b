"""One run of the CDC or full-load job: its options, and its context shared by the tables it applies in
parallel (the files classified by table, the raw read, quarantine, ledger entries); it composes the run's
report from its tables' (lake_contracts.run_report)."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lake_contracts.dms_files import DmsFile, NotADmsFileError, parse_dms_key
from lake_contracts.run_report import ReadFigures, RunReport, StepFigures, TableReport, table_report
from pyspark.sql import DataFrame, SparkSession

from lakehouse.apply.clean_table import SchemaOutOfDateError, layout_and_types, loaded_at
from lakehouse.apply.ledger import LedgerEntry, RecordedFile, StateTables
from lakehouse.apply.pending_load import PendingLoad, pending_loads
from lakehouse.apply.quarantine import (
    REAPPLIED_MARK,
    FileProblem,
    ReappliedFile,
    file_rejections,
    quarantined_in_run,
    record_rejections,
    write_quarantine,
)
from lakehouse.base.config import LakeConfig
from lakehouse.base.schema import SchemaFile, TableSpec
from lakehouse.dms import changes as C
from lakehouse.dms.reader import RawRead, ReaderOptions, only_records, read_dms_files, with_record_numbers
from lakehouse.io.fence import LeaseLostError
from lakehouse.io.storage import stage_for_spark

log = logging.getLogger(__name__)

Record = Callable[[StepFigures], None]  # a table's step records its figures as it completes

TYPE_MISMATCH_POLICIES = ("fail", "quarantine")


class MissingFileError(RuntimeError):
    """A file the batch names does not exist (and no reload made it unnecessary)."""


@dataclass(frozen=True)
class ApplyOptions:
    reader: ReaderOptions = ReaderOptions()
    names: C.ChangeColumns = C.ChangeColumns()
    parallel_tables: int = 0  # 0: from the run's cores (tables_at_once)
    no_primary_key: str = "append"  # "append": inserts are appended, updates/deletes quarantined; "skip"
    type_mismatch: str = "fail"  # "fail": the table stops with the values named; "quarantine"
    reload_margin_seconds: int = 300  # a reload placed by time: DMS's start, give or take this long


DEFAULT_OPTIONS = ApplyOptions()


def check_options(options: ApplyOptions) -> None:
    if options.type_mismatch not in TYPE_MISMATCH_POLICIES:
        raise ValueError(
            f"type_mismatch must be one of {TYPE_MISMATCH_POLICIES}, not {options.type_mismatch!r}"
        )
    if options.no_primary_key not in ("append", "skip"):
        raise ValueError(f"no_primary_key must be 'append' or 'skip', not {options.no_primary_key!r}")


def require_key_columns(spec: TableSpec, raw: RawRead) -> None:
    """A file whose header lacks a primary-key column is a schema change (the key was renamed or changed
    on the source, or the schema file names the wrong key), not bad data: the table stops before anything
    is quarantined or committed, like a column the schema file lacks, and the batch stays pending."""
    keys = [k.lower() for k in spec.primary_key]
    for uri, names in sorted(raw.headers.items()):
        missing = [k for k in keys if k not in {n.lower() for n in names}]
        if missing:
            raise SchemaOutOfDateError(
                f"{spec.qualified_name}: {uri} has no primary key column(s) {', '.join(missing)} (its header: "
                f"{', '.join(names[:20])}). The schema file says the key is {', '.join(spec.primary_key)}: if "
                "the source's key changed, regenerate the schema file (python -m tools.schema_gen ...) and "
                f"reload the table (full_load_job.py --tables {spec.qualified_name} --reload true). The batch "
                "stays pending and nothing of it is quarantined."
            )


class ApplyRun:
    """One run's context, shared by its tables (applied in parallel): what it was started with, and what its
    tables leave for the end of the run (quarantine rows, ledger entries, skipped files), collected under a
    lock. The run's report is composed once, by `finish`."""

    def __init__(
        self,
        spark: SparkSession,
        config: LakeConfig,
        schema: SchemaFile,
        options: ApplyOptions,
        run_id: str,
        job: str,
        reapplied: Mapping[str, ReappliedFile] | None = None,
    ) -> None:
        self.spark = spark
        self.config = config
        self.schema = schema
        self.options = options
        self.run_id = run_id
        self.job = job
        self.state = StateTables(spark, config)
        self.rejections: dict[str, list[DataFrame]] = defaultdict(list)  # by source table
        self.file_problems: list[FileProblem] = []
        # A re-application (tools.reapply_quarantined, lakehouse.apply.reapply): file URI → the ledger's
        # name for this attempt and the records it applies.
        self.reapplied: dict[str, ReappliedFile] = dict(reapplied or {})
        self._quarantine_lock = threading.Lock()
        self.ledger_entries: list[LedgerEntry] = []
        self.ledger_forget: list[tuple[str, RecordedFile]] = []
        self.unknown_tables: dict[str, list[str]] = defaultdict(list)
        self.skipped_files: list[str] = []  # files a table's job skipped as a whole (a load done before)
        self.pending: dict[str, PendingLoad] = {}  # the run's tables left pending, as its jobs found them
        self.quarantine_rows_added = 0
        self.deletes: list[tuple[str, DataFrame]] = []  # by source table, for the run's one tombstone append
        self._lock = threading.Lock()

    def classify(self, uris: Sequence[tuple[str, int]]) -> dict[TableSpec, list[DmsFile]]:
        by_table: dict[TableSpec, list[DmsFile]] = defaultdict(list)
        seen: set[str] = set()
        for uri, size in uris:
            if uri in seen:
                continue  # listed twice in one manifest: applied once
            seen.add(uri)
            try:
                file = parse_dms_key(uri, size, self._known)
            except NotADmsFileError as error:
                self.file_problems.append(FileProblem("", uri, str(error)))
                continue
            spec = self.schema.find(file.source_schema, file.table)
            if spec is None:
                self.unknown_tables[file.qualified_table].append(uri)
                continue
            by_table[spec].append(file)
        return by_table

    def _known(self, source_schema: str, table: str) -> bool:
        """The schema file has the table (or refused it): a folder named like a date may be a table."""
        qualified = f"{source_schema}.{table}"
        return (
            self.schema.find(source_schema, table) is not None or self.schema.refusal(qualified) is not None
        )

    def unknown_table_reports(self) -> list[TableReport]:
        """A table the schema file does not know (added on the source since it was generated) is not bad
        data: its table fails with what to do, and the batch stays pending until the file is regenerated."""
        return [
            TableReport(
                table,
                files=len(uris),
                error=(
                    f"RefusedName: {self.schema.refusal(table)}; the batch stays pending"
                    if self.schema.refusal(table)
                    else f"SchemaOutOfDateError: {table} is not in the schema file, but the batch has {len(uris)} "
                    f"file(s) of it (e.g. {uris[0]}): the source has a table the schema file was generated "
                    "without. Regenerate the schema file (python -m tools.schema_gen ...) and upload it where "
                    "--schema_file points, or exclude the table in the DMS task's table mappings; the batch "
                    "stays pending and the next run applies it."
                ),
            )
            for table, uris in sorted(self.unknown_tables.items())
        ]

    def read_raw(self, spec: TableSpec, files: list[DmsFile]) -> tuple[RawRead, ReadFigures]:
        """The files' records. Unreadable files go to quarantine; a file that does not exist is an error
        unless a later (re)load of the table superseded it (DMS removes a reloaded table's old files)."""
        paths = stage_for_spark([f.uri for f in files], self.config.s3_endpoint_url, self.config.staging_dir)
        raw = read_dms_files(self.spark, files, paths, self.options.reader)
        narrowed = {uri: r.records for uri, r in self.reapplied.items() if r.records is not None}
        raw = only_records(raw, narrowed)
        require_key_columns(spec, raw)
        missing = [r.file for r in raw.rejected if r.missing]
        superseded = 0
        if missing:
            reloaded_at = loaded_at(self.spark, self.config.clean_table(spec.iceberg_name))
            lost = [
                f
                for f in missing
                if reloaded_at is None or f.written_at is None or f.written_at > reloaded_at
            ]
            if lost:
                raise MissingFileError(
                    f"{spec.qualified_name}: {len(lost)} file(s) of the batch do not exist, e.g. {lost[0].uri}. "
                    "A file DMS wrote was removed from the raw zone (a lifecycle rule? by hand?) and its changes "
                    "can't be applied: restore it, or re-create the manifest without it after checking what it "
                    "held. The batch stays pending."
                )
            superseded = len(missing)
            log.info(
                "%s: %d file(s) superseded by the reload of %s",
                spec.qualified_name,
                len(missing),
                reloaded_at,
            )
        unreadable = [r for r in raw.rejected if not r.missing]
        for rejection in unreadable:
            self.file_problems.append(FileProblem(spec.qualified_name, rejection.file.uri, rejection.reason))
        return raw, ReadFigures(superseded_files=superseded, quarantined_files=len(unreadable))

    def read_typed(self, spec: TableSpec, files: list[DmsFile]) -> tuple[DataFrame | None, DataFrame | None]:
        """The files' raw records and their typed changes, as a first pass sees them (bench/profile_*)."""
        raw, _ = self.read_raw(spec, files)
        if raw.rows is None:
            return None, None
        table = self.config.clean_table(spec.iceberg_name)
        layout, types = layout_and_types(self.spark, spec, table, raw, self.options.names, replacing=True)
        names, marker = self.options.names, self.options.reader.csv_null_value
        return raw.rows, C.typed_changes(raw, spec, layout, types, names, marker)

    def quarantine_records(self, spec: TableSpec, rejected: DataFrame, raw: RawRead) -> None:
        """Rejected records (`_dms_reason` set), with their record numbers (one more pass over their files)."""
        numbered = with_record_numbers(rejected, raw)
        rows = record_rejections(numbered, spec.qualified_name).localCheckpoint()
        with self._lock:
            self.rejections[spec.qualified_name].append(rows)

    def ledger_name(self, file: DmsFile) -> str:
        """The name the ledger and the commit summaries know `file` by (its own, unless re-applied)."""
        again = self.reapplied.get(file.uri)
        return file.name if again is None else f"{file.name}{REAPPLIED_MARK}{again.tag}"

    def flush_quarantine(self, source_table: str | None = None) -> None:
        """Write what was rejected so far (of one table, or everything left) to the quarantine table. A
        table's rows are written BEFORE its data commit: a crash between the two loses none, and the retry
        (same run id) adds none twice (the quarantine's MERGE is keyed by file and record number)."""
        with self._lock:
            tables = [source_table] if source_table is not None else list(self.rejections)
            parts = [part for table in tables for part in self.rejections.pop(table, [])]
            problems = [
                p for p in self.file_problems if source_table is None or p.source_table == source_table
            ]
            self.file_problems = [p for p in self.file_problems if p not in problems]
        if problems:
            parts.append(file_rejections(self.spark, problems))
        if not parts:
            return
        with self._quarantine_lock:  # one writer at a time: parallel tables would race on its MERGE
            added = write_quarantine(self.spark, self.config.quarantine, self.run_id, self.job, parts)
            self.quarantine_rows_added += added

    def bury(self, source_table: str, deletes: DataFrame) -> None:
        """Tombstones for a table's deletes (`key`, `change_seq`, `commit_ts`), written by `before_commits`."""
        with self._lock:
            self.deletes.append((source_table, deletes))

    def before_commits(self) -> None:
        """The run's shared writes before any table's commit, one of each whatever the number of tables:
        what its tables quarantined (one write), then the tombstones of their deletes (one append). A crash
        after them leaves quarantine rows the retry does not add again and tombstones of rows the retry
        deletes (docs/CONTRACTS.md)."""
        self.flush_quarantine()
        with self._lock:
            deletes, self.deletes = self.deletes, []
        if deletes:
            self.state.bury(deletes, self.run_id)

    def remember(
        self, entries: Sequence[LedgerEntry], forget: Sequence[tuple[str, RecordedFile]] = ()
    ) -> None:
        with self._lock:
            self.ledger_entries.extend(entries)
            self.ledger_forget.extend(forget)

    def note_pending(self, source_table: str, pending: PendingLoad | None) -> None:
        """What a table's job found of its load left pending (None: not, or no longer, pending), from the table
        it loaded already: the run report's `pending_loads` costs no catalog load of its own."""
        with self._lock:
            if pending is None:
                self.pending.pop(source_table, None)
            else:
                self.pending[source_table] = pending

    def skip(self, files: Sequence[DmsFile]) -> None:
        """Files a table's job skipped as a whole (the run report's `skipped_files`)."""
        with self._lock:
            self.skipped_files.extend(f.uri for f in files)

    def finish(self, tables: list[TableReport], started: float) -> RunReport:
        """Record the ledger entries, write what is left for the quarantine, and compose the run's report
        (`started`: the run's time.monotonic() at its start)."""
        error = None
        try:
            self.state.record(self.ledger_entries, self.ledger_forget)
        except LeaseLostError:
            raise  # the lease moved on: nothing more is written, no report (lakehouse.io.fence)
        except Exception as failure:  # the commits stand; the next run copies their names again
            log.exception("recording the applied files in the ledger failed")
            error = f"ledger: {type(failure).__name__}: {failure}"[:2000]
        self.flush_quarantine()  # what no table's commit wrote: unclassifiable keys, failed tables
        run_records, run_files = quarantined_in_run(self.spark, self.config.quarantine, self.run_id)
        return RunReport(
            self.run_id,
            self.job,
            tables=tables,
            skipped_files=list(self.skipped_files),
            quarantine_rows_added=self.quarantine_rows_added,
            run_quarantined_records=run_records,
            run_quarantined_files=run_files,
            seconds=round(time.monotonic() - started, 3),
            error=error,
            pending_loads=pending_loads(self.pending, datetime.now(UTC)),
        )

    def job_group(self, spec: TableSpec) -> str:
        """The Spark job group of a table's jobs in this run (the Spark UI and the counting test group by it)."""
        return f"{self.job} {self.run_id} {spec.qualified_name}"

    def _enter_table(self, spec: TableSpec) -> None:
        """This thread's jobs are the table's: its job group, and its own pool of Spark's FAIR scheduler (a
        pool per table: tables share the cores, a small table's jobs don't queue behind a large one's)."""
        if self.spark is not None:
            context = self.spark.sparkContext
            context.setJobGroup(self.job_group(spec), f"{self.job} of {spec.qualified_name}")
            context.setLocalProperty("spark.scheduler.pool", spec.qualified_name)

    def run_tables(
        self,
        items: list[tuple[TableSpec, Any]],
        apply: Callable[[TableSpec, Any, Record], Iterator[None] | None],
        before_commits: Callable[[], None] | None = None,
    ) -> list[TableReport]:
        """Apply each table (in parallel, by name), and report it: `apply(spec, payload, record)` records
        each of its steps' figures as the step completes, so a failed table reports the steps it completed.
        An `apply` that is a generator runs in two phases: every table up to its `yield` (all it does before
        its commit), then `before_commits()` once (the run's shared writes, e.g. one tombstone and one
        quarantine write for all tables), then every table's rest (its commit). A failure of the shared
        writes fails the tables that waited for them: none of them commits."""
        ordered = [
            _TableRun(spec, payload) for spec, payload in sorted(items, key=lambda kv: kv[0].qualified_name)
        ]

        def step(table: _TableRun, action: Callable[[], None]) -> None:
            begun = time.monotonic()
            self._enter_table(table.spec)
            try:
                action()
            except LeaseLostError:
                raise  # the lease moved on: the run fails as a whole, its other tables commit nothing either
            except Exception as failure:  # one table's failure is reported; the others go on
                log.exception("%s: %s failed", table.spec.qualified_name, self.job)
                table.fail(f"{type(failure).__name__}: {failure}")
            finally:
                table.seconds += time.monotonic() - begun

        def prepare(table: _TableRun) -> None:
            def begin() -> None:
                rest = apply(table.spec, table.payload, table.steps.append)
                if isinstance(rest, Iterator) and next(rest, _DONE) is not _DONE:
                    table.rest = rest

            step(table, begin)

        def commit(table: _TableRun) -> None:
            rest = table.rest
            if rest is not None:
                step(table, lambda: next(rest, None))

        wanted = self.options.parallel_tables or tables_at_once(self.spark.sparkContext.defaultParallelism)
        workers = max(1, min(wanted, len(items) or 1))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="table") as pool:
            list(pool.map(prepare, ordered))
            waiting = [t for t in ordered if t.rest is not None]
            if waiting and before_commits is not None:
                try:
                    before_commits()
                except LeaseLostError:
                    raise
                except Exception as failure:
                    log.exception("the run's shared writes before its commits failed")
                    for table in waiting:
                        table.fail(f"before the commit: {type(failure).__name__}: {failure}")
            list(pool.map(commit, ordered))
        return [t.report() for t in ordered]


_DONE = object()


def tables_at_once(default_parallelism: int) -> int:
    """How many tables a run applies at once when not told: half its cores (the sessions set Spark's default
    parallelism to twice the cores, lakehouse.io.session), at least 4 (a table's apply waits on the driver,
    its commits and the catalog as much as on the executors), at most 32. Each table's jobs run in its own
    pool of Spark's FAIR scheduler, so a small table is not queued behind a large one's stages."""
    return max(4, min(32, default_parallelism // 4))


@dataclass
class _TableRun:
    """A table of the run: its figures, its error, its time, and what is left of its apply (its commit)."""

    spec: TableSpec
    payload: Any
    steps: list[StepFigures] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    rest: Iterator[None] | None = None

    def fail(self, error: str) -> None:
        self.error, self.rest = error[:2000], None

    def report(self) -> TableReport:
        return table_report(self.spec.qualified_name, self.steps, round(self.seconds, 3), self.error)

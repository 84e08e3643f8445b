"""Deployment planner: a deployment's billed compute per day on Glue and on EMR Serverless, from the
per-run costs the benches measured, whether the state machine's loop keeps up with the day, and each file's
freshness (landed -> applied).

    .venv/bin/python bench/cost_model.py deployment          # --rows --tables --changes-per-day --max-files-per-run …
    .venv/bin/python bench/cost_model.py deployment --many-tables bench/results/many-tables-<time>.json --search

A day of the loop for N tables of R rows and C changes a day: CDC runs, a refine run every few batches, a
maintenance pass every few more, sized to what the changes made due and bounded by its budget (a slice); each
run's seconds from `Measured` (constants with their source, or the benches' JSON), billed as each engine bills
a run of `RunSize` workers (the prices and the 1-minute minimum of bench/cost_model.py). `--search`: when the
settings miss the goal (keep up, freshness p95 at most 5 minutes, on both engines), the cheapest setting of a
grid that meets it. Also a lower bound of the full load's compute at the template's defaults.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

if __package__:  # imported as bench.deployment_planner (the tests)
    from bench.cost_model import MINIMUM_BILLED_SECONDS, PRICES
else:  # imported by bench/cost_model.py run as a script: bench/ is on sys.path
    from cost_model import MINIMUM_BILLED_SECONDS, PRICES


@dataclass(frozen=True)
class Deployment:
    """What a user plans: `rows` in `tables` tables of equal size, `changes_per_day` spread evenly over the
    day and the tables, DMS writing one file per table every `file_interval` seconds; the template's
    defaults for the loop (LoopWaitSeconds, MaxFilesPerRun, RefineEveryNBatches, RefineEveryMinutes,
    MaintenanceEveryNBatches)."""

    rows: float = 1e9
    tables: int = 100
    changes_per_day: float = 50e6
    file_interval: float = 60.0
    loop_wait: float = 60.0
    max_files_per_run: int = 500
    refine_every: int = 5
    refine_every_minutes: float = 15.0  # RefineEveryMinutes: no refine starts sooner after the last (0: none)
    maintenance_every: int = 50
    # RunPaceSeconds: the loop's pause after a batch that emptied the queue (None: auto, the engine's own)
    run_pace: float | None = None
    hours: float = 24.0
    audit_every_minutes: float = (
        60.0  # RawAuditEveryMinutes: a run of its fixed cost between two batches (0: none)
    )

    @property
    def rows_per_table(self) -> float:
        return self.rows / self.tables


GIB = 1024**3
# `.venv/bin/python bench/many_tables.py --rounds 2 --warmups 1`, 2026-11-28T18:55Z at 103a422, load 3.3-5.9
# (bench/results/many-tables-20261128T185532Z.json): the slope of a batch's seconds over the tables it touches
# (1 to 100 small tables, warm session), and its lake's two maintenance passes: per table changed since the last
# pass ((39.78 s - 38 tables x 0.018 s) / 64 tables with something due) and per table with nothing due.
MANY_TABLES_SECONDS_PER_TABLE = 0.380
MANY_TABLES_PASSES = (0.61, 0.018)
# The mix of bench/generate.py's batches (10 % deletes, 15 % inserts, 75 % updates): the share of changes that
# delete a row of an older data file (updates and deletes) and the share that write a new row (inserts, updates).
DELETING_SHARE, WRITING_SHARE = 0.85, 0.90


@dataclass(frozen=True)
class Measured:
    """Per-run costs measured on this repository's benchmark machine, 2 local cores standing in for one run's
    workers (as in the engine table); each figure's source beside it, `from_results` replaces them with a
    newer bench's JSON.
    - a run's fixed cost and the apply's throughput: the line through two CDC job processes on a 10M-row
      table from DMS CSV (the template's DmsDataFormat), one file of 5,000 changes (22.05 s) and a batch of
      1M (41.90 s): 22.0 s + 50,128 changes/s (`bench/run.py --rows 10000000 --formats csv --only
      cdc-job,perfile-job --sample 3 --runs 3`, 2026-11-29, `bench/cost_model.py --results
      bench/results/run-csv-20261129T060554Z.json`; 39.2 s + 40,254/s on 2026-11-23's code); the fixed cost holds the process,
      the session and the MERGE of one table;
    - each further table a batch touches: `table_fixed_seconds`, the slope of `bench/many_tables.py` (one warm
      session, batches touching 1 to 100 small tables), plus `table_seconds_per_million_rows` (0.026 s:
      "Cost growth", `bench/scale.py`, 2026-11-26: 1,000 changes into 10M and 100M rows, 2.8 and 5.1 s; the MERGE
      reads the key column of each table it touches through a Bloom filter of the batch's keys);
    - a maintenance pass, sized to the changes and bounded: a run's fixed cost, `maintenance_table_seconds` for
      each table it inspects (`maintained_tables_per_table` a source table), `maintenance_due_table_seconds` for
      each table changed since the last pass (its rewrite's jobs and commit; both bench/many_tables.py's
      passes), and the bytes it rewrites at `rewrite_bytes_per_second`, at most `rewrite_budget_bytes` a pass (the
      slice; lakehouse.maintenance.options: 4 GiB), the rest due again next pass. What is due follows the
      changes: a change that deletes a row of an older file brings that file 1/rows closer to the rewrite
      threshold (`delete_ratio_threshold` of its rows deleted: 0.2), so each such change makes
      `bytes_per_row / threshold` bytes due, and each written row `bytes_per_row` of small files to compact
      (`bytes_due_per_change`); `bytes_per_row` 20.1: the narrow bench table, 201 MB for 10M rows of zstd
      Parquet ("Cost growth");
    - once a day, expiry and orphan removal: `expiry_seconds_per_table` for each table it visits;
    - a refine run: its fixed cost only (the refine job's own work depends on the refined model: not measured)."""

    overhead_seconds: float = 22.0
    changes_per_second: float = 50_128.0
    table_fixed_seconds: float = MANY_TABLES_SECONDS_PER_TABLE
    table_seconds_per_million_rows: float = 0.026
    maintenance_table_seconds: float = MANY_TABLES_PASSES[1]
    maintenance_due_table_seconds: float = MANY_TABLES_PASSES[0]
    maintained_tables_per_table: float = (
        1.0  # the clean table (HistoryTables is empty by default; records few)
    )
    # one pass rewriting a 257 MB backlog in 17.1 s (bench/maintenance_backlog.py, 2026-11-29, 10M rows)
    rewrite_bytes_per_second: float = 15.0e6
    rewrite_budget_bytes: float = 4 * GIB
    delete_ratio_threshold: float = 0.2
    bytes_per_row: float = 20.1
    expiry_seconds_per_table: float = 1.0  # an assumption: not measured
    refine_seconds: float = 0.0
    commit_before_end_seconds: float = 0.0  # a run's commits come before its end by this much (0: at its end)
    sources: tuple[str, ...] = ()

    def table_seconds(self, rows: float) -> float:
        return self.table_fixed_seconds + self.table_seconds_per_million_rows * rows / 1e6

    def cdc_seconds(self, changes: float, tables: int, rows_per_table: float) -> float:
        return (
            self.overhead_seconds
            + max(0, tables - 1) * self.table_seconds(rows_per_table)
            + changes / self.changes_per_second
        )

    @property
    def bytes_due_per_change(self) -> float:
        return self.bytes_per_row * (DELETING_SHARE / self.delete_ratio_threshold + WRITING_SHARE)

    def maintenance_seconds(
        self, tables: int, rewrite_bytes: float, expiry: bool = False, due_tables: int = 0
    ) -> float:
        """One pass over `tables` source tables, `due_tables` of them changed since the last pass (each costs
        its rewrite's jobs and commit), that rewrites `rewrite_bytes` (within its budget) and, once a day,
        expires snapshots and removes orphans."""
        visited = tables * self.maintained_tables_per_table
        return (
            self.overhead_seconds
            + visited * (self.maintenance_table_seconds + (self.expiry_seconds_per_table if expiry else 0.0))
            + due_tables * self.maintenance_due_table_seconds
            + min(rewrite_bytes, self.rewrite_budget_bytes) / self.rewrite_bytes_per_second
        )

    @classmethod
    def from_results(cls, many_tables: Path | None = None, maintenance: Path | None = None) -> Measured:
        """These defaults, with the per-table cost (and a pass's cost of a table with nothing due) from a
        `bench/many_tables.py` JSON and the maintenance
        figures from a `bench/maintenance.py` JSON (its `planner` block) where given."""
        figures: dict[str, float] = {}
        sources: list[str] = []
        if many_tables is not None:
            document = json.loads(many_tables.read_text())
            figures["table_fixed_seconds"] = float(document["summary"]["seconds_per_table"])
            if passes := document.get("maintenance_passes"):  # the last finds nothing due: a table left alone
                figures["maintenance_table_seconds"] = float(passes[-1]["seconds_per_table"])
                first, alone = passes[0], float(passes[-1]["seconds_per_table"])
                if due_tables := first["tables"] - first["nothing_due"]:
                    spent = first["wall_seconds"] - first["nothing_due"] * alone
                    figures["maintenance_due_table_seconds"] = spent / due_tables
            sources.append(many_tables.name)
        if maintenance is not None:
            planner = json.loads(maintenance.read_text()).get("planner", {})
            known = {f.name for f in fields(cls)} - {"sources"}
            figures |= {name: float(value) for name, value in planner.items() if name in known}
            sources.append(maintenance.name)
        return replace(cls(), **figures, sources=tuple(sources))


@dataclass(frozen=True)
class RunSize:
    """One run's workers as each engine bills them, at the template's defaults: Glue CdcNumberOfWorkers=2 of
    CdcWorkerType=G.1X (2 DPU, start-up billed); EMR Serverless a driver of 2 vCPU / 8 GB and one executor of
    4 vCPU / 16 GB (the application's spark-defaults), billed from when they are ready, each at least a minute.
    With `emr_pre_initialized` (EmrPreInitializedExecutors=1, the template's default: the driver and the
    executor kept warm) a run starts in `emr_warm_start_seconds` and the pool is billed for as long as the
    application is started: all day, as a loop that drains every few minutes never leaves it idle for
    EmrIdleTimeoutMinutes; without it, each run waits `emr_start_seconds` for its workers (unbilled)."""

    glue_dpus: float = 2.0
    glue_start_seconds: float = 10.0
    emr_workers: int = 2  # the driver and its executors
    emr_vcpu: float = 4.0  # an executor's
    emr_memory_gb: float = 16.0
    emr_driver_vcpu: float = 2.0
    emr_driver_memory_gb: float = 8.0
    emr_start_seconds: float = 60.0
    emr_pre_initialized: bool = True
    emr_warm_start_seconds: float = 5.0

    @property
    def emr_run_vcpu(self) -> float:
        """The vCPUs of one run's workers: the driver's and the executors'."""
        return self.emr_driver_vcpu + (self.emr_workers - 1) * self.emr_vcpu

    @property
    def emr_run_memory_gb(self) -> float:
        return self.emr_driver_memory_gb + (self.emr_workers - 1) * self.emr_memory_gb


@dataclass(frozen=True)
class DeploymentDay:
    cdc_runs: int
    refine_runs: int
    maintenance_runs: int
    changes: float
    audit_runs: int
    busy_hours: float  # the loop's time in runs (start-ups included) out of the day
    end_hours: float  # when the last of the day's files was applied
    glue_dpu_hours: float
    emr_vcpu_hours: float
    emr_gb_hours: float
    freshness_p50: float
    freshness_p95: float
    cdc_hours: float = 0.0  # of busy_hours: CDC runs, start-ups included
    maintenance_hours: float = 0.0  # of busy_hours: maintenance passes, start-ups included
    rewritten_gb: float = 0.0  # what the day's passes rewrote
    due_gb_left: float = 0.0  # due at the day's end, beyond the passes' budgets
    pauses: int = 0  # RunPaceSeconds pauses: batches that emptied the queue, with a pace

    def keeps_up(self, hours: float = 24.0) -> bool:
        """The day's changes are applied within the day (plus an hour: the last runs' own time)."""
        return self.end_hours <= hours + 1.0

    def glue_usd(self, usd_per_dpu_hour: float = PRICES["glue_usd_per_dpu_hour"]) -> float:
        return self.glue_dpu_hours * usd_per_dpu_hour

    def emr_usd(
        self,
        usd_per_vcpu_hour: float = PRICES["emr_serverless_usd_per_vcpu_hour"],
        usd_per_gb_hour: float = PRICES["emr_serverless_usd_per_gb_hour"],
    ) -> float:
        return self.emr_vcpu_hours * usd_per_vcpu_hour + self.emr_gb_hours * usd_per_gb_hour


def deployment_day(
    plan: Deployment, measured: Measured, size: RunSize, engine: str = "glue"
) -> DeploymentDay:
    """A day of the state machine's loop for `plan`, one thing at a time: a CDC run per batch (a batch: the
    files landed so far, at most `max_files_per_run`; `loop_wait` when none has; after a batch that emptied
    the queue, a pause of `run_pace`: auto is 60 s, none on EMR Serverless's warm pool), a refine run after
    `refine_every` batches once `refine_every_minutes` have passed since the last refine started, the raw
    audit (its fixed cost) once `audit_every_minutes` have passed since the last, a maintenance pass after
    every `maintenance_every` (a slice: what the changes made due since, within its budget; the first pass
    after each day's start also expires and removes orphans);
    each run after its engine's start-up. Billed: Glue `dpus x max(60 s, start + run)` per run; EMR Serverless
    `workers x max(60 s, run)` per run (start-up unbilled), in vCPU- and GB-hours. Files land round-robin
    over the tables, so a batch of n files touches min(n, tables) tables; each file's freshness is the end of
    the run that applied it (less `commit_before_end_seconds`: its commit) less its landing."""
    warm = engine != "glue" and size.emr_pre_initialized
    pace = plan.run_pace if plan.run_pace is not None else (0.0 if warm else 60.0)
    start = size.glue_start_seconds if engine == "glue" else size.emr_start_seconds
    start = size.emr_warm_start_seconds if warm else start
    horizon = plan.hours * 3600
    spacing = plan.file_interval / plan.tables
    changes_per_file = plan.changes_per_day * plan.file_interval / (plan.tables * 86_400)
    files = int(horizon / spacing)
    clock, next_file, batches, due, rewritten, expired_days, since_pass = 0.0, 0, 0, 0.0, 0.0, 0, 0
    pauses = 0
    since_refine, last_refine = 0, -float("inf")
    audit_period = plan.audit_every_minutes * 60 or float("inf")
    next_audit = audit_period
    runs: list[tuple[str, float]] = []
    fresh: list[float] = []
    while next_file < files:
        landed_by = min(files, int(clock / spacing))  # files 0 .. landed_by-1 have landed
        count = min(plan.max_files_per_run, landed_by - next_file)
        if count <= 0:
            clock += plan.loop_wait
            continue
        touched = min(count, plan.tables)
        seconds = measured.cdc_seconds(count * changes_per_file, touched, plan.rows_per_table)
        clock += start + seconds
        applied = clock - measured.commit_before_end_seconds
        fresh += [applied - (next_file + i + 1) * spacing for i in range(count)]
        next_file += count
        since_pass += count
        due += count * changes_per_file * measured.bytes_due_per_change
        batches += 1
        since_refine += 1
        runs.append(("cdc", start + seconds))
        rested = clock - last_refine >= plan.refine_every_minutes * 60
        if since_refine >= plan.refine_every and rested:
            seconds = measured.overhead_seconds + measured.refine_seconds
            since_refine, last_refine = 0, clock
            clock += start + seconds
            runs.append(("refine", start + seconds))
        if batches % plan.maintenance_every == 0:
            expiry = int(clock // 86_400) >= expired_days
            expired_days += expiry
            slice_bytes = min(due, measured.rewrite_budget_bytes)
            seconds = measured.maintenance_seconds(
                plan.tables, slice_bytes, expiry, min(plan.tables, since_pass)
            )
            since_pass = 0
            due, rewritten = due - slice_bytes, rewritten + slice_bytes
            clock += start + seconds
            runs.append(("maintenance", start + seconds))
        if landed_by - next_file == 0 and pace > 0:  # the batch emptied the queue: a pause before the next
            clock += pace
            pauses += 1
        if clock >= next_audit:
            clock += start + measured.overhead_seconds
            runs.append(("audit", start + measured.overhead_seconds))
            next_audit = clock + audit_period
    glue_seconds = sum(max(MINIMUM_BILLED_SECONDS, s - start + size.glue_start_seconds) for _, s in runs)
    emr_seconds = sum(max(MINIMUM_BILLED_SECONDS, s - start) for _, s in runs)  # of a run's workers
    if warm:
        emr_seconds = max(horizon, clock)
    quantiles = statistics.quantiles(fresh, n=20, method="inclusive")
    return DeploymentDay(
        cdc_runs=sum(kind == "cdc" for kind, _ in runs),
        refine_runs=sum(kind == "refine" for kind, _ in runs),
        maintenance_runs=sum(kind == "maintenance" for kind, _ in runs),
        changes=next_file * changes_per_file,
        audit_runs=sum(kind == "audit" for kind, _ in runs),
        busy_hours=sum(s for _, s in runs) / 3600,
        end_hours=clock / 3600,
        glue_dpu_hours=glue_seconds * size.glue_dpus / 3600,
        emr_vcpu_hours=emr_seconds * size.emr_run_vcpu / 3600,
        emr_gb_hours=emr_seconds * size.emr_run_memory_gb / 3600,
        freshness_p50=statistics.median(fresh),
        freshness_p95=quantiles[18],
        cdc_hours=sum(s for kind, s in runs if kind == "cdc") / 3600,
        maintenance_hours=sum(s for kind, s in runs if kind == "maintenance") / 3600,
        rewritten_gb=rewritten / 1e9,
        due_gb_left=due / 1e9,
        pauses=pauses,
    )


# Full-load rates on 2 local cores (bench/RESULTS.md section 7: a new 8-column table, CSV 1M rows, Parquet 10M).
FULL_LOAD_ROWS_PER_SECOND = {"csv": 162_000.0, "parquet": 475_000.0}


def full_load_hours(
    rows: float, rows_per_second_per_core: float, cores: int, overhead_seconds: float
) -> float:
    """Hours of a full load spread over `cores` executor cores at a measured per-core rate (linear scaling: an
    assumption) plus a run's fixed cost."""
    return (rows / (rows_per_second_per_core * cores) + overhead_seconds) / 3600


def meets_goal(day: DeploymentDay, hours: float = 24.0, p95_seconds: float = 300.0) -> bool:
    """Keeps up with the day, and a file's freshness p95 is at most `p95_seconds`."""
    return day.keeps_up(hours) and day.freshness_p95 <= p95_seconds


def deployment_markdown(plan: Deployment, glue: DeploymentDay, emr: DeploymentDay) -> str:
    rows = [
        ("CDC / refine / maintenance / raw audit runs per day", lambda d: f"{d.cdc_runs:,} / {d.refine_runs:,} / {d.maintenance_runs:,} / {d.audit_runs}"),
        ("changes applied per day", lambda d: f"{d.changes / 1e6:,.1f}M"),
        ("hours in runs (start-ups included) / last file applied at", lambda d: f"{d.busy_hours:.1f} h / {d.end_hours:.1f} h"),
        ("of which CDC / maintenance", lambda d: f"{d.cdc_hours:.1f} h / {d.maintenance_hours:.2f} h"),
        ("maintenance: rewritten / still due at the end", lambda d: f"{d.rewritten_gb:.1f} / {d.due_gb_left:.1f} GB"),
        ("keeps up with the day", lambda d: "yes" if d.keeps_up(plan.hours) else "**no**"),
        ("freshness p50 / p95 (landed -> applied)", lambda d: f"{d.freshness_p50 / 60:.1f} / {d.freshness_p95 / 60:.1f} min"),
    ]  # fmt: skip
    lines = ["| per day | Glue | EMR Serverless |", "| --- | ---: | ---: |"]
    lines += [f"| {label} | {value(glue)} | {value(emr)} |" for label, value in rows]
    lines.append(f"| billed compute | **{glue.glue_dpu_hours:,.1f} DPU-hours** | "
                 f"**{emr.emr_vcpu_hours:,.1f} vCPU-hours + {emr.emr_gb_hours:,.1f} GB-hours** |")  # fmt: skip
    lines.append(f"| list price, us-east-1 | {glue.glue_usd():,.2f} USD | {emr.emr_usd():,.2f} USD |")
    return "\n".join(lines)


def loop_settings(plan: Deployment) -> str:
    return (
        f"MaxFilesPerRun={plan.max_files_per_run}, LoopWaitSeconds={plan.loop_wait:g}, "
        f"RunPaceSeconds={'auto' if plan.run_pace is None else f'{plan.run_pace:g}'}, "
        f"RefineEveryNBatches={plan.refine_every}, RefineEveryMinutes={plan.refine_every_minutes:g}, "
        f"MaintenanceEveryNBatches={plan.maintenance_every}"
    )


def cheapest_meeting_goal(
    plan: Deployment, measured: Measured, size: RunSize, p95_seconds: float = 300.0
) -> tuple[Deployment, DeploymentDay, DeploymentDay] | None:
    """Of a grid of loop settings around `plan`, the one that keeps up with p95 at most `p95_seconds` on both
    engines at the lowest Glue bill (then EMR Serverless's), or None."""
    best: tuple[float, float, Deployment, DeploymentDay, DeploymentDay] | None = None
    for files in sorted({plan.max_files_per_run, 1000, 3000}):
        for refine in sorted({plan.refine_every, 5, 10, 20, 50}):
            for maintain in sorted({plan.maintenance_every, 10, 50, 100, 200}):
                candidate = replace(
                    plan, max_files_per_run=files, refine_every=refine, maintenance_every=maintain
                )
                glue = deployment_day(candidate, measured, size, "glue")
                if not meets_goal(glue, plan.hours, p95_seconds):
                    continue
                emr = deployment_day(candidate, measured, size, "emr")
                if meets_goal(emr, plan.hours, p95_seconds):
                    key = (round(glue.glue_usd(), 2), round(emr.emr_usd(), 2))
                    if best is None or key < best[:2]:
                        best = (*key, candidate, glue, emr)
    return None if best is None else best[2:]


def deployment_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description="A deployment's billed compute per day")
    parser.add_argument("--rows", type=float, default=1e9, help="rows in the clean zone, all tables")
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--changes-per-day", type=float, default=50e6)
    parser.add_argument("--file-interval", type=float, default=60, help="DMS CdcMaxBatchInterval, s")
    parser.add_argument("--loop-wait-seconds", type=float, default=60, help="template LoopWaitSeconds")
    parser.add_argument("--max-files-per-run", type=int, default=500, help="template MaxFilesPerRun")
    parser.add_argument("--refine-every", type=int, default=5, help="template RefineEveryNBatches")
    parser.add_argument(
        "--refine-every-minutes", type=float, default=15.0, help="template RefineEveryMinutes"
    )
    parser.add_argument(
        "--run-pace-seconds", type=float, default=None, help="template RunPaceSeconds (default: auto)"
    )
    parser.add_argument("--maintenance-every", type=int, default=50, help="template MaintenanceEveryNBatches")
    parser.add_argument("--many-tables", type=Path, help="a bench/many_tables.py JSON: the per-table costs")
    parser.add_argument("--maintenance", type=Path, help="a bench/maintenance.py JSON with a planner block")
    parser.add_argument("--table-seconds", type=float, help="instead: the cost of each further table, s")
    parser.add_argument("--p95-minutes", type=float, default=5.0, help="the freshness goal")
    parser.add_argument(
        "--search",
        action="store_true",
        help="when the settings miss the goal: the cheapest grid setting that meets it",
    )
    args = parser.parse_args(argv)
    plan = Deployment(
        args.rows, args.tables, args.changes_per_day, file_interval=args.file_interval,
        loop_wait=args.loop_wait_seconds, max_files_per_run=args.max_files_per_run,
        refine_every=args.refine_every, refine_every_minutes=args.refine_every_minutes,
        maintenance_every=args.maintenance_every, run_pace=args.run_pace_seconds,
    )  # fmt: skip
    measured = Measured.from_results(args.many_tables, args.maintenance)
    if args.table_seconds is not None:
        measured = replace(measured, table_fixed_seconds=args.table_seconds)
    size = RunSize()
    print(
        f"{plan.rows:,.0f} rows in {plan.tables} tables, {plan.changes_per_day:,.0f} changes/day; {measured}"
    )
    glue = deployment_day(plan, measured, size, "glue")
    emr = deployment_day(plan, measured, size, "emr")
    print(f"\n{loop_settings(plan)}:")
    print(deployment_markdown(plan, glue, emr))
    goal = args.p95_minutes * 60
    met = meets_goal(glue, plan.hours, goal) and meets_goal(emr, plan.hours, goal)
    print(
        f"goal (keeps up, freshness p95 <= {args.p95_minutes:g} min) on both engines: {'met' if met else 'missed'}"
    )
    cold = deployment_day(plan, measured, replace(size, emr_pre_initialized=False), "emr")
    print(
        f"EMR Serverless with EmrPreInitializedExecutors=0 (each run waits {size.emr_start_seconds:g} s for its "
        f"workers, billed only while runs go): freshness p50 / p95 {cold.freshness_p50 / 60:.1f} / "
        f"{cold.freshness_p95 / 60:.1f} min, keeps up: {'yes' if cold.keeps_up(plan.hours) else 'no'}, "
        f"{cold.emr_vcpu_hours:,.1f} vCPU-hours + {cold.emr_gb_hours:,.1f} GB-hours, {cold.emr_usd():,.2f} USD"
    )
    if not met and args.search:
        found = cheapest_meeting_goal(plan, measured, size, goal)
        if found is None:
            print("no setting of the grid meets it")
        else:
            candidate, glue, emr = found
            print(f"\ncheapest that meets it: {loop_settings(candidate)}:")
            print(deployment_markdown(candidate, glue, emr))
    # Once: the full load at the defaults (Glue FullLoadNumberOfWorkers=10 of G.2X: 20 DPU, 9 executors of 8
    # cores; EMR Serverless EmrMaximumVcpu=64: 15 executors of 4 vCPU and a driver), at the per-core rates of
    # bench/RESULTS.md section 7 (2 local cores: CSV 162k rows/s, Parquet 475k rows/s), scaling linearly.
    for label, rate in (
        ("CSV", FULL_LOAD_ROWS_PER_SECOND["csv"]),
        ("Parquet", FULL_LOAD_ROWS_PER_SECOND["parquet"]),
    ):
        glue_hours = full_load_hours(plan.rows, rate / 2, 72, measured.overhead_seconds)
        emr_hours = full_load_hours(plan.rows, rate / 2, 60, measured.overhead_seconds)
        print(f"full load once, {label}: Glue {glue_hours * 20:.2f} DPU-hours ({glue_hours * 60:.0f} min on 20 DPU); "
              f"EMR Serverless {emr_hours * 64:.1f} vCPU-hours + {emr_hours * 256:.1f} GB-hours "
              f"({emr_hours * 60:.0f} min on 64 vCPU): a lower bound (linear scaling)")  # fmt: skip
    return 0

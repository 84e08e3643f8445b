"""Deployment planner: a deployment's billed compute per day on Glue and on EMR Serverless, from the
per-run costs measured in bench/RESULTS.md, and whether the state machine's loop keeps up with the day.

    .venv/bin/python bench/cost_model.py deployment          # --rows --tables --changes-per-day --max-files-per-run …

A day of the loop for N tables of R rows and C changes a day: CDC runs, a refine run every few batches, a
maintenance run every few more; each run's seconds from `Measured`, billed as each engine bills a run of
`RunSize` workers (the prices and the 1-minute minimum of bench/cost_model.py). Also a lower bound of the
full load's compute at the template's defaults.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

if __package__:  # imported as bench.deployment_planner (the tests)
    from bench.cost_model import MINIMUM_BILLED_SECONDS, PRICES
else:  # imported by bench/cost_model.py run as a script: bench/ is on sys.path
    from cost_model import MINIMUM_BILLED_SECONDS, PRICES


@dataclass(frozen=True)
class Deployment:
    """What a user plans: `rows` in `tables` tables of equal size, `changes_per_day` spread evenly over the
    day and the tables, DMS writing one file per table every `file_interval` seconds; the template's
    defaults for the loop (LoopWaitSeconds, MaxFilesPerRun, RefineEveryNBatches, MaintenanceEveryNBatches)."""

    rows: float = 1e9
    tables: int = 100
    changes_per_day: float = 50e6
    file_interval: float = 60.0
    loop_wait: float = 60.0
    max_files_per_run: int = 500
    refine_every: int = 5
    maintenance_every: int = 50
    hours: float = 24.0

    @property
    def rows_per_table(self) -> float:
        return self.rows / self.tables


@dataclass(frozen=True)
class Measured:
    """Per-run costs measured on this repository's benchmark machine (bench/RESULTS.md; 2 local cores stand in
    for one run's workers, as in the engine table):
    - a run's fixed cost and the apply's throughput: the line of section 4 (39.2 s + 40,254 changes/s, a 10M-row
      table, CSV); the fixed cost holds the MERGE of one table;
    - each further table a batch touches: 1.30 s (section 1, perfile-session: a few changes into a 1M-row
      table, the changes' own time taken out) + 0.026 s per million rows (bench/RESULTS.md, "Cost growth": a
      batch of 1,000 changes into 10M and 100M rows, medians 2.8 and 5.1 s warm; the MERGE reads the key
      column of every row through a Bloom filter of the batch's keys). Before the apply jobs stopped
      broadcasting it was 0.654 s per million rows (section 1): a small batch's MERGE shuffled every key;
    - a maintenance pass: 13-16 s for one 1M-row table with its ledger and tombstones (section 6), taken as
      15 s per million rows of every table (a MERGE-on-read batch leaves deletes on every data file, so
      compaction rewrites each table whole);
    - a refine run: its fixed cost only (the refine job's own work depends on the refined model; not measured)."""

    overhead_seconds: float = 39.2
    changes_per_second: float = 40_254.0
    table_fixed_seconds: float = 1.30
    table_seconds_per_million_rows: float = 0.026
    maintenance_seconds_per_million_rows: float = 15.0
    refine_seconds: float = 0.0

    def table_seconds(self, rows: float) -> float:
        return self.table_fixed_seconds + self.table_seconds_per_million_rows * rows / 1e6

    def cdc_seconds(self, changes: float, tables: int, rows_per_table: float) -> float:
        return (
            self.overhead_seconds
            + max(0, tables - 1) * self.table_seconds(rows_per_table)
            + changes / self.changes_per_second
        )

    def maintenance_seconds(self, rows: float) -> float:
        return self.overhead_seconds + self.maintenance_seconds_per_million_rows * rows / 1e6


@dataclass(frozen=True)
class RunSize:
    """One run's workers as each engine bills them, at the template's defaults: Glue CdcNumberOfWorkers=2 of
    CdcWorkerType=G.1X (2 DPU, start-up billed); EMR Serverless a driver and one executor of 4 vCPU / 16 GB (the
    application's worker size), billed from when they are ready, each at least a minute."""

    glue_dpus: float = 2.0
    glue_start_seconds: float = 10.0
    emr_workers: int = 2
    emr_vcpu: float = 4.0
    emr_memory_gb: float = 16.0
    emr_start_seconds: float = 60.0


@dataclass(frozen=True)
class DeploymentDay:
    cdc_runs: int
    refine_runs: int
    maintenance_runs: int
    changes: float
    busy_hours: float  # the loop's time in runs (start-ups included) out of the day
    end_hours: float  # when the last of the day's files was applied
    glue_dpu_hours: float
    emr_vcpu_hours: float
    emr_gb_hours: float
    freshness_p50: float
    freshness_p95: float

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
    """A day of the state machine's loop for `plan` (one thing at a time: CDC runs, a refine run after every
    `refine_every` batches, a maintenance run after every `maintenance_every`), its runs' durations on `engine`
    (its start-up before each run) and what both engines would bill for them: Glue `dpus x max(60 s, start +
    run)` per run; EMR Serverless `workers x max(60 s, run)` per run (start-up unbilled), in vCPU- and
    GB-hours. Files land round-robin over the tables, so a batch of n files touches min(n, tables) tables."""
    start = size.glue_start_seconds if engine == "glue" else size.emr_start_seconds
    horizon = plan.hours * 3600
    spacing = plan.file_interval / plan.tables
    changes_per_file = plan.changes_per_day * plan.file_interval / (plan.tables * 86_400)
    files = int(horizon / spacing)
    clock, next_file, batches = 0.0, 0, 0
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
        first_landed = (next_file + 1) * spacing
        last_landed = (next_file + count) * spacing
        fresh += [clock - first_landed, clock - (first_landed + last_landed) / 2, clock - last_landed]
        next_file += count
        batches += 1
        runs.append(("cdc", seconds))
        if batches % plan.refine_every == 0:
            seconds = measured.overhead_seconds + measured.refine_seconds
            clock += start + seconds
            runs.append(("refine", seconds))
        if batches % plan.maintenance_every == 0:
            seconds = measured.maintenance_seconds(plan.rows)
            clock += start + seconds
            runs.append(("maintenance", seconds))
    glue_seconds = sum(max(MINIMUM_BILLED_SECONDS, size.glue_start_seconds + s) for _, s in runs)
    emr_seconds = sum(max(MINIMUM_BILLED_SECONDS, s) for _, s in runs) * size.emr_workers
    quantiles = statistics.quantiles(fresh, n=20, method="inclusive")
    return DeploymentDay(
        cdc_runs=sum(kind == "cdc" for kind, _ in runs),
        refine_runs=sum(kind == "refine" for kind, _ in runs),
        maintenance_runs=sum(kind == "maintenance" for kind, _ in runs),
        changes=next_file * changes_per_file,
        busy_hours=sum(start + s for _, s in runs) / 3600,
        end_hours=clock / 3600,
        glue_dpu_hours=glue_seconds * size.glue_dpus / 3600,
        emr_vcpu_hours=emr_seconds * size.emr_vcpu / 3600,
        emr_gb_hours=emr_seconds * size.emr_memory_gb / 3600,
        freshness_p50=statistics.median(fresh),
        freshness_p95=quantiles[18],
    )


# Full-load rates on 2 local cores (bench/RESULTS.md section 7: a new 8-column table, CSV 1M rows, Parquet 10M).
FULL_LOAD_ROWS_PER_SECOND = {"csv": 162_000.0, "parquet": 475_000.0}


def full_load_hours(
    rows: float, rows_per_second_per_core: float, cores: int, overhead_seconds: float
) -> float:
    """Hours of a full load spread over `cores` executor cores at a measured per-core rate (linear scaling: an
    assumption) plus a run's fixed cost."""
    return (rows / (rows_per_second_per_core * cores) + overhead_seconds) / 3600


def deployment_markdown(plan: Deployment, glue: DeploymentDay, emr: DeploymentDay) -> str:
    rows = [
        ("CDC / refine / maintenance runs per day", lambda d: f"{d.cdc_runs:,} / {d.refine_runs:,} / {d.maintenance_runs:,}"),
        ("changes applied per day", lambda d: f"{d.changes / 1e6:,.1f}M"),
        ("hours in runs (start-ups included) / last file applied at", lambda d: f"{d.busy_hours:.1f} h / {d.end_hours:.1f} h"),
        ("keeps up with the day", lambda d: "yes" if d.keeps_up(plan.hours) else "**no**"),
        ("freshness p50 / p95 (landed -> applied)", lambda d: f"{d.freshness_p50 / 60:.1f} / {d.freshness_p95 / 60:.1f} min"),
    ]  # fmt: skip
    lines = ["| per day | Glue | EMR Serverless |", "| --- | ---: | ---: |"]
    lines += [f"| {label} | {value(glue)} | {value(emr)} |" for label, value in rows]
    lines.append(f"| billed compute | **{glue.glue_dpu_hours:,.1f} DPU-hours** | "
                 f"**{emr.emr_vcpu_hours:,.1f} vCPU-hours + {emr.emr_gb_hours:,.1f} GB-hours** |")  # fmt: skip
    lines.append(f"| list price, us-east-1 | {glue.glue_usd():,.2f} USD | {emr.emr_usd():,.2f} USD |")
    return "\n".join(lines)


def deployment_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description="A deployment's billed compute per day")
    parser.add_argument("--rows", type=float, default=1e9, help="rows in the clean zone, all tables")
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--changes-per-day", type=float, default=50e6)
    parser.add_argument("--loop-wait-seconds", type=float, default=60, help="template LoopWaitSeconds")
    parser.add_argument("--max-files-per-run", type=int, default=500, help="template MaxFilesPerRun")
    parser.add_argument(
        "--try-max-files",
        type=int,
        nargs="*",
        default=[1000, 1500, 2000, 3000, 5000, 10000],
        help="when the default falls behind: larger MaxFilesPerRun to try, the first that keeps up printed",
    )
    parser.add_argument("--refine-every", type=int, default=5, help="template RefineEveryNBatches")
    parser.add_argument("--maintenance-every", type=int, default=50, help="template MaintenanceEveryNBatches")
    parser.add_argument(
        "--table-seconds-per-million-rows", type=float, default=Measured.table_seconds_per_million_rows
    )
    parser.add_argument("--maintenance-seconds-per-million-rows", type=float,
                        default=Measured.maintenance_seconds_per_million_rows)  # fmt: skip
    args = parser.parse_args(argv)
    plan = Deployment(
        args.rows, args.tables, args.changes_per_day, loop_wait=args.loop_wait_seconds,
        max_files_per_run=args.max_files_per_run, refine_every=args.refine_every,
        maintenance_every=args.maintenance_every,
    )  # fmt: skip
    measured = Measured(
        table_seconds_per_million_rows=args.table_seconds_per_million_rows,
        maintenance_seconds_per_million_rows=args.maintenance_seconds_per_million_rows,
    )
    size = RunSize()
    print(
        f"{plan.rows:,.0f} rows in {plan.tables} tables, {plan.changes_per_day:,.0f} changes/day; {measured}"
    )
    for files in [plan.max_files_per_run, *(n for n in args.try_max_files if n > plan.max_files_per_run)]:
        candidate = replace(plan, max_files_per_run=files)
        glue = deployment_day(candidate, measured, size, "glue")
        emr = deployment_day(candidate, measured, size, "emr")
        print(f"\nMaxFilesPerRun={files}:")
        print(deployment_markdown(candidate, glue, emr))
        if glue.keeps_up(plan.hours) and emr.keeps_up(plan.hours):
            break
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

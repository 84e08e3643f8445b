"""Cost model: Glue DPU-seconds per million changes, one Glue run per file vs batched runs.

    .venv/bin/python bench/cost_model.py                        # from the newest bench/data/results/*.json
    .venv/bin/python bench/cost_model.py --results bench/data/results/<time>.json --price-per-dpu-hour 0.44
    .venv/bin/python bench/cost_model.py deployment             # a deployment's day (bench/deployment_planner.py)

A CDC run costs `overhead + changes / throughput` seconds. Both are fitted from two measured job processes
of `bench/run.py` on the same table: `perfile-job` (one process on one file) and `cdc-job` (one process on
the whole manifest): two points, one line. Overhead is what every run pays whatever its size (JVM, Spark
session, catalog, planning, commit); Glue adds its own start-up (`--glue-start-seconds`, an assumption:
measure yours in the job run's `ExecutionTime` vs the apply time in its report).

Then a discrete-event simulation of a day of arrivals: every `--file-interval` seconds (its
`CdcMaxBatchInterval`) DMS writes one file per changed table, `--tables` of them, spread over the interval;
each holds `rate * interval / tables` changes.
- per file: every file starts its own Glue run at once (runs overlap; Glue bills each for at least 60 s).
- batched: our state machine: drain whatever is queued (≤ MaxFilesPerRun), run it, and wait
  `--loop-wait-seconds` only when the queue was empty.
Billed DPU-seconds = DPUs * max(60, run seconds) per run (Glue 2.0+: per second, 1 minute minimum).
Freshness = a file's landing → the end of the run that applied it.

Local seconds stand in for Glue seconds: this machine's 2 cores are fewer than 2 G.1X workers (8 vCPU), so the
Glue figures should be no worse, but that is an assumption, not a measurement.

Engines (SparkEngine): the batched schedule priced on AWS Glue and on EMR Serverless, same workers
(Glue G.1X = 4 vCPU, 16 GB = 1 DPU; EMR Serverless workers of 4 vCPU, 16 GB). Glue bills DPU-hours per second
with a 1-minute minimum per run, its start-up included; EMR Serverless bills each worker's vCPU-hours and
GB-hours per second with a 1-minute minimum per worker, from when the worker is ready (its start-up delays the
run, unbilled), and pre-initialized workers for as long as the application is started (a CDC loop every
`--loop-wait-seconds` keeps it started all day: auto-stop needs an idle timeout of quiet). Ephemeral storage
(20 GB free per worker) is not counted. List prices, us-east-1, x86, as of 2026-11-24 (`PRICES`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "data" / "results"
MINIMUM_BILLED_SECONDS = 60.0

# On-demand list prices, us-east-1, x86 (aws.amazon.com/glue/pricing, aws.amazon.com/emr/pricing), 2026-11-24.
PRICES: dict[str, float] = {
    "glue_usd_per_dpu_hour": 0.44,
    "emr_serverless_usd_per_vcpu_hour": 0.052624,
    "emr_serverless_usd_per_gb_hour": 0.0057785,
}


@dataclass(frozen=True)
class RunCost:
    """Seconds of one CDC run of `changes` changes: `overhead + changes / throughput`."""

    overhead_seconds: float
    changes_per_second: float

    def seconds(self, changes: float) -> float:
        return self.overhead_seconds + changes / self.changes_per_second


@dataclass(frozen=True)
class Scenario:
    rate: float  # changes per second arriving at the source
    file_interval: float  # DMS CdcMaxBatchInterval: seconds between two files of one table
    tables: int  # tables with changes: files per interval
    loop_wait: float
    max_files_per_run: int
    dpus: float
    glue_start: float
    hours: float = 24.0


@dataclass(frozen=True)
class Outcome:
    runs: int
    dpu_seconds_per_million: float
    usd_per_million: float
    freshness_p50: float
    freshness_p95: float


def fit(per_file: tuple[int, float], batched: tuple[int, float]) -> RunCost:
    """The line through (changes, seconds) of a one-file run and a whole-batch run."""
    (n1, s1), (n2, s2) = per_file, batched
    if n2 <= n1 or s2 <= s1:
        raise ValueError(f"need a bigger, slower batched run: per-file {per_file}, batched {batched}")
    throughput = (n2 - n1) / (s2 - s1)
    return RunCost(max(0.0, s1 - n1 / throughput), throughput)


def _billed(seconds: float, dpus: float) -> float:
    return dpus * max(MINIMUM_BILLED_SECONDS, seconds)


def _outcome(
    scenario: Scenario, billed: float, changes: float, runs: int, fresh: list[float], price: float
) -> Outcome:
    per_million = billed * 1_000_000 / changes
    quantiles = statistics.quantiles(fresh, n=20, method="inclusive") if len(fresh) > 1 else fresh * 19
    return Outcome(runs, per_million, per_million / 3600 * price, statistics.median(fresh), quantiles[18])


def per_file(scenario: Scenario, cost: RunCost, price: float) -> Outcome:
    files = int(scenario.hours * 3600 / scenario.file_interval) * scenario.tables
    changes_per_file = scenario.rate * scenario.file_interval / scenario.tables
    seconds = scenario.glue_start + cost.seconds(changes_per_file)
    billed = files * _billed(seconds, scenario.dpus)
    return _outcome(scenario, billed, files * changes_per_file, files, [seconds] * files, price)


def schedule(
    scenario: Scenario, cost: RunCost, start_seconds: float
) -> tuple[list[float], list[float], float]:
    """The state machine's loop over a day: each run's seconds (its start-up included), each file's
    freshness (landed → applied), and the changes applied."""
    horizon = scenario.hours * 3600
    changes_per_file = scenario.rate * scenario.file_interval / scenario.tables
    spacing = scenario.file_interval / scenario.tables
    landed = [i * spacing for i in range(1, int(horizon / spacing) + 1)]
    clock, next_file, applied = 0.0, 0, 0
    durations: list[float] = []
    fresh: list[float] = []
    while next_file < len(landed):
        queued = [t for t in landed[next_file : next_file + scenario.max_files_per_run] if t <= clock]
        if not queued:
            clock += scenario.loop_wait
            continue
        seconds = start_seconds + cost.seconds(len(queued) * changes_per_file)
        clock += seconds
        fresh.extend(clock - t for t in queued)
        next_file += len(queued)
        applied += len(queued)
        durations.append(seconds)
    return durations, fresh, applied * changes_per_file


def batched(scenario: Scenario, cost: RunCost, price: float) -> Outcome:
    durations, fresh, changes = schedule(scenario, cost, scenario.glue_start)
    billed = sum(_billed(seconds, scenario.dpus) for seconds in durations)
    return _outcome(scenario, billed, changes, len(durations), fresh, price)


@dataclass(frozen=True)
class Engine:
    """How one Spark engine runs and bills a CDC run of the batched schedule."""

    name: str
    usd_per_hour: float  # every worker of one run together, while it runs
    start_seconds: float  # from the start request to the script running
    start_billed: bool  # Glue bills its start-up; EMR Serverless bills a worker once it is ready
    workers: int = 1  # EMR Serverless bills its 1-minute minimum per worker: the same for all of a run's
    idle_usd_per_hour: float = 0.0  # pre-initialized workers, billed while the application is started


def glue_engine(
    dpus: float, start_seconds: float, usd_per_dpu_hour: float = PRICES["glue_usd_per_dpu_hour"]
) -> Engine:
    return Engine("Glue", dpus * usd_per_dpu_hour, start_seconds, start_billed=True)


def emr_serverless_engine(
    workers: int,
    vcpu: float,
    memory_gb: float,
    start_seconds: float,
    pre_initialized_workers: int = 0,
    usd_per_vcpu_hour: float = PRICES["emr_serverless_usd_per_vcpu_hour"],
    usd_per_gb_hour: float = PRICES["emr_serverless_usd_per_gb_hour"],
    driver_vcpu: float | None = None,
    driver_memory_gb: float | None = None,
) -> Engine:
    """`workers` of a run (its driver and executors) of `vcpu` and `memory_gb` each, the driver of its own size
    when given (the template's: 2 vCPU, 8 GB); `pre_initialized_workers` of them (the driver among them) kept
    warm and billed all day."""
    worker_hour = vcpu * usd_per_vcpu_hour + memory_gb * usd_per_gb_hour
    driver_hour = (vcpu if driver_vcpu is None else driver_vcpu) * usd_per_vcpu_hour + (
        memory_gb if driver_memory_gb is None else driver_memory_gb
    ) * usd_per_gb_hour
    name = (
        f"EMR Serverless, {pre_initialized_workers} pre-initialized"
        if pre_initialized_workers
        else ("EMR Serverless")
    )
    return Engine(
        name,
        driver_hour + (workers - 1) * worker_hour,
        start_seconds,
        start_billed=False,
        workers=workers,
        idle_usd_per_hour=driver_hour + (pre_initialized_workers - 1) * worker_hour
        if pre_initialized_workers
        else 0.0,
    )


@dataclass(frozen=True)
class EngineDay:
    engine: str
    runs: int
    usd_per_day: float
    usd_per_million: float
    freshness_p50: float
    freshness_p95: float


def engine_day(scenario: Scenario, cost: RunCost, engine: Engine) -> EngineDay:
    """A day of the batched schedule on `engine`. A pre-initialized pool is billed all day: runs come at
    least every loop, so the application never idles long enough to auto-stop (its pool runs the runs, which
    cost nothing more unless they need more workers than the pool holds; here they never do)."""
    durations, fresh, changes = schedule(scenario, cost, engine.start_seconds)
    usd = engine.idle_usd_per_hour * scenario.hours
    if not engine.idle_usd_per_hour:
        unbilled = 0.0 if engine.start_billed else engine.start_seconds
        usd += sum(max(MINIMUM_BILLED_SECONDS, s - unbilled) for s in durations) * engine.usd_per_hour / 3600
    quantiles = statistics.quantiles(fresh, n=20, method="inclusive") if len(fresh) > 1 else fresh * 19
    return EngineDay(
        engine.name,
        len(durations),
        usd,
        usd * 1_000_000 / changes,
        statistics.median(fresh),
        quantiles[18],
    )


def engines_markdown(rows: Sequence[tuple[Scenario, Sequence[EngineDay]]]) -> str:
    names = [day.engine for day in rows[0][1]]
    lines = [
        "| changes/s | tables | " + " | ".join(f"{n}: USD/day, per 1M, fresh p50/p95" for n in names) + " |",
        "| ---: | ---: | " + " | ".join("---:" for _ in names) + " |",
    ]
    for scenario, days in rows:
        cells = [
            f"{d.usd_per_day:,.2f}, {d.usd_per_million:,.3f}, {d.freshness_p50:.0f}/{d.freshness_p95:.0f} s"
            for d in days
        ]
        lines.append(f"| {scenario.rate:,.0f} | {scenario.tables} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def from_results(path: Path) -> tuple[RunCost, dict[str, object]]:
    document = json.loads(path.read_text())
    figures = document["figures"]

    def point(prefix: str, rows: int) -> tuple[int, float]:
        match = next(f for f in figures if f["name"].startswith(prefix) and f["rows"] == rows)
        return match["units"], match["median"]

    sizes = sorted(
        {f["rows"] for f in figures if f["name"].startswith("perfile-job")}
        & {f["rows"] for f in figures if f["name"].startswith("cdc-job")}
    )
    if not sizes:
        raise SystemExit(f"{path}: needs both perfile-job and cdc-job figures (bench/run.py default parts)")
    rows = sizes[-1]
    one, whole = point("perfile-job", rows), point("cdc-job", rows)
    return fit(one, whole), {"results": path.name, "table_rows": rows, "per_file": one, "batched": whole}


def markdown(rows: Sequence[tuple[Scenario, Outcome, Outcome]]) -> str:
    lines = [
        "| changes/s | tables | runs/day per-file | runs/day batched | DPU-s per 1M changes per-file "
        "| batched | ratio | USD per 1M per-file | batched | freshness p50/p95 per-file | batched |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s, one, many in rows:
        lines.append(
            f"| {s.rate:,.0f} | {s.tables} | {one.runs:,} | {many.runs:,} "
            f"| {one.dpu_seconds_per_million:,.0f} | {many.dpu_seconds_per_million:,.0f} "
            f"| {one.dpu_seconds_per_million / many.dpu_seconds_per_million:.1f}x "
            f"| {one.usd_per_million:.3f} | {many.usd_per_million:.3f} "
            f"| {one.freshness_p50:.0f}/{one.freshness_p95:.0f} s | {many.freshness_p50:.0f}/"
            f"{many.freshness_p95:.0f} s |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, help="a bench/run.py results JSON (default: the newest)")
    parser.add_argument("--overhead-seconds", type=float, help="instead of the fit: seconds every run pays")
    parser.add_argument("--changes-per-second", type=float, help="instead of the fit: apply throughput")
    parser.add_argument("--rates", type=float, nargs="+", default=[10, 100, 1_000, 10_000])
    parser.add_argument("--file-interval", type=float, default=60, help="DMS CdcMaxBatchInterval, s")
    parser.add_argument("--tables", type=int, nargs="+", default=[1, 20], help="tables with changes")
    parser.add_argument("--loop-wait-seconds", type=float, default=60, help="template LoopWaitSeconds")
    parser.add_argument("--max-files-per-run", type=int, default=500, help="template MaxFilesPerRun")
    parser.add_argument("--dpus", type=float, default=2, help="CdcNumberOfWorkers * DPU per worker (G.1X: 1)")
    parser.add_argument("--glue-start-seconds", type=float, default=10, help="Glue start-up billed per run")
    parser.add_argument("--price-per-dpu-hour", type=float, default=0.44, help="USD (us-east-1 list price)")
    engines = parser.add_argument_group("engines: the batched schedule on Glue and on EMR Serverless")
    engines.add_argument("--emr-workers", type=int, default=2, help="driver + executors of a run")
    engines.add_argument("--emr-vcpu", type=float, default=4, help="vCPU per EMR Serverless executor")
    engines.add_argument("--emr-memory-gb", type=float, default=16, help="GB per EMR Serverless executor")
    engines.add_argument(
        "--emr-driver-vcpu", type=float, default=2, help="the driver's vCPU (the template's)"
    )
    engines.add_argument(
        "--emr-driver-memory-gb", type=float, default=8, help="the driver's GB (the template's)"
    )
    engines.add_argument(
        "--emr-start-seconds", type=float, default=60, help="EMR Serverless run start without a warm pool"
    )
    engines.add_argument(
        "--emr-warm-start-seconds",
        type=float,
        default=5,
        help="EMR Serverless run start from pre-initialized workers",
    )
    engines.add_argument(
        "--price-per-vcpu-hour", type=float, default=PRICES["emr_serverless_usd_per_vcpu_hour"], help="USD"
    )
    engines.add_argument(
        "--price-per-gb-hour", type=float, default=PRICES["emr_serverless_usd_per_gb_hour"], help="USD"
    )
    args = parser.parse_args(argv)

    source: dict[str, object] = {}
    if args.overhead_seconds is not None and args.changes_per_second is not None:
        cost = RunCost(args.overhead_seconds, args.changes_per_second)
    else:
        path = args.results or max(RESULTS.glob("2*.json"), default=None, key=lambda p: p.name)
        if path is None:
            raise SystemExit(
                "no results: run bench/run.py first, or give --overhead-seconds and --changes-per-second"
            )
        cost, source = from_results(path)
    print(f"fit: {source or 'given'} → overhead {cost.overhead_seconds:.1f} s per run, "
          f"{cost.changes_per_second:,.0f} changes/s")  # fmt: skip
    print(
        f"settings: file every {args.file_interval:.0f} s, loop wait {args.loop_wait_seconds:.0f} s, "
        f"{args.dpus:g} DPU, Glue start {args.glue_start_seconds:.0f} s, {args.price_per_dpu_hour} USD/DPU-h, "
        f"minimum billed {MINIMUM_BILLED_SECONDS:.0f} s per run"
    )
    rows = []
    for tables, rate in ((t, r) for t in args.tables for r in args.rates):
        scenario = Scenario(
            rate, args.file_interval, tables, args.loop_wait_seconds, args.max_files_per_run, args.dpus,
            args.glue_start_seconds,
        )  # fmt: skip
        rows.append((scenario, per_file(scenario, cost, args.price_per_dpu_hour),
                     batched(scenario, cost, args.price_per_dpu_hour)))  # fmt: skip
    print(markdown(rows))

    on = [
        glue_engine(args.dpus, args.glue_start_seconds, args.price_per_dpu_hour),
        emr_serverless_engine(
            args.emr_workers, args.emr_vcpu, args.emr_memory_gb, args.emr_start_seconds,
            usd_per_vcpu_hour=args.price_per_vcpu_hour, usd_per_gb_hour=args.price_per_gb_hour,
            driver_vcpu=args.emr_driver_vcpu, driver_memory_gb=args.emr_driver_memory_gb,
        ),
        emr_serverless_engine(
            args.emr_workers, args.emr_vcpu, args.emr_memory_gb, args.emr_warm_start_seconds,
            pre_initialized_workers=args.emr_workers,
            usd_per_vcpu_hour=args.price_per_vcpu_hour, usd_per_gb_hour=args.price_per_gb_hour,
            driver_vcpu=args.emr_driver_vcpu, driver_memory_gb=args.emr_driver_memory_gb,
        ),
    ]  # fmt: skip
    print(
        f"\nengines (batched): Glue {args.dpus:g} DPU at {args.price_per_dpu_hour} USD/DPU-h, start "
        f"{args.glue_start_seconds:.0f} s billed; EMR Serverless a driver ({args.emr_driver_vcpu:g} vCPU, "
        f"{args.emr_driver_memory_gb:g} GB) and {args.emr_workers - 1} x ({args.emr_vcpu:g} vCPU, "
        f"{args.emr_memory_gb:g} GB) at {args.price_per_vcpu_hour} USD/vCPU-h + {args.price_per_gb_hour} "
        f"USD/GB-h, start {args.emr_start_seconds:.0f} s (warm pool {args.emr_warm_start_seconds:.0f} s) "
        f"unbilled; {MINIMUM_BILLED_SECONDS:.0f} s minimum per run / per worker"
    )
    print(
        engines_markdown([(scenario, [engine_day(scenario, cost, e) for e in on]) for scenario, _, _ in rows])
    )
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["deployment"]:
        from deployment_planner import deployment_main

        sys.exit(deployment_main(sys.argv[2:]))
    sys.exit(main(sys.argv[1:]))

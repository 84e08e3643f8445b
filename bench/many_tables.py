"""What each further table of a CDC batch costs: one warm session, a lake of many small tables, and batches
touching 1, 10, 50 and 100 of them (one DMS file of a few changes each: an update, an insert, a delete)
through the real apply (`lakehouse.apply.cdc.apply_cdc`, as bench/run.py's cdc-session). For each batch: its
wall seconds, the Spark JVM's CPU seconds, the Spark jobs it ran, the table metadata loads and the commits it made into the tables it
touched and into the pipeline's own shared tables (the ledger, the tombstones, the quarantine, freshness).
Then a least-squares line through (tables touched, seconds): its slope is the warm cost of each further
table, its intercept what a batch pays whatever its width. Then maintenance passes over the lake (the second
finds little or nothing due: what a pass pays a table it leaves alone). Not a test: nothing here asserts a
timing.

    .venv/bin/python bench/many_tables.py                                 # 100 tables, batches of 1/10/50/100
    .venv/bin/python bench/many_tables.py --tables 12 --widths 1 4 12 --rounds 1   # a smoke run

Writes bench/results/many-tables-<UTC time>.json (read by bench/deployment_planner.py) and prints a summary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(ROOT / "spark_jobs")]

from lakehouse.apply.cdc import apply_cdc  # noqa: E402
from lakehouse.apply.full_load import full_load  # noqa: E402
from lakehouse.base.config import LakeConfig  # noqa: E402
from lakehouse.io import iceberg  # noqa: E402
from lakehouse.io.session import APPLY_TUNING, build_session  # noqa: E402
from lakehouse.maintenance.run import maintain  # noqa: E402

from tests.support import DmsWriter, manifest, schema_of  # noqa: E402

RESULTS = BENCH / "results"
SOURCE_SCHEMA = "shop"
COLUMNS = ["sku", "qty", "label"]


def table_names(count: int) -> list[str]:
    return [f"{SOURCE_SCHEMA}.t{number:03d}" for number in range(count)]


@dataclass(frozen=True)
class Line:
    """seconds = intercept + slope x tables, fitted by least squares."""

    intercept: float
    slope: float

    def at(self, tables: float) -> float:
        return self.intercept + self.slope * tables


def fit_line(points: Sequence[tuple[float, float]]) -> Line:
    """The least-squares line through (x, y) points of at least two distinct x."""
    if len({x for x, _ in points}) < 2:
        raise ValueError("need points at two or more distinct x")
    slope, intercept = statistics.linear_regression([x for x, _ in points], [y for _, y in points])
    return Line(intercept, slope)


def commits_between(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """Commits per table between two readings of each table's metadata version (a table first seen after
    counts from 0); the tables without a commit left out."""
    made = {name: version - before.get(name, 0) for name, version in after.items()}
    return {name: count for name, count in sorted(made.items()) if count}


def split_commits(commits: Mapping[str, int], replica_prefix: str) -> tuple[int, dict[str, int]]:
    """Commits into the replica tables (their names start with `replica_prefix`), summed, and the commits into
    every other table (the pipeline's own, shared by all replicas), by name."""
    replicas = sum(count for name, count in commits.items() if name.startswith(replica_prefix))
    shared = {name: count for name, count in commits.items() if not name.startswith(replica_prefix)}
    return replicas, shared


def metadata_versions(warehouse: Path) -> dict[str, int]:
    """Each table's current metadata version in a hadoop-catalog warehouse, as `database/table`."""
    versions = {}
    for hint in warehouse.glob("*/*/metadata/version-hint.text"):
        table_dir = hint.parent.parent
        versions[f"{table_dir.parent.name}/{table_dir.name}"] = int(hint.read_text().strip())
    return versions


def children_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process's children so far: the Spark JVM (Linux /proc)."""
    total, ticks = 0.0, os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def jobs_so_far(spark: Any) -> int:
    """Spark jobs submitted by this session's context so far (the scheduler's next job id), whatever their
    thread or job group."""
    next_id = spark.sparkContext._jsc.sc().dagScheduler().nextJobId()  # an AtomicInteger, or py4j's int
    return int(next_id if isinstance(next_id, int) else next_id.get())


@contextlib.contextmanager
def counting_loads(spark: Any, loads: list[str]) -> Iterator[None]:
    """Every table metadata load meanwhile appended to `loads`: the library's `iceberg_table` (a catalog load)
    and the session catalog's `tableExists` and `refreshTable` (each a load of the table's metadata)."""
    original = iceberg.iceberg_table
    patched = [m for m in list(sys.modules.values()) if (m.__name__ or "").startswith("lakehouse")]
    patched = [m for m in patched if getattr(m, "iceberg_table", None) is original]

    def counted_load(session: Any, table: str) -> Any:
        loads.append(table)
        return original(session, table)

    catalog = type(spark.catalog)
    methods = {name: getattr(catalog, name) for name in ("tableExists", "refreshTable")}

    def counted(method: Any) -> Any:
        def call(self: Any, table: str, *rest: Any) -> Any:
            loads.append(table)
            return method(self, table, *rest)

        return call

    for module in patched:
        module.iceberg_table = counted_load  # type: ignore[attr-defined]
    for name, method in methods.items():
        setattr(catalog, name, counted(method))
    try:
        yield
    finally:
        for module in patched:
            module.iceberg_table = original  # type: ignore[attr-defined]
        for name, method in methods.items():
            setattr(catalog, name, method)


@dataclass
class Batch:
    tables: int
    round: int
    wall_seconds: float
    jvm_cpu_seconds: float
    jobs: int
    metadata_loads: int
    replica_commits: int
    shared_commits: dict[str, int]
    load_average: list[float]


class ManyTables:
    """A lake of `count` small tables of `rows` rows each, full-loaded once, and batches applied to it."""

    def __init__(self, root: Path, count: int, rows: int) -> None:
        self.config = LakeConfig(
            warehouse=str(root / "warehouse"), staging_dir=str(root / "staging"), clean_database="bench"
        )
        self.warehouse = root / "warehouse"
        self.names = table_names(count)
        columns = [("sku", "int"), ("qty", "bigint"), ("label", "varchar(20)")]
        self.schema = schema_of({name: (["sku"], columns) for name in self.names})
        self.dms = DmsWriter(root / "dms")
        self.rows = rows
        self.next_key = rows
        self.batches = 0

    def load(self, spark: Any) -> None:
        for name in self.names:
            self.dms.load(name, COLUMNS, [(k, k, f"row {k}") for k in range(self.rows)])
        report = full_load(spark, self.config, self.schema, str(self.dms.root))
        if report.failed:
            raise RuntimeError(f"full load failed: {report.failed[0]}")

    def batch_files(self, width: int) -> list[str]:
        """One CDC file for each of `width` tables (rotating through them): an update, an insert, a delete."""
        first = self.batches * width
        names = [self.names[(first + offset) % len(self.names)] for offset in range(width)]
        files = []
        for name in names:
            self.next_key += 1
            changes = [
                ("U", (self.next_key % self.rows, self.batches, "updated")),
                ("I", (self.next_key, 1, None)),
                ("D", ((self.next_key + 7) % self.rows, 0, None)),
            ]
            files.append(self.dms.cdc(name, COLUMNS, changes))
        return files

    def apply(self, spark: Any, width: int, round_number: int) -> Batch:
        files = self.batch_files(width)
        self.batches += 1
        before_versions, before_jobs = metadata_versions(self.warehouse), jobs_so_far(spark)
        load = [round(x, 2) for x in os.getloadavg()]
        cpu, started = children_cpu_seconds(), time.perf_counter()
        loads: list[str] = []
        with counting_loads(spark, loads):
            report = apply_cdc(spark, self.config, self.schema, manifest(*files, run_id=f"b{self.batches}"))
        wall, cpu = time.perf_counter() - started, children_cpu_seconds() - cpu
        if report.failed:
            raise RuntimeError(f"apply failed: {report.failed[0]}")
        commits = commits_between(before_versions, metadata_versions(self.warehouse))
        replicas, shared = split_commits(commits, f"{self.config.clean_database}/{SOURCE_SCHEMA}_")
        return Batch(
            width, round_number, round(wall, 3), round(cpu, 2), jobs_so_far(spark) - before_jobs,
            len(loads), replicas, shared, load,
        )  # fmt: skip


def maintenance_pass(spark: Any, config: LakeConfig) -> dict[str, Any]:
    """One maintenance pass over the lake (lakehouse.maintenance.run.maintain, its defaults), timed."""
    load, started = [round(x, 2) for x in os.getloadavg()], time.perf_counter()
    report = maintain(spark, config)
    wall = time.perf_counter() - started
    tables = report.tables
    return {
        "wall_seconds": round(wall, 3),
        "tables": len(tables),
        "nothing_due": sum(t.nothing_due for t in tables),
        "spark_jobs": report.spark_jobs,
        "due_bytes": sum(t.due_bytes for t in tables),
        "rewritten_bytes": sum(t.rewritten_bytes for t in tables),
        "failed": len(report.failed),
        "seconds_per_table": round(wall / max(1, len(tables)), 3),
        "load_average": load,
    }


def summary(batches: Sequence[Batch]) -> dict[str, Any]:
    """Per width: median seconds, CPU, jobs, commits; and the lines through them (the per-table cost)."""
    widths = sorted({b.tables for b in batches})
    per_width = {}
    for width in widths:
        these = [b for b in batches if b.tables == width]
        per_width[str(width)] = {
            "batches": len(these),
            "median_wall_seconds": round(statistics.median(b.wall_seconds for b in these), 3),
            "median_jvm_cpu_seconds": round(statistics.median(b.jvm_cpu_seconds for b in these), 2),
            "median_jobs": statistics.median(b.jobs for b in these),
            "median_metadata_loads": statistics.median(b.metadata_loads for b in these),
            "replica_commits": statistics.median(b.replica_commits for b in these),
            "shared_commits": statistics.median(sum(b.shared_commits.values()) for b in these),
        }
    wall = fit_line([(b.tables, b.wall_seconds) for b in batches])
    cpu = fit_line([(b.tables, b.jvm_cpu_seconds) for b in batches])
    jobs = fit_line([(b.tables, float(b.jobs)) for b in batches])
    loads = fit_line([(b.tables, float(b.metadata_loads)) for b in batches])
    shared = fit_line([(b.tables, float(sum(b.shared_commits.values()))) for b in batches])
    return {
        "per_width": per_width,
        "seconds_per_table": round(wall.slope, 3),
        "seconds_fixed": round(wall.intercept, 3),
        "jvm_cpu_seconds_per_table": round(cpu.slope, 3),
        "jobs_per_table": round(jobs.slope, 2),
        "jobs_fixed": round(jobs.intercept, 1),
        "metadata_loads_per_table": round(loads.slope, 2),
        "metadata_loads_fixed": round(loads.intercept, 1),
        "shared_commits_per_table": round(shared.slope, 3),
        "shared_commits_fixed": round(shared.intercept, 2),
    }


def markdown(result: Mapping[str, Any]) -> str:
    lines = [
        "| tables in the batch | batches | wall s (median) | JVM CPU s | Spark jobs | metadata loads | commits: replicas / shared |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for width, row in result["summary"]["per_width"].items():
        lines.append(
            f"| {width} | {row['batches']} | {row['median_wall_seconds']:.2f} | {row['median_jvm_cpu_seconds']:.2f} "
            f"| {row['median_jobs']:g} | {row['median_metadata_loads']:g} "
            f"| {row['replica_commits']:g} / {row['shared_commits']:g} |"
        )
    s = result["summary"]
    lines.append(
        f"\nEach further table: **{s['seconds_per_table']:.3f} s** wall ({s['jvm_cpu_seconds_per_table']:.3f} JVM "
        f"CPU-s), {s['jobs_per_table']:.2f} Spark jobs, {s['metadata_loads_per_table']:.2f} metadata loads, "
        f"{s['shared_commits_per_table']:.3f} shared commits; "
        f"a batch's fixed part {s['seconds_fixed']:.2f} s, {s['jobs_fixed']:.1f} jobs, "
        f"{s['shared_commits_fixed']:.2f} shared commits."
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=int, default=100, help="tables in the lake (the widest batch)")
    parser.add_argument("--rows", type=int, default=200, help="rows of each table")
    parser.add_argument("--widths", type=int, nargs="+", default=[1, 10, 50, 100], help="tables per batch")
    parser.add_argument("--rounds", type=int, default=3, help="batches of each width (interleaved)")
    parser.add_argument("--warmups", type=int, default=1, help="throw-away batches of the widest width")
    parser.add_argument(
        "--maintenance-passes",
        type=int,
        default=2,
        help="timed passes after the batches (the last: nothing due)",
    )
    args = parser.parse_args(argv)
    if max(args.widths) > args.tables:
        parser.error("--widths: no batch can touch more tables than --tables")
    started_at, load_start = datetime.now(UTC), [round(x, 2) for x in os.getloadavg()]
    lake = ManyTables(Path(tempfile.mkdtemp(prefix="many-tables-")), args.tables, args.rows)
    spark = build_session(lake.config, "many-tables", APPLY_TUNING)
    try:
        began = time.perf_counter()
        lake.load(spark)
        load_seconds = time.perf_counter() - began
        print(f"full load of {args.tables} tables: {load_seconds:.1f}s", flush=True)
        for number in range(args.warmups):
            warm = lake.apply(spark, max(args.widths), -1 - number)
            print(f"warm-up: {warm.tables} tables {warm.wall_seconds:.2f}s", flush=True)
        batches = []
        for round_number in range(args.rounds):
            for width in args.widths:
                batch = lake.apply(spark, width, round_number)
                batches.append(batch)
                print(
                    f"round {round_number}, {width} tables: {batch.wall_seconds:.2f}s, {batch.jobs} jobs, "
                    f"{batch.metadata_loads} loads, "
                    f"commits {batch.replica_commits} + {batch.shared_commits} (load {batch.load_average[0]})",
                    flush=True,
                )
        passes = [maintenance_pass(spark, lake.config) for _ in range(args.maintenance_passes)]
        for number, done in enumerate(passes):
            print(f"maintenance pass {number}: {done}", flush=True)
    finally:
        spark.stop()
    result: dict[str, Any] = {
        "command": "python bench/many_tables.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "at": started_at.isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_average": {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]},
        "settings": vars(args),
        "full_load_seconds": round(load_seconds, 1),
        "batches": [asdict(b) for b in batches],
        "summary": summary(batches),
        "maintenance_passes": passes,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"many-tables-{started_at:%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print("\n" + markdown(result) + f"\n\nJSON: {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

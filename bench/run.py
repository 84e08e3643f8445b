"""Benchmarks of the Spark pipeline (issue 6). Not tests: nothing here asserts a timing.

    .venv/bin/python bench/run.py --quick                    # smoke run, small sizes, < 2 min
    .venv/bin/python bench/run.py --rows 1000000 10000000    # CDC at 1M and 10M rows + full load
    .venv/bin/python bench/run.py --rows 10000000 --only cdc-session --variants baseline,window-dedup

Measured side by side on the same generated DMS files (bench/data/, cached):
- cdc-job:        our CDC job, one process (`spark_jobs/cdc_job.py`) on one manifest of all files
- cdc-session:    the same apply in a warm session (apply_cdc), per optimisation variant
- perfile-job:    the per-file baseline: one job process per file (a Glue run per file), sampled
- perfile-session: the same job in the same session, one apply per file, sampled
- pyiceberg:      PyIceberg delete + upsert of the same changes in one transaction
- full-load:      DMS LOAD files → a new Iceberg table (full_load) vs the pyarrow floor (the same files →
                  zstd Parquet), narrow in each --formats, wide from CSV

Each table is built once by our full load and restored to that snapshot before every measured run
(its metadata folder is put back; data files are never deleted), so every run does the same work.
Results: printed as Markdown and written to bench/data/results/<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(BENCH), str(ROOT / "spark_jobs")]

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.csv as pacsv  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from datasets import DATA, Dataset, wide_load_raw  # noqa: E402
from experiments import session_patches, table_setups  # noqa: E402
from generate import NARROW, SOURCE_SCHEMA, WIDE, cdc_ops_and_keys, write_schema  # noqa: E402

PYTHON = sys.executable
CDC_JOB = ROOT / "spark_jobs" / "cdc_job.py"
ALL_PARTS = ("full-load", "cdc-job", "cdc-session", "perfile-job", "perfile-session", "pyiceberg")


@dataclass
class Figure:
    """One measured quantity: every run's seconds, the load average before each run, the units."""

    name: str
    rows: int
    units: int  # changes or rows processed by one run
    unit: str
    seconds: list[float] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) if self.seconds else float("nan")

    @property
    def per_second(self) -> float:
        return self.units / self.median if self.seconds else float("nan")


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def timed(figure: Figure, action: Callable[[], Any], before: Callable[[], Any] | None = None) -> Any:
    if before:
        before()
    figure.load.append(load_average())
    started = time.perf_counter()
    result = action()
    figure.seconds.append(round(time.perf_counter() - started, 3))
    print(
        f"  {figure.name} rows={figure.rows}: {figure.seconds[-1]:.2f}s (load {figure.load[-1]})", flush=True
    )
    return result


# ---------------------------------------------------------------- the table and its base snapshot


@dataclass(frozen=True)
class Lake:
    warehouse: Path
    schema_file: Path
    shuffle_partitions: int

    def database(self, rows: int, fmt: str = "csv") -> str:
        return f"rows_{rows}" if fmt == "csv" else f"rows_{rows}_{fmt}"

    def table_dir(self, database: str, table: str) -> Path:
        return self.warehouse / database / f"{SOURCE_SCHEMA}_{table}"

    def config(self, database: str):
        from lakehouse.base.config import LakeConfig

        return LakeConfig(
            warehouse=str(self.warehouse),
            clean_database=database,
            schema_file=str(self.schema_file),
            staging_dir=str(DATA / "staging"),
            shuffle_partitions=self.shuffle_partitions,
        )

    def job_arguments(self, database: str) -> list[str]:
        return [
            "--catalog_type", "hadoop",
            "--warehouse", str(self.warehouse),
            "--clean_database", database,
            "--schema_file", str(self.schema_file),
            "--staging_dir", str(DATA / "staging"),
            "--shuffle_partitions", str(self.shuffle_partitions),
        ]  # fmt: skip


def backup_dir(table_dir: Path) -> Path:
    return DATA / "base-metadata" / table_dir.parent.name / table_dir.name


# The pipeline's own tables beside the replica: which files it applied, which keys it deleted. A batch
# applied again after a restore must find them as they were after the full load, or it is skipped.
STATE_TABLES = ("dms_applied_files", "dms_tombstones")


def backup_base(table_dir: Path) -> None:
    """Keep the metadata of the table and of the pipeline's own tables as they are after the full load."""
    for folder in (table_dir, *(table_dir.parent / name for name in STATE_TABLES)):
        if (folder / "metadata").exists():
            shutil.copytree(folder / "metadata", backup_dir(folder))


def restore(table_dir: Path) -> None:
    """Put the table (and the pipeline's own tables) back to the base snapshot after the full load."""
    for folder in (table_dir, *(table_dir.parent / name for name in STATE_TABLES)):
        backup = backup_dir(folder)
        if backup.exists():
            shutil.rmtree(folder / "metadata", ignore_errors=True)
            shutil.copytree(backup, folder / "metadata")


def base_metadata_json(table_dir: Path) -> Path:
    hint = (table_dir / "metadata" / "version-hint.text").read_text().strip()
    return table_dir / "metadata" / f"v{hint}.metadata.json"


def build_base(spark, lake: Lake, dataset: Dataset, figures: list[Figure]) -> Path:
    """Full-load the dataset's table once (timed: the 10M-row full-load figure) and keep its metadata."""
    from lakehouse.apply.full_load import full_load
    from lakehouse.base.schema import SchemaFile

    database = lake.database(dataset.rows, dataset.fmt)
    table_dir = lake.table_dir(database, NARROW)
    if backup_dir(table_dir).exists():
        return table_dir
    raw = dataset.load_raw
    schema = SchemaFile.from_dict(json.loads(lake.schema_file.read_text()))
    figure = Figure(
        f"full-load-base (narrow, {dataset.fmt})",
        dataset.rows,
        dataset.rows,
        "rows",
        note="one run: builds the base",
    )
    report = timed(
        figure,
        lambda: full_load(
            spark, lake.config(database), schema, str(raw), [f"{SOURCE_SCHEMA}.{NARROW}"], reload=True
        ),
    )
    if report.failed:
        raise RuntimeError(f"full load failed: {report.failed}")
    figures.append(figure)
    backup_base(table_dir)
    return table_dir


def expected_rows(dataset: Dataset) -> int:
    """Rows after applying the batch, from the generator's ops and keys (no Iceberg involved)."""
    ops, keys = cdc_ops_and_keys(dataset.cdc_spec)
    frame = pa.table({"key": keys, "deleted": pa.array(ops == "D")})
    last = frame.group_by("key", use_threads=False).aggregate([("deleted", "last")])
    deleted = last["deleted_last"]
    existing = pc.less_equal(last["key"], dataset.rows)
    removed = pc.sum(pc.and_(existing, deleted).cast(pa.int64())).as_py() or 0
    added = pc.sum(pc.and_(pc.invert(existing), pc.invert(deleted)).cast(pa.int64())).as_py() or 0
    return dataset.rows - removed + added


# ---------------------------------------------------------------- manifests and job processes


def write_manifest(name: str, files: Sequence[Path]) -> Path:
    path = DATA / "manifests" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "version": 1,
        "run_id": name,
        "files": [{"uri": str(f), "size": f.stat().st_size} for f in files],
    }
    path.write_text(json.dumps(document))
    return path


def run_job(
    manifest: Path, lake: Lake, database: str, driver_memory: str, spark_conf: Sequence[str] = ()
) -> dict[str, Any]:
    """One CDC job process, as one Glue run: JVM start, session, apply, exit. Returns its report.
    `spark_conf` (KEY=VALUE) is passed to the process's Spark as `--conf`."""
    env = os.environ | {"LAKE_SPARK_DRIVER_MEMORY": driver_memory, "PYTHONPATH": str(ROOT / "spark_jobs")}
    if spark_conf:
        env["PYSPARK_SUBMIT_ARGS"] = " ".join(f"--conf {c}" for c in spark_conf) + " pyspark-shell"
    done = subprocess.run(
        [PYTHON, str(CDC_JOB), "--manifest", str(manifest), *lake.job_arguments(database)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"cdc job failed ({done.returncode}): {done.stderr[-3000:]}")
    return json.loads(done.stdout[done.stdout.index("{") :])


# ---------------------------------------------------------------- the measurements


def spark_session(lake: Lake, driver_memory: str):
    os.environ["LAKE_SPARK_DRIVER_MEMORY"] = driver_memory
    from lakehouse.io.session import APPLY_TUNING, build_session

    return build_session(lake.config("bench"), "bench", APPLY_TUNING)


def apply_in_session(spark, lake: Lake, database: str, files: Sequence[Path], run_id: str):
    from lakehouse.apply.cdc import apply_cdc
    from lakehouse.base.manifest import Manifest, ManifestFile
    from lakehouse.base.schema import SchemaFile

    schema = SchemaFile.from_dict(json.loads(lake.schema_file.read_text()))
    manifest = Manifest(run_id, tuple(ManifestFile(str(f), f.stat().st_size) for f in files))
    report = apply_cdc(spark, lake.config(database), schema, manifest)
    if report.failed:
        raise RuntimeError(f"apply failed: {report.failed[0].error}")
    return report


def table_name(lake: Lake, database: str) -> str:
    return f"lake.{database}.{SOURCE_SCHEMA}_{NARROW}"


def refreshed(spark, table: str) -> None:
    """Forget the cached metadata of the table and of the pipeline's own tables beside it (a restore
    replaced their metadata folders)."""
    database = table.rsplit(".", 1)[0]
    for name in (table, *(f"{database}.{state}" for state in STATE_TABLES)):
        if spark.catalog.tableExists(name):
            spark.sql(f"REFRESH TABLE {name}")


def measure_cdc(spark, lake: Lake, dataset: Dataset, args: argparse.Namespace, figures: list[Figure]) -> None:
    database = lake.database(dataset.rows, dataset.fmt)
    table_dir = build_base(spark, lake, dataset, figures)
    table = table_name(lake, database)
    files = dataset.cdc_files
    expected = expected_rows(dataset)
    n = dataset.changes
    per_file = n // len(files)

    def reset() -> None:
        spark.catalog.clearCache()  # what a variant kept of an earlier run (it reads the tables)
        restore(table_dir)
        refreshed(spark, table)

    def check(label: str) -> None:
        refreshed(spark, table)
        count = spark.table(table).count()
        if count != expected:
            raise RuntimeError(f"{label}: {count} rows after the batch, expected {expected}")

    if "cdc-session" in args.parts:
        # Warm up the JVM with whole throw-away applies of the same batch: the first applies in a JVM
        # run 1.5-2x slower (JIT), which handicapped whichever variant came first.
        for warmup in range(args.warmups):
            reset()
            apply_in_session(spark, lake, database, files, f"warmup{warmup}")
        for variant in args.variants:
            label = dataset.fmt if dataset.mix == "mixed" else f"{dataset.fmt}, {dataset.mix}"
            figure = Figure(f"cdc-session [{variant}, {label}]", dataset.rows, n, "changes")
            for run in range(args.runs):
                with session_patches(spark, variant):

                    def before(variant: str = variant) -> None:
                        reset()
                        for setup in table_setups(variant):
                            setup(spark, table)
                        refreshed(spark, table)

                    report = timed(
                        figure,
                        lambda run=run: apply_in_session(spark, lake, database, files, f"s{run}"),
                        before,
                    )
                check(figure.name)
                figure.extra = {"report_seconds": report.seconds}
            figures.append(figure)

    if "cdc-job" in args.parts:
        manifest = write_manifest(f"batch-{dataset.name}", files)
        figure = Figure("cdc-job (1 process, 1 manifest)", dataset.rows, n, "changes")
        apply_seconds = []
        for _ in range(args.runs):
            report = timed(
                figure, lambda: run_job(manifest, lake, database, args.driver_memory, args.job_conf), reset
            )
            apply_seconds.append(report["seconds"])
            check(figure.name)
        figure.extra = {"apply_seconds_in_job": apply_seconds}
        figures.append(figure)

    sample = files[: args.sample]
    if "perfile-session" in args.parts:
        reset()
        figure = Figure(
            f"perfile-session ({len(sample)} of {len(files)} files)", dataset.rows, per_file, "changes"
        )
        for index, path in enumerate(sample):
            timed(
                figure,
                lambda path=path, index=index: apply_in_session(spark, lake, database, [path], f"f{index}"),
            )
        figure.note = f"per file; x{len(files)} files extrapolated"
        figures.append(figure)

    if "perfile-job" in args.parts:
        reset()
        figure = Figure(
            f"perfile-job ({len(sample)} of {len(files)} files)", dataset.rows, per_file, "changes"
        )
        for index, path in enumerate(sample):
            manifest = write_manifest(f"one-{dataset.name}-{index}", [path])
            timed(
                figure,
                lambda manifest=manifest: run_job(
                    manifest, lake, database, args.driver_memory, args.job_conf
                ),
            )
        figure.note = f"per file; x{len(files)} files extrapolated"
        figures.append(figure)

    if "pyiceberg" in args.parts:
        reset()
        metadata = base_metadata_json(table_dir)
        figure = Figure("pyiceberg (delete + upsert, 1 transaction)", dataset.rows, n, "changes")
        for run in range(args.pyiceberg_runs):
            workdir = DATA / "pyiceberg" / f"{dataset.name}-{run}"
            command = [PYTHON, str(BENCH / "pyiceberg_apply.py"), "--metadata", str(metadata)]
            command += ["--workdir", str(workdir), *map(str, files)]
            figure.load.append(load_average())
            try:
                done = subprocess.run(
                    command, capture_output=True, text=True, check=True, timeout=args.pyiceberg_timeout
                )
            except subprocess.TimeoutExpired:
                figure.note = f"timed out after {args.pyiceberg_timeout}s (lower bound)"
                figure.seconds.append(float(args.pyiceberg_timeout))
                print(f"  pyiceberg: timeout {args.pyiceberg_timeout}s", flush=True)
                break
            finally:
                shutil.rmtree(workdir / "table" / "data", ignore_errors=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            figure.seconds.append(round(result["seconds"], 3))
            print(f"  pyiceberg rows={dataset.rows}: {result}", flush=True)
            if result["rows_after"] != expected:
                raise RuntimeError(f"pyiceberg: {result['rows_after']} rows, expected {expected}")
        figures.append(figure)
    reset()


def arrow_floor(raw_folder: Path, out: Path, target: pa.Schema, fmt: str = "csv") -> int:
    """The floor: pyarrow reads the same LOAD files (CSV typed as it parses; Parquet cast to the table's
    types, as DMS writes the change columns as text) and writes zstd Parquet, file by file."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    types = {f.name: f.type for f in target}
    rows = 0
    for path in sorted(raw_folder.glob(f"LOAD*.{fmt}")):
        if fmt == "parquet":
            read = pq.read_table(path)
            table = pa.table(
                [read[name].cast(types[name]) if name in types else read[name] for name in read.column_names],
                names=read.column_names,
            )
        else:
            table = pacsv.read_csv(
                path,
                parse_options=pacsv.ParseOptions(newlines_in_values=True),
                convert_options=pacsv.ConvertOptions(column_types=types, strings_can_be_null=True),
            )
        pq.write_table(table, out / f"{path.stem}.parquet", compression="zstd")
        rows += table.num_rows
    return rows


def measure_full_load(spark, lake: Lake, rows: int, args: argparse.Namespace, figures: list[Figure]) -> None:
    """The full load of a new table (dropped before each run, outside the timing) against the pyarrow
    floor on the same files: the narrow table in every format asked for, the wide one from CSV."""
    from lakehouse.apply.full_load import full_load
    from lakehouse.base.schema import SchemaFile

    schema = SchemaFile.from_dict(json.loads(lake.schema_file.read_text()))
    loads = [(NARROW, fmt, Dataset(rows, 0, fmt=fmt).load_raw) for fmt in args.format_list]
    if "csv" in args.format_list:
        loads.append((WIDE, "csv", wide_load_raw(rows)))
    for table, fmt, raw in loads:
        database = "full_load" if fmt == "csv" else f"full_load_{fmt}"
        qualified = f"{SOURCE_SCHEMA}.{table}"
        config = lake.config(database)
        clean = f"lake.{database}.{SOURCE_SCHEMA}_{table}"

        def drop(clean: str = clean) -> None:
            spark.sql(f"DROP TABLE IF EXISTS {clean} PURGE")

        def load(config=config, raw: Path = raw, qualified: str = qualified):
            return full_load(spark, config, schema, str(raw), [qualified])

        drop()
        load()  # warm-up: the same work once, to warm the JVM
        figure = Figure(f"full-load [{table}, {fmt}]", rows, rows, "rows")
        for _ in range(args.runs):
            report = timed(figure, load, drop)
            if report.failed or report.totals()["inserted_or_updated"] != rows:
                raise RuntimeError(f"full load of {qualified}: {report.to_dict()}")
        figures.append(figure)
        target = _arrow_schema(schema.tables[qualified])
        floor = Figure(f"arrow-floor [{table}, {fmt}]", rows, rows, "rows")
        for _ in range(args.runs):
            timed(floor, lambda raw=raw, table=table, target=target, fmt=fmt: arrow_floor(
                raw / SOURCE_SCHEMA / table, DATA / "arrow-floor" / f"{table}-{fmt}", target, fmt
            ))  # fmt: skip
        figures.append(floor)


def _arrow_schema(spec) -> pa.Schema:
    from pyspark.sql import types as T

    def arrow_type(data_type: T.DataType) -> pa.DataType:
        if isinstance(data_type, T.LongType):
            return pa.int64()
        if isinstance(data_type, T.IntegerType):
            return pa.int32()
        if isinstance(data_type, T.DecimalType):
            return pa.decimal128(data_type.precision, data_type.scale)
        if isinstance(data_type, T.DateType):
            return pa.date32()
        if isinstance(data_type, T.TimestampType | T.TimestampNTZType):
            return pa.timestamp("us")
        return pa.string()

    fields = [pa.field("Op", pa.string()), pa.field("dms_timestamp", pa.timestamp("us"))]
    fields.append(pa.field("AR_H_CHANGE_SEQ", pa.decimal128(38, 0)))
    return pa.schema(fields + [pa.field(f.name, arrow_type(f.dataType)) for f in spec.spark_schema()])


# ---------------------------------------------------------------- report


def machine() -> dict[str, Any]:
    memory = next(
        (
            line.split()[1]
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        ),
        "0",
    )
    import pyspark

    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "memory_gb": round(int(memory) / 1024 / 1024, 1),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "pyarrow": pa.__version__,
        "platform": platform.platform(),
    }


def markdown(figures: Sequence[Figure]) -> str:
    lines = [
        "| measurement | rows in table | work per run | runs (s) | median s | per second | load avg |",
        "| --- | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for f in figures:
        runs = ", ".join(f"{s:.2f}" for s in f.seconds)
        loads = ", ".join(f"{x:.1f}" for x in f.load)
        lines.append(
            f"| {f.name} | {f.rows:,} | {f.units:,} {f.unit} | {runs} | {f.median:.2f} | "
            f"{f.per_second:,.0f} {f.unit}/s | {loads} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description="Pipeline benchmarks (see bench/RESULTS.md)")
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000], help="table sizes for CDC")
    parser.add_argument("--change-ratio", type=float, default=0.1, help="changes per batch / table rows")
    parser.add_argument("--files", type=int, default=200, help="CDC files per batch")
    parser.add_argument("--formats", default="csv", help="comma list of DMS DataFormats: csv, parquet")
    parser.add_argument(
        "--mix",
        default="mixed",
        help="comma list of CDC batches: mixed (10%% D, 15%% I, 75%% U), inserts (new keys)",
    )
    parser.add_argument("--full-load-rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmups", type=int, default=2, help="throw-away applies before cdc-session")
    parser.add_argument("--sample", type=int, default=10, help="files measured in the per-file baselines")
    parser.add_argument("--pyiceberg-runs", type=int, default=3)
    parser.add_argument("--pyiceberg-timeout", type=int, default=900)
    parser.add_argument("--variants", default="baseline", help="comma list, see bench/experiments.py")
    parser.add_argument("--only", default=",".join(ALL_PARTS), help=f"comma list of {ALL_PARTS}")
    parser.add_argument("--shuffle-partitions", type=int, default=4, help="the jobs' --shuffle_partitions")
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument(
        "--job-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Spark setting of the job processes",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, one run each: a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.files, args.full_load_rows = [20_000], 20, 20_000
        args.runs, args.sample, args.pyiceberg_runs = 1, 2, 1
    args.parts = {p.strip() for p in args.only.split(",") if p.strip()}
    args.format_list = [f.strip() for f in args.formats.split(",") if f.strip()]
    args.mix_list = [m.strip() for m in args.mix.split(",") if m.strip()]
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = args.parts - set(ALL_PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}")

    lake = Lake(DATA / "warehouse", write_schema(DATA / "schema.json"), args.shuffle_partitions)
    info = machine()
    print(f"machine: {info}; load average {os.getloadavg()}", flush=True)
    figures: list[Figure] = []
    started = time.perf_counter()
    spark = spark_session(lake, args.driver_memory)
    try:
        for rows in args.rows if args.parts - {"full-load"} else []:
            for fmt in args.format_list:
                for mix in args.mix_list:
                    changes = max(args.files, int(rows * args.change_ratio))
                    dataset = Dataset(rows, changes, args.files, fmt, mix)
                    print(f"CDC: {dataset.name}", flush=True)
                    measure_cdc(spark, lake, dataset, args, figures)
        if "full-load" in args.parts:
            print(f"full load: {args.full_load_rows} rows", flush=True)
            measure_full_load(spark, lake, args.full_load_rows, args, figures)
    finally:
        spark.stop()
    table = markdown(figures)
    print(table)
    out = DATA / "results" / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": info,
        "argv": list(argv),
        "seconds": round(time.perf_counter() - started, 1),
        "figures": [asdict(f) | {"median": f.median, "per_second": f.per_second} for f in figures],
    }
    out.write_text(json.dumps(document, indent=2, default=str))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

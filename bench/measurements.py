"""The measurements of bench/run.py: CDC (the job process, the warm session per variant, the per-file
baselines, PyIceberg) on a table restored to its base snapshot, and the full load of a new table against the
pyarrow floor on the same files."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from datasets import DATA, Dataset, wide_load_raw
from experiments import session_patches, table_setups
from generate import NARROW, SOURCE_SCHEMA, WIDE
from lake_runs import (
    PYTHON,
    Lake,
    apply_in_session,
    base_metadata_json,
    build_base,
    check_rows,
    expected_rows,
    refreshed,
    reset_table,
    run_job,
    table_name,
    write_manifest,
)
from timings import Figure, load_average, timed

BENCH = Path(__file__).resolve().parent


def measure_cdc(spark, lake: Lake, dataset: Dataset, args: argparse.Namespace, figures: list[Figure]) -> None:
    database = lake.database(dataset.rows, dataset.fmt)
    table_dir = build_base(spark, lake, dataset, figures)
    table = table_name(lake, database)
    files = dataset.cdc_files
    expected = expected_rows(dataset)
    n = dataset.changes
    per_file = n // len(files)

    def reset() -> None:
        reset_table(spark, table_dir, table)

    def check(label: str) -> None:
        check_rows(spark, table, expected, label)

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
                        partial(apply_in_session, spark, lake, database, files, f"s{run}"),
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
                partial(apply_in_session, spark, lake, database, [path], f"f{index}"),
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
                partial(run_job, manifest, lake, database, args.driver_memory, args.job_conf),
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
            timed(
                floor,
                partial(
                    arrow_floor,
                    raw / SOURCE_SCHEMA / table,
                    DATA / "arrow-floor" / f"{table}-{fmt}",
                    target,
                    fmt,
                ),
            )
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

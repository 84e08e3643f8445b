"""What a DMS read costs with each record's file facts: the pieces of a first pass, timed in one process,
for A/B runs of two library versions (`--library`: the spark_jobs folder to import, e.g. an older commit's,
`git archive <commit> spark_jobs | tar -x -C /tmp/old`), alternated process by process.

Each piece's wall seconds and the CPU seconds of Spark's JVM (every thread: tasks, GC, JIT), which a
shared machine disturbs less. Pieces (each into Spark's `noop` sink unless said):
- `plain read`: Spark's own read of the files with `_metadata.file_path` and `row_index` (the floor),
- `read_dms_files`: the library's read, each record with its file's facts,
- `typed`: the read typed and validated (`typed_changes`),
- `first pass kept`: the typed valid rows persisted on disk and counted (the full load's first pass),
- `last change per key` (CDC files): typed, one change per key (the CDC batch's shuffle).

    .venv/bin/python bench/file_facts.py --rows 10000000 --format parquet
    .venv/bin/python bench/file_facts.py --rows 10000000 --format parquet --library /tmp/old/spark_jobs
    .venv/bin/python bench/file_facts.py --rows 10000000 --changes 1000000 --format parquet --cdc
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=1_000_000, help="with --cdc: the CDC batch's changes")
    parser.add_argument("--format", choices=("csv", "parquet"), default="parquet", help="DMS DataFormat")
    parser.add_argument("--cdc", action="store_true", help="the CDC batch's files instead of the LOAD files")
    parser.add_argument(
        "--library", type=Path, default=BENCH.parent / "spark_jobs", help="spark_jobs to import"
    )
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each piece, after one warm-up")
    parser.add_argument("--label", default="", help="a name for this variant in the output")
    parser.add_argument("--pieces", default="", help="comma-separated piece names (default: all)")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(BENCH), str(args.library.resolve())]

    from datasets import DATA, Dataset
    from generate import NARROW, SOURCE_SCHEMA, write_schema
    from lake_contracts.dms_files import parse_dms_key
    from lake_runs import Lake
    from lakehouse.apply.run import ApplyOptions, ApplyRun
    from lakehouse.base.schema import SchemaFile
    from lakehouse.dms import changes as C
    from lakehouse.io.session import build_session
    from pyspark import StorageLevel
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    dataset = Dataset(args.rows, args.changes, fmt=args.format)
    lake = Lake(DATA / "warehouse", write_schema(DATA / "schema.json"), 4)
    os.environ.setdefault("LAKE_SPARK_DRIVER_MEMORY", "8g")
    config = lake.config("file_facts")
    schema = SchemaFile.from_dict(json.loads(lake.schema_file.read_text()))
    spec = schema.tables[f"{SOURCE_SCHEMA}.{NARROW}"]
    spark = build_session(config, "file-facts")
    paths = (
        dataset.cdc_files if args.cdc else sorted((dataset.load_raw / SOURCE_SCHEMA / NARROW).glob("LOAD*"))
    )
    files = [parse_dms_key(p.as_uri(), p.stat().st_size) for p in paths]
    run = ApplyRun(spark, config, schema, ApplyOptions(), "file-facts", "full-load")

    def noop(frame: DataFrame | None) -> None:
        assert frame is not None, "the files hold records"
        frame.write.format("noop").mode("overwrite").save()

    def typed_frame() -> DataFrame:
        typed = run.read_typed(spec, files)[1]
        assert typed is not None, "the files hold records"
        return typed

    def plain_read() -> None:
        read = spark.read.parquet if args.format == "parquet" else spark.read.option("header", "true").csv
        columns = [F.col("*"), F.col("_metadata.file_path")]
        if args.format == "parquet":
            columns.append(F.col("_metadata.row_index"))
        noop(read(*(f.uri for f in files)).select(*columns))

    def first_pass_kept() -> None:
        typed = typed_frame()
        usable = F.col(C.REASON).isNull() & F.col(C.MISMATCH).isNull() & F.col(C.WIDEN).isNull()
        kept = typed.where(usable).persist(StorageLevel.DISK_ONLY)
        kept.count()
        kept.unpersist()

    def last_change_per_key() -> None:
        typed = typed_frame()
        fresh = typed.drop(C.REASON, C.MISMATCH, C.WIDEN, C.RAW)
        noop(C.last_change_per_key(C.expand_key_changes(fresh, spec.primary_key), spec.primary_key))

    pieces: dict[str, Callable[[], None]] = {
        "plain read": plain_read,
        "read_dms_files": lambda: noop(run.read_typed(spec, files)[0]),
        "typed": lambda: noop(run.read_typed(spec, files)[1]),
        "first pass kept": first_pass_kept,
    }
    if args.cdc:
        pieces["last change per key"] = last_change_per_key
    if args.pieces:
        pieces = {name: pieces[name] for name in args.pieces.split(",")}
    for piece in pieces.values():  # warm-up: JVM, JIT, the file listing
        piece()
    label = args.label or str(args.library)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    stat = Path(f"/proc/{jvm.java.lang.ProcessHandle.current().pid()}/stat")
    for name, piece in pieces.items():
        walls, cpus = [], []
        for _ in range(args.runs):
            started, cpu = time.perf_counter(), _cpu_seconds(stat)
            piece()
            walls.append(round(time.perf_counter() - started, 2))
            cpus.append(round(_cpu_seconds(stat) - cpu, 2))
        line = {"variant": label, "piece": name, "seconds": walls, "jvm_cpu_seconds": cpus}
        line["load"] = round(os.getloadavg()[0], 2)
        print(json.dumps(line), flush=True)
    spark.stop()
    return 0


def _cpu_seconds(stat: Path) -> float:
    """The CPU time (user + system, every thread: tasks, GC, JIT) of the process whose /proc stat this is."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""What a full load and a CDC apply cost on the pipeline tests' own tables: the TPC-DS-like source of
`tools.sample_data` (customer, customer_address, date_dim, item, time_dim, web_sales: 9 to 27 columns, most
of web_sales' decimal) at a small scale, full-loaded, then rounds of its change workload applied one table
at a time in one warm session. For each: wall time, CPU seconds of the Spark JVM, and how many generated
stages Spark could not compile ("Code grows beyond 64 KB": it compiles, throws the code away and runs the
stage interpreted). Small data on purpose: what it measures is an apply's fixed cost, paid by every table
of every CDC run.

    .venv/bin/python bench/tpcds_apply.py --rounds 4

Writes bench/results/tpcds-apply-<UTC time>.json and prints a summary. LAKE_SPARK_JAVA_OPTIONS sets the
JVM's options (the tests' C1-only JIT: tests/conftest.py TEST_JIT_OPTIONS).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(ROOT / "spark_jobs")]

from lake_contracts.documents import Manifest, ManifestFile  # noqa: E402
from lakehouse.apply.cdc import apply_cdc  # noqa: E402
from lakehouse.apply.full_load import full_load  # noqa: E402
from lakehouse.apply.run import ApplyOptions  # noqa: E402
from lakehouse.base.config import LakeConfig  # noqa: E402
from lakehouse.base.schema import SchemaFile  # noqa: E402
from lakehouse.dms.reader import ReaderOptions  # noqa: E402
from lakehouse.io.session import build_session  # noqa: E402

from tools import sample_data  # noqa: E402
from tools.dms_csv import CsvFormat  # noqa: E402
from tools.schema_gen import reflect_schema  # noqa: E402

NULL_MARKER = "NULL"
TOO_BIG = "Code grows beyond 64 KB"


class Jvm:
    """The session's JVM seen from outside: its CPU seconds (Linux /proc) and its log's compile failures."""

    def __init__(self, spark, log: Path) -> None:
        self.pid = spark._jvm.java.lang.ProcessHandle.current().pid()
        self.log = log

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def failed_compiles(self) -> int:
        return self.log.read_text(errors="replace").count(TOO_BIG) if self.log.exists() else 0


def measured(jvm: Jvm, run) -> dict:
    failed, cpu, started = jvm.failed_compiles(), jvm.cpu_seconds(), time.perf_counter()
    run()
    return {
        "wall_seconds": round(time.perf_counter() - started, 3),
        "jvm_cpu_seconds": round(jvm.cpu_seconds() - cpu, 2),
        "failed_compiles": jvm.failed_compiles() - failed,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="at least 2; the first is not counted")
    parser.add_argument("--scale", type=float, default=0.05, help="tools.sample_data's (the tests': 0.05)")
    parser.add_argument("--changes", type=int, default=150, help="business operations a round")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds: at least 2 (the first round of a session is not counted)")
    root = Path(tempfile.mkdtemp(prefix="tpcds-apply-"))
    raw, db = root / "raw" / "dms", root / "source.db"
    fmt = CsvFormat(csv_null_value=NULL_MARKER)
    options = ApplyOptions(reader=ReaderOptions(csv_null_value=NULL_MARKER))
    sample_data.create_source_database(db, args.scale, 42)
    schema = SchemaFile.from_dict(reflect_schema(f"sqlite:///{db}", [sample_data.SOURCE_SCHEMA]))
    sample_data.write_full_load_files(db, raw, fmt=fmt)
    config = LakeConfig(warehouse=str(root / "warehouse"), staging_dir=str(root / "staging"))
    log = root / "spark.log"
    # the JVM's own log (stderr) names the stages it could not compile
    saved_stderr, log_fd = os.dup(2), os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log_fd, 2)
    try:
        spark = build_session(config, "tpcds-apply")  # its JVM keeps the log as its stderr
    finally:
        os.dup2(saved_stderr, 2)
        os.close(log_fd)
        os.close(saved_stderr)
    jvm = Jvm(spark, log)
    load = measured(jvm, lambda: full_load(spark, config, schema, str(raw), options=options))
    applies: dict[str, list[dict]] = defaultdict(list)
    next_seq = 1
    for number in range(1, args.rounds + 1):
        workload = sample_data.run_workload(db, args.changes, 42 + number)
        files = sample_data.write_cdc_files(db, workload.changes, raw, first_change_seq=next_seq, fmt=fmt)
        next_seq += len(workload.changes)
        by_table: dict[str, list[str]] = defaultdict(list)
        for path in files:
            by_table[Path(path).parent.name].append(path)
        for table, paths in sorted(by_table.items()):
            batch = Manifest(f"round-{number}-{table}", [ManifestFile(p) for p in paths])
            figures = measured(jvm, lambda batch=batch: apply_cdc(spark, config, schema, batch, options))
            applies[table].append(figures)
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)

    def warm_mean(runs: list[dict], key: str) -> float:
        return round(statistics.mean(r[key] for r in runs[1:]), 3)

    result: dict[str, Any] = {
        "command": f"python bench/tpcds_apply.py --rounds {args.rounds} --scale {args.scale} "
        f"--changes {args.changes}",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "java_options": os.environ.get("LAKE_SPARK_JAVA_OPTIONS", "(lakehouse.io.session's)"),
        "full_load": load,
        "applies": applies,
        "warm_mean": {
            table: {
                key: warm_mean(runs, key) for key in ("wall_seconds", "jvm_cpu_seconds", "failed_compiles")
            }
            for table, runs in applies.items()
        },
    }
    out = BENCH / "results" / f"tpcds-apply-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print("full load:", json.dumps(load))
    for table, mean in result["warm_mean"].items():
        print(f"{table:18s} {json.dumps(mean)}")
    print("->", out)


if __name__ == "__main__":
    main()

"""What one small CDC apply costs whatever its size: a keyed table of a few rows, a batch of three changes (an
update, an insert, a delete) applied again and again in one warm session, and for each apply its wall time, the
CPU seconds of the Spark JVM and the Spark jobs it ran (with the call site of each). The fixed cost of an apply,
paid by every table of every CDC run (and by every apply of the test suite, which is why `make test` is
CPU-bound on 2 cores).

    .venv/bin/python bench/small_apply.py --applies 12

Writes bench/results/small-apply-<UTC time>.json and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(ROOT / "spark_jobs")]

from lakehouse.apply.cdc import apply_cdc  # noqa: E402
from lakehouse.apply.full_load import full_load  # noqa: E402
from lakehouse.base.config import LakeConfig  # noqa: E402
from lakehouse.io.session import build_session  # noqa: E402

from tests.support import DmsWriter, manifest, schema_of  # noqa: E402

TABLE = "shop.stock"
COLUMNS = ["sku", "qty", "label"]
SCHEMA = schema_of({TABLE: (["sku"], [("sku", "int"), ("qty", "bigint"), ("label", "varchar(20)")])})


def children_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process's children so far: the Spark JVM (Linux /proc)."""
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def job_sites(spark, job_ids: list[int]) -> list[str]:
    tracker = spark.sparkContext.statusTracker()
    sites = []
    for job in job_ids:
        info = tracker.getJobInfo(job)
        stage = tracker.getStageInfo(info.stageIds[0]) if info and info.stageIds else None
        sites.append(stage.name if stage else "(no stage)")
    return sites


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--applies", type=int, default=12, help="at least 2; the first is not counted")
    args = parser.parse_args(argv)
    if args.applies < 2:
        parser.error("--applies: at least 2 (the first apply of a session is not counted)")
    root = Path(tempfile.mkdtemp(prefix="small-apply-"))
    config = LakeConfig(
        warehouse=str(root / "warehouse"), staging_dir=str(root / "staging"), clean_database="bench"
    )
    spark = build_session(config, "small-apply")
    tracker = spark.sparkContext.statusTracker()
    dms = DmsWriter(root / "dms")
    dms.load(TABLE, COLUMNS, [(k, k, f"row {k}") for k in range(5)])
    full_load(spark, config, SCHEMA, str(dms.root))
    applies = []
    for number in range(args.applies):
        path = dms.cdc(
            TABLE,
            COLUMNS,
            [("U", (1, number, "updated")), ("I", (10 + number, 1, None)), ("D", (2, 0, None))],
        )
        before_jobs = set(tracker.getJobIdsForGroup(None))
        cpu, started = children_cpu_seconds(), time.perf_counter()
        report = apply_cdc(spark, config, SCHEMA, manifest(path, run_id=f"apply-{number}"))
        wall, cpu = time.perf_counter() - started, children_cpu_seconds() - cpu
        assert report.ok, report.error
        jobs = sorted(set(tracker.getJobIdsForGroup(None)) - before_jobs)
        applies.append({"wall_seconds": round(wall, 3), "jvm_cpu_seconds": round(cpu, 2), "jobs": len(jobs)})
        if number == args.applies - 1:
            last_sites = job_sites(spark, jobs)
    warm = applies[1:]  # the first apply of a session also pays for class loading and compiling
    result: dict[str, Any] = {
        "command": f"python bench/small_apply.py --applies {args.applies}",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "java_options": os.environ.get("LAKE_SPARK_JAVA_OPTIONS", "(lakehouse.io.session's)"),
        "applies": applies,
        "warm_mean": {
            key: round(sum(a[key] for a in warm) / len(warm), 3)
            for key in ("wall_seconds", "jvm_cpu_seconds", "jobs")
        },
        "last_apply_jobs_by_call_site": Counter(last_sites).most_common(),
    }
    spark.stop()
    out = BENCH / "results" / f"small-apply-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["warm_mean"]), "->", out)
    for site, count in result["last_apply_jobs_by_call_site"]:
        print(f"{count:3d}  {site}")


if __name__ == "__main__":
    main()

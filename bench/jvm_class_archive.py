"""What a cold local Spark JVM costs with and without the JVM class archive (localaws.jvm_archive): a new
process builds a local session (the tests' JVM options) and runs a small Iceberg workload (create, insert,
merge, read), then exits; the CPU-seconds of its whole process tree (Python and JVM, from /proc) and its wall
time, the two settings alternating round by round.

    .venv/bin/python bench/jvm_class_archive.py [--rounds 3]

Makes the archive first when it is missing (as `make jvm-archive` does)."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "spark_jobs")]

from lakehouse.io.session import LOCAL_JAVA_OPTIONS  # noqa: E402

from localaws import jvm_archive  # noqa: E402
from tests.conftest import TEST_JIT_OPTIONS  # noqa: E402

COLD_SESSION = """
import sys, tempfile
sys.path.insert(0, {spark_jobs!r})
from lakehouse.base.config import LakeConfig
from lakehouse.io.session import build_session
with tempfile.TemporaryDirectory() as scratch:
    spark = build_session(LakeConfig(catalog_name="bench", warehouse=scratch), "bench-cold-jvm")
    spark.sql("CREATE TABLE bench.db.t (id BIGINT, v STRING) USING iceberg")
    spark.sql("INSERT INTO bench.db.t VALUES (1, 'a'), (2, 'b')")
    spark.createDataFrame([(2, "c"), (3, "d")], "id BIGINT, v STRING").createOrReplaceTempView("s")
    spark.sql("MERGE INTO bench.db.t t USING s ON t.id = s.id "
              "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    assert [r.id for r in spark.table("bench.db.t").orderBy("id").collect()] == [1, 2, 3]
    spark.stop()
"""


def tree_cpu_seconds(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run `command`; its wall seconds and the CPU-seconds of every process of its tree (polled from /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    started = time.monotonic()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: dict[tuple[int, str], float] = {}
    while process.poll() is None:
        table: dict[int, tuple[int, float, str]] = {}
        for pid_text in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = Path(f"/proc/{pid_text}/stat").read_text()
            except OSError:
                continue
            rest = stat[stat.rfind(")") + 2 :].split()
            table[int(pid_text)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / ticks, rest[19])
        tree, grew = {process.pid}, True
        while grew:
            grew = False
            for pid, (parent, _, _) in table.items():
                if parent in tree and pid not in tree:
                    tree.add(pid)
                    grew = True
        for pid in tree & table.keys():
            seen[(pid, table[pid][2])] = table[pid][1]
        time.sleep(0.2)
    if process.returncode != 0:
        raise SystemExit(f"the cold session failed (exit {process.returncode})")
    return time.monotonic() - started, sum(seen.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    archive = jvm_archive.archive_path()
    if not archive.is_file():
        jvm_archive.create(archive)
    base = f"{LOCAL_JAVA_OPTIONS} {TEST_JIT_OPTIONS}"
    settings = {"jars": base, "archive": f"{base} {jvm_archive.archive_option(archive)}"}
    script = [sys.executable, "-c", COLD_SESSION.format(spark_jobs=str(ROOT / "spark_jobs"))]
    measured: dict[str, list[tuple[float, float]]] = {name: [] for name in settings}
    for round_number in range(1, rounds + 1):
        for name, options in settings.items():
            env = os.environ | {"LAKE_SPARK_JAVA_OPTIONS": options, "LAKE_SPARK_DRIVER_MEMORY": "3g"}
            wall, cpu = tree_cpu_seconds(script, env)
            measured[name].append((wall, cpu))
            print(f"round {round_number} {name:8s} wall {wall:5.1f} s  CPU {cpu:5.1f} s", flush=True)
    for name, runs in measured.items():
        walls, cpus = zip(*runs, strict=True)
        print(
            f"{name:8s} median wall {statistics.median(walls):5.1f} s  median CPU {statistics.median(cpus):5.1f} s "
            f"(classes from {'the archive ' + archive.name if name == 'archive' else 'the jars'})"
        )


if __name__ == "__main__":
    main()

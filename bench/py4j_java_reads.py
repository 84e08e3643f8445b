"""What a Java map read from Python and a class named by its package path cost, before and after
lakehouse.io.jvm, in one local session with the Iceberg runtime on the classpath (the jobs' own: 250-odd jars):

- an Iceberg snapshot summary (15 entries) read with dict() (py4j's iteration, which ends in a Java exception
  that PySpark converts) and with `java_dict`;
- `org.apache.iceberg.spark.Spark3Util` reached package by package and with `java_class`;

each with py4j as it ships and with the names `build_session` remembers on the gateway's view
(lakehouse.io.jvm.remember_names).

    .venv/bin/python bench/py4j_java_reads.py [--rounds 300]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "spark_jobs")]

from lakehouse.base.config import LakeConfig  # noqa: E402
from lakehouse.io.jvm import java_class, java_dict  # noqa: E402
from lakehouse.io.session import (  # noqa: E402
    PYSPARK_PACKAGE_ROOTS,
    PYSPARK_SHORT_NAMES,
    build_session,
    import_short_names,
)


def timed(label: str, rounds: int, action) -> float:
    started = time.perf_counter()
    for _ in range(rounds):
        action()
    seconds = time.perf_counter() - started
    print(f"{label:52s} {seconds * 1000 / rounds:7.2f} ms each ({rounds} rounds)", flush=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    rounds = parser.parse_args().rounds
    warehouse = tempfile.mkdtemp(prefix="bench-py4j-")
    spark = build_session(LakeConfig(warehouse=warehouse, staging_dir=f"{warehouse}/staging"), "bench-py4j")
    table = "lake.bench.t"
    spark.sql(f"CREATE TABLE {table} (id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1), (2)")
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # the session's gateway
    summary = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    summary = summary.currentSnapshot().summary()
    assert dict(summary) == java_dict(summary)
    print(f"a snapshot summary of {len(java_dict(summary))} entries", flush=True)

    def walked() -> object:
        return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable

    def named() -> object:
        return java_class(spark, "org.apache.iceberg.spark.Spark3Util").loadIcebergTable

    # py4j as it ships: the names build_session remembered taken off the view
    for name in [n.rsplit(".", 1)[1] for n in PYSPARK_SHORT_NAMES] + list(PYSPARK_PACKAGE_ROOTS):
        jvm.__dict__.pop(name, None)
    for remembered in (False, True):
        if remembered:
            import_short_names(spark)
        print(f"-- names remembered on the view: {remembered}", flush=True)
        timed("warm-up", 30, lambda: (dict(summary), java_dict(summary), walked(), named()))
        timed("dict(summary): py4j's iteration", rounds, lambda: dict(summary))
        timed("java_dict(summary)", rounds, lambda: java_dict(summary))
        timed("jvm.org.apache.iceberg.spark.Spark3Util.<member>", rounds, walked)
        timed("java_class(spark, 'org…Spark3Util').<member>", rounds, named)
    spark.stop()


if __name__ == "__main__":
    main()

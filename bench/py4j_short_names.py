"""What resolving PySpark's short names through the gateway's star imports costs: 3,000 times
F.when(F.col("a") == "x", F.lit(1)) (four JVM calls, three of them through `functions`), before and after
lakehouse.io.session.import_short_names (the names remembered on the gateway's view), in one local session.

    .venv/bin/python bench/py4j_short_names.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "spark_jobs")]

from lakehouse.io.session import import_short_names  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

CALLS = 3000


def timed(label: str) -> float:
    started = time.perf_counter()
    for _ in range(CALLS):
        F.when(F.col("a") == "x", F.lit(1))
    seconds = time.perf_counter() - started
    print(f"{label:28s} {seconds:6.2f} s for {CALLS} x F.when(F.col(a) == x, F.lit(1))", flush=True)
    return seconds


def main() -> None:
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    timed("warm-up")
    before = timed("the gateway's star imports")
    import_short_names(spark)
    after = timed("remembered on the view")
    print(f"{after / before:.2f}x the time")
    spark.stop()


if __name__ == "__main__":
    main()

"""The benchmarks' timed figures: one measured quantity's runs with the load average before each, the
machine they ran on, and the Markdown table of the results."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa


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

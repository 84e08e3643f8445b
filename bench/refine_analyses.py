"""How many times each refine of bench/refine_models.py's scenario turns each model's SQL into a DataFrame (Spark
analyses it each time: driver time with no Spark job) and reads an input as of a snapshot, by refine: counts, not
seconds. The scenario and its options are refine_models.py's (`--library DIR` for an earlier commit's code, as
there); the counts do not depend on --rows, so a small one is enough.

    .venv/bin/python bench/refine_analyses.py --rows 20000 --files 10 --recent --dated --out <file>"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

import refine_models  # the scenario; it puts --library's lakehouse first on the path
from lakehouse.refine import refresh

COUNTS: dict[str, Counter[str]] = {}  # "<run>: analyses of <model>" / "<run>: reads as of <table>" → calls


def count_calls() -> None:
    """Each refine's model evaluations (by model) and reads as of a snapshot (by table) counted into COUNTS."""
    unwrapped_refine, unwrapped_evaluator = refine_models.refine, refresh._Refiner.evaluator
    unwrapped_read = refresh.read_as_of
    current: Counter[str] = Counter()

    def counted_refine(*args: Any, **kwargs: Any) -> Any:
        current.clear()
        try:
            return unwrapped_refine(*args, **kwargs)
        finally:
            COUNTS[str(kwargs.get("run_id"))] = Counter(current)

    def counted_evaluator(refiner: Any, model: Any, views: dict[str, str]) -> Any:
        evaluate = unwrapped_evaluator(refiner, model, views)

        def analysed(frames: Any) -> Any:
            current[f"analyses of {model.name}"] += 1
            return evaluate(frames)

        return analysed

    def counted_read(spark: Any, table: str, snapshot_id: int) -> Any:
        current[f"reads as of {table.rsplit('.', 1)[-1]}"] += 1
        return unwrapped_read(spark, table, snapshot_id)

    refine_models.refine = counted_refine
    refresh._Refiner.evaluator = counted_evaluator  # type: ignore[method-assign,assignment]
    refresh.read_as_of = counted_read


if __name__ == "__main__":
    out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else None
    if out is not None:
        at = sys.argv.index("--out")
        del sys.argv[at : at + 2]
    count_calls()
    refine_models.main()
    counts = {run: dict(sorted(counted.items())) for run, counted in COUNTS.items()}
    text = json.dumps({"library": refine_models.LIBRARY, "counts": counts}, indent=2)
    print(text)
    if out is not None:
        with open(out, "w", encoding="utf-8") as file:
            file.write(text + "\n")

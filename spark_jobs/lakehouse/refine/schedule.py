"""The order models are refreshed in, as dbt's `threads` runs them: a model starts as soon as every model it refs
has finished, and models with no path of refs between them run at once, up to `workers` of them. A refresh is
latency-bound (most of its Spark jobs are one task on the driver's critical path), so two aggregates of one
refined table refreshed side by side take about the wall of the longer one.

Among the models ready to start, the first in the folder's order goes first: with one worker the models run one
at a time in the folder's order (a ref before the model that reads it, lakehouse.refine.models).
`run_after_refs` is the order alone (no Spark); `refresh_after_refs` runs the refine's models with it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Protocol, TypeVar

from lakehouse.refine.models import Model, ModelError, model_failure

log = logging.getLogger(__name__)

Result = TypeVar("Result")


class Refreshed(Protocol):
    """What a model's refresh reports (lakehouse.refine.refresh, RefinedTableReport)."""

    table: str
    mode: str
    seconds: float
    affected: int
    reason: str | None
    error: str | None


Report = TypeVar("Report", bound=Refreshed)


def run_after_refs(
    names: Sequence[str],
    refs: Mapping[str, Collection[str]],
    run: Callable[[str], Result],
    is_failure: Callable[[Result], bool],
    blocked: Callable[[str, str], Result],
    workers: int,
    broken: Collection[str] = (),
) -> list[Result]:
    """Each model's result, in the order of `names`: `run(name)` once every model it refs (`refs`: name → the
    names it refs, without a cycle) has finished, or `blocked(name, ref)` without running it when a ref failed
    (`is_failure` of its result) or is `broken` (refused before the run): the first such ref by name. A ref that
    is neither a model of `names` nor broken does not hold the model back."""
    order = {name: index for index, name in enumerate(names)}
    waiting_on = {name: {r for r in refs.get(name, ()) if r in order and r != name} for name in names}
    dependents: dict[str, list[str]] = {name: [] for name in names}
    for name, upstream in waiting_on.items():
        for ref in upstream:
            dependents[ref].append(name)
    failed = set(broken)
    results: dict[str, Result] = {}
    ready = [name for name in names if not waiting_on[name]]
    running: dict[Future[Result], str] = {}

    def finished(name: str, result: Result) -> None:
        results[name] = result
        if is_failure(result):
            failed.add(name)
        for dependent in dependents[name]:
            waiting_on[dependent].discard(name)
            if not waiting_on[dependent]:
                ready.append(dependent)
        ready.sort(key=order.__getitem__)

    at_once = max(1, workers)
    with ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="model") as pool:
        while ready or running:
            while ready and len(running) < at_once:
                name = ready.pop(0)
                failed_refs = sorted(set(refs.get(name, ())) & failed)
                if failed_refs:
                    finished(name, blocked(name, failed_refs[0]))
                else:
                    running[pool.submit(run, name)] = name
            if running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in sorted(done, key=lambda f: order[running[f]]):
                    finished(running.pop(future), future.result())
    return [results[name] for name in names]


def refresh_after_refs(
    models: Sequence[Model],
    refresh: Callable[[Model], Report],
    failed: Callable[[Model, ModelError], Report],
    workers: int,
    broken: Collection[str] = (),
    spark: Any = None,
) -> list[Report]:
    """Each model's report, in the folder's order (run_after_refs): `refresh(model)`, timed, whose error fails
    that model alone, or `failed(model, error)` for a model whose ref failed in this run or is `broken`. With
    the `spark` session, each model's thread has it as its active session (Iceberg's reader of staged scan
    tasks configures the active session's catalogs), its Spark jobs carry the caller's local properties (its
    job group) and run in the model's own pool of Spark's FAIR scheduler."""
    by_name = {model.name: model for model in models}
    properties: Any = None if spark is None else spark.sparkContext._jsc.sc().getLocalProperties().clone()

    def run(name: str) -> Report:
        model, begun = by_name[name], time.monotonic()
        if spark is not None:  # a copy of the properties each: a thread's are its own to change
            spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
            spark.sparkContext._jsc.sc().setLocalProperties(properties.clone())
            spark.sparkContext.setLocalProperty("spark.scheduler.pool", f"refine {name}")
        try:
            report = refresh(model)
        except Exception as failure:  # one model's failure stops that model alone
            report = failed(model, model_failure(model, failure))
        report.seconds = round(time.monotonic() - begun, 3)
        return _logged(report)

    def blocked(name: str, ref: str) -> Report:
        model = by_name[name]
        return _logged(failed(model, model.error(f"ref({ref!r}) failed in this run")))

    return run_after_refs(
        list(by_name),
        {model.name: model.refs for model in models},
        run,
        lambda report: report.mode == "failed",
        blocked,
        workers,
        broken,
    )


def _logged(report: Report) -> Report:
    if report.mode == "failed":
        log.error("refine: %s failed: %s", report.table, report.error)
    else:
        log.info(
            "refine: %s %s (%d affected) %s", report.table, report.mode, report.affected, report.reason or ""
        )
    return report

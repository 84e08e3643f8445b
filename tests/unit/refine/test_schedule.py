"""The order the refine's models run in (lakehouse.refine.schedule), as dbt's `threads`: a model after the models
it refs, models with no ref between them at once, a failure failing its dependents only, the report in the
folder's order; and, with Spark, each model's jobs in its own FAIR pool and the caller's job group."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest
from lakehouse.refine.models import Model, ModelError, load_folder
from lakehouse.refine.schedule import refresh_after_refs, run_after_refs

# The example models' shape: an enriched fact and two aggregates of it (plus one reading a source alone).
FOLDER = {
    "sales.sql": "SELECT * FROM {{ source('web_sales') }}",
    "by_category.sql": "SELECT * FROM {{ ref('sales') }}",
    "by_state.sql": "SELECT * FROM {{ ref('sales') }}",
    "items.sql": "SELECT * FROM {{ source('item') }}",
}
TOO_LONG = 20.0  # seconds a barrier waits for its second model before it fails the test


@dataclass
class Report:
    table: str
    mode: str = "incremental"
    seconds: float = 0.0
    affected: int = 0
    reason: str | None = None
    error: str | None = None


def folder_models() -> list[Model]:
    folder = load_folder(FOLDER.items())
    assert not folder.errors
    return folder.models


def failed(model: Model, error: ModelError) -> Report:
    return Report(model.name, "failed", error=str(error))


def test_a_model_waits_for_its_refs_and_independent_models_run_at_once() -> None:
    """Given the two aggregates of `sales` and `items` (no ref between them), refreshed two at once; when each
    refresh notes what had finished before it started and the aggregates meet at a barrier only two models
    running together pass; then the aggregates ran together, each after `sales`, and the report is in the
    folder's order (one at a time, the barrier would break and the test fail)."""
    models = folder_models()
    together = threading.Barrier(2, timeout=TOO_LONG)
    done: list[str] = []
    seen_done: dict[str, list[str]] = {}

    def refresh(model: Model) -> Report:
        seen_done[model.name] = list(done)
        if model.name in ("by_category", "by_state"):
            together.wait()
        done.append(model.name)
        return Report(model.name)

    reports = refresh_after_refs(models, refresh, failed, workers=2)

    assert [r.table for r in reports] == [m.name for m in models]
    assert all(r.mode == "incremental" for r in reports)
    assert "sales" in seen_done["by_category"] and "sales" in seen_done["by_state"]
    assert "by_category" not in seen_done["by_state"] and "by_state" not in seen_done["by_category"]


def test_one_worker_runs_the_folders_order() -> None:
    """Given the folder's models, when refreshed one at a time, then they run in the folder's order, as before
    models ran at once."""
    models = folder_models()
    ran: list[str] = []

    def refresh(model: Model) -> Report:
        ran.append(model.name)
        return Report(model.name)

    refresh_after_refs(models, refresh, failed, workers=1)
    assert ran == [m.name for m in models]


def test_a_failed_model_fails_its_dependents_and_nothing_else() -> None:
    """Given `sales` failing with an error, when the folder refreshes (four at once), then its two aggregates
    fail naming it without running, `items` refreshes, and the failure names the model's file."""
    models = folder_models()
    ran: list[str] = []

    def refresh(model: Model) -> Report:
        ran.append(model.name)
        if model.name == "sales":
            raise RuntimeError("[UNRESOLVED_COLUMN] no column x; line 1")
        return Report(model.name)

    reports = {r.table: r for r in refresh_after_refs(models, refresh, failed, workers=4)}

    assert sorted(ran) == ["items", "sales"]
    assert reports["items"].mode == "incremental"
    assert reports["sales"].mode == "failed" and str(reports["sales"].error).startswith("sales.sql:1: ")
    for aggregate in ("by_category", "by_state"):
        assert reports[aggregate].mode == "failed"
        assert reports[aggregate].error == "by_category.sql:1: ref('sales') failed in this run".replace(
            "by_category", aggregate
        )


def test_a_ref_broken_before_the_run_fails_its_dependents_transitively() -> None:
    """Given a chain a → b → c whose `a` was refused before the run (`broken`), and `d` apart; when run, then b
    and c are blocked (c by b), d runs, and the results keep the given order."""
    refs = {"b": ["a"], "c": ["b"], "d": []}
    ran: list[str] = []

    def run(name: str) -> str:
        ran.append(name)
        return f"ran {name}"

    results = run_after_refs(
        ["b", "c", "d"],
        refs,
        run,
        lambda r: r.startswith("blocked"),
        lambda n, r: f"blocked {n} by {r}",
        2,
        {"a"},
    )
    assert results == ["blocked b by a", "blocked c by b", "ran d"]
    assert ran == ["d"]


@pytest.mark.spark
def test_each_model_runs_in_its_own_fair_pool_with_the_callers_job_group(spark) -> None:
    """Given a job group set by the caller, when the folder refreshes with the session, then each model's
    thread has the session as its active one (Iceberg's staged reads configure that one's catalogs), the
    caller's job group and a scheduler pool of its own (no Spark job is run)."""
    context = spark.sparkContext
    context.setJobGroup("schedule-test", "the caller's group")
    seen: dict[str, tuple[str, str]] = {}
    active: list[bool] = []

    def refresh(model: Model) -> Report:
        seen[model.name] = (
            context.getLocalProperty("spark.jobGroup.id"),
            context.getLocalProperty("spark.scheduler.pool"),
        )
        active.append(spark._jvm.org.apache.spark.sql.SparkSession.active().equals(spark._jsparkSession))
        return Report(model.name)

    try:
        refresh_after_refs(folder_models(), refresh, failed, 2, spark=spark)
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)

    assert active == [True] * len(FOLDER)
    assert {name: group for name, (group, _) in seen.items()} == dict.fromkeys(seen, "schedule-test")
    pools = [pool for _, pool in seen.values()]
    assert len(set(pools)) == len(FOLDER) and all(name in pool for name, (_, pool) in seen.items())


def test_every_refine_option_is_a_job_argument_and_reaches_the_options_by_its_name():
    # Given the refine job's arguments, each option set to a value other than its default
    from dataclasses import fields

    from lakehouse.jobs.refine import options_of, parser
    from lakehouse.refine.refresh import RefineOptions

    argv = [
        "--source_schema", "sales", "--refined_location", "s3://lake/refined", "--min_interval_seconds", "60",
        "--read_at", "consistent", "--models_uri", "s3://lake/models/", "--rebuild_below_rows", "7",
        "--rebuild_above_changed_fraction", "0.3", "--rebuild_above_affected_fraction", "0.6",
        "--models_at_once", "3",
    ]  # fmt: skip
    # When they are parsed into the refine's options
    options = options_of(parser().parse_args(argv))
    # Then each reaches the option of its name, and no option lacks an argument
    assert options == RefineOptions(
        "sales", "s3://lake/refined", 60.0, "consistent", "s3://lake/models/", 7, 0.3, 0.6, 3
    )
    assert {f.name for f in fields(RefineOptions)} == {argv[i][2:] for i in range(0, len(argv), 2)}
    # and an empty models folder means the examples
    assert options_of(parser().parse_args(["--models_uri", ""])).models_uri is None

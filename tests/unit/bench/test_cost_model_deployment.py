"""bench/cost_model.py, a deployment to plan (bench/deployment_planner.py): the state machine's day for N
tables of R rows and C changes a day, maintenance in bounded slices sized to the changes, each engine's billed
compute, and whether the loop keeps up with freshness p95 within the goal."""

from __future__ import annotations

import json
import statistics

import pytest

from bench.cost_model import MINIMUM_BILLED_SECONDS
from bench.deployment_planner import (
    Deployment,
    Measured,
    RunSize,
    cheapest_meeting_goal,
    deployment_day,
    deployment_main,
    meets_goal,
)

FREE = Measured(  # runs cost only their fixed part: the schedule alone decides
    overhead_seconds=20.0,
    changes_per_second=1e12,
    table_fixed_seconds=0.0,
    table_seconds_per_million_rows=0.0,
    maintenance_table_seconds=0.0,
    maintenance_due_table_seconds=0.0,
    expiry_seconds_per_table=0.0,
)

# Two tables, a file each every 60 s (one every 30 s in all), 100 changes a file, for 6 minutes: 12 files.
TINY = Deployment(
    rows=2e6, tables=2, changes_per_day=100 * 2 * 1440, hours=0.1, refine_every=1000, audit_every_minutes=0,
    run_pace=0.0,
)  # fmt: skip
TINY_COSTS = Measured(  # a run 20 s, each further table 5 s; a pass 20 s + 0.2 s a table inspected + 1 s a
    overhead_seconds=20.0,  # table changed since the last pass + 1 kB/s rewritten
    changes_per_second=1e12,
    table_fixed_seconds=5.0,
    table_seconds_per_million_rows=0.0,
    maintenance_table_seconds=0.2,
    maintenance_due_table_seconds=1.0,
    maintained_tables_per_table=2.0,
    rewrite_bytes_per_second=1000.0,
    rewrite_budget_bytes=1e9,
    delete_ratio_threshold=0.2,
    bytes_per_row=20.0,
    expiry_seconds_per_table=0.0,
)


def test_a_tiny_deployment_computed_by_hand():
    """Given 2 tables writing a file every 60 s each (landing at 30, 60, 90 … 360 s), a loop wait of 60 s,
    Glue's 10 s start, runs of 20 s + 5 s for the second table, and a maintenance pass after 5 batches,
    When the 6 minutes are simulated, Then, by hand: the first drain at 60 s takes files 0-1 (ends 95 s), then
    one file a run (ends 125, 155, 185, 215 s); the pass rewrites the 6 files' 600 changes x 103 bytes due
    (20 B x (0.85 / 0.2 + 0.9)) = 61,800 B at 1 kB/s, with 20 s + 4 tables inspected x 0.2 s + 2 tables
    changed x 1 s: 84.6 s (ends 309.6 s); then files 6-9 in one run (ends 344.6), file 10 (374.6), file 11
    (404.6). Freshness: 65, 35 x 5, 134.6, 104.6, 74.6, 44.6 x 3 s. Glue bills 8 CDC runs the 60 s minimum and
    the pass 94.6 s, 2 DPU each."""
    plan = Deployment(**{**TINY.__dict__, "maintenance_every": 5})
    assert TINY_COSTS.bytes_due_per_change == pytest.approx(103.0)
    assert TINY_COSTS.maintenance_seconds(2, 61_800, due_tables=2) == pytest.approx(84.6)
    day = deployment_day(plan, TINY_COSTS, RunSize(), "glue")
    assert (day.cdc_runs, day.refine_runs, day.maintenance_runs) == (8, 0, 1)
    assert day.end_hours * 3600 == pytest.approx(404.6)
    fresh = [65.0] + [35.0] * 5 + [134.6, 104.6, 74.6] + [44.6] * 3
    assert day.freshness_p50 == pytest.approx(statistics.median(fresh)) == pytest.approx(44.6)
    assert day.freshness_p95 == pytest.approx(104.6 + 0.45 * 30)
    assert day.glue_dpu_hours == pytest.approx((8 * 60 + 94.6) * 2 / 3600)
    assert day.rewritten_gb * 1e9 == pytest.approx(61_800)
    assert day.due_gb_left * 1e9 == pytest.approx(61_800)  # files 6-11, after the only pass
    assert day.maintenance_hours * 3600 == pytest.approx(94.6)
    assert day.changes == pytest.approx(1200)


def test_a_file_is_applied_when_its_run_commits():
    """Given the tiny deployment with commits 5 s before each run's end, Then every file is 5 s fresher."""
    plan = Deployment(**{**TINY.__dict__, "maintenance_every": 5})
    late = deployment_day(plan, TINY_COSTS, RunSize(), "glue")
    early = deployment_day(
        plan, Measured(**{**TINY_COSTS.__dict__, "commit_before_end_seconds": 5.0}), RunSize()
    )
    assert early.freshness_p50 == pytest.approx(late.freshness_p50 - 5.0)
    assert early.freshness_p95 == pytest.approx(late.freshness_p95 - 5.0)
    assert early.end_hours == late.end_hours


def test_a_quiet_small_deployment_pays_the_minimum_per_run_on_both_engines():
    """Given one table and runs of 20 s (under the 60 s minimum), Then every run is billed 60 s: Glue 2 DPU
    each (its 10 s start-up inside the minute), EMR Serverless without pre-initialized workers a driver
    (2 vCPU, 8 GB) and an executor (4 vCPU, 16 GB) each."""
    plan = Deployment(rows=1e6, tables=1, changes_per_day=86_400, hours=1.0)
    glue = deployment_day(plan, FREE, RunSize(), "glue")
    runs = glue.cdc_runs + glue.refine_runs + glue.maintenance_runs + glue.audit_runs
    assert glue.glue_dpu_hours == pytest.approx(runs * 2 * MINIMUM_BILLED_SECONDS / 3600)
    emr = deployment_day(plan, FREE, RunSize(emr_pre_initialized=False), "emr")
    runs = emr.cdc_runs + emr.refine_runs + emr.maintenance_runs + emr.audit_runs
    assert emr.emr_vcpu_hours == pytest.approx(runs * (2 + 4) * MINIMUM_BILLED_SECONDS / 3600)
    assert emr.emr_gb_hours == pytest.approx(runs * (8 + 16) * MINIMUM_BILLED_SECONDS / 3600)
    assert glue.changes == pytest.approx(3600) and emr.changes == pytest.approx(3600)
    assert glue.keeps_up(1.0) and emr.keeps_up(1.0)


def test_refine_and_maintenance_follow_their_batch_counts():
    plan = Deployment(
        rows=1e6, tables=3, changes_per_day=1e6, hours=6.0, refine_every=5, maintenance_every=7,
        refine_every_minutes=0.0, run_pace=0.0,
    )  # fmt: skip
    day = deployment_day(plan, FREE, RunSize(), "glue")
    assert day.cdc_runs > 35
    assert (day.refine_runs, day.maintenance_runs) == (day.cdc_runs // 5, day.cdc_runs // 7)


def test_a_refine_waits_for_its_minimum_interval_and_a_caught_up_loop_paces_its_runs():
    """Given the tiny deployment (files landing every 30 s) with a refine after every batch, When no refine
    may start sooner than 2 minutes after the last, Then a refine runs after the first batch and then only
    every other batch or so: fewer refines than batches, none closer than 120 s; When a caught-up loop pauses
    60 s after each batch, Then each run gathers more files: fewer CDC runs for the same files, each file
    staler, and the Glue bill (a billed minute a run) smaller; the paced day counts its pauses (one after each
    batch that emptied the queue, so at most one a CDC run), the unpaced day none."""
    every_batch = Deployment(**{**TINY.__dict__, "refine_every": 1, "refine_every_minutes": 0.0})
    rested = Deployment(**{**every_batch.__dict__, "refine_every_minutes": 2.0})
    paced = Deployment(**{**TINY.__dict__, "run_pace": 60.0})

    eager = deployment_day(every_batch, TINY_COSTS, RunSize(), "glue")
    slow = deployment_day(rested, TINY_COSTS, RunSize(), "glue")
    base = deployment_day(TINY, TINY_COSTS, RunSize(), "glue")
    pacing = deployment_day(paced, TINY_COSTS, RunSize(), "glue")

    assert eager.refine_runs == eager.cdc_runs
    assert 1 <= slow.refine_runs < slow.cdc_runs and slow.refine_runs <= 1 + slow.end_hours * 3600 / 120
    assert pacing.changes == base.changes and pacing.cdc_runs < base.cdc_runs
    assert pacing.freshness_p50 > base.freshness_p50
    assert pacing.glue_dpu_hours < base.glue_dpu_hours
    assert base.pauses == 0 and 1 <= pacing.pauses <= pacing.cdc_runs


def test_run_pace_auto_is_a_minute_where_runs_are_billed_and_none_on_the_warm_pool():
    """Given RunPaceSeconds auto (None), Then Glue and EMR Serverless without the pool plan as with 60 s,
    EMR Serverless with its warm pool as with none."""
    auto = Deployment(rows=1e6, tables=10, changes_per_day=1e6, hours=2.0)
    minute = Deployment(**{**auto.__dict__, "run_pace": 60.0})
    none = Deployment(**{**auto.__dict__, "run_pace": 0.0})
    cold = RunSize(emr_pre_initialized=False)

    assert deployment_day(auto, FREE, RunSize(), "glue") == deployment_day(minute, FREE, RunSize(), "glue")
    assert deployment_day(auto, FREE, cold, "emr") == deployment_day(minute, FREE, cold, "emr")
    assert deployment_day(auto, FREE, RunSize(), "emr") == deployment_day(none, FREE, RunSize(), "emr")


def test_a_batch_pays_a_merge_per_table_it_touches():
    """Given the same changes over 1 or 50 tables of 10M rows, Then the 50-table batches cost 49 table scans more
    each: the loop is busier in CDC runs, and the changes wait longer (fewer, longer runs)."""
    measured = Measured(table_seconds_per_million_rows=0.654, table_fixed_seconds=1.30)
    one = deployment_day(Deployment(rows=10e6, tables=1, changes_per_day=5e6, hours=2.0), measured, RunSize())
    many = deployment_day(
        Deployment(rows=500e6, tables=50, changes_per_day=5e6, hours=2.0), measured, RunSize()
    )
    assert measured.cdc_seconds(1000, 50, 10e6) - measured.cdc_seconds(1000, 1, 10e6) == pytest.approx(
        49 * (1.30 + 0.654 * 10)
    )
    assert many.cdc_hours > one.cdc_hours and many.busy_hours > one.busy_hours
    assert many.freshness_p50 > 5 * one.freshness_p50  # longer runs carry more minutes of files each
    assert one.changes == pytest.approx(many.changes)


def test_a_pass_rewrites_at_most_its_budget_and_leaves_the_rest_due():
    """Given a budget of 10 kB a pass and changes that make far more due, Then every pass rewrites exactly the
    budget (its seconds bounded whatever the backlog) and the rest is still due at the day's end."""
    measured = Measured(**{**TINY_COSTS.__dict__, "rewrite_budget_bytes": 10_000.0})
    plan = Deployment(**{**TINY.__dict__, "maintenance_every": 2, "hours": 1.0})
    day = deployment_day(plan, measured, RunSize(), "glue")
    assert day.maintenance_runs >= 5
    assert day.rewritten_gb * 1e9 == pytest.approx(day.maintenance_runs * 10_000)
    assert day.due_gb_left * 1e9 == pytest.approx(day.changes * 103.0 - day.maintenance_runs * 10_000)
    assert measured.maintenance_seconds(2, 1e9) == measured.maintenance_seconds(2, 10_000)


def test_the_raw_audit_runs_once_its_period_has_passed_since_the_last():
    """Given runs of 20 s and an audit every minute over 6 minutes, Then an audit run follows the first batch
    to end after each minute since the last audit (about one a minute and a half: a minute, then the runs)."""
    plan = Deployment(**{**TINY.__dict__, "audit_every_minutes": 1.0})
    day = deployment_day(plan, FREE, RunSize(), "glue")
    assert 3 <= day.audit_runs <= 5
    assert deployment_day(TINY, FREE, RunSize(), "glue").audit_runs == 0


def test_the_first_pass_of_each_day_also_expires():
    measured = Measured(**{**TINY_COSTS.__dict__, "expiry_seconds_per_table": 3.0})
    assert measured.maintenance_seconds(2, 0, expiry=True) - measured.maintenance_seconds(
        2, 0
    ) == pytest.approx(12.0)


def test_the_figures_come_from_the_benches_json(tmp_path):
    """Given a many-tables result (0.42 s a further table; two passes: 10 tables due in 10 s, then 0.05 s a
    table with nothing due) and
    a maintenance result with a planner block, Then Measured takes those and keeps its other figures, naming
    the files it read."""
    many = tmp_path / "many-tables-x.json"
    passes = [
        {"wall_seconds": 10.0, "tables": 12, "nothing_due": 2, "seconds_per_table": 0.83},
        {"wall_seconds": 0.6, "tables": 12, "nothing_due": 12, "seconds_per_table": 0.05},
    ]
    many.write_text(json.dumps({"summary": {"seconds_per_table": 0.42}, "maintenance_passes": passes}))
    maintenance = tmp_path / "maintenance-y.json"
    maintenance.write_text(json.dumps({"planner": {"rewrite_bytes_per_second": 2e7, "unknown": 1}}))
    measured = Measured.from_results(many, maintenance)
    assert (measured.table_fixed_seconds, measured.rewrite_bytes_per_second) == (0.42, 2e7)
    assert measured.maintenance_table_seconds == 0.05  # the last pass: nothing due
    assert measured.maintenance_due_table_seconds == pytest.approx((10.0 - 2 * 0.05) / 10)
    assert measured.overhead_seconds == Measured().overhead_seconds
    assert measured.sources == ("many-tables-x.json", "maintenance-y.json")


def test_the_search_finds_a_cheaper_setting_that_meets_the_freshness_goal():
    """Given a deployment whose refine run after every batch pushes EMR Serverless's p95 past 5 minutes (no
    pre-initialized workers: each run waits a minute for its own), Then the search finds a setting that meets
    the goal on both engines, refining less often."""
    plan = Deployment(rows=1e6, tables=10, changes_per_day=1e6, hours=2.0, refine_every=1, loop_wait=60)
    measured = Measured(overhead_seconds=40.0, table_fixed_seconds=1.0)
    cold = RunSize(emr_pre_initialized=False)
    assert not meets_goal(deployment_day(plan, measured, cold, "emr"), 2.0)
    found = cheapest_meeting_goal(plan, measured, cold)
    assert found is not None
    candidate, glue, emr = found
    assert candidate.refine_every > 1 and meets_goal(glue, 2.0) and meets_goal(emr, 2.0)


def test_the_command_prints_the_day_at_the_settings_and_whether_it_meets_the_goal(capsys):
    assert deployment_main([]) == 0
    out = capsys.readouterr().out
    assert (
        "MaxFilesPerRun=500, LoopWaitSeconds=60, RunPaceSeconds=auto, RefineEveryNBatches=5, "
        "RefineEveryMinutes=15, MaintenanceEveryNBatches=50:" in out
    )
    assert "goal (keeps up, freshness p95 <= 5 min) on both engines:" in out
    assert "DPU-hours" in out and "vCPU-hours" in out and "full load once, Parquet" in out


def test_a_warm_emr_pool_starts_runs_at_once_and_is_billed_all_day():
    """Given EMR Serverless with its driver and executor pre-initialized (the template's default), Then runs
    start in 5 s instead of 60 s (fresher files) and the bill is the pool's two workers (a driver of 2 vCPU,
    8 GB and an executor of 4 vCPU, 16 GB) for the whole day, whatever the runs."""
    plan = Deployment(rows=1e6, tables=10, changes_per_day=1e6, hours=2.0)
    cold = deployment_day(plan, FREE, RunSize(emr_pre_initialized=False), "emr")
    warm = deployment_day(plan, FREE, RunSize(), "emr")
    assert warm.freshness_p95 < cold.freshness_p95
    assert warm.emr_vcpu_hours == pytest.approx((2 + 4) * max(2.0, warm.end_hours))
    assert warm.emr_gb_hours == pytest.approx((8 + 16) * max(2.0, warm.end_hours))

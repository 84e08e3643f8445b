"""bench/cost_model.py, a deployment to plan: the state machine's day for N tables of R rows
and C changes a day, each engine's billed compute, and whether the loop keeps up."""

from __future__ import annotations

import pytest

from bench.cost_model import MINIMUM_BILLED_SECONDS
from bench.deployment_planner import Deployment, Measured, RunSize, deployment_day, deployment_main

FREE = Measured(  # runs cost only their fixed part: the schedule alone decides
    overhead_seconds=20.0,
    changes_per_second=1e12,
    table_fixed_seconds=0.0,
    table_seconds_per_million_rows=0.0,
    maintenance_seconds_per_million_rows=0.0,
)


def test_a_quiet_small_deployment_pays_the_minimum_per_run_on_both_engines():
    """Given one table and runs of 20 s (under the 60 s minimum), Then every run is billed 60 s: Glue 2 DPU
    each (its 10 s start-up inside the minute), EMR Serverless 2 workers x (4 vCPU, 16 GB) each."""
    plan = Deployment(rows=1e6, tables=1, changes_per_day=86_400, hours=1.0)
    glue = deployment_day(plan, FREE, RunSize(), "glue")
    runs = glue.cdc_runs + glue.refine_runs + glue.maintenance_runs
    assert glue.glue_dpu_hours == pytest.approx(runs * 2 * MINIMUM_BILLED_SECONDS / 3600)
    emr = deployment_day(plan, FREE, RunSize(), "emr")
    runs = emr.cdc_runs + emr.refine_runs + emr.maintenance_runs
    assert emr.emr_vcpu_hours == pytest.approx(runs * 2 * 4 * MINIMUM_BILLED_SECONDS / 3600)
    assert emr.emr_gb_hours == pytest.approx(runs * 2 * 16 * MINIMUM_BILLED_SECONDS / 3600)
    assert glue.changes == pytest.approx(3600) and emr.changes == pytest.approx(3600)
    assert glue.keeps_up(1.0) and emr.keeps_up(1.0)


def test_refine_and_maintenance_follow_their_batch_counts():
    plan = Deployment(rows=1e6, tables=3, changes_per_day=1e6, hours=6.0, refine_every=5, maintenance_every=7)
    day = deployment_day(plan, FREE, RunSize(), "glue")
    assert day.cdc_runs > 35
    assert (day.refine_runs, day.maintenance_runs) == (day.cdc_runs // 5, day.cdc_runs // 7)


def test_a_batch_pays_a_merge_per_table_it_touches():
    """Given the same changes over 1 or 50 tables of 10M rows, Then the 50-table batches cost 49 table scans more
    each (the MERGE reads every key of each table it touches): the loop is busier, the day costs more, and the
    changes wait longer (fewer, longer runs)."""
    # a MERGE that shuffles every key (0.654 s per million rows, before the Bloom filter reached small batches)
    measured = Measured(maintenance_seconds_per_million_rows=0.0, table_seconds_per_million_rows=0.654)
    one = deployment_day(Deployment(rows=10e6, tables=1, changes_per_day=5e6, hours=2.0), measured, RunSize())
    many = deployment_day(
        Deployment(rows=500e6, tables=50, changes_per_day=5e6, hours=2.0), measured, RunSize()
    )
    assert measured.cdc_seconds(1000, 50, 10e6) - measured.cdc_seconds(1000, 1, 10e6) == pytest.approx(
        49 * (1.30 + 0.654 * 10)
    )
    assert many.glue_dpu_hours > one.glue_dpu_hours and many.busy_hours > one.busy_hours
    assert many.freshness_p50 > 5 * one.freshness_p50  # longer runs carry more minutes of files each
    assert one.changes == pytest.approx(many.changes)


def test_the_planning_case_falls_behind_at_the_default_batch_size_and_keeps_up_with_larger_batches():
    """1B rows in 100 tables, 50M changes a day, the template's defaults: a batch of 500 files touches all 100
    tables and lasts ~4 minutes (a run's fixed cost and 99 more tables' MERGEs) for 5 minutes of files, and
    with the refine and maintenance runs between batches the day's changes take 43 hours; 3,000 files a
    batch keep up, the loop busy all day (2 DPU x 24 h and the maintenance)."""
    plan = Deployment()
    measured, size = Measured(), RunSize()
    default = deployment_day(plan, measured, size, "glue")
    assert not default.keeps_up() and default.end_hours > 40
    larger = deployment_day(Deployment(max_files_per_run=3000), measured, size, "glue")
    assert larger.keeps_up()
    assert 40 < larger.glue_dpu_hours < 60
    assert larger.changes == pytest.approx(50e6)
    emr = deployment_day(Deployment(max_files_per_run=3000), measured, size, "emr")
    assert emr.keeps_up()
    assert emr.emr_gb_hours == pytest.approx(4 * emr.emr_vcpu_hours)


def test_the_command_prints_the_default_and_the_first_batch_size_that_keeps_up(capsys):
    assert deployment_main([]) == 0
    out = capsys.readouterr().out
    assert (
        "MaxFilesPerRun=500:" in out and "MaxFilesPerRun=3000:" in out and "MaxFilesPerRun=5000:" not in out
    )
    assert "DPU-hours" in out and "vCPU-hours" in out and "full load once, Parquet" in out

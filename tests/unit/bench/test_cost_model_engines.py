"""bench/cost_model.py's engines: the batched schedule billed as Glue and as EMR Serverless bill it."""

import pytest

from bench.cost_model import (
    PRICES,
    RunCost,
    Scenario,
    batched,
    emr_serverless_engine,
    engine_day,
    glue_engine,
)

SCENARIO = Scenario(rate=10, file_interval=60, tables=1, loop_wait=60, max_files_per_run=500, dpus=2,
                    glue_start=10)  # fmt: skip
COST = RunCost(overhead_seconds=20, changes_per_second=36_000)
WORKER_HOUR = 4 * PRICES["emr_serverless_usd_per_vcpu_hour"] + 16 * PRICES["emr_serverless_usd_per_gb_hour"]


def test_glue_priced_as_an_engine_is_the_dpu_model():
    """Given the batched schedule, Then Glue as an engine costs what the DPU-second model says."""
    day = engine_day(SCENARIO, COST, glue_engine(2, 10, 0.44))
    dpu = batched(SCENARIO, COST, 0.44)
    assert day.runs == dpu.runs == 1_440
    assert day.usd_per_million == pytest.approx(dpu.usd_per_million)
    assert day.usd_per_day == pytest.approx(1_440 * 2 * 60 * 0.44 / 3600)


def test_emr_serverless_bills_each_worker_a_minute_at_least_and_not_its_start():
    """Given runs of 20 s apply after a 60 s start, Then each of the 2 workers is billed its 1-minute minimum
    at 4 vCPU and 16 GB, the start is not billed, and the start shows in freshness."""
    engine = emr_serverless_engine(workers=2, vcpu=4, memory_gb=16, start_seconds=60)
    day = engine_day(SCENARIO, COST, engine)
    assert engine.usd_per_hour == pytest.approx(2 * WORKER_HOUR)
    assert day.usd_per_day == pytest.approx(day.runs * 60 * 2 * WORKER_HOUR / 3600)
    glue = engine_day(SCENARIO, COST, glue_engine(2, 10))
    assert day.freshness_p50 > glue.freshness_p50 + 40


def test_a_warm_pool_is_billed_all_day_and_starts_runs_at_once():
    engine = emr_serverless_engine(
        workers=2, vcpu=4, memory_gb=16, start_seconds=5, pre_initialized_workers=2
    )
    day = engine_day(SCENARIO, COST, engine)
    assert day.usd_per_day == pytest.approx(24 * 2 * WORKER_HOUR)
    cold = engine_day(
        SCENARIO, COST, emr_serverless_engine(workers=2, vcpu=4, memory_gb=16, start_seconds=60)
    )
    assert day.freshness_p95 < cold.freshness_p95


def test_a_smaller_driver_is_billed_at_its_own_size_in_runs_and_in_the_pool():
    """Given a driver of 2 vCPU / 8 GB beside one executor of 4 vCPU / 16 GB (the template's), Then a run and
    the warm pool cost a driver's hour plus an executor's, not two executors'."""
    driver_hour = (
        2 * PRICES["emr_serverless_usd_per_vcpu_hour"] + 8 * PRICES["emr_serverless_usd_per_gb_hour"]
    )
    cold = emr_serverless_engine(2, 4, 16, 60, driver_vcpu=2, driver_memory_gb=8)
    warm = emr_serverless_engine(2, 4, 16, 5, pre_initialized_workers=2, driver_vcpu=2, driver_memory_gb=8)
    assert cold.usd_per_hour == pytest.approx(driver_hour + WORKER_HOUR)
    assert warm.idle_usd_per_hour == pytest.approx(driver_hour + WORKER_HOUR)
    assert engine_day(SCENARIO, COST, warm).usd_per_day == pytest.approx(24 * (driver_hour + WORKER_HOUR))

"""The cost model of bench/cost_model.py: the fitted line and the two simulated schedules."""

import pytest

from bench.cost_model import RunCost, Scenario, batched, fit, per_file


def test_fit_recovers_overhead_and_throughput_from_two_runs():
    """Given a one-file run (5,000 changes in 22 s) and a batch run (1M changes in 40 s) of the same line,
    When fitted, Then the overhead and the throughput are that line's."""
    cost = fit((5_000, 20.0 + 5_000 / 50_000), (1_000_000, 20.0 + 1_000_000 / 50_000))

    assert cost.overhead_seconds == pytest.approx(20.0)
    assert cost.changes_per_second == pytest.approx(50_000)


def test_fit_refuses_a_batch_that_is_not_bigger_and_slower():
    with pytest.raises(ValueError, match="bigger, slower"):
        fit((5_000, 30.0), (1_000_000, 20.0))


def test_one_table_one_file_a_minute_costs_the_same_either_way():
    """Given one table writing a file a minute and a loop wait of a minute, When simulated for a day,
    Then batching has nothing to batch: one run per file both ways, each billed the 60 s minimum."""
    scenario = Scenario(rate=10, file_interval=60, tables=1, loop_wait=60, max_files_per_run=500, dpus=2,
                        glue_start=10)  # fmt: skip
    cost = RunCost(overhead_seconds=20, changes_per_second=36_000)

    one, many = per_file(scenario, cost, 0.44), batched(scenario, cost, 0.44)

    assert one.runs == many.runs == 1_440
    assert one.dpu_seconds_per_million == pytest.approx(2 * 60 * 1_440 * 1_000_000 / (10 * 86_400))
    assert many.dpu_seconds_per_million == pytest.approx(one.dpu_seconds_per_million)
    assert one.freshness_p50 == pytest.approx(10 + 20 + 600 / 36_000)


def test_many_tables_are_cheaper_batched_and_every_file_is_applied():
    """Given 20 tables (20 files a minute), When simulated, Then batched runs are a tenth as many as the
    per-file runs, cost about a tenth per million changes, and no file waits more than two runs."""
    scenario = Scenario(rate=100, file_interval=60, tables=20, loop_wait=60, max_files_per_run=500, dpus=2,
                        glue_start=10)  # fmt: skip
    cost = RunCost(overhead_seconds=20, changes_per_second=36_000)

    one, many = per_file(scenario, cost, 0.44), batched(scenario, cost, 0.44)

    assert one.runs == 20 * 1_440
    assert many.runs < one.runs / 9
    assert one.dpu_seconds_per_million / many.dpu_seconds_per_million > 9
    assert many.freshness_p95 <= 2 * (10 + 20 + 20 * 300 / 36_000) + 1

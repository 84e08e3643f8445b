"""bench/many_tables.py's arithmetic: the line through (tables touched, seconds) and the commits counted from
two readings of the tables' metadata versions."""

from __future__ import annotations

import pytest

from bench.many_tables import commits_between, fit_line, split_commits, table_names


def test_the_line_through_batches_of_1_10_and_100_tables_gives_the_cost_of_each_further_table():
    """Given batches costing 3 s + 0.5 s a table (two of them 0.1 s off either way), When fitted, Then the
    slope is 0.5 s a table and the intercept 3 s."""
    points = [(1, 3.5), (10, 8.1), (10, 7.9), (100, 53.0)]
    line = fit_line(points)
    assert line.slope == pytest.approx(0.5) and line.intercept == pytest.approx(3.0)
    assert line.at(50) == pytest.approx(28.0)


def test_a_line_needs_two_widths():
    with pytest.raises(ValueError, match="two or more distinct"):
        fit_line([(10, 1.0), (10, 2.0)])


def test_commits_are_the_version_steps_of_each_table_and_a_new_table_counts_from_zero():
    """Given versions before and after a batch (one table untouched, one new with 2 versions), Then the
    commits are the differences, the untouched table left out; the replicas summed, the shared by name."""
    before = {"bench/shop_t000": 3, "bench/shop_t001": 5, "bench_records/dms_applied_files": 7}
    after = {
        "bench/shop_t000": 4,
        "bench/shop_t001": 5,
        "bench_records/dms_applied_files": 8,
        "bench_records/dms_tombstones": 2,
    }
    commits = commits_between(before, after)
    assert commits == {
        "bench/shop_t000": 1,
        "bench_records/dms_applied_files": 1,
        "bench_records/dms_tombstones": 2,
    }
    assert split_commits(commits, "bench/shop_") == (
        1,
        {"bench_records/dms_applied_files": 1, "bench_records/dms_tombstones": 2},
    )


def test_table_names_sort_in_order():
    assert table_names(3) == ["shop.t000", "shop.t001", "shop.t002"]

"""bench/loop_replay.py's reading of a replay: each file's freshness from the snapshots that name it applied,
and the planner's figures from the replay's own runs."""

from __future__ import annotations

import json

import pytest

from bench.loop_replay import Run, commit_tail, file_freshness, local_measured


def snapshot(at_ms: int, *files: str) -> dict:
    return {"timestamp-ms": at_ms, "summary": {"dms.applied-files": json.dumps(list(files))}}


def test_a_file_is_fresh_from_its_name_to_the_first_commit_that_names_it():
    """Given a file landed at 12:00:10 committed at 12:00:40 (and named again by a later snapshot), one landed
    at 12:00:20 committed at 12:01:00, and one landed before the replay began, Then the first two are 30 and 40
    s fresh and the third is left out."""
    base = 1_764_331_200  # 2025-11-28T12:00:00Z
    snapshots = [
        snapshot((base + 100) * 1000, "20251128-120010000.csv"),
        snapshot((base + 40) * 1000, "20251128-120010000.csv", "20251128-115950000.csv"),
        snapshot((base + 60) * 1000, "20251128-120020000.csv"),
    ]
    assert file_freshness(snapshots, since=base) == {
        "20251128-120010000.csv": 30.0,
        "20251128-120020000.csv": 40.0,
    }


def test_the_planner_takes_the_replays_cdc_line_refine_mean_and_the_loops_own_time():
    """Given CDC runs of 20 s for 1 table and 29 s for 4 (3 s a further table), refine runs of 30 and 34 s, a
    maintenance run of 40 s over 5 tables, and 2 s of the loop's own time before each CDC run, Then a run's
    fixed part is 20 s, each further table 3 s, a refine run 12 s beyond it, a maintenance pass 20 s beyond it
    over its 5 tables, and the start-up 2 s."""
    runs = [
        Run("cdc", 0, 20.0, 2.0, "a", 1),
        Run("cdc", 0, 29.0, 2.0, "b", 4),
        Run("refine", 0, 30.0),
        Run("refine", 0, 34.0),
        Run("maintenance", 0, 40.0),
    ]
    measured, size = local_measured(runs, tables=5)
    assert measured.overhead_seconds == pytest.approx(20.0)
    assert measured.table_fixed_seconds == pytest.approx(3.0)
    assert measured.refine_seconds == pytest.approx(12.0)
    assert measured.maintenance_seconds(5, 0.0) == pytest.approx(40.0)
    assert size.glue_start_seconds == pytest.approx(2.0)


def test_a_run_commits_on_average_this_long_before_its_end():
    """Given a CDC run from 100 s to 120 s that committed at 110 and 114 s, and one from 130 to 140 s that
    committed at 136 s (a commit outside any run ignored), Then the tail is the mean of 8 and 4 s."""
    runs = [Run("cdc", 100.0, 20.0), Run("refine", 121.0, 5.0), Run("cdc", 130.0, 10.0)]
    assert commit_tail(runs, [110.0, 114.0, 136.0, 150.0]) == pytest.approx(6.0)

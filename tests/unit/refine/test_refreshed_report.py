"""The refine job writes its report to `--refreshed_report_uri` only when the run left the refined zone
reflecting what it read: the watchdog measures the refined zone's lag from the newest such run."""

from __future__ import annotations

import json
from pathlib import Path

from lakehouse.base.config import LakeConfig
from lakehouse.jobs.refine import parser, publish_if_refreshed
from lakehouse.refine.refresh import RefinedTableReport, RefineReport


def test_only_a_run_that_left_no_model_failed_and_was_not_skipped_writes_the_refreshed_report(
    tmp_path: Path,
) -> None:
    """Given runs that refreshed every model, whose models wait for data, with no model, with a failed model,
    and skipped as too soon, When each is published to --refreshed_report_uri, Then the first three are
    written (the report with its `batch`, the run's start in milliseconds), the failed and skipped ones never
    overwrite it (the refined zone did not catch up), and no URI writes nothing."""
    target = tmp_path / "reports" / "refine-latest.json"
    config = LakeConfig()
    assert parser().parse_args(["--refreshed_report_uri", str(target)]).refreshed_report_uri == str(target)

    refreshed = RefineReport("r1", 1_764_496_800_000, tables=[RefinedTableReport("sales", "incremental")])
    assert publish_if_refreshed(refreshed, str(target), config)
    assert json.loads(target.read_text())["batch"] == 1_764_496_800_000
    for written in (RefineReport("r2", 2, status="waiting"), RefineReport("r3", 3, status="no-models")):
        assert publish_if_refreshed(written, str(target), config)
        assert json.loads(target.read_text())["run_id"] == written.run_id

    failed = RefineReport(
        "r4", 4, tables=[RefinedTableReport("sales"), RefinedTableReport("daily", "failed")]
    )
    skipped = RefineReport("r5", 5, status="too-soon")
    for not_written in (failed, skipped):
        assert not publish_if_refreshed(not_written, str(target), config)
        assert json.loads(target.read_text())["run_id"] == "r3"
    assert not publish_if_refreshed(refreshed, None, config)

"""The dashboard's freshness table and consistency line (tools.dashboard), from CDC run reports: no Spark."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from tools.dashboard import Figures, render_html, run_metrics

NOW = datetime(2026, 11, 26, 10, 0, 0, tzinfo=UTC)


def report(run_id: str, freshness: dict | None) -> dict:
    document = {
        "run_id": run_id,
        "job": "cdc",
        "totals": {"inserted_or_updated": 1},
        "newest_commit_ts": None,
    }
    return document | ({"freshness": freshness} if freshness is not None else {})


def table_rows(page: str) -> list[list[str]]:
    (table,) = re.findall(r'<table id="table-freshness">(.*?)</table>', page, flags=re.S)
    return [re.findall(r"<t[dh]>(.*?)</t[dh]>", row) for row in re.findall(r"<tr>(.*?)</tr>", table)]


def test_the_newest_reports_freshness_is_a_table_and_its_point_a_line() -> None:
    """Given three CDC run reports: the oldest with a consistent point, the middle without freshness, the newest
    with freshness for two tables but no newer point,
    When the dashboard is rendered at 10:00 with a refined zone built from the older point,
    Then the freshness table shows the newest report's tables in name order with their lag at 10:00, and the
    consistency line names the newest recorded point and the one the refined zone was built from."""
    old_point = {"at": "2026-11-26T09:40:00", "snapshots": {"main_item": 1}}
    reports = [
        report("20261126T094500000000Z-a", {"tables": [], "consistent_point": old_point}),
        report("20261126T095000000000Z-b", None),
        report(
            "20261126T095500000000Z-c",
            {
                "tables": [
                    {
                        "source_table": "main.web_sales",
                        "newest_source_commit_ts": "2026-11-26T09:58:30",
                        "applied_through_ts": "2026-11-26T09:54:59.999999",
                        "last_batch_id": "20261126T095500000000Z-c",
                    },
                    {
                        "source_table": "main.item",
                        "newest_source_commit_ts": "2026-11-26T08:00:00",
                        "applied_through_ts": "2026-11-26T09:54:59.999999",
                        "last_batch_id": "full-load",
                    },
                ],
                "consistent_point": None,
            },
        ),
    ]
    metrics = run_metrics(list(reversed(reports)))

    page = render_html(Figures(refined_point="2026-11-26T09:40:00"), metrics, now=NOW)

    assert table_rows(page) == [
        ["table", "newest source change (UTC)", "lag", "every change applied up to (UTC)", "last batch"],
        ["main.item", "2026-11-26 08:00:00", "7.2k s", "2026-11-26 09:54:59", "full-load"],
        ["main.web_sales", "2026-11-26 09:58:30", "90 s", "2026-11-26 09:54:59", "20261126T095500000000Z-c"],
    ]
    (line,) = re.findall(r'<div class="fresh" id="consistency">(.*?)</div>', page)
    assert line == (
        "every clean table applied exactly up to 2026-11-26 09:40:00.000000 UTC (consistent point); "
        "refined zone built from the consistent point 2026-11-26 09:40:00.000000 UTC"
    )
    assert "freshness</div>" not in page and ">consistent point<" not in page  # not shown as cards


def test_without_freshness_there_is_no_table_and_the_line_says_so() -> None:
    page = render_html(Figures(), run_metrics([report("20261126T095000000000Z-b", None)]), now=NOW)
    assert 'id="table-freshness"' not in page
    assert '<div class="fresh" id="consistency">no consistent point recorded yet</div>' in page

"""The dashboard: one self-contained HTML page (inline SVG, no scripts, no external resources)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from lakehouse.dashboard import Figures, render_html, write_dashboard

FIGURES = Figures(
    totals={"revenue": 1_234_567.89, "profit": 234_567.0, "orders": 4321, "lines": 19_876},
    revenue_by_month=[(f"2024-{m:02d}", 50_000.0 + 1000 * m) for m in range(1, 13)],
    revenue_by_category=[("Books", 300_000.0), ("Home", 200_000.0), ("(deleted item)", 1_000.0)],
    revenue_by_state=[("TX", 150_000.0), ("CA", 140_000.0), ("<script>", 1.0)],
    snapshots={"sales_enriched": 3},
)
METRICS = {
    "files": 42,
    "changes_applied": 12_345,
    "lag_seconds": 38.5,
    "runs": [{"run_id": f"r{i}", "files": i, "changes": 100 * i, "lag_seconds": 30 + i} for i in range(1, 6)],
}


def test_dashboard_is_self_contained_html_with_charts(tmp_path: Path) -> None:
    """Given refined-zone figures and pipeline metrics
    When the dashboard is written
    Then it is one HTML file with an SVG chart per figure, the metrics as cards, text escaped, and no
    script or external resource (it renders offline)."""
    path = write_dashboard(tmp_path / "dash.html", FIGURES, METRICS)
    page = path.read_text(encoding="utf-8")

    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<svg") == 5  # month, category, state, lag per run, changes per run
    assert "$1.2M" in page and "changes applied" in page and "12.3k" in page
    assert "&lt;script&gt;" in page and "<script" not in page
    assert re.findall(r"(?:src|href)=", page) == []
    assert set(re.findall(r"https?://[^\"' ]+", page)) == {"http://www.w3.org/2000/svg"}


def test_dashboard_without_data_still_renders() -> None:
    """Given an empty refined zone and no runs
    When the dashboard is rendered
    Then the charts say there is no data yet."""
    page = render_html(Figures(), {}, now=datetime(2026, 1, 1, tzinfo=UTC))

    assert page.count("no data yet") == 3 and "2026-01-01 00:00 UTC" in page

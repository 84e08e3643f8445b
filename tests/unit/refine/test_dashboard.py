"""The dashboard: one self-contained, interactive HTML page (Plotly, plotly.js inlined, no external resource),
checked as text and in a real headless browser (Chromium)."""

from __future__ import annotations

import re
import shutil
import subprocess
import warnings
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tools.dashboard import NO_DATA, Figures, freshness_line, render_html, run_metrics, write_dashboard

FIGURES = Figures(
    totals={"revenue": 1_234_567.89, "profit": 234_567.0, "orders": 4321, "lines": 19_876},
    revenue_by_month=[(f"2024-{m:02d}", 50_000.0 + 1000 * m) for m in range(1, 13)],
    revenue_by_category=[("Books", 300_000.0), ("Home", 200_000.0), ("(deleted item)", 1_000.0)],
    revenue_by_state=[("TX", 150_000.0), ("CA", 140_000.0), ("</script><b>", 1.0)],
    snapshots={"sales_enriched": 3},
)
METRICS = {
    "files": 42,
    "changes_applied": 12_345,
    "newest_commit_ts": "2026-11-24T10:00:00",
    "runs": [{"run_id": f"r{i}", "files": i, "changes": 100 * i, "lag_seconds": 30 + i} for i in range(1, 6)],
}
CHARTS = 5  # revenue by month, category, state; lag and changes per run


def test_dashboard_is_one_self_contained_file_with_a_chart_per_figure(tmp_path: Path) -> None:
    """Given refined-zone figures and pipeline metrics, When the dashboard is written, Then it is one HTML
    file with plotly.js inlined, one Plotly chart per figure with axis titles and units, the metrics as
    cards, the freshness line, source text escaped (a category named `</script>` cannot end a script), and
    no external resource (it works offline)."""
    page = write_dashboard(tmp_path / "dash.html", FIGURES, METRICS).read_text(encoding="utf-8")

    assert page.startswith("<!DOCTYPE html>")
    assert page.count("Plotly.newPlot(") == CHARTS
    assert "revenue (USD)" in page and "lag (seconds)" in page and "changes (rows)" in page
    assert "$1.2M" in page and "12.3k" in page and "changes applied" in page
    assert "newest source change applied: 2026-11-24 10:00:00 UTC" in page
    scripts = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    assert len(scripts) == 2 and not any("</script><b>" in s for s in scripts)
    assert re.findall(r"""<(?:script|link|img)[^>]+(?:src|href)=""", page) == []


def test_dashboard_without_data_still_renders() -> None:
    """Given an empty refined zone and no runs, When the dashboard is rendered, Then every chart says there
    is no data yet, and the freshness line says no change was applied."""
    page = render_html(Figures(), {}, now=datetime(2026, 1, 1, tzinfo=UTC))

    assert page.count(f'"text": "{NO_DATA}"') == CHARTS
    assert "no source change applied yet" in page and "2026-01-01 00:00 UTC" in page


def test_freshness_is_the_lag_from_the_newest_applied_change() -> None:
    line = freshness_line(
        {"newest_commit_ts": "2026-11-24T10:00:00Z"}, datetime(2026, 11, 24, 10, 1, 30, tzinfo=UTC)
    )
    assert line == "newest source change applied: 2026-11-24 10:00:00 UTC (lag 90 s)"


def _chromium() -> str | None:
    return next(
        (
            found
            for name in ("chromium", "chromium-browser", "google-chrome")
            if (found := shutil.which(name))
        ),
        None,
    )


@pytest.fixture(scope="module")
def browser() -> str:
    found = _chromium()
    if found is None:
        message = (
            "NO HEADLESS BROWSER: the dashboard was NOT checked in a browser. `make test` installs Debian's "
            "chromium (apt-get install chromium); install it, or run as a user who may."
        )
        warnings.warn(message, stacklevel=1)
        pytest.skip(message)
    return found


def _headless(browser: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=10000",
            *arguments,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_page_loads_in_a_real_browser_without_console_errors_and_draws_its_charts(
    browser, tmp_path: Path
) -> None:
    """Given the dashboard with data and an empty one, When Chromium loads each (headless, offline), Then
    plotly.js ran: every chart was drawn as SVG, and the console shows no error."""
    for name, figures, metrics in (("full", FIGURES, METRICS), ("empty", Figures(), {})):
        page = write_dashboard(tmp_path / f"{name}.html", figures, metrics)
        result = _headless(browser, "--dump-dom", page.as_uri())

        drawn = re.findall(
            r'<div class="chart[^"]*" id="([a-z-]+)"[^>]*>.*?<svg class="main-svg"', result.stdout, flags=re.S
        )
        assert len(set(drawn)) == CHARTS, (name, result.stderr[-2000:])
        console = [line for line in result.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
        assert [line for line in console if re.search(r"error|uncaught", line, re.I)] == [], console


def test_a_screenshot_of_the_dashboard_is_an_image_of_its_charts(browser, tmp_path: Path) -> None:
    """A small, stable screenshot check: the rendered page is a PNG of the page's size, not blank."""
    page = write_dashboard(tmp_path / "dash.html", FIGURES, METRICS)
    shot = tmp_path / "dash.png"
    _headless(browser, f"--screenshot={shot}", "--window-size=1280,1600", page.as_uri())

    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 1600)
    assert len(data) > 40_000  # charts, text and colours compress far worse than a blank page (~5 kB)


def test_run_reports_become_the_pipeline_figures_demo_and_make_dashboard_draw() -> None:
    """Given CDC run reports (one retried after a failed attempt that quarantined 2 records) and a
    full-load report, When turned into the dashboard's metrics, Then only CDC runs count, oldest first,
    with their files, changes, seconds and lag (batch cut time minus newest applied change), and the
    quarantine counts what every attempt of a run quarantined."""

    def cdc(run_id: str, newest: str | None, **totals: int) -> dict:
        base = {"files": 1, "inserted_or_updated": 0, "deleted": 0, "quarantined_records": 0}
        return {
            "run_id": run_id,
            "job": "cdc",
            "totals": base | totals,
            "newest_commit_ts": newest,
            "seconds": 3.04,
        }

    later = cdc(
        "20261124T100200000000Z-bbbbbbbb", "2026-11-24T10:01:30", files=2, inserted_or_updated=5, deleted=1
    )
    retried = cdc("20261124T100100000000Z-aaaaaaaa", "2026-11-24T10:00:00", inserted_or_updated=3) | {
        "run_quarantined_records": 2
    }
    full_load = {
        "run_id": "full-load",
        "job": "full-load",
        "totals": {"inserted_or_updated": 99, "deleted": 0},
    }

    metrics = run_metrics([later, full_load, retried])

    assert (metrics["CDC runs"], metrics["changes applied"], metrics["quarantined records"]) == (2, 9, 2)
    assert metrics["newest_commit_ts"] == "2026-11-24T10:01:30"
    assert [(r["files"], r["changes"], r["seconds"], r["lag_seconds"]) for r in metrics["runs"]] == [
        (1, 3, 3.0, 60.0),
        (2, 6, 3.0, 30.0),
    ]

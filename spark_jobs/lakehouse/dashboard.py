"""A self-contained HTML dashboard of the refined zone and the pipeline's own metrics.

Inline SVG charts and inline CSS: no JavaScript, no CDN, readable offline and attachable to a mail.

    figures = collect_figures(spark, config)           # the only Spark part
    write_dashboard("var/dashboard.html", figures, {"files": 12, "changes_applied": 3456, "lag_seconds": 41.5})

`metrics` is a flat dict of pipeline figures (shown as cards) and optionally `runs`: a list of dicts
with `run_id`, `files`, `changes` and `lag_seconds` per CDC run (shown as charts and a table).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.config import LakeConfig

PALETTE = ("#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#d53f8c", "#319795", "#b7791f", "#4a5568")


@dataclass(frozen=True)
class Figures:
    """What the dashboard shows of the refined zone."""

    totals: dict[str, float] = field(default_factory=dict)  # revenue, profit, orders, lines
    revenue_by_month: list[tuple[str, float]] = field(default_factory=list)
    revenue_by_category: list[tuple[str, float]] = field(default_factory=list)
    revenue_by_state: list[tuple[str, float]] = field(default_factory=list)
    snapshots: dict[str, int] = field(default_factory=dict)  # refined table → snapshot count


def collect_figures(spark: SparkSession, config: LakeConfig) -> Figures:
    """Read the figures from the refined tables (small aggregates only)."""
    refined = f"{config.catalog_name}.{config.refined_database}"
    category = f"{refined}.daily_revenue_by_category"
    state = f"{refined}.daily_revenue_by_state"
    totals = spark.sql(
        f"SELECT SUM(revenue) AS revenue, SUM(profit) AS profit, SUM(orders) AS orders, SUM(lines) AS lines "
        f"FROM {category}"
    ).first()
    by_month = spark.sql(
        f"SELECT date_format(sold_date, 'yyyy-MM') AS month, SUM(revenue) AS revenue FROM {category} "
        "WHERE sold_date IS NOT NULL GROUP BY 1 ORDER BY 1"
    ).collect()
    by_category = spark.sql(
        f"SELECT coalesce(category, '(deleted item)') AS name, SUM(revenue) AS revenue FROM {category} "
        "GROUP BY 1 ORDER BY 2 DESC"
    ).collect()
    by_state = spark.sql(
        f"SELECT coalesce(customer_state, '(unknown)') AS name, SUM(revenue) AS revenue FROM {state} "
        "GROUP BY 1 ORDER BY 2 DESC LIMIT 12"
    ).collect()
    snapshots = {
        name: spark.sql(f"SELECT count(*) AS n FROM {refined}.{name}.snapshots").first()["n"]
        for name in ("sales_enriched", "daily_revenue_by_category", "daily_revenue_by_state")
    }
    return Figures(
        totals={k: float(v or 0) for k, v in totals.asDict().items()},
        revenue_by_month=[(r["month"], float(r["revenue"])) for r in by_month],
        revenue_by_category=[(r["name"], float(r["revenue"])) for r in by_category],
        revenue_by_state=[(r["name"], float(r["revenue"])) for r in by_state],
        snapshots=snapshots,
    )


# ------------------------------------------------------------------------------------------------
# Pure rendering


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _number(value: float | int | Decimal, money: bool = False) -> str:
    value = float(value)
    for limit, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{'$' if money else ''}{value / limit:,.1f}{suffix}"
    return (
        f"{'$' if money else ''}{value:,.2f}"
        if money
        else f"{value:,.0f}"
        if value == int(value)
        else f"{value:,.2f}"
    )


def column_chart(
    points: Sequence[tuple[str, float]], title: str, money: bool = True, width: int = 720
) -> str:
    """Vertical bars, one per point (label, value)."""
    height, left, bottom, top = 260, 64, 46, 28
    if not points:
        return _empty(title, width)
    peak = max(max(v for _, v in points), 1e-9)
    plot_w, plot_h = width - left - 12, height - top - bottom
    step = plot_w / len(points)
    bar = max(step * 0.7, 1)
    parts = [_title(title, width)]
    for i in range(5):
        y = top + plot_h - plot_h * i / 4
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - 12}" y2="{y:.1f}" stroke="#e2e8f0"/>')
        parts.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="axis">{_number(peak * i / 4, money)}</text>'
        )
    every = max(1, len(points) // 12)
    for i, (label, value) in enumerate(points):
        h = plot_h * max(value, 0) / peak
        x = left + i * step + (step - bar) / 2
        parts.append(
            f'<rect x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="{PALETTE[0]}">'
            f"<title>{_esc(label)}: {_number(value, money)}</title></rect>"
        )
        if i % every == 0:
            parts.append(
                f'<text x="{x + bar / 2:.1f}" y="{height - bottom + 16}" text-anchor="middle" class="axis">{_esc(label)}</text>'
            )
    return _svg(parts, width, height)


def bar_chart(points: Sequence[tuple[str, float]], title: str, money: bool = True, width: int = 460) -> str:
    """Horizontal bars, largest first, with their values."""
    row, top, left = 24, 30, 120
    if not points:
        return _empty(title, width)
    height = top + row * len(points) + 8
    peak = max(max(v for _, v in points), 1e-9)
    parts = [_title(title, width)]
    for i, (label, value) in enumerate(points):
        y = top + i * row
        w = (width - left - 80) * max(value, 0) / peak
        parts.append(
            f'<text x="{left - 8}" y="{y + 15}" text-anchor="end" class="label">{_esc(label)}</text>'
        )
        parts.append(
            f'<rect x="{left}" y="{y + 3}" width="{w:.1f}" height="{row - 8}" rx="2" fill="{PALETTE[(i % 7) + 1]}"/>'
        )
        parts.append(
            f'<text x="{left + w + 6:.1f}" y="{y + 15}" class="value">{_number(value, money)}</text>'
        )
    return _svg(parts, width, height)


def line_chart(points: Sequence[tuple[str, float]], title: str, unit: str = "", width: int = 460) -> str:
    """A line with dots, for a per-run series (lag, changes)."""
    height, left, bottom, top = 200, 56, 36, 28
    if not points:
        return _empty(title, width)
    peak = max(max(v for _, v in points), 1e-9)
    plot_w, plot_h = width - left - 16, height - top - bottom
    step = plot_w / max(len(points) - 1, 1)
    xy = [(left + i * step, top + plot_h - plot_h * max(v, 0) / peak) for i, (_, v) in enumerate(points)]
    parts = [_title(title, width)]
    for i in range(3):
        y = top + plot_h - plot_h * i / 2
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - 16}" y2="{y:.1f}" stroke="#e2e8f0"/>')
        parts.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="axis">{_number(peak * i / 2)}{_esc(unit)}</text>'
        )
    path = " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(xy))
    parts.append(f'<path d="{path}" fill="none" stroke="{PALETTE[1]}" stroke-width="2"/>')
    for (x, y), (label, value) in zip(xy, points, strict=True):
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{PALETTE[1]}"><title>{_esc(label)}: '
            f"{_number(value)}{_esc(unit)}</title></circle>"
        )
    parts.append(f'<text x="{left}" y="{height - 10}" class="axis">{_esc(points[0][0])}</text>')
    parts.append(
        f'<text x="{width - 16}" y="{height - 10}" text-anchor="end" class="axis">{_esc(points[-1][0])}</text>'
    )
    return _svg(parts, width, height)


def _title(title: str, width: int) -> str:
    return f'<text x="{width / 2:.0f}" y="18" text-anchor="middle" class="chart-title">{_esc(title)}</text>'


def _svg(parts: list[str], width: int, height: int) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img">{"".join(parts)}</svg>'
    )


def _empty(title: str, width: int) -> str:
    return _svg([_title(title, width), '<text x="20" y="60" class="label">no data yet</text>'], width, 80)


def _card(label: str, value: str) -> str:
    return f'<div class="card"><div class="card-value">{_esc(value)}</div><div class="card-label">{_esc(label)}</div></div>'


CSS = """
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px;color:#1a202c;background:#f7fafc}
h1{font-size:22px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px;color:#2d3748}
.sub{color:#718096;font-size:13px;margin-bottom:16px}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{background:#fff;border:1px solid #e2e8f0;border-radius:8px;padding:12px 16px;min-width:130px}
.card-value{font-size:22px;font-weight:600} .card-label{font-size:12px;color:#718096;margin-top:2px}
.charts{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
.panel{background:#fff;border:1px solid #e2e8f0;border-radius:8px;padding:8px}
svg text{font-size:11px;fill:#4a5568} svg .chart-title{font-size:13px;font-weight:600;fill:#1a202c}
svg .value{fill:#2d3748}
table{border-collapse:collapse;background:#fff;font-size:12px} td,th{border:1px solid #e2e8f0;padding:4px 8px;text-align:right}
th{background:#edf2f7} td:first-child,th:first-child{text-align:left}
"""


def render_html(
    figures: Figures,
    metrics: Mapping[str, Any],
    title: str = "DMS → Iceberg lake",
    now: datetime | None = None,
) -> str:
    """The whole dashboard as one HTML document."""
    moment = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    t = figures.totals
    business = [
        _card("revenue", _number(t.get("revenue", 0), money=True)),
        _card("profit", _number(t.get("profit", 0), money=True)),
        _card("orders (order-days)", _number(t.get("orders", 0))),
        _card("sale lines", _number(t.get("lines", 0))),
    ]
    runs = list(metrics.get("runs") or [])
    pipeline = [
        _card(str(k).replace("_", " "), _number(v) if isinstance(v, int | float | Decimal) else str(v))
        for k, v in metrics.items()
        if k != "runs"
    ]
    pipeline += [_card(f"snapshots of {k}", str(v)) for k, v in figures.snapshots.items()]
    run_charts = ""
    run_table = ""
    if runs:
        labels = [str(r.get("run_id", i + 1)) for i, r in enumerate(runs)]
        run_charts = (
            f'<div class="panel">{line_chart(list(zip(labels, [float(r.get("lag_seconds", 0)) for r in runs], strict=True)), "lag per CDC run", "s")}</div>'
            f'<div class="panel">{line_chart(list(zip(labels, [float(r.get("changes", 0)) for r in runs], strict=True)), "changes applied per CDC run")}</div>'
        )
        columns = sorted({k for r in runs for k in r}, key=lambda k: (k != "run_id", k))
        head = "".join(f"<th>{_esc(c)}</th>" for c in columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{_esc(r.get(c, ''))}</td>" for c in columns) + "</tr>" for r in runs[-20:]
        )
        run_table = f"<h2>Last CDC runs</h2><table><tr>{head}</tr>{body}</table>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title><style>{CSS}</style></head>
<body>
<h1>{_esc(title)}</h1><div class="sub">refined zone and pipeline metrics, generated {moment}</div>
<h2>Business (refined zone)</h2><div class="cards">{"".join(business)}</div>
<div class="charts" style="margin-top:12px">
<div class="panel">{column_chart(figures.revenue_by_month, "revenue by month")}</div>
<div class="panel">{bar_chart(figures.revenue_by_category, "revenue by category")}</div>
<div class="panel">{bar_chart(figures.revenue_by_state, "revenue by customer state (top 12)")}</div>
</div>
<h2>Pipeline</h2><div class="cards">{"".join(pipeline)}</div>
<div class="charts" style="margin-top:12px">{run_charts}</div>
{run_table}
</body></html>
"""


def write_dashboard(
    path: str | Path, figures: Figures, metrics: Mapping[str, Any], title: str = "DMS → Iceberg lake"
) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_html(figures, metrics, title), encoding="utf-8")
    return target

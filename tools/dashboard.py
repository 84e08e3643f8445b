"""A self-contained, interactive HTML dashboard of the refined zone and the pipeline's runs (Plotly).

One file with plotly.js inlined: it opens offline, from a mail or a bucket, with zoom and hover. Its business
figures read the example models' refined tables (`models/`: `sales_enriched`, `daily_revenue_by_category`,
`daily_revenue_by_state`, the demo's); a refined zone without them (models of your own) has none to show.

    figures = collect_figures(spark, config)           # the only Spark part
    write_dashboard("var/dashboard.html", figures, {"files": 12, "changes_applied": 3456, "runs": [...]})

`metrics` is a flat dict of pipeline figures (shown as cards), optionally `runs`: one dict per CDC run with
`run_id`, `files`, `changes`, `lag_seconds` (charts and a table), `newest_commit_ts` (ISO-8601 UTC, the
newest source change applied: the freshness line), `freshness` (the newest run report's per-table freshness,
lakehouse.audit.freshness: the freshness table) and `consistent_point` (the newest moment every clean table has
applied exactly).
"""

from __future__ import annotations

import html
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakehouse.base.config import LakeConfig
    from pyspark.sql import SparkSession

PALETTE = ("#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#d53f8c", "#319795", "#b7791f", "#4a5568")
NO_DATA = "no data yet"


@dataclass(frozen=True)
class Figures:
    """What the dashboard shows of the refined zone."""

    totals: dict[str, float] = field(default_factory=dict)  # revenue, profit, orders, lines
    revenue_by_month: list[tuple[str, float]] = field(default_factory=list)
    revenue_by_category: list[tuple[str, float]] = field(default_factory=list)
    revenue_by_state: list[tuple[str, float]] = field(default_factory=list)
    snapshots: dict[str, int] = field(default_factory=dict)  # refined table → snapshot count
    refined_point: str | None = None  # the consistent point the refined zone was built from


EXAMPLE_TABLES = ("sales_enriched", "daily_revenue_by_category", "daily_revenue_by_state")


def collect_figures(spark: SparkSession, config: LakeConfig) -> Figures:
    """Read the figures from the example models' refined tables (small aggregates only); none without them."""
    from lakehouse.io.frames import one_row

    refined = f"{config.catalog_name}.{config.refined_database}"
    if not all(spark.catalog.tableExists(f"{refined}.{name}") for name in EXAMPLE_TABLES):
        return Figures()
    category = f"{refined}.daily_revenue_by_category"
    state = f"{refined}.daily_revenue_by_state"
    totals = one_row(
        spark.sql(
            f"SELECT SUM(revenue) AS revenue, SUM(profit) AS profit, SUM(orders) AS orders, SUM(lines) AS lines "
            f"FROM {category}"
        )
    )
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
        name: one_row(spark.sql(f"SELECT count(*) AS n FROM {refined}.{name}.snapshots"))["n"]
        for name in EXAMPLE_TABLES
    }
    from lakehouse.audit.consistent import POINT_AT
    from lakehouse.io.iceberg import snapshot_properties

    built_from = next(
        (p[POINT_AT] for p in snapshot_properties(spark, f"{refined}.sales_enriched") if POINT_AT in p), None
    )
    return Figures(
        refined_point=built_from,
        totals={k: float(v or 0) for k, v in totals.asDict().items()},
        revenue_by_month=[(r["month"], float(r["revenue"])) for r in by_month],
        revenue_by_category=[(r["name"], float(r["revenue"])) for r in by_category],
        revenue_by_state=[(r["name"], float(r["revenue"])) for r in by_state],
        snapshots=snapshots,
    )


# ------------------------------------------------------------------------------------------------
# Pure rendering (Plotly figures as JSON, one inlined plotly.js)


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _number(value: float | int | Decimal, money: bool = False) -> str:
    value = float(value)
    for limit, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{'$' if money else ''}{value / limit:,.1f}{suffix}"
    if money:
        return f"${value:,.2f}"
    return f"{value:,.0f}" if value == int(value) else f"{value:,.2f}"


def _figure(
    title: str,
    kind: str,
    points: Sequence[tuple[str, float]],
    x_title: str,
    y_title: str,
    money: bool = False,
    color: str = PALETTE[0],
) -> dict[str, Any]:
    """A Plotly figure (as its JSON dict): bars, horizontal bars or a line; 'no data yet' when empty."""
    import plotly.graph_objects as go

    labels = [str(label) for label, _ in points]
    values = [float(value) for _, value in points]
    value_format = "$,.2f" if money else ",.0f"
    if kind == "hbar":
        trace = go.Bar(
            x=values,
            y=labels,
            orientation="h",
            marker_color=color,
            hovertemplate=f"%{{y}}: %{{x:{value_format}}}<extra></extra>",
        )
        value_axis, label_axis = "xaxis", "yaxis"
    elif kind == "line":
        trace = go.Scatter(
            x=labels,
            y=values,
            mode="lines+markers",
            line={"color": color},
            hovertemplate=f"%{{x}}: %{{y:{value_format}}}<extra></extra>",
        )
        value_axis, label_axis = "yaxis", "xaxis"
    else:
        trace = go.Bar(
            x=labels,
            y=values,
            marker_color=color,
            hovertemplate=f"%{{x}}: %{{y:{value_format}}}<extra></extra>",
        )
        value_axis, label_axis = "yaxis", "xaxis"
    figure = go.Figure(trace if points else None)
    figure.update_layout(
        title={"text": title, "x": 0.02, "font": {"size": 15}},
        template="plotly_white",
        height=340,
        margin={"l": 70, "r": 20, "t": 50, "b": 60},
        **{
            value_axis: {
                "title": {"text": y_title if value_axis == "yaxis" else x_title},
                "tickformat": "$~s" if money else "~s",  # round ticks: 200k, 1.5M
                "rangemode": "tozero",
                "nticks": 6,
            },
            label_axis: {
                "title": {"text": x_title if label_axis == "xaxis" else y_title},
                "type": "category",
                **({"autorange": "reversed"} if kind == "hbar" else {}),
            },
        },
    )
    if not points:
        figure.add_annotation(
            text=NO_DATA, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5, font={"size": 16}
        )
        figure.update_xaxes(visible=False)
        figure.update_yaxes(visible=False)
    return figure.to_plotly_json()


def _card(label: str, value: str) -> str:
    return (
        f'<div class="card"><div class="card-value">{_esc(value)}</div>'
        f'<div class="card-label">{_esc(label)}</div></div>'
    )


def freshness_line(metrics: Mapping[str, Any], now: datetime) -> str:
    """'newest source change applied: <time> UTC (lag 41 s)', or that none was applied yet."""
    newest = metrics.get("newest_commit_ts")
    if not newest:
        return "no source change applied yet"
    moment = datetime.fromisoformat(str(newest).replace("Z", "+00:00"))
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    lag = max((now - moment).total_seconds(), 0.0)
    return f"newest source change applied: {moment:%Y-%m-%d %H:%M:%S} UTC (lag {_number(round(lag))} s)"


def _moment(text: Any) -> datetime | None:
    if not text:
        return None
    moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def consistency_line(metrics: Mapping[str, Any], figures: Figures) -> str:
    """The newest consistent point the CDC runs recorded, and the one the refined zone was built from."""
    point, built = _moment(metrics.get("consistent_point")), _moment(figures.refined_point)
    parts = [
        f"every clean table applied exactly up to {point:%Y-%m-%d %H:%M:%S.%f} UTC (consistent point)"
        if point
        else "no consistent point recorded yet"
    ]
    if built:
        parts.append(f"refined zone built from the consistent point {built:%Y-%m-%d %H:%M:%S.%f} UTC")
    return "; ".join(parts)


def freshness_table(metrics: Mapping[str, Any], now: datetime) -> str:
    """Per clean table: its newest source change, its lag now, the moment up to which it applied every
    change, and its last batch (the newest CDC run report's `freshness`)."""
    rows = [r for r in metrics.get("freshness") or [] if isinstance(r, Mapping)]
    if not rows:
        return ""
    body = []
    for row in sorted(rows, key=lambda r: str(r.get("source_table"))):
        newest, through = _moment(row.get("newest_source_commit_ts")), _moment(row.get("applied_through_ts"))
        lag = f"{_number(round(max((now - newest).total_seconds(), 0.0)))} s" if newest else ""
        cells = [
            row.get("source_table", ""),
            f"{newest:%Y-%m-%d %H:%M:%S}" if newest else "",
            lag,
            f"{through:%Y-%m-%d %H:%M:%S}" if through else "",
            row.get("last_batch_id") or "",
        ]
        body.append("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>")
    titles = ("table", "newest source change (UTC)", "lag", "every change applied up to (UTC)", "last batch")
    head = "".join(f"<th>{h}</th>" for h in titles)
    return f'<h2>Freshness per table</h2><table id="table-freshness"><tr>{head}</tr>{"".join(body)}</table>'


CSS = """
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px;color:#1a202c;background:#f7fafc}
h1{font-size:22px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px;color:#2d3748}
.sub{color:#718096;font-size:13px;margin-bottom:4px} .fresh{font-size:14px;margin-bottom:16px}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{background:#fff;border:1px solid #e2e8f0;border-radius:8px;padding:12px 16px;min-width:130px}
.card-value{font-size:22px;font-weight:600} .card-label{font-size:12px;color:#718096;margin-top:2px}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(460px,1fr));gap:16px;margin-top:12px}
.chart{background:#fff;border:1px solid #e2e8f0;border-radius:8px;min-height:340px}
table{border-collapse:collapse;background:#fff;font-size:12px} td,th{border:1px solid #e2e8f0;padding:4px 8px;text-align:right}
th{background:#edf2f7} td:first-child,th:first-child{text-align:left}
"""


def _json_for_script(document: Any) -> str:
    """JSON safe inside <script>: no `</script>` or HTML comment can close it early."""
    text = json.dumps(document, default=float)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(
    figures: Figures,
    metrics: Mapping[str, Any],
    title: str = "DMS → Iceberg lake",
    now: datetime | None = None,
) -> str:
    """The whole dashboard as one HTML document (plotly.js inlined once)."""
    from plotly.offline import get_plotlyjs

    moment = now or datetime.now(UTC)
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
        if k not in ("runs", "newest_commit_ts", "freshness", "consistent_point")
    ]
    pipeline += [_card(f"snapshots of {k}", str(v)) for k, v in figures.snapshots.items()]
    labels = [str(r.get("run_id", i + 1)) for i, r in enumerate(runs)]
    charts = {
        "revenue-by-month": _figure(
            "Revenue by month", "bar", figures.revenue_by_month, "month", "revenue (USD)", money=True
        ),
        "revenue-by-category": _figure(
            "Revenue by category",
            "hbar",
            figures.revenue_by_category,
            "revenue (USD)",
            "category",
            money=True,
            color=PALETTE[2],
        ),
        "revenue-by-state": _figure(
            "Revenue by customer state (top 12)",
            "bar",
            figures.revenue_by_state,
            "customer state",
            "revenue (USD)",
            money=True,
            color=PALETTE[3],
        ),
        "lag-per-run": _figure(
            "Lag of the clean zone after each CDC run",
            "line",
            list(zip(labels, [float(r.get("lag_seconds", 0)) for r in runs], strict=True)),
            "CDC run",
            "lag (seconds)",
            color=PALETTE[1],
        ),
        "changes-per-run": _figure(
            "Changes applied per CDC run",
            "bar",
            list(zip(labels, [float(r.get("changes", 0)) for r in runs], strict=True)),
            "CDC run",
            "changes (rows)",
            color=PALETTE[5],
        ),
    }
    run_table = ""
    if runs:
        columns = sorted({k for r in runs for k in r}, key=lambda k: (k != "run_id", k))
        head = "".join(f"<th>{_esc(c)}</th>" for c in columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{_esc(r.get(c, ''))}</td>" for c in columns) + "</tr>" for r in runs[-20:]
        )
        run_table = f"<h2>Last CDC runs</h2><table><tr>{head}</tr>{body}</table>"

    def divs(*names: str) -> str:
        return "".join(f'<div class="chart" id="{name}"></div>' for name in names)

    draw = "\n".join(
        f"Plotly.newPlot({json.dumps(name)}, {_json_for_script(f['data'])}, {_json_for_script(f['layout'])},"
        " {responsive: true, displaylogo: false});"
        for name, f in charts.items()
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title><style>{CSS}</style>
<script>{get_plotlyjs()}</script></head>
<body>
<h1>{_esc(title)}</h1><div class="sub">refined zone and pipeline runs, generated {moment:%Y-%m-%d %H:%M} UTC</div>
<div class="fresh" id="freshness">{_esc(freshness_line(metrics, moment))}</div>
<div class="fresh" id="consistency">{_esc(consistency_line(metrics, figures))}</div>
<h2>Business (refined zone)</h2><div class="cards">{"".join(business)}</div>
<div class="charts">{divs("revenue-by-month", "revenue-by-category", "revenue-by-state")}</div>
<h2>Pipeline</h2><div class="cards">{"".join(pipeline)}</div>
<div class="charts">{divs("lag-per-run", "changes-per-run")}</div>
{freshness_table(metrics, moment)}
{run_table}
<script>{draw}</script>
</body></html>
"""


def batch_lag(report: Mapping[str, Any]) -> float:
    """How old the batch's newest change was when the drain cut the batch (its run id is that time)."""
    newest = report.get("newest_commit_ts")
    try:
        cut = datetime.strptime(str(report["run_id"])[:22], "%Y%m%dT%H%M%S%fZ").replace(tzinfo=UTC)
    except (KeyError, ValueError):
        return 0.0
    if not newest:
        return 0.0
    moment = datetime.fromisoformat(newest.replace("Z", "+00:00"))
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return round(max((cut - moment).total_seconds(), 0.0), 1)


def run_metrics(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The dashboard's pipeline figures from CDC run reports (docs/CONTRACTS.md), oldest run first."""
    cdc = sorted(
        (r for r in reports if r.get("job") == "cdc" and isinstance(r.get("totals"), dict)),
        key=lambda r: str(r.get("run_id", "")),
    )

    def changes(report: Mapping[str, Any]) -> int:
        return report["totals"].get("inserted_or_updated", 0) + report["totals"].get("deleted", 0)

    measured = [r["freshness"] for r in cdc if isinstance(r.get("freshness"), dict)]
    latest = measured[-1] if measured else {}
    point = next((m["consistent_point"] for m in reversed(measured) if m.get("consistent_point")), None)
    return {
        "freshness": latest.get("tables") or [],
        "consistent_point": point.get("at") if isinstance(point, dict) else None,
        "CDC runs": len(cdc),
        "changes applied": sum(changes(r) for r in cdc),
        "quarantined records": sum(
            max(r["totals"].get("quarantined_records", 0), r.get("run_quarantined_records", 0)) for r in cdc
        ),
        "newest_commit_ts": max(
            (r["newest_commit_ts"] for r in cdc if r.get("newest_commit_ts")), default=None
        ),
        "runs": [
            {
                "run_id": r["run_id"],
                "files": r["totals"].get("files", 0),
                "changes": changes(r),
                "seconds": round(r.get("seconds", 0), 1),
                "lag_seconds": batch_lag(r),
            }
            for r in cdc
        ],
    }


def write_dashboard(
    path: str | Path, figures: Figures, metrics: Mapping[str, Any], title: str = "DMS → Iceberg lake"
) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_html(figures, metrics, title), encoding="utf-8")
    return target


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m tools.dashboard --warehouse var/warehouse/clean --clean_database demo_clean
    --refined_database demo_refined --out var/dashboard.html [--reports DIR]`: the dashboard of a local
    warehouse (the demo's, by default `make dashboard`), run reports (`<run_id>.json`) read from DIR."""
    import argparse

    from lakehouse.base.config import parse_job_arguments
    from lakehouse.io.session import build_session

    parser = argparse.ArgumentParser(description="Write the dashboard of a warehouse's refined zone")
    parser.add_argument("--out", default="var/dashboard.html", help="the HTML file to write")
    parser.add_argument("--reports", default=None, help="a folder of CDC run reports (JSON), optional")
    config, args = parse_job_arguments(list(argv) if argv is not None else sys.argv[1:], parser)
    metrics: dict[str, Any] = {}
    if args.reports:
        metrics = run_metrics([json.loads(p.read_text()) for p in Path(args.reports).glob("*.json")])
    spark = build_session(config, "dashboard")
    path = write_dashboard(args.out, collect_figures(spark, config), metrics)
    print(path.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The dashboard: one server-rendered HTML page with plotly figures, no build step.

plotly.js is embedded inline from the installed ``plotly`` package, so the page
(and ``recrawl report``'s file) works offline. Everything user-supplied (URLs,
site names, page types, reasons) is HTML-escaped before it reaches the page or
a figure.

Figures:

* where the money goes: cost per change detected and fetches that found no
  change, per site and page type;
* each site's health score over time on its bands (healthy ≥ 80, degrading
  50–79, critical < 50), with the reasons on hover;
* the freshness estimate over time: the value-weighted mean probability that
  our copy of a page equals the live page, ``exp(−λ·(t − last successful
  fetch))`` with λ each page's current change-rate estimate (a page not yet
  fetched counts as stale), over a sample of up to :data:`FRESHNESS_SAMPLE` pages;
* the current plan's split between score, discovery, re-estimation,
  verification (and canaries), by tasks and by cost.
"""

from __future__ import annotations

import html
import math
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from recrawl.engine.engine import Engine, PlanResult
from recrawl.estimate.pagestate import CONTENT_OUTCOMES
from recrawl.plan.planner import reallocate

__all__ = [
    "FRESHNESS_SAMPLE",
    "freshness_series",
    "render_dashboard",
    "render_report",
]

FRESHNESS_SAMPLE = 2000
"""Pages sampled for the freshness estimate (the estimate is a mean, so a sample suffices)."""

_DAY_S = 86_400.0
_BAND_COLOURS = {"healthy": "#2e7d32", "degrading": "#f9a825", "critical": "#c62828"}
_REASON_ORDER = ("score", "discovery", "reestimate", "verify", "canary")
_PLOT_CONFIG = {"displaylogo": False, "responsive": True}


def _e(text: Any) -> str:
    """HTML-escape anything user-supplied."""
    return html.escape(str(text), quote=True)


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


@lru_cache(maxsize=1)
def _plotly_js() -> str:
    return str(get_plotlyjs())


def _empty(fig: go.Figure, message: str) -> go.Figure:
    fig.add_annotation(text=_e(message), showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


# -- data ------------------------------------------------------------------------------------


def freshness_series(
    engine: Engine, now: float, *, points: int = 96, days: float = 7.0, seed: int = 0
) -> tuple[list[float], list[float]]:
    """Estimated freshness (0–1) at ``points`` times (unix seconds) over ``days`` days.

    The window ends at ``now``, or at the last successful fetch when that is
    older than the window. See the module docstring for the estimate.
    """
    pages, cols = engine.page_arrays(now)
    idx = np.flatnonzero(pages.active)
    if idx.size == 0:
        return [], []
    per_day = engine.settings.daily_budget(len(pages))
    model = reallocate(pages, per_day, now, config=engine.planner_config())
    if idx.size > FRESHNESS_SAMPLE:
        idx = np.sort(np.random.default_rng(seed).choice(idx, FRESHNESS_SAMPLE, replace=False))
    fetches: list[np.ndarray[Any, np.dtype[np.float64]]] = []
    latest = -math.inf
    urls = [cols["url"][i] for i in idx.tolist()]
    logs = engine.store.outcomes_many(urls)
    pruned = engine.store.pruned_last_success(urls)  # a pruned log's last success still counts
    for u in urls:
        times = np.array(
            ([pruned[u]] if u in pruned else []) + [t for t, o in logs[u] if o in CONTENT_OUTCOMES],
            dtype=np.float64,
        )
        fetches.append(times)
        if times.size:
            latest = max(latest, float(times[-1]))
    if not math.isfinite(latest):
        return [], []
    end = now if latest >= now - days * _DAY_S else latest
    grid = np.linspace(end - days * _DAY_S, end, points)
    rate = model.rate_per_day[idx] / _DAY_S
    value = pages.value[idx]
    first = pages.first_seen[idx]
    num = np.zeros(points)
    den = np.zeros(points)
    for k, times in enumerate(fetches):
        exists = grid >= first[k]
        den += value[k] * exists
        if times.size == 0:
            continue
        j = np.searchsorted(times, grid, side="right") - 1
        have = j >= 0
        last = times[np.maximum(j, 0)]
        num += value[k] * np.where(have & exists, np.exp(-rate[k] * (grid - last)), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        fresh = np.where(den > 0, num / np.maximum(den, 1e-300), np.nan)
    keep = ~np.isnan(fresh)
    return grid[keep].tolist(), fresh[keep].tolist()


# -- figures ---------------------------------------------------------------------------------


def _money_figure(stats: dict[str, Any]) -> go.Figure:
    groups = stats["groups"]
    unit = stats["unit"]
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(f"Cost per change detected ({_e(unit)})", "Fetches that found no change"),
    )
    if not groups:
        return _empty(fig, "no fetches yet")
    labels = [f"{_e(g['site'])} · {_e(g['page_type'])}" for g in groups]
    per_change = [g["cost_per_change"] for g in groups]
    fig.add_trace(
        go.Bar(
            x=labels,
            y=[v if v is not None else 0 for v in per_change],
            text=["no change yet" if v is None else "" for v in per_change],
            name="cost per change",
            marker_color="#1565c0",
            hovertemplate="%{x}<br>%{y:,.2f} " + _e(unit) + " per change<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Bar(
            x=labels,
            y=[g["fetches_without_change"] for g in groups],
            customdata=[[g["fetches"], g["changes_detected"]] for g in groups],
            name="fetches without change",
            marker_color="#ef6c00",
            hovertemplate="%{x}<br>%{y:,} of %{customdata[0]:,} fetches found no change"
            "<br>%{customdata[1]:,} changes<extra></extra>",
        ),
        row=1,
        col=2,
    )
    fig.update_layout(height=420, showlegend=False, margin={"t": 60, "b": 120})
    return fig


def _health_figure(history: list[tuple[float, dict[str, Any]]]) -> go.Figure:
    fig = go.Figure()
    for band, (y0, y1) in (("critical", (0, 50)), ("degrading", (50, 80)), ("healthy", (80, 100))):
        fig.add_hrect(
            y0=y0,
            y1=y1,
            fillcolor=_BAND_COLOURS[band],
            opacity=0.10,
            line_width=0,
            annotation_text=band,
            annotation_position="top left",
        )
    by_site: dict[str, list[tuple[float, dict[str, Any]]]] = {}
    for at, report in history:
        by_site.setdefault(str(report.get("site")), []).append((at, report))
    for site, rows in sorted(by_site.items()):
        scored = [(at, r) for at, r in rows if r.get("score") is not None]
        if not scored:
            continue
        fig.add_trace(
            go.Scatter(
                x=[_dt(at) for at, _ in scored],
                y=[r["score"] for _, r in scored],
                mode="lines+markers",
                name=_e(site),
                text=[
                    f"{_e(r.get('band'))}: {_e(', '.join(map(str, r.get('reasons') or [])) or 'no penalty')}"
                    for _, r in scored
                ],
                hovertemplate="%{x}<br>score %{y}<br>%{text}<extra>" + _e(site) + "</extra>",
            )
        )
    fig.update_layout(
        height=420,
        yaxis={"range": [0, 100], "title": "health score"},
        margin={"t": 30},
        legend={"orientation": "h"},
    )
    if not fig.data:
        _empty(fig, "no health evaluation yet (50 requests in a window are needed)")
    return fig


def _freshness_figure(times: list[float], fresh: list[float]) -> go.Figure:
    fig = go.Figure()
    if times:
        fig.add_trace(
            go.Scatter(
                x=[_dt(t) for t in times],
                y=fresh,
                mode="lines",
                fill="tozeroy",
                name="freshness",
                line_color="#00897b",
                hovertemplate="%{x}<br>%{y:.1%} of pages fresh (value-weighted)<extra></extra>",
            )
        )
    else:
        _empty(fig, "no successful fetch yet")
    fig.update_layout(
        height=360, yaxis={"range": [0, 1], "tickformat": ".0%", "title": "estimated fresh"},
        margin={"t": 30},
    )  # fmt: skip
    return fig


def _plan_figure(plan: PlanResult | None, unit: str) -> go.Figure:
    fig = make_subplots(
        rows=1,
        cols=2,
        specs=[[{"type": "domain"}, {"type": "xy"}]],
        subplot_titles=("Tasks by reason", f"Cost by reason ({_e(unit)})"),
    )
    if plan is None or not plan.tasks:
        return _empty(fig, "no plan (no pages, or no budget configured)")
    counts: dict[str, int] = {}
    costs: dict[str, float] = {}
    for t in plan.tasks:
        r = str(t["reason"])
        counts[r] = counts.get(r, 0) + 1
        costs[r] = costs.get(r, 0.0) + float(t.get("cost") or 0.0)
    reasons = [r for r in _REASON_ORDER if r in counts] + sorted(
        r for r in counts if r not in _REASON_ORDER
    )
    labels = [_e(r) for r in reasons]
    fig.add_trace(go.Pie(labels=labels, values=[counts[r] for r in reasons], hole=0.4), 1, 1)
    fig.add_trace(
        go.Bar(x=labels, y=[costs[r] for r in reasons], marker_color="#6a1b9a", name="cost"),
        1,
        2,
    )
    fig.update_layout(height=380, showlegend=True, margin={"t": 60})
    return fig


def _div(fig: go.Figure, div_id: str) -> str:
    return str(
        pio.to_html(
            fig, full_html=False, include_plotlyjs=False, div_id=div_id, config=_PLOT_CONFIG
        )
    )


# -- page ------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#222;
background:#fafafa}
header{background:#263238;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:22px} header p{margin:4px 0 0;color:#cfd8dc;font-size:13px}
main{padding:12px 24px;max-width:1400px}
section{background:#fff;border:1px solid #e0e0e0;border-radius:6px;margin:14px 0;padding:10px 16px}
h2{font-size:17px;margin:6px 0}
table{border-collapse:collapse;font-size:13px;width:100%}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eee;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.kpi{display:inline-block;margin-right:28px} .kpi b{font-size:20px;display:block}
.band-healthy{color:#2e7d32} .band-degrading{color:#b26a00} .band-critical{color:#c62828}
.url{word-break:break-all}
.warn{color:#b26a00}
"""


def _num(x: Any, digits: int = 2) -> str:
    if x is None:
        return "–"
    x = float(x)
    if not math.isfinite(x):
        return "∞"
    return f"{int(x):,}" if x.is_integer() else f"{x:,.{digits}f}"


def _health_table(health: list[dict[str, Any]], controls: dict[str, dict[str, Any]]) -> str:
    if not health and not controls:
        return "<p>No site evaluated yet.</p>"
    rows = []
    seen = set()
    for h in health:
        seen.add(h["site"])
        c = controls.get(h["site"]) or {}
        band = str(h.get("band", "unknown"))
        action = h.get("action") or {}
        rows.append(
            f"<tr><td>{_e(h['site'])}</td><td class='band-{_e(band)}'>{_e(band)}</td>"
            f"<td class='n'>{_num(h.get('score'))}</td>"
            f"<td>{_e(', '.join(map(str, h.get('reasons') or [])))}</td>"
            f"<td>{_e(h.get('diagnosis', ''))}</td><td>{_e(action.get('name', ''))}</td>"
            f"<td>{'paused' if c.get('paused') else ''}</td>"
            f"<td class='n'>{_num(c.get('concurrency_cap'))}</td></tr>"
        )
    for site, c in sorted(controls.items()):
        if site not in seen:
            rows.append(
                f"<tr><td>{_e(site)}</td><td>{_e(c.get('band', 'unknown'))}</td><td></td><td></td>"
                f"<td></td><td></td><td>{'paused' if c.get('paused') else ''}</td>"
                f"<td class='n'>{_num(c.get('concurrency_cap'))}</td></tr>"
            )
    return (
        "<table><tr><th>site</th><th>band</th><th>score</th><th>reasons</th><th>diagnosis</th>"
        "<th>action</th><th>paused</th><th>concurrency cap</th></tr>" + "".join(rows) + "</table>"
    )


def _rates_note(plan: PlanResult | None) -> str:
    r = None if plan is None else plan.resolution
    if r is None or not r.revisited:
        return ""
    advice = r.advice()
    return f"<p>Rates: {_e(r.summary())}.</p>" + (
        f"<p class='warn'>{_e(advice)}</p>" if advice else ""
    )


def _plan_table(plan: PlanResult | None, limit: int = 25) -> str:
    if plan is None or not plan.tasks:
        return ""
    rows = "".join(
        f"<tr><td class='url'>{_e(t['url'])}</td><td>{_e(t['site'])}</td>"
        f"<td>{_e(t['page_type'])}</td><td>{_e(t['reason'])}</td>"
        f"<td class='n'>{_num(t.get('priority'), 4)}</td><td class='n'>{_num(t.get('cost'))}</td></tr>"
        for t in plan.tasks[:limit]
    )
    return (
        f"<h2>Next tasks (first {min(limit, len(plan.tasks))} of {len(plan.tasks):,})</h2>"
        "<table><tr><th>url</th><th>site</th><th>page type</th><th>reason</th>"
        "<th>priority</th><th>cost</th></tr>" + rows + "</table>"
    )


def render_dashboard(
    engine: Engine,
    *,
    now: float | None = None,
    plan: PlanResult | None = None,
    health: list[dict[str, Any]] | None = None,
    history_days: float = 7.0,
    title: str = "recrawl",
) -> str:
    """The dashboard as one self-contained HTML page (plotly.js inline).

    ``plan`` and ``health`` are the current plan and the last health evaluation
    (``recrawl health --json`` shape); the health figure shows the history of
    the last ``history_days`` days.
    """
    t = engine.clock() if now is None else now
    stats = engine.stats()
    unit = stats["unit"]
    history = engine.store.health_history(since=t - history_days * _DAY_S)
    times, fresh = freshness_series(engine, t)
    controls = engine.store.site_controls()
    total = stats["total"]
    kpis = [
        ("fetches", _num(total["fetches"])),
        ("changes detected", _num(total["changes_detected"])),
        ("fetches without change", _num(total["fetches_without_change"])),
        (f"cost ({unit})", _num(total["cost"])),
        (f"cost per change ({unit})", _num(total["cost_per_change"])),
        ("freshness now (est.)", f"{fresh[-1]:.1%}" if fresh else "–"),
    ]
    if plan is not None:
        kpis.append(
            (f"plan: {len(plan.tasks):,} tasks", f"{_num(plan.spent)} / {_num(plan.budget)}")
        )
    kpi_html = "".join(f"<span class='kpi'><b>{v}</b>{_e(k)}</span>" for k, v in kpis)
    sections = [
        ("Where the money goes", _div(_money_figure(stats), "fig-money")),
        (
            "Site health over time",
            _div(_health_figure(history), "fig-health") + _health_table(health or [], controls),
        ),
        ("Freshness estimate over time", _div(_freshness_figure(times, fresh), "fig-freshness")),
        (
            "The current plan",
            _div(_plan_figure(plan, unit), "fig-plan") + _rates_note(plan) + _plan_table(plan),
        ),
    ]
    body = "".join(f"<section><h2>{_e(h)}</h2>{content}</section>" for h, content in sections)
    generated = _dt(t).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<style>{_CSS}</style><script>{_plotly_js()}</script></head><body>"
        f"<header><h1>{_e(title)}</h1><p>generated {generated} · costs in {_e(unit)}</p></header>"
        f"<main><section>{kpi_html}</section>{body}</main></body></html>"
    )


def render_report(engine: Engine, *, now: float | None = None) -> str:
    """The dashboard for ``recrawl report``: plans the next cycle and scores health
    (without recording either), then renders :func:`render_dashboard`."""
    t = engine.clock() if now is None else now
    try:
        plan: PlanResult | None = engine.plan(now=t)
    except ValueError:
        plan = None
    health_fn = getattr(engine, "health", None)
    health = list(health_fn(at=t, record=False)) if health_fn is not None else None
    return render_dashboard(engine, now=t, plan=plan, health=health)

"""The dashboard: one server-rendered HTML page with plotly figures, no build step.

plotly.js is not inlined: the page loads it by URL (:mod:`recrawl.report.assets`),
so after the first load a page weighs its HTML alone; :func:`render_report`
with ``inline=True`` keeps the single-file form. Everything user-supplied
(URLs, site names, page types, reasons) is HTML-escaped before it reaches the
page, and escaped as plotly reads text (``&``, ``<``, ``>``, not quotes) before
it reaches a figure.

Every figure covers one time range (:class:`~recrawl.report.window.TimeWindow`,
picked with ``?days=`` or ``?from=&to=`` on the service, ``--days`` or
``--since`` for ``recrawl report``), in steps of an hour (ranges up to three
days) or a UTC day:

* where the money goes in the range: cost per change detected and fetches that
  found no change, per site and page type;
* cost per change detected for each cheap signal (sitemap, feed, listing) and
  the schedule, per site, since the store began counting
  (:meth:`recrawl.engine.Engine.signal_costs`), and the items per site that
  left every listing;
* spend per step against the budget (``budget_per_day``, or one fetch per page
  a day), by site;
* fetches without change and cost per change over time, per site and page type;
* hard blocks, challenges and p95 latency over time, each against that site's
  normal (the health scorer's baseline on that day);
* each site's health score over time on its bands (healthy ≥ 80, degrading
  50–79, critical < 50), with the reasons on hover;
* the freshness estimate over time: the value-weighted mean probability that
  our copy of a page equals the live page, ``exp(−λ·(t − last successful
  fetch))`` with λ each page's current change-rate estimate (a page not yet
  fetched counts as stale), over a sample of up to :data:`FRESHNESS_SAMPLE` pages;
* the calibration check: whether the change model predicted what the range's
  revisits found (:meth:`recrawl.engine.Engine.calibration`);
* the current plan's split between score, discovery, re-estimation,
  verification (and canaries), by tasks and by cost.

One site's page (``?site=``, linked from the health table when served) shows
every figure for that site alone, plus its refusals by route over time, its
pauses, resumes and band changes in the range, and its pages.

A chart with nothing to show says so over an axis of the range's dates; a
stale store (no fetch for a day, :data:`~recrawl.report.window.STALE_AFTER_S`)
is shown as of its newest fetch, with a banner saying how old it is.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from recrawl.engine.engine import Engine, PlanResult
from recrawl.engine.stats import BillingUnit
from recrawl.estimate.calibration import Calibration
from recrawl.estimate.pagestate import CONTENT_OUTCOMES
from recrawl.plan.planner import reallocate
from recrawl.report.assets import PLOTLY_FILE, PLOTLY_PATH, plotly_js, write_plotly
from recrawl.report.timeline import (
    MoneySeries,
    RouteSeries,
    SignalSeries,
    money_over_time,
    routes_over_time,
    signals_over_time,
)
from recrawl.report.window import TimeWindow

__all__ = [
    "FIGURES",
    "FRESHNESS_SAMPLE",
    "REASON_COLOURS",
    "SITE_FIGURES",
    "DashboardData",
    "dashboard_figures",
    "freshness_series",
    "read_dashboard",
    "render_dashboard",
    "render_page",
    "render_report",
    "write_report",
]

FRESHNESS_SAMPLE = 2000
"""Pages sampled for the freshness estimate (the estimate is a mean, so a sample suffices)."""

FIGURES = (
    "fig-money",
    "fig-cheap",
    "fig-spend",
    "fig-waste",
    "fig-signals",
    "fig-health",
    "fig-freshness",
    "fig-calibration",
    "fig-plan",
)
"""The figures' element ids, in page order."""

SITE_FIGURES = (*FIGURES, "fig-routes")
"""The figures of one site's page (``?site=``): the same, for that site, and its routes."""

REASON_COLOURS = {
    "score": "#1565c0",
    "discovery": "#2e7d32",
    "reestimate": "#ef6c00",
    "verify": "#6a1b9a",
    "canary": "#00838f",
}
"""One colour per plan reason, the same in every panel (others: grey)."""

_SIGNAL_COLOURS = {
    "schedule": "#546e7a",
    "sitemap": "#2e7d32",
    "feed": "#ef6c00",
    "listing": "#1565c0",
}

_DAY_S = 86_400.0
_BAND_COLOURS = {"healthy": "#2e7d32", "degrading": "#f9a825", "critical": "#c62828"}
_REASON_ORDER = tuple(REASON_COLOURS)
_PLOT_CONFIG = {"displaylogo": False, "responsive": True}
_PALETTE = qualitative.D3


def _e(text: Any) -> str:
    """HTML-escape anything user-supplied."""
    return html.escape(str(text), quote=True)


def _label(text: Any) -> str:
    """Anything user-supplied as a plotly figure's text (a title, a label, a
    trace's name, hover text): its ``&``, ``<`` and ``>`` as entities, which
    plotly's text renderer decodes, so a name reads as it is and a ``<b>`` or
    ``<br>`` in it is not taken for markup. Not :func:`_e`: plotly does not
    decode ``&quot;``, so a quote would show as that. The figure's JSON stays
    inert in its ``<script>`` whatever the text: plotly writes ``<`` as ``\\u003c``."""
    return html.escape(str(text), quote=False)


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _dts(ts: Any) -> list[datetime]:
    return [_dt(float(t)) for t in ts]


def _gaps(y: Any) -> list[float | None]:
    """NaN as None, so plotly leaves a gap instead of drawing through it."""
    return [None if not math.isfinite(v) else float(v) for v in np.asarray(y, float).tolist()]


# -- data ------------------------------------------------------------------------------------


def freshness_series(
    engine: Engine,
    now: float,
    *,
    points: int = 96,
    days: float = 7.0,
    seed: int = 0,
    site: str | None = None,
) -> tuple[list[float], list[float]]:
    """Estimated freshness (0–1) at ``points`` times (unix seconds) over ``days`` days,
    of every page or of one ``site``'s.

    The window ends at ``now``, or at the last successful fetch when that is
    older than the window. See the module docstring for the estimate.
    """
    pages, cols = engine.page_arrays(now)
    idx = np.flatnonzero(pages.active)
    if site is not None:
        idx = idx[np.asarray(cols["site"], dtype=object)[idx] == site]
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


@dataclass(frozen=True)
class DashboardData:
    """What the page shows, read from the engine for one time range."""

    window: TimeWindow
    unit: BillingUnit
    budget_per_day: float
    money: MoneySeries
    signals: SignalSeries
    history: list[tuple[float, dict[str, Any]]]
    freshness: tuple[list[float], list[float]]
    calibration: Calibration | None
    plan: PlanResult | None
    health: list[dict[str, Any]]
    controls: dict[str, dict[str, Any]]
    site: str | None = None
    """One site's page, or None for every site."""
    routes: RouteSeries | None = None
    events: list[dict[str, Any]] | None = None
    pages: list[dict[str, Any]] | None = None
    cheap: Mapping[str, Any] | None = None
    """:meth:`recrawl.engine.Engine.signal_report` (of the site, on a site's page)."""

    def totals(self) -> dict[str, Any]:
        """The range's sums per site and page type (the shape of ``Stats.groups``)."""
        m = self.money
        rows = []
        for g, (site, ptype) in enumerate(m.groups):
            changes = float(m.changes[g].sum())
            cost = float(m.cost[g].sum())
            rows.append(
                {
                    "site": site,
                    "page_type": ptype,
                    "fetches": int(m.fetches[g].sum()),
                    "changes_detected": int(changes),
                    "fetches_without_change": int(m.without_change[g].sum()),
                    "cost": cost,
                    "cost_per_change": cost / changes if changes else None,
                }
            )
        return {"unit": self.unit, "groups": rows}


def _data_end(engine: Engine) -> float | None:
    last = np.asarray(engine.store.page_columns()["last_fetch"], dtype=np.float64)
    return float(np.nanmax(last)) if np.any(~np.isnan(last)) else None


def read_dashboard(
    engine: Engine,
    window: TimeWindow,
    *,
    plan: PlanResult | None = None,
    health: list[dict[str, Any]] | None = None,
    site: str | None = None,
) -> DashboardData:
    """Read everything the page shows for ``window`` through the engine and its
    store, of every site or of one ``site`` (with its routes, events and pages)."""
    w = window
    unit: BillingUnit = engine.settings.billing_unit
    daily_only = w.step_s >= _DAY_S
    cfg = engine.settings.health_config()
    only = None if site is None else [site]
    buckets = engine.store.buckets(w.start - w.step_s, w.end, only, daily=daily_only)
    daily = engine.store.buckets(
        w.start - (cfg.baseline_days + 2) * _DAY_S, w.end, only, daily=True
    )
    calibration = None
    if w.data_end is not None:
        try:
            calibration = engine.calibration(
                days=w.days, until=min(w.end, w.data_end), by="site" if site is None else "group"
            )
        except ValueError:
            calibration = None
    columns = engine.store.page_columns()
    pages = len(columns["url"])
    extra: dict[str, Any] = {}
    if site is not None:
        if calibration is not None:
            mine = [g for g in calibration.groups if g.name.startswith(f"{site} / ")]
            calibration = replace(calibration, groups=mine)
        if plan is not None:
            plan = replace(plan, tasks=[t for t in plan.tasks if t["site"] == site])
        health = [h for h in health or [] if h.get("site") == site]
        extra = {
            "site": site,
            "routes": routes_over_time(buckets, w.start, w.end, w.step_s),
            "events": [e for e in engine.store.site_events(site) if w.start <= e["at"] <= w.end],
            "pages": _site_pages(columns, site),
        }
    controls = engine.store.site_controls()
    if site is not None:
        controls = {k: v for k, v in controls.items() if k == site}
    return DashboardData(
        window=w,
        unit=unit,
        budget_per_day=engine.settings.daily_budget(pages),
        money=money_over_time(buckets, w.start, w.end, w.step_s, unit),
        signals=signals_over_time(buckets, daily, w.start, w.end, w.step_s, cfg),
        history=engine.store.health_history(site=site, since=w.start, until=w.end),
        freshness=freshness_series(engine, w.end, days=w.days, site=site),
        calibration=calibration,
        plan=plan,
        health=list(health or []),
        controls=controls,
        cheap=engine.signal_report(site=site),
        **extra,
    )


def _site_pages(columns: Mapping[str, Any], site: str, limit: int = 25) -> list[dict[str, Any]]:
    """The site's pages that failed most, then the most recently fetched."""
    mine = np.flatnonzero(np.asarray(columns["site"], dtype=object) == site)
    fails = np.asarray(columns["fails"], dtype=np.float64)[mine]
    last = np.nan_to_num(np.asarray(columns["last_fetch"], dtype=np.float64)[mine], nan=-1.0)
    order = mine[np.lexsort((-last, -fails))][:limit]
    return [
        {
            "url": columns["url"][i],
            "page_type": columns["page_type"][i],
            "last_fetch": float(columns["last_fetch"][i]),
            "fails": int(columns["fails"][i]),
            "gone": bool(columns["gone"][i]),
        }
        for i in order.tolist()
    ]


# -- figures ---------------------------------------------------------------------------------


def _time_axes(fig: go.Figure, w: TimeWindow) -> None:
    """Every x axis of ``fig`` a date axis over the range, whether or not it has data."""
    fig.update_xaxes(type="date", range=[_dt(w.start), _dt(w.end)])


def _empty(fig: go.Figure, message: str) -> go.Figure:
    fig.add_annotation(
        text=_e(message), showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5,
        font={"size": 15, "color": "#666"},
    )  # fmt: skip
    return fig


def _nothing_in(w: TimeWindow, what: str) -> str:
    if w.data_end is None:
        return f"no {what} yet: the store holds no fetch"
    return f"no {what} between {_dt(w.start):%Y-%m-%d %H:%M} and {_dt(w.end):%Y-%m-%d %H:%M} UTC"


def _colours(names: list[str]) -> dict[str, str]:
    return {n: _PALETTE[i % len(_PALETTE)] for i, n in enumerate(sorted(set(names)))}


def _money_figure(data: DashboardData) -> go.Figure:
    totals = data.totals()
    groups = totals["groups"]
    unit = data.unit
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(
            f"Cost per change detected ({_label(unit)})",
            "Fetches that found no change",
        ),
    )
    if not groups:
        return _empty(fig, _nothing_in(data.window, "fetches"))
    labels = [f"{_label(g['site'])} · {_label(g['page_type'])}" for g in groups]
    per_change = [g["cost_per_change"] for g in groups]
    fig.add_trace(
        go.Bar(
            x=labels,
            y=[v if v is not None else 0 for v in per_change],
            text=["no change yet" if v is None else "" for v in per_change],
            name="cost per change",
            marker_color="#1565c0",
            hovertemplate="%{x}<br>%{y:,.2f} " + _label(unit) + " per change<extra></extra>",
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


def _cheap_figure(data: DashboardData) -> go.Figure:
    """Cost per change detected of each signal, per site (bars by signal)."""
    rows = list((data.cheap or {}).get("signals") or [])
    unit = _label(data.unit)
    fig = go.Figure()
    found = [r for r in rows if r["changes"]]
    if not found:
        _empty(fig, "no change found by a fetch yet")
        fig.update_layout(height=300)
        return fig
    sites = sorted({r["site"] for r in rows})
    for sig in sorted({r["signal"] for r in rows}):
        mine = {r["site"]: r for r in rows if r["signal"] == sig}
        got = [mine.get(s) for s in sites]
        fig.add_trace(
            go.Bar(
                x=[_label(s) for s in sites],
                y=[r["per_change"] if r and r["per_change"] is not None else None for r in got],
                name=_label(sig),
                marker_color=_SIGNAL_COLOURS.get(sig, "#757575"),
                customdata=[[r["cost"], r["changes"], r["reads"], r["fetches"]] if r else
                            [0, 0, 0, 0] for r in got],
                hovertemplate="%{x}: " + _label(sig) + "<br>%{y:,.2f} " + unit + " per change"
                "<br>%{customdata[0]:,.2f} " + unit + ", %{customdata[1]:,} changes"
                "<br>%{customdata[2]:,} reads, %{customdata[3]:,} fetches<extra></extra>",
            )
        )  # fmt: skip
    fig.update_layout(
        barmode="group", height=360, margin={"t": 30}, legend={"orientation": "h"},
        yaxis={"title": f"{unit} per change detected", "rangemode": "tozero"},
    )  # fmt: skip
    return fig


def _cheap_table(cheap: Mapping[str, Any] | None) -> str:
    rows = list((cheap or {}).get("signals") or [])
    delisted: Mapping[str, int] = (cheap or {}).get("delisted") or {}
    if not rows:
        return "<p>No fetch counted per signal yet.</p>"
    body = "".join(
        f"<tr><td>{_e(r['site'])}</td><td>{_e(r['signal'])}</td>"
        f"<td class='n'>{_num(r['reads'])}</td><td class='n'>{_num(r['read_cost'])}</td>"
        f"<td class='n'>{_num(r['fetches'])}</td><td class='n'>{_num(r['fetch_cost'])}</td>"
        f"<td class='n'>{_num(r['changes'])}</td><td class='n'>{_num(r['per_change'])}</td></tr>"
        for r in rows
    )
    left = "".join(
        f"<li>{_e(site)}: {n:,} item{'s' if n != 1 else ''} left every listing</li>"
        for site, n in delisted.items()
    )
    return (
        "<table><tr><th>site</th><th>signal</th><th>reads</th><th>read cost</th>"
        "<th>fetches caused</th><th>fetch cost</th><th>changes found</th>"
        "<th>cost per change</th></tr>" + body + "</table>" + (f"<ul>{left}</ul>" if left else "")
    )


def _spend_figure(data: DashboardData) -> go.Figure:
    m, w = data.money, data.window
    step = "hour" if m.step_s < _DAY_S else "day"
    fig = go.Figure()
    sites, spend = m.spend_by_site()
    colours = _colours(sites)
    x = _dts(m.starts + m.step_s / 2)
    for i, site in enumerate(sites):
        fig.add_trace(
            go.Bar(
                x=x, y=spend[i].tolist(), name=_label(site), marker_color=colours[site],
                hovertemplate="%{x}<br>%{y:,.2f} " + _label(data.unit) + "<extra>" + _label(site) + "</extra>",
            )
        )  # fmt: skip
    budget = data.budget_per_day * m.step_s / _DAY_S
    if sites:
        fig.add_trace(
            go.Scatter(
                x=_dts([m.starts[0], m.starts[-1] + m.step_s]), y=[budget, budget],
                mode="lines", name=f"budget ({budget:,.4g} a {step})",
                line={"color": "#c62828", "dash": "dash", "width": 2}, hoverinfo="name",
            )
        )  # fmt: skip
    else:
        _empty(fig, _nothing_in(w, "spend"))
    fig.update_layout(
        barmode="stack", height=380, margin={"t": 30}, legend={"orientation": "h"},
        yaxis={"title": f"{_label(data.unit)} per {step}", "rangemode": "tozero"},
    )  # fmt: skip
    _time_axes(fig, w)
    return fig


def _waste_figure(data: DashboardData) -> go.Figure:
    m, w = data.money, data.window
    step = "hour" if m.step_s < _DAY_S else "day"
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
        subplot_titles=(
            f"Fetches that found no change, per {step}",
            f"Cost per change detected ({_label(data.unit)})",
        ),
    )  # fmt: skip
    labels = [f"{s} · {p}" for s, p in m.groups]
    colours = _colours(labels)
    x = _dts(m.starts + m.step_s / 2)
    per_change = m.cost_per_change
    for g, label in enumerate(labels):
        name = _label(label)
        line = {"color": colours[label]}
        fig.add_trace(
            go.Scatter(
                x=x, y=m.without_change[g].tolist(), mode="lines", name=name, legendgroup=name,
                line=line, hovertemplate="%{x}<br>%{y:,} fetches without change<extra>" + name + "</extra>",
            ),
            row=1, col=1,
        )  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=x, y=_gaps(per_change[g]), mode="lines+markers", name=name, legendgroup=name,
                showlegend=False, line=line, marker={"size": 4},
                hovertemplate="%{x}<br>%{y:,.2f} " + _label(data.unit) + " per change<extra>" + name + "</extra>",
            ),
            row=2, col=1,
        )  # fmt: skip
    if not labels:
        _empty(fig, _nothing_in(w, "fetches"))
    fig.update_layout(height=560, margin={"t": 40}, legend={"orientation": "h"})
    fig.update_yaxes(rangemode="tozero")
    _time_axes(fig, w)
    return fig


def _signals_figure(data: DashboardData) -> go.Figure:
    s, w = data.signals, data.window
    fig = make_subplots(
        rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.08,
        subplot_titles=(
            "Hard blocks (share of requests)", "Challenges (share of requests)",
            "p95 latency (ms)",
        ),
    )  # fmt: skip
    colours = _colours(s.sites)
    x = _dts(s.starts + s.step_s / 2)
    rows = (
        (1, s.hard_block, s.normal_hard_block, ".1%"),
        (2, s.challenge, s.normal_challenge, ".1%"),
        (3, s.p95_ms, s.normal_p95_ms, ",.0f"),
    )
    for i, site in enumerate(s.sites):
        name = _label(site)
        for row, values, normal, fmt in rows:
            fig.add_trace(
                go.Scatter(
                    x=x, y=_gaps(values[i]), mode="lines", name=name, legendgroup=name,
                    showlegend=row == 1, line={"color": colours[site]},
                    hovertemplate="%{x}<br>%{y:" + fmt + "}<extra>" + name + "</extra>",
                ),
                row=row, col=1,
            )  # fmt: skip
            fig.add_trace(
                go.Scatter(
                    x=x, y=_gaps(normal[i]), mode="lines", name=f"{name}: normal",
                    legendgroup=name, showlegend=False,
                    line={"color": colours[site], "dash": "dot", "width": 1},
                    hovertemplate="%{x}<br>normal %{y:" + fmt + "}<extra>" + name + "</extra>",
                ),
                row=row, col=1,
            )  # fmt: skip
    if not s.sites:
        _empty(fig, _nothing_in(w, "requests"))
    fig.update_yaxes(tickformat=".0%", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(tickformat=".0%", rangemode="tozero", row=2, col=1)
    fig.update_yaxes(rangemode="tozero", row=3, col=1)
    fig.update_layout(height=720, margin={"t": 40}, legend={"orientation": "h"})
    _time_axes(fig, w)
    return fig


def _health_figure(data: DashboardData) -> go.Figure:
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
    for at, report in data.history:
        by_site.setdefault(str(report.get("site")), []).append((at, report))
    colours = _colours(list(by_site))
    for site, rows in sorted(by_site.items()):
        scored = [(at, r) for at, r in rows if r.get("score") is not None]
        if not scored:
            continue
        fig.add_trace(
            go.Scatter(
                x=[_dt(at) for at, _ in scored],
                y=[r["score"] for _, r in scored],
                mode="lines+markers",
                name=_label(site),
                line={"color": colours[site]},
                text=[
                    f"{_label(r.get('band'))}: {_label(', '.join(map(str, r.get('reasons') or [])) or 'no penalty')}"
                    for _, r in scored
                ],
                hovertemplate="%{x}<br>score %{y}<br>%{text}<extra>" + _label(site) + "</extra>",
            )
        )
    fig.update_layout(
        height=420,
        yaxis={"range": [0, 100], "title": "health score"},
        margin={"t": 30},
        legend={"orientation": "h"},
    )
    _time_axes(fig, data.window)
    if not fig.data:
        _empty(
            fig,
            "no health score in this range: "
            "health is scored once a window holds 50 requests (recrawl health --record)",
        )
    return fig


def _freshness_figure(data: DashboardData) -> go.Figure:
    times, fresh = data.freshness
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
        _empty(fig, _nothing_in(data.window, "successful fetch"))
    fig.update_layout(
        height=360, yaxis={"range": [0, 1], "tickformat": ".0%", "title": "estimated fresh"},
        margin={"t": 30},
    )  # fmt: skip
    _time_axes(fig, data.window)
    return fig


def _calibration_figure(data: DashboardData) -> go.Figure:
    cal = data.calibration
    fig = make_subplots(
        rows=1, cols=2, horizontal_spacing=0.12,
        subplot_titles=(
            "Predicted probability of a change against the share that changed"
            + ("" if data.site is None else " (all sites)"),
            "Changes found against expected, per site",
        ),
    )  # fmt: skip
    if cal is None or cal.overall.revisits == 0:
        return _empty(fig, "no revisits in this range to check the change model against")
    bins = [b for b in cal.bins if b.revisits > 0]
    fig.add_trace(
        go.Scatter(
            x=[0, 1], y=[0, 1], mode="lines", line={"color": "#9e9e9e", "dash": "dot"},
            name="calibrated", hoverinfo="skip",
        ),
        1, 1,
    )  # fmt: skip
    sizes = np.sqrt(np.array([b.revisits for b in bins], dtype=float))
    fig.add_trace(
        go.Scatter(
            x=[b.mean_predicted for b in bins], y=[b.observed_share for b in bins],
            customdata=[[b.revisits, b.lo, b.hi] for b in bins], mode="markers+lines",
            marker={"size": (6 + 24 * sizes / max(float(sizes.max()), 1.0)).tolist(), "color": "#1565c0"},
            name="revisits",
            hovertemplate="predicted %{customdata[1]:.2f}–%{customdata[2]:.2f}: %{customdata[0]:,} revisits"
            "<br>mean predicted %{x:.1%}, changed %{y:.1%}<extra></extra>",
        ),
        1, 1,
    )  # fmt: skip
    groups = cal.groups
    names = [_label(g.name) for g in groups]
    fig.add_trace(
        go.Bar(x=names, y=[g.expected_changes for g in groups], name="expected", marker_color="#90a4ae"),
        1, 2,
    )  # fmt: skip
    fig.add_trace(
        go.Bar(
            x=names, y=[g.observed_changes for g in groups], name="found",
            marker_color=["#c62828" if g.flagged else "#1565c0" for g in groups],
            customdata=[[g.z] for g in groups],
            hovertemplate="%{x}: %{y:,} changes found (z %{customdata[0]:.1f})<extra></extra>",
        ),
        1, 2,
    )  # fmt: skip
    fig.update_xaxes(range=[0, 1], tickformat=".0%", title="predicted", row=1, col=1)
    fig.update_yaxes(range=[0, 1], tickformat=".0%", title="changed", row=1, col=1)
    fig.update_layout(height=420, barmode="group", margin={"t": 60}, legend={"orientation": "h"})
    return fig


def _plan_figure(plan: PlanResult | None, unit: str, empty: str = "") -> go.Figure:
    fig = make_subplots(
        rows=1,
        cols=2,
        specs=[[{"type": "domain"}, {"type": "xy"}]],
        subplot_titles=("Tasks by reason", f"Cost by reason ({_label(unit)})"),
    )
    if plan is None or not plan.tasks:
        return _empty(fig, empty or "no plan (no pages, or no budget configured)")
    counts: dict[str, int] = {}
    costs: dict[str, float] = {}
    for t in plan.tasks:
        r = str(t["reason"])
        counts[r] = counts.get(r, 0) + 1
        costs[r] = costs.get(r, 0.0) + float(t.get("cost") or 0.0)
    reasons = [r for r in _REASON_ORDER if r in counts] + sorted(
        r for r in counts if r not in _REASON_ORDER
    )
    labels = [_label(r) for r in reasons]
    colours = [REASON_COLOURS.get(r, "#9e9e9e") for r in reasons]
    fig.add_trace(
        go.Pie(
            labels=labels, values=[counts[r] for r in reasons], hole=0.4, sort=False,
            marker={"colors": colours}, textposition="inside", textinfo="percent",
            domain={"x": [0.0, 0.42], "y": [0.0, 0.86]},
            hovertemplate="%{label}: %{value:,} tasks (%{percent})<extra></extra>",
        )
    )  # fmt: skip
    fig.add_trace(
        go.Bar(
            x=labels, y=[costs[r] for r in reasons], marker_color=colours, showlegend=False,
            hovertemplate="%{x}: %{y:,.2f} " + _label(unit) + "<extra></extra>",
        ),
        1, 2,
    )  # fmt: skip
    fig.update_layout(height=380, showlegend=True, margin={"t": 70}, legend={"title": "reason"})
    return fig


def _routes_figure(data: DashboardData) -> go.Figure:
    r, w = data.routes, data.window
    fig = go.Figure()
    if r is not None:
        colours = _colours(r.routes)
        x = _dts(r.starts + r.step_s / 2)
        for i, route in enumerate(r.routes):
            name = _label(route or "no route reported")
            fig.add_trace(
                go.Scatter(
                    x=x, y=_gaps(r.refused[i]), customdata=r.requests[i].tolist(),
                    mode="lines+markers", name=name, line={"color": colours[route]},
                    marker={"size": 4},
                    hovertemplate="%{x}<br>%{y:.1%} of %{customdata:,} requests refused<extra>"
                    + name + "</extra>",
                )
            )  # fmt: skip
    if not fig.data:
        _empty(fig, _nothing_in(w, "requests"))
    fig.update_layout(
        height=380, margin={"t": 30}, legend={"orientation": "h"},
        yaxis={"title": "refused (blocks, challenges)", "tickformat": ".0%", "rangemode": "tozero"},
    )  # fmt: skip
    _time_axes(fig, w)
    return fig


def _no_tasks(data: DashboardData) -> str:
    """What an empty plan means on one site's page."""
    if data.site is None or data.plan is None:
        return ""
    if (data.controls.get(data.site) or {}).get("paused"):
        return "no task of this site in the next cycle: it is paused (recrawl site resume)"
    return "no task of this site in the next cycle"


def dashboard_figures(data: DashboardData) -> dict[str, go.Figure]:
    """Every figure of the page, by element id (:data:`FIGURES` order, or
    :data:`SITE_FIGURES` on one site's page)."""
    extra = {} if data.site is None else {"fig-routes": _routes_figure(data)}
    return {
        "fig-money": _money_figure(data),
        "fig-cheap": _cheap_figure(data),
        "fig-spend": _spend_figure(data),
        "fig-waste": _waste_figure(data),
        "fig-signals": _signals_figure(data),
        "fig-health": _health_figure(data),
        "fig-freshness": _freshness_figure(data),
        "fig-calibration": _calibration_figure(data),
        "fig-plan": _plan_figure(data.plan, data.unit, _no_tasks(data)),
        **extra,
    }


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
.banner{background:#fff3e0;border:1px solid #ffb74d;border-radius:6px;padding:10px 16px;margin:14px 0}
form.range{font-size:13px} form.range label{margin-right:12px} form.range a{margin-right:8px}
"""


def _num(x: Any, digits: int = 2) -> str:
    if x is None:
        return "–"
    x = float(x)
    if not math.isfinite(x):
        return "∞"
    return f"{int(x):,}" if x.is_integer() else f"{x:,.{digits}f}"


def _site_link(site: str, links: bool) -> str:
    if not links:
        return _e(site)
    return f"<a href='?site={quote(site, safe='')}'>{_e(site)}</a>"


def _health_table(
    health: list[dict[str, Any]], controls: dict[str, dict[str, Any]], links: bool = False
) -> str:
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
            f"<tr><td>{_site_link(h['site'], links)}</td><td class='band-{_e(band)}'>{_e(band)}</td>"
            f"<td class='n'>{_num(h.get('score'))}</td>"
            f"<td>{_e(', '.join(map(str, h.get('reasons') or [])))}</td>"
            f"<td>{_e(h.get('diagnosis', ''))}</td><td>{_e(action.get('name', ''))}</td>"
            f"<td>{'paused' if c.get('paused') else ''}</td>"
            f"<td class='n'>{_num(c.get('concurrency_cap'))}</td></tr>"
        )
    for site, c in sorted(controls.items()):
        if site not in seen:
            rows.append(
                f"<tr><td>{_site_link(site, links)}</td><td>{_e(c.get('band', 'unknown'))}</td>"
                "<td></td><td></td>"
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


def _events_table(events: list[dict[str, Any]] | None) -> str:
    if not events:
        return "<p>No pause, resume or band change recorded in this range.</p>"
    rows = "".join(
        f"<tr><td>{_dt(e['at']):%Y-%m-%d %H:%M}</td><td>{_e(e['kind'])}</td>"
        f"<td>{_e(e.get('detail') or '')}</td></tr>"
        for e in events
    )
    return "<table><tr><th>at (UTC)</th><th>event</th><th>detail</th></tr>" + rows + "</table>"


def _pages_table(pages: list[dict[str, Any]] | None) -> str:
    if not pages:
        return "<p>No page of this site is known.</p>"

    def when(t: float) -> str:
        return _dt(t).strftime("%Y-%m-%d %H:%M") if math.isfinite(t) else "never"

    rows = "".join(
        f"<tr><td class='url'>{_e(p['url'])}</td><td>{_e(p['page_type'])}</td>"
        f"<td>{when(p['last_fetch'])}</td>"
        f"<td class='n'>{p['fails']}</td><td>{'gone' if p['gone'] else ''}</td></tr>"
        for p in pages
    )
    return (
        "<table><tr><th>url</th><th>page type</th><th>last fetch (UTC)</th><th>failures in a row</th>"
        "<th></th></tr>" + rows + "</table>"
    )


def _calibration_note(cal: Calibration | None) -> str:
    if cal is None:
        return ""
    return f"<p>{_e(cal.verdict())}.</p>"


def _picker(w: TimeWindow, site: str | None = None) -> str:
    """The time range picker: a plain GET form (works without JavaScript),
    keeping the site of a site's page."""
    keep = "" if site is None else f"&site={quote(site, safe='')}"
    quick = "".join(f"<a href='?days={d}{_e(keep)}'>{label}</a>" for d, label in
                    ((1, "last day"), (7, "7 days"), (30, "30 days"), (90, "90 days")))  # fmt: skip
    hidden = "" if site is None else f"<input type='hidden' name='site' value='{_e(site)}'>"
    return (
        "<form class='range' method='get' action=''>"
        + hidden
        + f"<label>from <input type='date' name='from' value='{_dt(w.start):%Y-%m-%d}'></label>"
        f"<label>to <input type='date' name='to' value='{_dt(w.end - 1):%Y-%m-%d}'></label>"
        "<button type='submit'>show</button> &nbsp; " + quick + "</form>"
    )


def _banners(data: DashboardData) -> str:
    w = data.window
    out = []
    if w.note:
        out.append(w.note)
    if w.data_end is None:
        out.append(
            "The store holds no fetch yet: ingest a fetch log (recrawl ingest) or report "
            "observations to POST /v1/observations, and the charts fill in."
        )
    elif w.stale:
        out.append(w.stale_message())
    return "".join(f"<div class='banner' role='status'>{_e(t)}</div>" for t in out)


def render_page(
    data: DashboardData,
    *,
    title: str = "recrawl",
    script: str | None = PLOTLY_PATH,
    picker: bool = True,
) -> str:
    """The page for ``data``; plotly.js from the URL ``script``, or inline when None."""
    w = data.window
    unit = data.unit
    figures = dashboard_figures(data)
    totals = data.totals()["groups"]
    fetches = sum(g["fetches"] for g in totals)
    changes = sum(g["changes_detected"] for g in totals)
    cost = sum(g["cost"] for g in totals)
    fresh = data.freshness[1]
    fresh_label = "freshness at the data's end (est.)" if w.stale else "freshness now (est.)"
    kpis = [
        ("fetches", _num(fetches)),
        ("changes detected", _num(changes)),
        ("fetches without change", _num(sum(g["fetches_without_change"] for g in totals))),
        (f"cost ({unit})", _num(cost)),
        (f"cost per change ({unit})", _num(cost / changes if changes else None)),
        (fresh_label, f"{fresh[-1]:.1%}" if fresh else "–"),
    ]
    plan = data.plan
    if plan is not None and data.site is None:
        kpis.append(
            (f"plan: {len(plan.tasks):,} tasks", f"{_num(plan.spent)} / {_num(plan.budget)}")
        )
    elif plan is not None:
        mine = sum(float(t.get("cost") or 0.0) for t in plan.tasks)
        kpis.append(
            (f"plan: {len(plan.tasks):,} tasks of this site", f"{_num(mine)} / {_num(plan.budget)}")
        )
    kpi_html = "".join(f"<span class='kpi'><b>{v}</b>{_e(k)}</span>" for k, v in kpis)
    d = {k: _div(f, k) for k, f in figures.items()}
    sections = [
        ("Where the money goes in this range", d["fig-money"]),
        ("Cost per change detected, per signal (since counting began)",
         d["fig-cheap"] + _cheap_table(data.cheap)),
        ("Spend against the budget", d["fig-spend"]),
        ("Fetches without change and cost per change over time", d["fig-waste"]),
        ("Blocks, challenges and latency against each site's normal (dotted)", d["fig-signals"]),
        (
            "Site health over time",
            d["fig-health"] + _health_table(data.health, data.controls, links=picker),
        ),
        ("Freshness estimate over time", d["fig-freshness"]),
        ("Did the change model predict what the revisits found?",
         d["fig-calibration"] + _calibration_note(data.calibration)),
        ("The current plan", d["fig-plan"] + _rates_note(plan) + _plan_table(plan)),
    ]  # fmt: skip
    if data.site is not None:
        sections[5:5] = [
            ("Refusals by route (concentrated: the routes; even: the site)", d["fig-routes"]),
            ("Incidents and actions: pauses, resumes, band changes", _events_table(data.events)),
            ("Pages: the most failures in a row first", _pages_table(data.pages)),
        ]
    body = "".join(f"<section><h2>{_e(h)}</h2>{content}</section>" for h, content in sections)
    generated = _dt(w.now).strftime("%Y-%m-%d %H:%M:%S UTC")
    js = f"<script>{plotly_js().decode()}</script>" if script is None else (
        f"<script src='{_e(script)}'></script>"
    )  # fmt: skip
    top = f"<section>{_picker(w, data.site) if picker else ''}{kpi_html}</section>"
    back = (
        "" if data.site is None or not picker else "<a href='.' style='color:#fff'>all sites</a> · "
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<style>{_CSS}</style>{js}</head><body>"
        f"<header><h1>{_e(title if data.site is None else f'{title}: {data.site}')}</h1>"
        f"<p>{back}generated {generated} · {_e(w.label())} · "
        f"costs in {_e(unit)}</p></header>"
        f"<main>{_banners(data)}{top}{body}</main></body></html>"
    )


def render_dashboard(
    engine: Engine,
    *,
    now: float | None = None,
    plan: PlanResult | None = None,
    health: list[dict[str, Any]] | None = None,
    window: TimeWindow | None = None,
    query: Mapping[str, str] | None = None,
    site: str | None = None,
    title: str = "recrawl",
    script: str | None = PLOTLY_PATH,
    picker: bool = True,
) -> str:
    """The dashboard as one HTML page, as the service shows it at ``/``.

    ``plan`` and ``health`` are the current plan and the last health evaluation
    (``recrawl health --json`` shape). The time range is ``window``, else the
    one the page's ``query`` asks for (``days``, ``from``, ``to``; one that
    cannot be read gives the default range and a note saying why), else the
    last :data:`~recrawl.report.window.DEFAULT_DAYS` days. ``site`` (or the
    query's ``site``) gives that site's page: every figure for that site alone,
    its refusals by route, its events and pages. plotly.js is loaded
    from ``script`` (the service's :data:`~recrawl.report.assets.PLOTLY_PATH`)
    or inlined when ``script`` is None.
    """
    t = engine.clock() if now is None else now
    if window is None:
        window = TimeWindow.from_query(query or {}, t, _data_end(engine))
    if site is None and query is not None and query.get("site"):
        site = str(query["site"])
    data = read_dashboard(engine, window, plan=plan, health=health, site=site)
    return render_page(data, title=title, script=script, picker=picker)


def _report_inputs(
    engine: Engine, t: float
) -> tuple[PlanResult | None, list[dict[str, Any]] | None]:
    try:
        plan: PlanResult | None = engine.plan(now=t)
    except ValueError:
        plan = None
    health_fn = getattr(engine, "health", None)
    health = list(health_fn(at=t, record=False)) if health_fn is not None else None
    return plan, health


def render_report(
    engine: Engine,
    *,
    now: float | None = None,
    days: float | None = None,
    since: float | None = None,
    inline: bool = True,
) -> str:
    """The dashboard for a report file: plans the next cycle and scores health
    (without recording either), then renders :func:`render_dashboard` over the
    last ``days`` days or from ``since`` (unix seconds). With ``inline``
    (the default here) the page holds plotly.js and works on its own;
    otherwise it loads :data:`~recrawl.report.assets.PLOTLY_FILE` from beside
    itself (:func:`write_report` writes both)."""
    t = engine.clock() if now is None else now
    window = TimeWindow.choose(t, _data_end(engine), days=days, since=since)
    plan, health = _report_inputs(engine, t)
    return render_dashboard(
        engine, now=t, plan=plan, health=health, window=window,
        script=None if inline else PLOTLY_FILE, picker=False,
    )  # fmt: skip


def write_report(
    engine: Engine,
    path: Path,
    *,
    now: float | None = None,
    days: float | None = None,
    since: float | None = None,
    inline: bool = False,
) -> str:
    """Write the report to ``path`` (``recrawl report``): the HTML and, unless
    ``inline``, :data:`~recrawl.report.assets.PLOTLY_FILE` beside it, which
    every report in that folder shares. Returns one line saying what was
    written. Raises ValueError for a time range that cannot be shown."""
    page = render_report(engine, now=now, days=days, since=since, inline=inline)
    path.write_text(page, encoding="utf-8")
    size = len(page.encode("utf-8"))
    if inline:
        return f"report written to {path} ({size / 1e6:.1f} MB, plotly.js inline)"
    script = write_plotly(path.parent)
    return (
        f"report written to {path} ({size / 1e6:.2f} MB) with {script.name} beside it "
        f"({script.stat().st_size / 1e6:.1f} MB, loaded once)"
    )

"""The dashboard's figures over time: pure functions over the store's buckets.

:func:`money_over_time` sums 15-minute (or daily) buckets into steps per site
and page type: fetches, changes detected, fetches that found no change (an
unchanged page or a 304) and their cost in the billing unit, hence cost per
change detected and spend against the budget. :func:`signals_over_time` gives
each site's hard-block and challenge rates and p95 latency per step, next to
that site's normal as the health scorer saw it on that day
(:func:`recrawl.health.score.compute_baselines`: medians of daily figures
over about two weeks, the day before excluded). No I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from recrawl.engine.stats import BillingUnit
from recrawl.health.score import BucketArrays, HealthConfig, compute_baselines, p95_rows

__all__ = [
    "MoneySeries",
    "RouteSeries",
    "SignalSeries",
    "money_over_time",
    "routes_over_time",
    "signals_over_time",
    "step_starts",
]

FloatArray = npt.NDArray[np.float64]
_DAY = 86_400


def step_starts(start: float, end: float, step_s: float) -> FloatArray:
    """Starts of the steps covering ``[start, end]`` (unix seconds), on a grid of
    ``step_s`` seconds (UTC days or hours)."""
    first = np.floor(start / step_s) * step_s
    return np.arange(first, end, step_s, dtype=np.float64)


def _step_index(b: BucketArrays, starts: FloatArray, step_s: float) -> tuple[Any, Any]:
    """Each bucket's step (−1 outside) and the mask of buckets inside."""
    if len(starts) == 0:
        k = np.full(len(b), -1, dtype=np.int64)
    else:
        k = ((b.bucket_start - starts[0]) // step_s).astype(np.int64)
        k[(k < 0) | (k >= len(starts))] = -1
    return k, k >= 0


def _cost(b: BucketArrays, unit: BillingUnit) -> FloatArray:
    if unit == "bytes":
        return np.asarray(b.bytes_sent + b.bytes_received, dtype=np.float64)
    if unit == "credits":
        return np.asarray(b.credits, dtype=np.float64)
    return np.asarray(b.n, dtype=np.float64)


@dataclass(frozen=True)
class MoneySeries:
    """Per (site, page type) and step: ``(G, T)`` arrays, costs in ``unit``.

    ``starts`` are the steps' starts (unix seconds), ``step_s`` their length;
    ``groups`` the ``(site, page_type)`` of each row, sorted.
    """

    unit: BillingUnit
    starts: FloatArray
    step_s: float
    groups: list[tuple[str, str]]
    fetches: FloatArray
    changes: FloatArray
    without_change: FloatArray
    cost: FloatArray

    @property
    def cost_per_change(self) -> FloatArray:
        """Cost ÷ changes detected per group and step; NaN where none was detected."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.changes > 0, self.cost / self.changes, np.nan)

    def spend_by_site(self) -> tuple[list[str], FloatArray]:
        """Sites and their ``(S, T)`` spend per step."""
        sites = sorted({s for s, _ in self.groups})
        pos = {s: i for i, s in enumerate(sites)}
        out = np.zeros((len(sites), len(self.starts)))
        for g, (s, _) in enumerate(self.groups):
            out[pos[s]] += self.cost[g]
        return sites, out


def money_over_time(
    b: BucketArrays, start: float, end: float, step_s: float, unit: BillingUnit = "fetches"
) -> MoneySeries:
    """Sum ``b`` into steps of ``step_s`` seconds over ``[start, end]``, per site
    and page type (groups without a fetch in the range are left out)."""
    starts = step_starts(start, end, step_s)
    k, inside = _step_index(b, starts, step_s)
    pairs = b.site.astype(np.int64) * max(len(b.page_types), 1) + b.page_type
    used = np.unique(pairs[inside])
    g = np.searchsorted(used, pairs)
    t = len(starts)
    key = np.where(inside, np.minimum(g, max(len(used) - 1, 0)) * t + k, len(used) * t)
    size = len(used) * t + 1

    def total(col: npt.ArrayLike) -> FloatArray:
        w = np.asarray(col, dtype=np.float64)
        sums = np.bincount(key, weights=w, minlength=size)[:-1]
        return np.asarray(sums, dtype=np.float64).reshape(len(used), t)

    without = b.outcome("unchanged") + b.outcome("not_modified")
    npt_ = max(len(b.page_types), 1)
    groups = [(b.sites[int(p) // npt_], b.page_types[int(p) % npt_]) for p in used.tolist()]
    return MoneySeries(
        unit=unit,
        starts=starts,
        step_s=step_s,
        groups=groups,
        fetches=total(b.n),
        changes=total(b.outcome("changed")),
        without_change=total(without),
        cost=total(_cost(b, unit)),
    )


@dataclass(frozen=True)
class SignalSeries:
    """Per site and step: ``(S, T)`` arrays; NaN where a step had no request
    (rates, latency) or the site had no normal yet (the ``normal_`` arrays).

    Rates are fractions of requests; latency is the p95 in milliseconds.
    """

    starts: FloatArray
    step_s: float
    sites: list[str]
    requests: FloatArray
    hard_block: FloatArray
    challenge: FloatArray
    p95_ms: FloatArray
    normal_hard_block: FloatArray
    normal_challenge: FloatArray
    normal_p95_ms: FloatArray


def signals_over_time(
    b: BucketArrays,
    daily: BucketArrays,
    start: float,
    end: float,
    step_s: float,
    config: HealthConfig = HealthConfig(),
) -> SignalSeries:
    """Each site's blocks, challenges and p95 latency per step of ``b`` (15-minute
    or daily buckets) over ``[start, end]``, with the site's normal from the
    daily buckets ``daily`` as it stood on each step's day (sites without a
    request in the range are left out)."""
    starts = step_starts(start, end, step_s)
    t = len(starts)
    k, inside = _step_index(b, starts, step_s)
    used = np.unique(b.site[inside])
    s = len(used)
    g = np.searchsorted(used, b.site)
    key = np.where(inside, np.minimum(g, max(s - 1, 0)) * t + k, s * t)
    size = s * t + 1

    def total(col: npt.ArrayLike) -> FloatArray:
        w = np.asarray(col, dtype=np.float64)
        sums = np.bincount(key, weights=w, minlength=size)[:-1]
        return np.asarray(sums, dtype=np.float64).reshape(s, t)

    n = total(b.n)
    with np.errstate(divide="ignore", invalid="ignore"):
        hard = np.where(n > 0, total(b.outcome("hard_block")) / n, np.nan)
        chal = np.where(n > 0, total(b.outcome("challenge")) / n, np.nan)
    hist = np.stack([total(b.latency[:, j]) for j in range(b.latency.shape[1])], axis=-1)
    p95 = p95_rows(hist.reshape(s * t, hist.shape[-1])).reshape(s, t)
    names = [b.sites[int(i)] for i in used.tolist()]
    nh, nc, nl = (np.full((s, t), np.nan) for _ in range(3))
    if s and t:
        days = np.floor(starts / _DAY) * _DAY
        for day in np.unique(days).tolist():
            base = compute_baselines(daily, float(day), config)
            rows = base.index(names)
            ok = rows >= 0
            cols = days == day
            for out, values in (
                (nh, base.rates[:, 0]),
                (nc, base.rates[:, 1]),
                (nl, base.p95_ms),
            ):
                v = np.where(ok, values[np.maximum(rows, 0)], np.nan)
                out[:, cols] = v[:, None]
    return SignalSeries(
        starts=starts,
        step_s=step_s,
        sites=names,
        requests=n,
        hard_block=hard,
        challenge=chal,
        p95_ms=p95,
        normal_hard_block=nh,
        normal_challenge=nc,
        normal_p95_ms=nl,
    )


@dataclass(frozen=True)
class RouteSeries:
    """Per route and step: ``(R, T)`` requests and the share of them refused
    (hard blocks, challenges and soft blocks; NaN where a step had none)."""

    starts: FloatArray
    step_s: float
    routes: list[str]
    requests: FloatArray
    refused: FloatArray


def routes_over_time(b: BucketArrays, start: float, end: float, step_s: float) -> RouteSeries:
    """Requests and refusals per route (``""``: none reported) and step of ``b``
    over ``[start, end]``: refusals concentrated on some routes point at the
    routes, spread evenly at the site (routes without a request are left out)."""
    starts = step_starts(start, end, step_s)
    t = len(starts)
    k, inside = _step_index(b, starts, step_s)
    used = np.unique(b.route[inside])
    r = len(used)
    g = np.searchsorted(used, b.route)
    key = np.where(inside, np.minimum(g, max(r - 1, 0)) * t + k, r * t)

    def total(col: npt.ArrayLike) -> FloatArray:
        w = np.asarray(col, dtype=np.float64)
        sums = np.bincount(key, weights=w, minlength=r * t + 1)[:-1]
        return np.asarray(sums, dtype=np.float64).reshape(r, t)

    n = total(b.n)
    refused = total(b.outcome("hard_block") + b.outcome("challenge") + b.outcome("soft_block"))
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(n > 0, refused / n, np.nan)
    return RouteSeries(
        starts=starts,
        step_s=step_s,
        routes=[b.routes[int(i)] for i in used.tolist()],
        requests=n,
        refused=share,
    )

"""Freshness math: what a visit buys, and how to split a budget of visits.

Pure numpy, no I/O. Every rate is in changes per day, every duration in days,
every frequency in visits per day, and every budget in billing units per day.

Changes of a page arrive as a Poisson process with rate λ. Four quantities
follow from that model:

``freshness_gain(λ, t, I)``
    The seed's priority term: the expected number of fresh days one visit buys
    when the page was last visited ``t`` days ago and the next visit comes
    ``I`` days later: ``(1 − e^(−λt)) · (1 − e^(−λI)) / λ``.
``time_averaged_freshness(λ, f)``
    The fraction of time the local copy is fresh when the page is visited
    every ``1/f`` days: ``F(λ, f) = (f/λ)(1 − e^(−λ/f))``.
``captured_change_rate(λ, f)``
    The number of visits per day that find a change (the event-capture
    objective): ``f (1 − e^(−λ/f))``.
``optimal_allocation(λ, budget, weight=w, cost=c)``
    The visit frequencies maximising ``Σ wᵢ F(λᵢ, fᵢ)`` (or, for the
    ``events`` objective, ``Σ wᵢ fᵢ (1 − e^(−λᵢ/fᵢ))``) subject to
    ``Σ cᵢ fᵢ = budget`` (Cho & Garcia-Molina, TODS 2003, with value and cost).
``budget_for_freshness(λ, target)``
    The other way round: the budget at which the optimal allocation (or one
    interval for every page) reaches a given mean freshness.

Both objectives share one marginal function of ``r = λ/f``:
``g(r) = 1 − (1 + r) e^(−r)``, which rises from 0 to 1. The optimum satisfies
``wᵢ g(rᵢ)/λᵢ = μ cᵢ`` (freshness) or ``wᵢ g(rᵢ) = μ cᵢ`` (events), and a page
whose left-hand side cannot reach ``μ cᵢ`` gets no visits. The solver inverts
``g`` through a table (uniform in ``logit g``, so a look-up is arithmetic, not a
search) and finds ``ln μ`` by safeguarded Newton steps, on a log-histogram of
the pages' ``a = cλ/w`` when there are many; the frequencies are then computed
for every page in cache-sized blocks and rescaled so the budget is spent
exactly. Ten million pages take one to two seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "Allocation",
    "Objective",
    "allocation_value",
    "budget_for_freshness",
    "captured_change_rate",
    "freshness_gain",
    "inverse_marginal",
    "marginal",
    "optimal_allocation",
    "reveal_read_rate",
    "reveal_weight",
    "time_averaged_freshness",
]

FloatArray = NDArray[np.float64]
Objective = Literal["freshness", "events"]


def _f64(x: ArrayLike) -> FloatArray:
    return np.asarray(x, dtype=np.float64)


def _pages(
    rate_per_day: ArrayLike, weight: ArrayLike | None, cost: ArrayLike | None
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Rates, weights and costs as 1-D arrays of one length, checked.

    A scalar rate is one page; a scalar weight or cost applies to every page.
    Raises ValueError unless rates are finite and ≥ 0, weights finite and ≥ 0
    and costs finite and > 0 (NaN fails every test: ``min``/``max`` propagate
    it, and every comparison with it is false).
    """
    lam = np.atleast_1d(_f64(rate_per_day))
    if lam.ndim != 1:
        raise ValueError(f"rate_per_day must be one-dimensional, got shape {lam.shape}")
    n = lam.shape[0]

    def per_page(x: ArrayLike | None, name: str) -> FloatArray:
        if x is None:
            return np.ones(n)
        arr = _f64(x)
        if arr.ndim == 0:
            return np.broadcast_to(arr, (n,))
        if arr.shape != (n,):
            raise ValueError(
                f"rate_per_day, weight and cost must have one entry per page: {name} has shape "
                f"{arr.shape}, rate_per_day {(n,)}"
            )
        return arr

    w = per_page(weight, "weight")
    c = per_page(cost, "cost")
    if n and not (lam.min() >= 0 and lam.max() < np.inf):
        raise ValueError("rates must be finite and ≥ 0")
    if n and weight is not None and not (w.min() >= 0 and w.max() < np.inf):
        raise ValueError("weights must be finite and ≥ 0")
    if n and cost is not None and not (c.min() > 0 and c.max() < np.inf):
        raise ValueError("every cost must be finite and positive (costs > 0)")
    return lam, w, c


@overload
def freshness_gain(
    rate_per_day: float, days_since_visit: float, interval_days: float = 1.0
) -> float: ...
@overload
def freshness_gain(
    rate_per_day: ArrayLike, days_since_visit: ArrayLike, interval_days: ArrayLike = 1.0
) -> FloatArray: ...
def freshness_gain(
    rate_per_day: ArrayLike, days_since_visit: ArrayLike, interval_days: ArrayLike = 1.0
) -> float | FloatArray:
    """Expected fresh days bought by visiting now, under a Poisson change model.

    This is the seed's ``freshness_gain``: the probability that the page is
    stale now, ``1 − e^(−λ t)``, times the expected time it then stays fresh
    until the next visit ``interval_days`` later, ``(1 − e^(−λ I)) / λ``
    (``I`` when ``λ = 0``).

    Parameters
    ----------
    rate_per_day : array_like
        Change rate λ, changes per day (≥ 0; ``inf`` allowed).
    days_since_visit : array_like
        Time since the last visit, days (≥ 0; ``inf``: never visited).
    interval_days : array_like, default 1.0
        Time until the following visit, days (≥ 0; ``inf`` allowed).

    Returns
    -------
    float or ndarray
        Fresh days per visit; a float when every input is a scalar. A page
        that never changes gains 0 (also for an infinite interval); a NaN
        input gives NaN.

    Raises
    ------
    ValueError
        If a rate, a time since the visit or an interval is negative.

    Examples
    --------
    A page that changes about daily, visited daily, gains 0.400 fresh days:

    >>> round(freshness_gain(1.0, 1.0, 1.0), 3)
    0.4
    >>> freshness_gain([96.0, 24.0, 4.0, 1.0, 1 / 7, 1 / 30, 1 / 365], 1.0, 1.0).round(3)
    array([0.01 , 0.042, 0.241, 0.4  , 0.124, 0.032, 0.003])
    """
    lam = _f64(rate_per_day)
    t = _f64(days_since_visit)
    interval = _f64(interval_days)
    if np.any(lam < 0) or np.any(t < 0) or np.any(interval < 0):
        raise ValueError("rates, days since the visit and intervals must be ≥ 0")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.expm1(-lam * t) * np.expm1(-lam * interval) / lam  # inputs broadcast
    # a page that never changes (λ = 0) is never stale, so a visit gains nothing
    # (NaN stays NaN: only λ == 0 is replaced)
    out = np.where(lam == 0, 0.0, out)
    if out.ndim == 0:
        return float(out)
    return out


def _time_averaged_freshness_of_r(r: FloatArray) -> FloatArray:
    """``F`` as a function of ``r = λ/f`` alone, unchecked: ``(1 − e^(−r))/r``, 0 at ∞."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(r > 1e-8, -np.expm1(-r) / r, 1.0 - r / 2.0)
    return out


@overload
def time_averaged_freshness(rate_per_day: float, visits_per_day: float) -> float: ...
@overload
def time_averaged_freshness(rate_per_day: ArrayLike, visits_per_day: ArrayLike) -> FloatArray: ...
def time_averaged_freshness(
    rate_per_day: ArrayLike, visits_per_day: ArrayLike
) -> float | FloatArray:
    """Long-run fraction of time a page visited at a fixed interval is fresh.

    ``F(λ, f) = (f/λ)(1 − e^(−λ/f))``; 1 for a page that never changes, 0 for
    a changing page that is never visited.

    Parameters
    ----------
    rate_per_day : array_like
        Change rate λ, changes per day (≥ 0).
    visits_per_day : array_like
        Visit frequency f, visits per day (≥ 0; fixed interval ``1/f`` days;
        ``inf`` gives 1).

    Returns
    -------
    float or ndarray
        Freshness in [0, 1]; NaN where an input is NaN.

    Raises
    ------
    ValueError
        If a rate or a frequency is negative.

    Examples
    --------
    >>> round(time_averaged_freshness(1.0, 1.0), 4)
    0.6321
    >>> time_averaged_freshness([0.0, 1.0], [0.0, 0.0]).tolist()
    [1.0, 0.0]
    """
    lam = _f64(rate_per_day)
    f = _f64(visits_per_day)
    if np.any(lam < 0) or np.any(f < 0):
        raise ValueError("rates and visit frequencies must be ≥ 0")
    with np.errstate(divide="ignore", invalid="ignore"):
        r = lam / f
    out = _time_averaged_freshness_of_r(r)
    out = np.where(lam <= 0, 1.0, np.where(f <= 0, 0.0, out))
    if out.ndim == 0:
        return float(out)
    return out


@overload
def captured_change_rate(rate_per_day: float, visits_per_day: float) -> float: ...
@overload
def captured_change_rate(rate_per_day: ArrayLike, visits_per_day: ArrayLike) -> FloatArray: ...
def captured_change_rate(rate_per_day: ArrayLike, visits_per_day: ArrayLike) -> float | FloatArray:
    """Visits per day that find a change, for a page visited at a fixed interval.

    ``f (1 − e^(−λ/f))``: the event-capture objective. It grows with both λ
    and f and never exceeds either.

    Parameters
    ----------
    rate_per_day : array_like
        Change rate λ, changes per day (≥ 0).
    visits_per_day : array_like
        Visit frequency f, visits per day (≥ 0; ``inf`` gives λ).

    Returns
    -------
    float or ndarray
        Detected changes per day; NaN where an input is NaN.

    Raises
    ------
    ValueError
        If a rate or a frequency is negative.

    Examples
    --------
    >>> round(captured_change_rate(1.0, 1.0), 4)
    0.6321
    """
    lam = _f64(rate_per_day)
    f = _f64(visits_per_day)
    if np.any(lam < 0) or np.any(f < 0):
        raise ValueError("rates and visit frequencies must be ≥ 0")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = -f * np.expm1(-lam / f)
    # no visits find nothing; infinitely many find every change (NaN stays NaN)
    out = np.where(f == 0, 0.0, np.where(f == np.inf, lam, out))
    if out.ndim == 0:
        return float(out)
    return out


@overload
def marginal(r: float) -> float: ...
@overload
def marginal(r: ArrayLike) -> FloatArray: ...
def marginal(r: ArrayLike) -> float | FloatArray:
    """``g(r) = 1 − (1 + r) e^(−r)``, the marginal value of a visit.

    ``r = λ/f`` is the expected number of changes between two visits. The
    derivative of ``f (1 − e^(−λ/f))`` with respect to ``f`` is ``g(λ/f)``, and
    that of ``F(λ, f)`` is ``g(λ/f)/λ``. ``g`` rises from 0 (``g ≈ r²/2``) to 1.

    >>> round(marginal(1.0), 6)
    0.264241
    """
    x0 = _f64(r)
    x = np.atleast_1d(x0)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(-x)
        e *= 1.0 + x
        out = np.subtract(1.0, e, out=e)
        small = x < 1e-3
        if np.any(small):
            xs = x[small]
            out[small] = xs * xs * (0.5 - xs / 3.0 + xs * xs / 8.0)
        out[np.isinf(x)] = 1.0
    if x0.ndim == 0:
        return float(out[0])
    return out.reshape(x0.shape)


def _revealed(item_rate: ArrayLike, item_value: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """The revealed items' rates and values (:func:`reveal_weight`,
    :func:`reveal_read_rate`), checked: finite rates, both ≥ 0."""
    lam = np.atleast_1d(_f64(item_rate))
    v = np.broadcast_to(_f64(item_value), lam.shape)
    if np.any(lam < 0) or not np.all(np.isfinite(lam)) or np.any(v < 0):
        raise ValueError("item rates and values must be finite and ≥ 0")
    return lam, v


def reveal_weight(
    item_rate: ArrayLike,
    item_value: ArrayLike,
    rate_per_day: float,
    visits_per_day: float,
) -> float:
    """The value weight of a page that reveals others (a listing page): what
    it is worth is not its own freshness but its items'.

    A read of a listing shows, for each of its items, whether it changed
    since the last read; trusted, it sends the changed items to the front of
    the plan and vouches for the others, so each item stays fresh as if it
    were visited at the listing's own read rate ``f``: the reads are worth
    ``Σ vᵢ F(λᵢ, f)``, whose marginal is ``M(f) = Σ vᵢ g(λᵢ/f)/λᵢ``. The
    optimal allocation sees the listing as a page of rate ``λ`` (its own: any
    item's summary moving changes it) and weight ``w``, visited where
    ``w g(λ/f)/λ = μ c``. The weight returned,

        ``w = λ M(f) / g(λ/f)``,

    makes the two marginals agree at ``f``: solved again as the read rate
    moves, the allocation reads the listing where ``M(f) = μ c``, as often as
    what it reveals is worth against a fetch of any page. ``item_rate``:
    changes per day of each item (≥ 0; an item that never changes adds
    nothing); ``item_value``: their values; ``rate_per_day``: the listing's
    (> 0); ``visits_per_day``: the read rate to value it at (> 0): solved
    again at each read rate, the allocation moves toward that agreement only
    if the rate moves without reads too, as that of
    :func:`reveal_read_rate` does.

    Forty items changing daily, the listing read every two hours (twelve a
    day) and changing forty times a day: weighted about as 6.2 pages, the
    allocation gives it the visits forty items at that rate would need.

    >>> round(reveal_weight(np.ones(40), np.ones(40), 40.0, 12.0), 2)
    6.22
    """
    if not (rate_per_day > 0 and visits_per_day > 0):
        raise ValueError("rate_per_day and visits_per_day must be positive")
    lam, v = _revealed(item_rate, item_value)
    moving = lam > 0
    m = float(np.sum(v[moving] * marginal(lam[moving] / visits_per_day) / lam[moving]))
    own = marginal(rate_per_day / visits_per_day)
    return rate_per_day * m / own if own > 0 else 0.0


def reveal_read_rate(
    item_rate: ArrayLike,
    item_value: ArrayLike,
    days_since_read: float,
    min_days: float,
) -> float:
    """The read rate, visits per day, at which to value a page that reveals
    others (:func:`reveal_weight`) now: one read per its time since the last
    read, ``days_since_read``, taken between ``min_days`` (the shortest gap
    the crawl can make, a cycle) and one mean change interval of its items
    (``1 / λ̄``, ``λ̄`` their value-weighted mean rate; at least ``min_days``).

    Not its read rate as last measured: that one moves only when the page is
    read, so a value computed at it from a run of close reads (low: each read
    found little) stays too low to get the page read again. At the time since
    the last read, the value is that of what a read would reveal now: low just
    after a read, it grows as the items have had time to change, and the
    allocation reads the page once it is worth a fetch, near its fixed point,
    the rate ``f`` where the reads' marginal ``M(f)`` (:func:`reveal_weight`)
    meets the allocation's multiplier. Past one mean item interval most items
    have changed; the value stops growing there, so a page left unread a long
    time (a cold start) is not valued past what reading it about as often as
    its items change is worth. Where no item moves (or none has a value), only
    ``min_days`` bounds it.

    >>> reveal_read_rate(np.ones(40), np.ones(40), 0.25, 1 / 24)
    4.0
    >>> reveal_read_rate(np.ones(40), np.ones(40), 3.0, 1 / 24)
    1.0
    """
    if not (min_days > 0 and days_since_read >= 0):
        raise ValueError("min_days must be positive and days_since_read ≥ 0")
    lam, v = _revealed(item_rate, item_value)
    total = float(v.sum())
    mean = float(np.dot(v, lam)) / total if total > 0 else 0.0
    longest = max(min_days, 1.0 / mean) if mean > 0 else math.inf
    return 1.0 / min(max(days_since_read, min_days), longest)


# g⁻¹ tabulated on a uniform grid of logit(g) = log(g / (1 − g)), so a look-up
# is an index computation rather than a binary search.
_R_FINE = np.geomspace(1e-4, 38.0, 200_000)
_LOGIT_FINE = np.log(marginal(_R_FINE)) - np.log1p(-marginal(_R_FINE))
_L0, _L1 = float(_LOGIT_FINE[0]), float(_LOGIT_FINE[-1])
_NTAB = 32_768
_LSTEP = (_L1 - _L0) / (_NTAB - 1)
_LOG_R_TAB = np.interp(np.linspace(_L0, _L1, _NTAB), _LOGIT_FINE, np.log(_R_FINE))
_G_MIN, _G_MAX = float(marginal(_R_FINE[0])), float(marginal(_R_FINE[-1]))


_BLOCK = 1 << 16


def _inverse_block(xa: FloatArray, polish: bool) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        xc = np.clip(xa, _G_MIN, _G_MAX)
        logit = np.log(xc)
        logit -= np.log1p(-xc)
        del xc
        pos = (logit - _L0) * (1.0 / _LSTEP)
        # clip the index, not pos: a NaN x keeps a NaN pos and so gives a NaN r
        i = pos.astype(np.intp)
        np.clip(i, 0, _NTAB - 2, out=i)
        pos -= i
        lo = _LOG_R_TAB[i]
        r = _LOG_R_TAB[i + 1]
        r -= lo
        r *= pos
        r += lo
        np.exp(r, out=r)
        low = xa < _G_MIN
        if np.any(low):
            s = np.sqrt(2.0 * np.clip(xa[low], 0.0, None))
            r[low] = s * (1.0 + s / 3.0)
        if polish:
            ok = (xa > 0) & (xa < _G_MAX)
            step = (marginal(r) - xa) / (r * np.exp(-r))
            r = np.where(ok, r - step, r)
        r[xa <= 0] = 0.0
        r[xa >= 1.0] = np.inf
    return r


def inverse_marginal(x: ArrayLike, *, polish: bool = False) -> FloatArray:
    """Solve ``g(r) = x`` for ``r`` (vectorised, tabulated).

    Parameters
    ----------
    x : array_like
        Target marginal values. ``x ≤ 0`` gives 0; ``x ≥ 1`` gives ``inf``
        (no finite visit interval has that marginal value); NaN gives NaN.
    polish : bool, default False
        Apply one Newton step after the table look-up (relative error on
        ``g(r)`` below 1e-10 instead of about 1e-6).

    Returns
    -------
    ndarray
        ``r`` ≥ 0, the expected number of changes between visits.

    Examples
    --------
    >>> round(float(inverse_marginal(marginal(2.5))), 5)
    2.5
    """
    xin = _f64(x)
    xa = np.atleast_1d(xin).ravel()
    if xa.size <= _BLOCK:
        r = _inverse_block(xa, polish)
    else:
        # cache-sized blocks: faster, and no full-size temporaries
        r = np.empty_like(xa)
        for start in range(0, xa.size, _BLOCK):
            r[start : start + _BLOCK] = _inverse_block(xa[start : start + _BLOCK], polish)
    return r.reshape(xin.shape)


@dataclass(frozen=True, slots=True)
class Allocation:
    """The result of :func:`optimal_allocation`.

    Attributes
    ----------
    visits_per_day : ndarray
        Optimal visit frequency of each page, visits per day (0: never visit).
    multiplier : float
        The Lagrange multiplier μ: objective gained per extra billing unit
        per day at the optimum (freshness-weight per unit for ``freshness``,
        weighted detected changes per unit for ``events``).
    spent_per_day : float
        ``Σ cᵢ fᵢ``, billing units per day; equals the budget up to 1e-6.
    """

    visits_per_day: FloatArray
    multiplier: float
    spent_per_day: float


def _solve_log_mu(
    a: FloatArray,
    b: FloatArray,
    budget: float,
    lo_a: float,
    hi_a: float,
    start: float | None = None,
    max_iter: int = 100,
) -> float:
    """Root in ``m = ln μ`` of ``Σ b / g⁻¹(μ a) = budget`` (safeguarded Newton).

    ``d ln S / dm = −Σ b g(r) / (r³ e^(−r)) / S``; it is −1/2 where every r is
    small, so the start ``μ₀ = (Σ b/√(2a) / budget)²`` is usually close.
    """
    lo = -hi_a - 90.0  # μ a ≤ e^-90 everywhere: a huge spend
    hi = -lo_a  # μ a_min = 1: nothing is visited
    target = float(np.log(budget))
    m = 2.0 * float(np.log(np.sum(b / np.sqrt(2.0 * a)) / budget)) if start is None else start
    m = min(max(m, lo), hi)
    for _ in range(max_iter):
        r = inverse_marginal(np.exp(m) * a, polish=True)
        ok = np.isfinite(r) & (r > 0)
        if not np.any(ok):
            hi = m
            m = 0.5 * (lo + hi)
            continue
        ro, bo = r[ok], b[ok]
        spend = float(np.sum(bo / ro))
        err = float(np.log(spend)) - target
        if abs(err) < 1e-10 or hi - lo < 1e-12:
            break
        if err > 0:
            lo = m
        else:
            hi = m
        slope = -float(np.sum(bo * marginal(ro) * np.exp(ro) / ro**3)) / spend
        step = m - err / slope if slope < 0 else 0.5 * (lo + hi)
        m = step if lo < step < hi else 0.5 * (lo + hi)
    return m


# pages with μa above this (r ≳ 4.5) are solved page by page on many pages: there a
# bin's 0.05 % error in a moves r by more than 0.05 %, and near the cut-off
# (μa → 1, r → ∞) without bound
_SENSITIVE_X = 0.95
_WINDOW = 0.01  # how far (in ln μ) the exact solve may move from the histogram's


def _log_histogram(
    log_key: FloatArray, w: FloatArray, lo: float, hi: float, *, span: float | None = None
) -> tuple[FloatArray, FloatArray]:
    """Summed weights and edges of a histogram of ``log_key`` over ``[lo, hi + 1e-9)``.

    Bins are about 0.05 % wide: ``span / 5e-4`` of them, 1 to 200,000, where
    ``span`` is the range's width unless given (:func:`_solve_log_mu_many`
    sizes its bins on ``hi − lo``).
    """
    top = hi + 1e-9
    width = top - lo if span is None else span
    nbins = int(min(max(width / 5e-4, 1), 200_000))
    return np.histogram(log_key, bins=nbins, range=(lo, top), weights=w)


def _solve_log_mu_many(
    a: FloatArray, log_a: FloatArray, b: FloatArray, budget: float, lo_a: float, hi_a: float
) -> float:
    """:func:`_solve_log_mu` for many pages: first on a log-histogram of ``a``
    (bins 0.05 % wide), then again with the pages near and past the cut-off
    taken one by one (and the rest still binned); on every page if the root
    moves too far for that split to hold."""
    hist, edges = _log_histogram(log_a, b, lo_a, hi_a, span=hi_a - lo_a)
    nbins = hist.size
    centres = np.exp(0.5 * (edges[:-1] + edges[1:]))
    keep = hist > 0
    m0 = _solve_log_mu(centres[keep], hist[keep], budget, lo_a, hi_a)
    # bins below k_lo stay binned; pages between edges k_lo and k_hi are taken
    # one by one; pages past edge k_hi get no visits while ln μ ≥ m0 − _WINDOW
    k_lo = int(np.searchsorted(edges, math.log(_SENSITIVE_X) - m0 - _WINDOW, side="right")) - 1
    k_lo = min(max(k_lo, 0), nbins)
    k_hi = min(max(int(np.searchsorted(edges, _WINDOW - m0, side="left")), k_lo), nbins)
    sel = log_a >= edges[k_lo]
    if k_hi < nbins:
        sel &= log_a < edges[k_hi]
    pick = np.flatnonzero(sel)
    del sel
    if pick.size > a.size // 2:
        # most pages sit near the cut-off, where the root is found by bisection
        # (r ↦ ∞ there); pages often share one rate (a group's prior), so solve
        # once per distinct key when a strided sample says that shrinks the work
        sample = a[:: max(1, a.size // 4096)]
        if np.unique(sample).size <= sample.size // 8:
            ua, inv = np.unique(a, return_inverse=True)
            ub = np.bincount(inv, weights=b).astype(np.float64, copy=False)
            return _solve_log_mu(ua, ub, budget, lo_a, hi_a, start=m0)
        return _solve_log_mu(a, b, budget, lo_a, hi_a, start=m0)
    low = keep[:k_lo]
    m = _solve_log_mu(
        np.concatenate([centres[:k_lo][low], a[pick]]),
        np.concatenate([hist[:k_lo][low], b[pick]]),
        budget,
        lo_a,
        hi_a,
        start=m0,
    )
    if abs(m - m0) >= _WINDOW:
        m = _solve_log_mu(a, b, budget, lo_a, hi_a, start=m)
    return m


def optimal_allocation(
    rate_per_day: ArrayLike,
    budget_per_day: float,
    *,
    weight: ArrayLike | None = None,
    cost: ArrayLike | None = None,
    objective: Objective = "freshness",
) -> Allocation:
    """Split a budget of visits between pages to maximise weighted freshness.

    Maximises ``Σ wᵢ F(λᵢ, fᵢ)`` (``objective="freshness"``) or
    ``Σ wᵢ fᵢ (1 − e^(−λᵢ/fᵢ))`` (``objective="events"``) subject to
    ``Σ cᵢ fᵢ = budget_per_day``. Under freshness, pages changing much faster
    than the budget can follow get no visits; under events, visits grow with λ.

    Parameters
    ----------
    rate_per_day : array_like
        Change rate λᵢ of each page, changes per day (finite, ≥ 0; 1-D, or a
        scalar for one page). Pages with λ = 0 get no visits (a visit cannot
        gain anything).
    budget_per_day : float
        Billing units per day to spend (finite, > 0).
    weight : array_like, optional
        Value weight wᵢ (finite, ≥ 0, default 1; a scalar applies to all).
    cost : array_like, optional
        Cost of one visit cᵢ, billing units (finite, > 0, default 1).
    objective : {"freshness", "events"}
        What to maximise.

    Returns
    -------
    Allocation
        Frequencies (visits per day), the multiplier μ and the spend.

    Raises
    ------
    ValueError
        For a budget that is not finite and positive, a rate, weight or cost
        outside the ranges above (NaN included), inputs that are not 1-D of
        one length, or an unknown objective.

    Examples
    --------
    A budget of one visit a day over three pages changing every 15 minutes,
    daily and weekly: the fastest page gets nothing.

    >>> a = optimal_allocation([96.0, 1.0, 1 / 7], 1.0)
    >>> a.visits_per_day.round(3)
    array([0.   , 0.653, 0.347])
    """
    if objective not in ("freshness", "events"):
        raise ValueError(f"unknown objective {objective!r}")
    budget_per_day = float(budget_per_day)
    if not 0.0 < budget_per_day < math.inf:
        raise ValueError(f"budget_per_day must be finite and positive, got {budget_per_day}")
    lam, w, c = _pages(rate_per_day, weight, cost)
    n = lam.shape[0]

    useful = (lam > 0) & (w > 0)
    freq = np.zeros(n)
    idx: slice | NDArray[np.intp]
    if not useful.any():
        return Allocation(freq, 0.0, 0.0)
    if useful.all():
        idx = slice(None)
        lam_u, w_u, c_u = lam, w, c
    else:
        idx = np.flatnonzero(useful)
        if idx.size == 0:
            return Allocation(freq, 0.0, 0.0)
        lam_u, w_u, c_u = lam[idx], w[idx], c[idx]
    del useful
    # f = λ / r with g(r) = μ a; spend = Σ b / r
    b = c_u * lam_u
    a = b / w_u if objective == "freshness" else c_u / w_u

    log_a = np.log(a)
    lo_edge, hi_edge = float(log_a.min()), float(log_a.max())
    if a.size > 50_000:
        log_mu = _solve_log_mu_many(a, log_a, b, budget_per_day, lo_edge, hi_edge)
        del log_a, b
    else:
        del log_a
        log_mu = _solve_log_mu(a, b, budget_per_day, lo_edge, hi_edge)
        del b
    mu = float(np.exp(log_mu))
    a *= mu
    r = inverse_marginal(a, polish=True)
    # pages whose μa rounds to 1 sit on the cut-off: any tiny frequency meets
    # the optimality condition there, so they absorb what the solver left over
    edge = np.flatnonzero(np.abs(a - 1.0) < 1e-9)
    r[edge] = np.inf
    del a
    steep = np.flatnonzero(r > 2.0)
    r_steep = r[steep]
    with np.errstate(divide="ignore"):
        f = np.divide(lam_u, r, out=r)
    spent = float(np.dot(c_u, f))
    left = budget_per_day - spent
    if left > 0 and edge.size:
        b_edge = c_u[edge] * lam_u[edge]
        f[edge] = left * (b_edge / b_edge.sum()) / c_u[edge]
    elif left != 0 and spent > 0:
        # the solver stops within 1e-10 of the budget (or 1e-12 of μ): spend the
        # rest as one more Newton step in ln μ would, page by page. It moves
        # ln f by s = d ln r / d ln μ = g(r) eʳ / r², which is ½ for small r and
        # huge near the cut-off, so a uniform rescaling would wrongly move
        # every page (and break monotonicity in the budget)
        finite = np.isfinite(r_steep)
        steep, r_steep = steep[finite], r_steep[finite]
        sens = marginal(r_steep) * np.exp(r_steep) / (r_steep * r_steep)
        cf = c_u[steep] * f[steep]
        # pages with r ≤ 2 have s between ½ and 1.1: take ¾
        total = float(np.dot(cf, sens)) + 0.75 * (spent - float(cf.sum()))
        t = left / total
        f *= 1.0 + 0.75 * t
        f[steep] *= np.maximum(1.0 + sens * t, 0.0) / (1.0 + 0.75 * t)
    spent = float(np.dot(c_u, f))
    if spent > 0:
        # absorb the last rounding so the budget is spent exactly
        f *= budget_per_day / spent
        spent = budget_per_day
    if isinstance(idx, slice):
        return Allocation(f, mu, spent)
    freq[idx] = f
    return Allocation(freq, mu, spent)


def allocation_value(
    rate_per_day: ArrayLike,
    visits_per_day: ArrayLike,
    *,
    weight: ArrayLike | None = None,
    objective: Objective = "freshness",
) -> float:
    """Objective value of an allocation: ``Σ wᵢ F(λᵢ, fᵢ)`` or ``Σ wᵢ fᵢ (1 − e^(−λᵢ/fᵢ))``.

    Raises ValueError for an unknown ``objective`` and, as
    :func:`time_averaged_freshness` and :func:`captured_change_rate` do, for a
    negative rate or frequency.

    >>> allocation_value([1.0, 1.0], [1.0, 1.0])  # doctest: +ELLIPSIS
    1.264...
    """
    if objective not in ("freshness", "events"):
        raise ValueError(f"unknown objective {objective!r}")
    lam = _f64(rate_per_day)
    f = _f64(visits_per_day)
    w = np.ones_like(lam) if weight is None else _f64(weight)
    if objective == "freshness":
        return float(np.sum(w * time_averaged_freshness(lam, f)))
    return float(np.sum(w * captured_change_rate(lam, f)))


def budget_for_freshness(
    rate_per_day: ArrayLike,
    target: float,
    *,
    weight: ArrayLike | None = None,
    cost: ArrayLike | None = None,
    allocation: Literal["optimal", "uniform"] = "optimal",
) -> float:
    """Smallest budget at which the pages' mean freshness reaches ``target``.

    Mean freshness is ``Σ wᵢ F(λᵢ, fᵢ) / Σ wᵢ`` under the Poisson model, with
    the frequencies of :func:`optimal_allocation` (``allocation="optimal"``)
    or one interval for every page (``"uniform"``: ``fᵢ = budget / Σ cⱼ``).
    It answers "what would 95 % freshness cost?" for rates one believes (an
    estimate, or hindsight rates of a trace); it is the model's figure, and
    pages whose changes come in bursts are fresher than it says at any
    interval. Solved for the allocation's multiplier (or the common
    interval) by bisection on a log-histogram of the pages, then Newton
    steps on every page: ten million pages take a few seconds.

    Parameters
    ----------
    rate_per_day : array_like
        Change rate λᵢ of each page, changes per day (≥ 0).
    target : float
        Mean freshness to reach, strictly between 0 and 1.
    weight : array_like, optional
        Value weight wᵢ (≥ 0, default 1), as in :func:`optimal_allocation`.
    cost : array_like, optional
        Cost of one visit cᵢ, billing units (> 0, default 1).
    allocation : {"optimal", "uniform"}
        How the budget is split.

    Returns
    -------
    float
        Billing units per day (0 when pages that never change already make
        up ``target`` of the weight); the mean freshness it buys equals
        ``target`` to about 1e-9.

    Raises
    ------
    ValueError
        For a target outside (0, 1), inputs that are not 1-D of one length, a
        rate that is negative, infinite or NaN, a weight that is negative,
        infinite or NaN, a cost that is not finite and positive, or no weight
        at all.

    Examples
    --------
    One page changing once a day is fresh 95 % of the time when visited
    about ten times a day; splitting the budget well between a fast and a
    slow page needs less than one interval for both:

    >>> round(budget_for_freshness([1.0], 0.95), 2)
    9.66
    >>> opt = budget_for_freshness([1.0, 0.01], 0.9)
    >>> uni = budget_for_freshness([1.0, 0.01], 0.9, allocation="uniform")
    >>> bool(opt < uni)
    True
    """
    if not 0.0 < target < 1.0:
        raise ValueError(f"target must be between 0 and 1 (exclusive), got {target}")
    lam, w, c = _pages(rate_per_day, weight, cost)
    if allocation not in ("optimal", "uniform"):
        raise ValueError(f"allocation must be 'optimal' or 'uniform', got {allocation!r}")
    total = float(w.sum())
    if total <= 0:
        raise ValueError("no page has a positive weight")
    need = target * total - float(w[lam == 0].sum())  # fresh weight the changing pages owe
    if need <= 0:
        return 0.0
    useful = (lam > 0) & (w > 0)
    lam_u, w_u, c_u = lam[useful], w[useful], c[useful]
    if allocation == "uniform":
        # every page visited at f = budget / Σc; with x = ln(1/f), r = λ eˣ
        x = _solve_uniform(np.log(lam_u), w_u, need)
        return float(c.sum()) * math.exp(-x)
    # the optimal allocation at multiplier μ = eᵐ: r = g⁻¹(μ a), a = cλ/w
    b = c_u * lam_u
    return _solve_budget(np.log(b / w_u), w_u, b, need)


def _fresh_sum(
    log_key: FloatArray,
    w: FloatArray,
    s: float,
    optimal: bool,
    b: FloatArray | None = None,
    slope: bool = True,
) -> tuple[float, float, float]:
    """``Σ wᵢ F``, its derivative in ``s`` (0 unless ``slope``) and ``Σ bᵢ/rᵢ``
    (0 without ``b``), with ``r = g⁻¹(eˢ kᵢ)`` (``optimal``) or ``r = eˢ kᵢ``
    (one interval for all), ``k = e^log_key``; in cache-sized blocks, so ten
    million pages need no full-size temporaries."""
    if log_key.size > _BLOCK:
        total, d_total, spend = 0.0, 0.0, 0.0
        for i in range(0, log_key.size, _BLOCK):
            sl = slice(i, i + _BLOCK)
            f, d, sp = _fresh_sum(
                log_key[sl], w[sl], s, optimal, None if b is None else b[sl], slope
            )
            total += f
            d_total += d
            spend += sp
        return total, d_total, spend
    x = np.exp(log_key + s)
    r = inverse_marginal(x, polish=True) if optimal else x
    fresh = _time_averaged_freshness_of_r(r)  # F depends on λ/f = r alone; 0 at r = ∞
    d_total = 0.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if slope:
            g = marginal(r)
            dfdr = np.where(r > 1e-8, -g / (r * r), -0.5)  # dF/dr = −g(r)/r²
            # dr/ds: r itself for a fixed interval; g(r)/g′(r) = g(r)/(r e⁻ʳ) for the optimum
            drds = g / (r * np.exp(-r)) if optimal else r
            d_total = float(np.dot(w, np.where(np.isfinite(r) & (r > 0), dfdr * drds, 0.0)))
        spend = 0.0 if b is None else float(np.sum(b / r))
    return float(np.dot(w, fresh)), d_total, spend


def _histogram(log_key: FloatArray, w: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Bin centres (in ``log_key``) and summed weights of a log-histogram 0.05 % wide."""
    hist, edges = _log_histogram(log_key, w, float(log_key.min()), float(log_key.max()))
    keep = hist > 0
    return 0.5 * (edges[:-1] + edges[1:])[keep], hist[keep]


def _bisect_fresh(
    keys: FloatArray,
    weights: FloatArray,
    need: float,
    optimal: bool,
    b: FloatArray | None = None,
) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """Bisect for ``Σ wᵢ F = need`` (decreasing in ``s``) to a bracket 1e-12 wide.

    Returns ``(s, Σ wF, Σ b/r)`` at the two ends: ``lo`` reaches ``need``, ``hi``
    does not.
    """
    lo = -float(keys.max()) - 60.0  # every page visited far more often than it changes
    hi = -float(keys.min()) + (0.0 if optimal else 60.0)  # no page is visited
    f_lo, f_hi, b_lo, b_hi = math.inf, 0.0, math.inf, 0.0
    while hi - lo > 1e-12 * max(1.0, abs(lo), abs(hi)):
        mid = 0.5 * (lo + hi)
        got, _, spend = _fresh_sum(keys, weights, mid, optimal, b, slope=False)
        if got >= need:
            lo, f_lo, b_lo = mid, got, spend
        else:
            hi, f_hi, b_hi = mid, got, spend
    return (lo, f_lo, b_lo), (hi, f_hi, b_hi)


def _chord(lo: tuple[float, float, float], hi: tuple[float, float, float], need: float) -> float:
    """The budget at which the frontier through the two ends reaches ``need``.

    Between two multipliers 1e-12 apart, spend and freshness move almost only
    through pages on the cut-off (``μ a ≈ 1``, ``r`` beyond the table's 38):
    the optimum gives them whatever budget is left, and their freshness
    ``F ≈ f/λ`` is linear in it; so the frontier is the chord.
    """
    _, f_lo, b_lo = lo
    _, f_hi, b_hi = hi
    if not math.isfinite(b_lo) or f_lo <= f_hi:
        return b_lo
    return b_hi + (b_lo - b_hi) * (need - f_hi) / (f_lo - f_hi)


def _solve_budget(log_key: FloatArray, w: FloatArray, b: FloatArray, need: float) -> float:
    """Least ``Σ bᵢ/rᵢ`` over optimal allocations with ``Σ wᵢ F(rᵢ) ≥ need``.

    ``r = g⁻¹(eˢ kᵢ)``. Freshness jumps in ``s`` where a page crosses the
    cut-off (``r`` from the table's end, 38, to ∞), and the budget reaching
    ``need`` may sit on such a jump: so the search ends on a bracket 1e-12
    wide and interpolates along the chord (:func:`_chord`). Above 50,000
    pages, bisection runs on a log-histogram first, then safeguarded Newton
    steps on every page (and, should they stall on a jump, bisection).
    """
    if log_key.size <= 50_000:
        return _chord(*_bisect_fresh(log_key, w, need, True, b), need)
    keys, weights = _histogram(log_key, w)
    s = _bisect_fresh(keys, weights, need, True)[0][0]
    lo: tuple[float, float, float] | None = None
    hi: tuple[float, float, float] | None = None
    scale = max(1.0, abs(s))
    reach = 1e-9 * scale
    for it in range(200):
        got, slope, spend = _fresh_sum(log_key, w, s, True, b)
        if abs(got - need) <= 1e-12 * need:
            return spend
        if got >= need:
            lo = (s, got, spend)
        else:
            hi = (s, got, spend)
        if lo is not None and hi is not None and hi[0] - lo[0] <= 1e-12 * scale:
            return _chord(lo, hi, need)
        step = s - (got - need) / slope if slope < 0 else math.nan
        inside = (lo is None or step > lo[0]) and (hi is None or step < hi[0])
        if it < 6 and inside:
            s = step
        elif lo is not None and hi is not None:
            s = 0.5 * (lo[0] + hi[0])
        else:  # Newton stalled on a jump, and one side is still open: widen
            s = s + reach if hi is None else s - reach
            reach *= 4.0
    return spend


def _solve_uniform(log_key: FloatArray, w: FloatArray, need: float) -> float:
    """The ``s`` at which ``Σ wᵢ F(eˢ kᵢ) = need`` (one interval for every page).

    Continuous and decreasing in ``s``: bisection (on a log-histogram of the
    keys when there are more than 50,000 pages), then Newton steps on every
    page.
    """
    if log_key.size <= 50_000:
        return _bisect_fresh(log_key, w, need, False)[0][0]
    keys, weights = _histogram(log_key, w)
    s = _bisect_fresh(keys, weights, need, False)[0][0]
    for _ in range(6):
        got, slope, _ = _fresh_sum(log_key, w, s, False)
        if abs(got - need) <= 1e-12 * need or slope >= 0:
            break
        s -= (got - need) / slope
    return s

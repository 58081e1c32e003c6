"""Change-rate estimation from a crawler's own revisit history.

A revisit only tells whether a page changed since the previous visit, never
how many times. Each page's history is kept as four decayed numbers, the
*evidence*:

``nc``  decayed count of revisit intervals that showed a change
``tc``  decayed sum of those intervals' lengths, days
``nu``  decayed count of intervals that showed no change
``tu``  decayed sum of those intervals' lengths, days

``nu`` does not enter the estimate (the likelihood of unchanged intervals
depends only on their total length ``tu``); it is kept because the number of
fetches that found nothing is what an operator looks at.

Beside them a page keeps its changed intervals' count and length sum in six
log-spaced length bins (:mod:`recrawl.records.evidence`; ``bins=`` here):
:func:`estimate_rates` then reads each bin's changed intervals at the bin's
mean length instead of all of them at ``tc/nc``, which the concavity of
``ln(1 − e^(−λt))`` in ``t`` makes biased low when revisit intervals vary
(:mod:`recrawl.estimate.censored`). After the bins come the page's
change-point test (:func:`change_point_step`), which replaces the evidence by
what was seen since a jump of the rate.

**Decay rule.** Evidence fades exponentially with elapsed time, half-life
``half_life_days``: when a revisit closes an interval of length ``t`` days, all
four numbers are first multiplied by ``2^(−t / half_life_days)`` and then the
new interval is added with weight 1. An observation made ``a`` days ago
therefore weighs ``2^(−a / half_life_days)``, however irregular the visits; a
page that changes behaviour is re-learned within a few half-lives.
:func:`estimate_rates` can apply the decay accrued since the last visit too,
and with it a change-point hazard (:func:`evidence_weight`): the longer a page
goes unvisited, the likelier its rate has changed since, and the more its
estimate leans on its group.

**Estimator.** Changes form a Poisson process of rate λ. An interval of length
``t`` shows a change with probability ``1 − e^(−λt)``, so the censored
log-likelihood (Cho & Garcia-Molina 2003, "Estimating Frequency of Change"),
with each changed interval approximated by the mean ``τ = tc/nc``, is::

    ℓ(λ) = nc · ln(1 − e^(−λτ)) − λ · tu

whose maximum is ``λ = ln(1 + tc/tu) · nc/tc``. Unlike ``changes / time`` it is
not biased low for pages that change faster than they are visited, but it is
infinite when every interval showed a change. Each page's rate therefore gets
a Gamma(α, β) prior fitted across its group (site × page type, blended with the
whole population for small groups: empirical Bayes) by maximising the marginal
likelihood of the group's evidence, and the estimate is the posterior mode of
``ln λ``: the root of ::

    α + nc · u/(e^u − 1) = (β + tu) · λ,     u = λτ

which lies in ``[α/(β + tu), (α + nc)/(β + tu)]`` and is found by safeguarded
Newton steps. With no evidence the estimate is the group mean ``α/β``; with
much evidence it is the page's own censored MLE. The uncertainty is the
Laplace approximation of the posterior standard deviation of λ.

**Bad evidence.** A page whose four numbers are not all finite and ≥ 0 (NaN,
an infinity, a negative sum: corrupt state, never produced by
:func:`update_evidence`) is treated as a page without evidence, by
:func:`fit_group_priors` and :func:`estimate_rates` alike: it gets its group's
mean, and it does not move its group's prior. One such page thus cannot turn
every page's rate into NaN, and a planner keeps planning; the check is one
vectorised pass per chunk.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from recrawl.records.evidence import (
    BIN_COLUMNS,
    BINS,
    EVIDENCE_COLUMNS,
    bins_from_totals,
    length_bin,
)

__all__ = [
    "CHANGE_FACTOR",
    "CHANGE_MIN_REVISITS",
    "CHANGE_THRESHOLD",
    "DEFAULT_CHANGE_HAZARD_PER_DAY",
    "DEFAULT_HALF_LIFE_DAYS",
    "RESOLUTION_WARN_SHARE",
    "GroupPriors",
    "RateResolution",
    "change_point_step",
    "decay_evidence",
    "estimate_rates",
    "evidence_weight",
    "fit_group_priors",
    "fold_bins",
    "fold_revisits",
    "gamma_priors_from_posteriors",
    "rate_resolution",
    "raw_rates",
    "update_evidence",
    "update_evidence_arrays",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.integer]

DEFAULT_HALF_LIFE_DAYS: float = 180.0
"""Half-life of revisit evidence, days."""

DEFAULT_CHANGE_HAZARD_PER_DAY: float = 1.0 / 730.0
"""Prior chance per page-day that a page's change rate is redrawn (a change
point), per day: one jump per page every two years. The planner ages an
unvisited page's evidence by it (:func:`evidence_weight`)."""

_CHUNK = 1 << 15
_NO_BINS = np.zeros((0, BIN_COLUMNS), dtype=np.float32)
_BINNED_STEPS = 12


def bracketed_newton_step(
    s: FloatArray, hp: FloatArray, h2: FloatArray, lo: FloatArray, hi: FloatArray
) -> FloatArray:
    """One safeguarded Newton step toward the root of a falling ``h'(s)``.

    ``hp`` is ``h'(s)`` and ``h2`` its derivative; the bracket ``[lo, hi]``
    (updated in place) closes on ``s`` from the side ``h'`` says the root is
    not on. The step is taken where it stays inside the bracket, and the
    bracket is halved where it would leave it (or is not finite).
    """
    up = hp > 0
    np.copyto(lo, s, where=up)
    np.copyto(hi, s, where=~up)
    with np.errstate(divide="ignore", invalid="ignore"):
        step = s - hp / h2
    ok = (step >= lo) & (step <= hi)  # False for NaN
    return np.where(ok, step, 0.5 * (lo + hi))


def _decay_factor(days: ArrayLike, half_life_days: float) -> FloatArray:
    d = np.asarray(days, dtype=np.float64)
    if not np.isfinite(half_life_days):
        return np.ones_like(d)
    if half_life_days <= 0:
        raise ValueError(f"half_life_days must be positive, got {half_life_days}")
    return np.exp2(-np.maximum(d, 0.0) / half_life_days)


def update_evidence(
    nc: float,
    tc: float,
    nu: float,
    tu: float,
    interval_days: float,
    changed: bool,
    *,
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS,
) -> tuple[float, float, float, float]:
    """Fold one revisit into a page's evidence.

    Parameters
    ----------
    nc, tc, nu, tu : float
        The page's evidence (see module docstring); ``tc`` and ``tu`` in days.
    interval_days : float
        Time since the previous visit, days (> 0).
    changed : bool
        Whether this visit found a change since the previous one.
    half_life_days : float
        Evidence half-life, days (``inf``: no decay).

    Returns
    -------
    tuple of float
        The new ``(nc, tc, nu, tu)``.

    Examples
    --------
    >>> update_evidence(0.0, 0.0, 0.0, 0.0, 2.0, True)
    (1.0, 2.0, 0.0, 0.0)
    >>> update_evidence(1.0, 2.0, 0.0, 0.0, 180.0, False)
    (0.5, 1.0, 1.0, 180.0)
    """
    if not (interval_days > 0 and math.isfinite(interval_days)):
        raise ValueError(f"interval_days must be positive and finite, got {interval_days}")
    d = 1.0 if not np.isfinite(half_life_days) else 2.0 ** (-interval_days / half_life_days)
    nc, tc, nu, tu = nc * d, tc * d, nu * d, tu * d
    if changed:
        return nc + 1.0, tc + interval_days, nu, tu
    return nc, tc, nu + 1.0, tu + interval_days


def update_evidence_arrays(
    nc: FloatArray,
    tc: FloatArray,
    nu: FloatArray,
    tu: FloatArray,
    index: ArrayLike,
    interval_days: ArrayLike,
    changed: ArrayLike,
    *,
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS,
    bins: NDArray[np.float32] | None = None,
) -> None:
    """Fold one revisit into each of the pages ``index``, in place.

    The vectorised form of :func:`update_evidence`: ``nc[index]`` and the
    other three arrays are updated, and so are the pages' ``bins`` when given
    (float32, :mod:`recrawl.records.evidence`): decayed alike, a changed
    interval added to the count and length sum of its length bin. With
    ``(n, 22)`` columns (the bins, then the change-point test) each revisit
    also goes through :func:`change_point_step`, and a page whose test calls
    a change point gets its run's evidence instead of its own; ``(n, 12)``:
    the bins alone.

    Parameters
    ----------
    nc, tc, nu, tu : ndarray of float
        Evidence arrays of all pages (one shape, a floating dtype), modified
        in place.
    index : array_like of int, or of bool
        Pages revisited: page numbers in ``[0, len(nc))``, none repeated, or a
        boolean mask over all pages (its true entries, in order).
    interval_days : array_like
        Time since each page's previous visit, days (finite, > 0), one per
        page revisited (or one for all).
    changed : array_like of bool
        Whether each visit found a change, one per page revisited (or one for
        all).
    half_life_days : float
        Evidence half-life, days.

    Raises
    ------
    TypeError
        If an evidence array is not a floating-point ndarray, or ``index``
        is neither integer nor boolean.
    ValueError
        If the evidence arrays differ in shape, ``index`` repeats a page or
        lies outside the pages, a mask has the wrong length, or an interval
        is not finite and positive. Nothing is modified then.

    Examples
    --------
    >>> ev = [np.zeros(3) for _ in range(4)]
    >>> update_evidence_arrays(*ev, [2, 0], [1.0, 4.0], [True, False])
    >>> ev[0].tolist(), ev[3].tolist()
    ([0.0, 0.0, 1.0], [4.0, 0.0, 0.0])
    """
    arrays = (nc, tc, nu, tu)
    for name, a in zip(("nc", "tc", "nu", "tu"), arrays, strict=True):
        if not isinstance(a, np.ndarray) or not np.issubdtype(a.dtype, np.floating):
            raise TypeError(
                f"evidence array {name} must be a floating-point ndarray (it is updated in "
                f"place), got {getattr(a, 'dtype', type(a).__name__)}"
            )
    if any(a.shape != nc.shape for a in arrays):
        raise ValueError("evidence arrays nc, tc, nu and tu must have one shape")
    n = nc.shape[0] if nc.ndim else 0
    raw = np.asarray(index)
    if raw.dtype == np.bool_:
        if raw.shape != (n,):
            raise ValueError(f"a boolean index must have one entry per page ({n}), got {raw.shape}")
        idx = np.flatnonzero(raw)
    elif raw.size == 0:
        idx = np.zeros(0, dtype=np.intp)
    elif np.issubdtype(raw.dtype, np.integer):
        idx = raw.astype(np.intp, copy=False).ravel()
        if int(idx.min()) < 0 or int(idx.max()) >= n:
            raise ValueError(f"index must lie in [0, {n}), got {int(idx.min())}…{int(idx.max())}")
        if np.unique(idx).size != idx.size:
            raise ValueError(
                "index repeats a page: fold one revisit per page per call, in time order"
            )
    else:
        raise TypeError(f"index must hold integers or booleans, got {raw.dtype}")
    try:
        t = np.broadcast_to(np.asarray(interval_days, dtype=np.float64), idx.shape)
        ch = np.broadcast_to(np.asarray(changed, dtype=bool), idx.shape)
    except ValueError:
        raise ValueError(
            f"interval_days and changed must have one entry per page revisited ({idx.size})"
        ) from None
    t_ok = (t > 0) & (t < np.inf)  # NaN fails both
    if not t_ok.all():
        bad = int(t_ok.size - np.count_nonzero(t_ok))
        raise ValueError(f"interval_days must be positive and finite; {bad} are not")
    if bins is not None and bins.shape not in ((n, BIN_COLUMNS), (n, EVIDENCE_COLUMNS)):
        raise ValueError(
            f"bins must have shape ({n}, {BIN_COLUMNS}) or ({n}, {EVIDENCE_COLUMNS}), "
            f"got {bins.shape}"
        )
    d = _decay_factor(t, half_life_days)
    watch = bins is not None and bins.shape[1] == EVIDENCE_COLUMNS and idx.size > 0
    if watch:
        assert bins is not None
        state, fired, run = change_point_step(
            nc[idx], tc[idx], nu[idx], tu[idx], bins[idx, BIN_COLUMNS:], t, ch, d,
            bins=bins[idx, :BIN_COLUMNS],
        )  # fmt: skip
        bins[idx, BIN_COLUMNS:] = state
    if bins is not None:
        fold_bins(bins, idx, t, ch, half_life_days=half_life_days)
    cf = ch.astype(np.float64)
    nc[idx] = nc[idx] * d + cf
    tc[idx] = tc[idx] * d + cf * t
    nu[idx] = nu[idx] * d + (1.0 - cf)
    tu[idx] = tu[idx] * d + (1.0 - cf) * t
    if watch and fired.any():
        assert bins is not None
        f = idx[fired]
        rn, rtc, rnu, rtu = run[fired].T
        nc[f], tc[f], nu[f], tu[f] = rn, rtc, rnu, rtu
        bins[f, :BIN_COLUMNS] = bins_from_totals(rn, rtc)


CHANGE_FACTOR: float = 4.0
"""The change-point test weighs "the rate is now this many times higher (or
lower) than the page's evidence says" against "it is as the evidence says"."""

CHANGE_THRESHOLD: float = 6.0
"""Log-likelihood ratio (nats) at which a page's CUSUM calls a change point."""

CHANGE_MIN_REVISITS: float = 5.0
"""Evidence (``nc + nu``, revisits) a page needs before its rate is tested."""


def change_point_step(
    nc: FloatArray,
    tc: FloatArray,
    nu: FloatArray,
    tu: FloatArray,
    state: NDArray[np.floating[Any]],
    interval_days: FloatArray,
    changed: NDArray[np.bool_],
    decay: FloatArray,
    *,
    bins: NDArray[np.floating[Any]] | None = None,
) -> tuple[NDArray[np.float32], NDArray[np.bool_], FloatArray]:
    """One revisit of each of ``m`` pages through their change-point test (pure).

    The test is a two-sided CUSUM (Page 1954) of the revisit's log-likelihood
    ratio between the rate ``κλ`` (and ``λ/κ``), κ = :data:`CHANGE_FACTOR`, and
    the rate ``λ`` the page's evidence gave before this revisit: the censored
    estimate of its length ``bins`` when given (``(m, 12)``, under a weak prior
    of half a change per half its mean interval), else of ``nc, tc, nu, tu``
    read at their mean length (:func:`raw_rates`, at least half a change over
    the span it covers). The bins matter: read at their mean length, mixed
    revisit intervals look slower than they are, and the test would keep
    calling the page faster than its evidence. A revisit after ``t`` days that found a change
    adds ``ln((1 − e^(−κλt)) / (1 − e^(−λt)))`` to the upward sum, one that
    did not ``−(κ − 1)λt``; each sum stays ≥ 0. While a sum is above 0 the
    evidence of its run (the revisits since it left 0, decayed as the page's)
    is kept beside it. A sum above :data:`CHANGE_THRESHOLD` is a change point:
    the page's evidence should be replaced by that run's, so the page is
    re-learned from the change on rather than through the evidence half-life
    (which stays as the floor). Pages with less than
    :data:`CHANGE_MIN_REVISITS` revisits of evidence are not tested.

    ``state`` is ``(m, 10)``: the upward and downward sums, then the upward
    run's ``nc, tc, nu, tu``, then the downward run's. Returns the new state
    (float32; zero where a change point was called), which pages called one,
    and the ``(m, 4)`` evidence of the run that called it.

    >>> st = np.zeros((1, 10), dtype=np.float32)
    >>> ev = [np.array([0.5]), np.array([1.5]), np.array([59.0]), np.array([177.0])]
    >>> for _ in range(6):  # a page that changed once in 60 revisits now changes every time
    ...     st, fired, run = change_point_step(*ev, st, np.array([3.0]), np.array([True]), np.ones(1))
    ...     if fired[0]:
    ...         break
    >>> bool(fired[0]), run[0].tolist()
    (True, [5.0, 15.0, 0.0, 0.0])
    """
    st = np.asarray(state, dtype=np.float64)
    t = interval_days
    cf = changed.astype(np.float64)
    if bins is None:
        lam = np.maximum(raw_rates(nc, tc, nu, tu), 0.5 / (tc + tu + t))
    else:  # the page's own binned censored estimate, under a weak prior: half a
        # change per half its mean interval (finite when every revisit changed)
        beta = 0.5 * (tc + tu + t) / np.maximum(nc + nu + 1.0, 1.0)
        lam, _ = _posterior_mode(np.full(nc.shape, 0.5), beta, nc, tc, tu, bins)
    x = lam * t
    k = CHANGE_FACTOR
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        p0 = -np.expm1(-x)
        llr_up = np.where(changed, np.log(-np.expm1(-k * x) / p0), -(k - 1.0) * x)
        llr_down = np.where(changed, np.log(-np.expm1(-x / k) / p0), (1.0 - 1.0 / k) * x)
    testable = (nc + nu) >= CHANGE_MIN_REVISITS
    here = np.stack([cf, cf * t, 1.0 - cf, (1.0 - cf) * t], axis=1)
    out = np.zeros_like(st)
    runs = []
    for j, llr in enumerate((llr_up, llr_down)):
        before = st[:, j]
        s = np.where(testable, np.maximum(before + np.nan_to_num(llr), 0.0), 0.0)
        cols = slice(2 + 4 * j, 6 + 4 * j)
        run = np.where((before > 0)[:, None], st[:, cols] * decay[:, None], 0.0) + here
        run[s <= 0] = 0.0
        out[:, j] = s
        out[:, cols] = run
        runs.append(run)
    fired = (out[:, 0] > CHANGE_THRESHOLD) | (out[:, 1] > CHANGE_THRESHOLD)
    which = out[:, 0] >= out[:, 1]
    chosen = np.where(which[:, None], runs[0], runs[1])
    out[fired] = 0.0
    return out.astype(np.float32), fired, chosen


def fold_revisits(
    nc: FloatArray,
    tc: FloatArray,
    nu: FloatArray,
    tu: FloatArray,
    index: NDArray[np.intp],
    prev: FloatArray,
    at: FloatArray,
    changed: NDArray[np.bool_],
    *,
    quiet_until: FloatArray | None = None,
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS,
    bins: NDArray[np.float32] | None = None,
) -> None:
    """Fold revisits ``(prev, at]`` (unix seconds) of the pages ``index`` (none
    repeated) into their evidence (and their length ``bins``, when given), in
    place, as :func:`update_evidence_arrays`.

    A revisit at the instant of the previous fetch carries no evidence. Where
    ``quiet_until`` (unix seconds, NaN: none) lies inside a revisit that
    found a change, the page is known unchanged until then
    (:func:`recrawl.hints.quiet_until`): the revisit counts as one unchanged
    interval up to it and one changed interval after it.

    >>> ev = [np.zeros(2) for _ in range(4)]
    >>> fold_revisits(*ev, np.array([0, 1]), np.array([0.0, 0.0]),
    ...               np.array([8 * 86400.0, 8 * 86400.0]), np.array([True, True]),
    ...               quiet_until=np.array([6 * 86400.0, np.nan]), half_life_days=np.inf)
    >>> [a.tolist() for a in ev]
    [[1.0, 1.0], [2.0, 8.0], [1.0, 0.0], [6.0, 0.0]]
    """
    start = np.asarray(prev, dtype=np.float64)
    end = np.asarray(at, dtype=np.float64)
    if quiet_until is not None:
        q = np.asarray(quiet_until, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            ok = changed & (q > start) & (q < end)
        if ok.any():
            update_evidence_arrays(
                nc, tc, nu, tu, index[ok], (q[ok] - start[ok]) / 86400.0, False,
                half_life_days=half_life_days, bins=bins,
            )  # fmt: skip
            start = np.where(ok, q, start)
    interval = np.maximum(end - start, 0.0) / 86400.0
    pos = interval > 0  # two fetches at the same instant carry no rate evidence
    if pos.any():
        update_evidence_arrays(
            nc, tc, nu, tu, index[pos], interval[pos], changed[pos],
            half_life_days=half_life_days, bins=bins,
        )  # fmt: skip


def fold_bins(
    bins: NDArray[np.float32],
    index: NDArray[np.intp],
    interval_days: FloatArray,
    changed: NDArray[np.bool_],
    *,
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS,
) -> None:
    """Fold one revisit of ``interval_days`` into the length bins of each of
    the pages ``index`` (none repeated), in place: the page's bins are first
    multiplied by ``2^(−t / half_life_days)`` (in float32), then a changed
    interval is added to the count and length sum (days) of its bin
    (:func:`~recrawl.records.evidence.length_bin`). One function for the
    batch fold and for one page at a time, so both give the same numbers.

    >>> bins = np.zeros((1, 12), dtype=np.float32)
    >>> fold_bins(bins, np.array([0]), np.array([2.0]), np.array([True]))
    >>> bins[0, 3].item(), bins[0, 9].item()
    (1.0, 2.0)
    """
    decay = _decay_factor(interval_days, half_life_days)
    bins[index] *= decay.astype(np.float32)[:, None]
    c = index[changed]
    if c.size:
        k = length_bin(interval_days[changed])
        bins[c, k] += np.float32(1.0)
        bins[c, BINS + k] += interval_days[changed].astype(np.float32)


def decay_evidence(
    nc: FloatArray,
    tc: FloatArray,
    nu: FloatArray,
    tu: FloatArray,
    elapsed_days: ArrayLike,
    *,
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Evidence as it stands ``elapsed_days`` after its last update (new arrays)."""
    d = _decay_factor(elapsed_days, half_life_days)
    return nc * d, tc * d, nu * d, tu * d


def evidence_weight(
    elapsed_days: ArrayLike,
    *,
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS,
    hazard_per_day: float = 0.0,
) -> FloatArray:
    """Weight left to a page's evidence ``elapsed_days`` after its last fetch.

    The evidence half-life gives ``2^(−t / half_life_days)``. A change-point
    hazard ``h`` (rate redraws per page-day) multiplies it by ``e^(−h t)``, the
    chance that the rate the evidence describes is still the page's rate:
    with probability ``1 − e^(−h t)`` it was redrawn from the page's group
    since, and the group's prior speaks for it. Discounting the counts before
    the shrinkage toward the group prior is how :func:`estimate_rates` mixes
    the two, so a page left unvisited because its evidence said "too fast to
    keep fresh" drifts back toward its group and is visited again, while a
    visit restores its evidence (a page still fast is confirmed by it).
    Pure; ``t < 0`` counts as 0.

    >>> evidence_weight([0.0, 180.0], half_life_days=180.0).tolist()
    [1.0, 0.5]
    >>> w = evidence_weight([365.0], half_life_days=math.inf, hazard_per_day=1 / 365)
    >>> round(float(w[0]), 4)
    0.3679
    """
    if not (0.0 <= hazard_per_day < math.inf):
        raise ValueError(f"hazard_per_day must be finite and ≥ 0, got {hazard_per_day}")
    d = _decay_factor(elapsed_days, half_life_days)
    if hazard_per_day > 0:
        t = np.maximum(np.asarray(elapsed_days, dtype=np.float64), 0.0)
        d = d * np.exp(-hazard_per_day * t)
    return d


def raw_rates(nc: ArrayLike, tc: ArrayLike, nu: ArrayLike, tu: ArrayLike) -> FloatArray:
    """Per-page censored estimate without any prior, changes per day.

    ``λ = ln((tc + tu + τ/2) / (tu + τ/2)) / τ`` with ``τ = tc/nc``: the
    censored MLE ``ln(1 + tc/tu)/τ`` with half an interval added to both
    sides, which keeps it finite when every interval showed a change. For
    regular intervals this is Cho & Garcia-Molina's bias-reduced estimator
    ``−ln((n − X + 0.5)/(n + 0.5)) / I``. Pages with no change get 0.

    Examples
    --------
    Ten daily visits, five of which found a change:

    >>> round(float(raw_rates(5.0, 5.0, 5.0, 5.0)), 4)
    0.6466
    """
    ncf = np.asarray(nc, dtype=np.float64)
    tcf = np.asarray(tc, dtype=np.float64)
    tuf = np.asarray(tu, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = tcf / ncf
        half = 0.5 * tau
        lam = np.log1p(tcf / (tuf + half)) / tau
    return np.where((ncf > 0) & (tcf > 0), lam, 0.0)


@dataclass(frozen=True, slots=True)
class GroupPriors:
    """Gamma(α, β) prior of each group's change rate.

    Attributes
    ----------
    alpha : ndarray
        Shape α of each group (pseudo-changes), indexed by group code.
    beta : ndarray
        Rate β of each group (pseudo-days of exposure), indexed by group code.
        The prior mean is ``alpha / beta`` changes per day.
    """

    alpha: FloatArray
    beta: FloatArray

    @property
    def mean_rate(self) -> FloatArray:
        """Prior mean of each group, changes per day."""
        return self.alpha / self.beta


def _chunks(n: int) -> list[slice]:
    return [slice(i, min(n, i + _CHUNK)) for i in range(0, n, _CHUNK)]


def _bad_pages(nc: FloatArray, tc: FloatArray, nu: FloatArray, tu: FloatArray) -> IntArray | None:
    """Indices of a chunk's pages whose evidence is bad; ``None`` if none is.

    Bad: any of the four numbers NaN, infinite or negative (see the module
    docstring); such a page counts as one without evidence.
    """
    arrays = (nc, tc, nu, tu)
    # fast path, reductions only (no temporaries): a NaN fails ``>= 0``
    if all(float(a.min(initial=0.0)) >= 0.0 and float(a.max(initial=0.0)) < np.inf for a in arrays):
        return None
    ok = (nc >= 0.0) & (nc < np.inf)
    for a in arrays[1:]:
        ok &= a >= 0.0
        ok &= a < np.inf
    return np.flatnonzero(~ok)


def _bad_chunks(
    nc: FloatArray,
    tc: FloatArray,
    nu: FloatArray,
    tu: FloatArray,
    bins: NDArray[np.floating[Any]] | None = None,
) -> list[IntArray | None]:
    """:func:`_bad_pages` of every chunk (:func:`_chunks`), checked once (with
    the pages whose length ``bins``, when given, are not finite and ≥ 0)."""
    if bins is not None and bins.shape not in (
        (nc.shape[0], BIN_COLUMNS),
        (nc.shape[0], EVIDENCE_COLUMNS),
    ):
        raise ValueError(f"bins must have shape ({nc.shape[0]}, {BIN_COLUMNS}), got {bins.shape}")
    return [
        _bad_bins(None if bins is None else bins[sl], _bad_pages(nc[sl], tc[sl], nu[sl], tu[sl]))
        for sl in _chunks(nc.shape[0])
    ]


def _usable(
    bad: IntArray | None, nc: FloatArray, tc: FloatArray, tu: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``(nc, tc, tu)`` of a chunk, zero at its ``bad`` pages (:func:`_bad_pages`).

    The chunk's own arrays are returned when every page is sound.
    """
    if bad is None:
        return nc, tc, tu
    out = (nc.copy(), tc.copy(), tu.copy())
    for a in out:
        a[bad] = 0.0
    return out


def _usable_bins(
    bad: IntArray | None, bins: NDArray[np.floating[Any]] | None
) -> NDArray[np.floating[Any]] | None:
    """A chunk's length bins, zero at its ``bad`` pages (the chunk's own array
    when every page is sound)."""
    if bins is None or bad is None:
        return bins
    out = bins.copy()
    out[bad] = 0.0
    return out


_AS_BITS: dict[int, tuple[type[np.unsignedinteger[Any]], int]] = {
    2: (np.uint16, 0x7C00),
    4: (np.uint32, 0x7F800000),
    8: (np.uint64, 0x7FF0000000000000),
}


def _bad_bins(bins: NDArray[np.floating[Any]] | None, bad: IntArray | None) -> IntArray | None:
    """``bad`` with the pages whose bins are not all finite and ≥ 0 added."""
    if bins is None:
        return bad
    bits = _AS_BITS.get(bins.dtype.itemsize)
    if bins.dtype.kind == "f" and bits is not None:
        # one integer reduction: a float is finite and ≥ 0 (or −0) exactly
        # when its bits, as an unsigned integer, lie below those of +inf
        kind, inf = bits
        u = bins.view(kind)
        if int(u.max(initial=0)) < inf:
            return bad
    elif float(bins.min(initial=0.0)) >= 0.0 and float(bins.max(initial=0.0)) < np.inf:
        return bad
    wrong = np.flatnonzero(~np.all((bins >= 0.0) & (bins < np.inf), axis=1))
    return wrong if bad is None else np.union1d(bad, wrong)


def _evidence_arrays(
    nc: ArrayLike, tc: ArrayLike, nu: ArrayLike, tu: ArrayLike
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """The four evidence arguments as 1-d float64 arrays of one length."""
    ncf = np.atleast_1d(np.asarray(nc, dtype=np.float64))
    if ncf.ndim != 1:
        raise ValueError(f"evidence must be one-dimensional, got shape {ncf.shape}")
    tcf, nuf, tuf = (np.asarray(x, dtype=np.float64) for x in (tc, nu, tu))
    if any(x.shape not in (ncf.shape, ()) for x in (tcf, nuf, tuf)):
        raise ValueError("evidence arrays nc, tc, nu and tu must have one length")
    tcf, nuf, tuf = (np.broadcast_to(x, ncf.shape) for x in (tcf, nuf, tuf))
    return ncf, tcf, nuf, tuf


def _moments(sums: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Exposure-weighted mean and excess variance from ``(k, Σe, Σex, Σex²)`` rows."""
    k, se, sx, sxx = sums
    with np.errstate(divide="ignore", invalid="ignore"):
        # half a change over the group's exposure keeps a change-free group above 0
        m = (sx + 0.5) / (se + 1.0)
        var = sxx / se - (sx / se) ** 2 - k * m / se
    return m, np.where(se > 0, var, np.nan)


def _digamma(x: FloatArray) -> FloatArray:
    """ψ(x) for x > 0: ``ψ(x) = ψ(x + 6) − Σ 1/(x + i)``, then the asymptotic series."""
    x = np.asarray(x, dtype=np.float64)
    acc = 1.0 / x + 1.0 / (x + 1.0) + 1.0 / (x + 2.0)
    acc += 1.0 / (x + 3.0) + 1.0 / (x + 4.0) + 1.0 / (x + 5.0)
    y = x + 6.0
    y2 = 1.0 / (y * y)
    return np.log(y) - 0.5 / y - y2 * (1 / 12 - y2 * (1 / 120 - y2 / 252)) - acc


def _trigamma(x: FloatArray) -> FloatArray:
    """ψ'(x) for x > 0, like :func:`_digamma`."""
    x = np.asarray(x, dtype=np.float64)
    acc = 1.0 / (x * x) + 1.0 / (x + 1.0) ** 2 + 1.0 / (x + 2.0) ** 2
    acc += 1.0 / (x + 3.0) ** 2 + 1.0 / (x + 4.0) ** 2 + 1.0 / (x + 5.0) ** 2
    y = x + 6.0
    y2 = 1.0 / (y * y)
    return acc + 1.0 / y + 0.5 * y2 + y2 / y * (1 / 6 - y2 * (1 / 30 - y2 / 42))


def _gamma_shape(s: FloatArray) -> FloatArray:
    """The shape α with ``ln α − ψ(α) = s`` (s > 0): the Gamma MLE's equation."""
    s = np.maximum(s, 1e-9)
    a = (3.0 - s + np.sqrt((s - 3.0) ** 2 + 24.0 * s)) / (12.0 * s)
    for _ in range(3):  # from Minka's start, three Newton steps reach 1e-10
        a = np.maximum(a - (np.log(a) - _digamma(a) - s) / (1.0 / a - _trigamma(a)), 1e-6)
    return a


def _sample_cap(k: FloatArray, size: int) -> float:
    """The ``c`` with ``Σ min(k, c) = size`` over the group sizes ``k``.

    Keeping ``min(k, c)`` pages of each group on average thins the pages to
    about ``size``, small groups kept whole (``c`` is below 1 when there are
    more groups than ``size``; infinite when there are fewer pages).
    """
    ks = np.sort(k[k > 0])
    if ks.sum() <= size:
        return float("inf")
    prefix = np.r_[0.0, np.cumsum(ks)[:-1]]  # pages in the smaller groups
    left = ks.size - np.arange(ks.size)  # groups at least this big
    j = int(np.searchsorted(prefix + ks * left, size, side="right"))
    return float((size - prefix[j]) / left[j]) if j < ks.size else float(ks[-1])


def _hash_unit(sl: slice) -> FloatArray:
    """A fixed pseudo-random number in [0, 1) per page number of ``sl``."""
    i = np.arange(sl.start, sl.stop, dtype=np.uint64)
    i *= np.uint64(0x9E3779B97F4A7C15)
    i >>= np.uint64(11)
    return i.astype(np.float64) * 2.0**-53


def fit_group_priors(
    nc: ArrayLike,
    tc: ArrayLike,
    nu: ArrayLike,
    tu: ArrayLike,
    groups: ArrayLike | None = None,
    *,
    mask: ArrayLike | None = None,
    n_groups: int | None = None,
    pseudo_pages: float = 5.0,
    max_alpha: float = 20.0,
    min_alpha: float = 0.1,
    iterations: int = 20,
    sample_pages: int = 100_000,
    bins: NDArray[np.floating[Any]] | None = None,
) -> GroupPriors:
    """Fit a Gamma prior of the change rate per group (empirical Bayes).

    The prior is the Gamma(α, β) that maximises the marginal likelihood of
    the group's evidence, found by EM: each page's posterior (Laplace
    approximation in ``ln λ``, i.e. the Gamma with the posterior's mode and
    curvature; exact for pages that never showed a change) gives ``E[λ]`` and
    ``E[ln λ]``, and the Gamma fitted to their group means is the next prior.
    Unlike moments of the pages' own estimates, this is not biased low by
    pages that change faster than they are visited (their censored evidence
    only bounds the rate from below) and it weighs each page's evidence by
    how much it says. The start is the method of moments on the raw per-page
    estimates (:func:`raw_rates`), weighted by each page's exposure
    ``tc + tu``.

    Each group is blended with the whole population as if ``pseudo_pages``
    pages of the population had joined it, so a group of one page leans on
    everyone. The EM runs on about ``sample_pages`` pages at most (small
    groups kept whole, big ones thinned; the population's means weigh each
    group by its full size), so its cost does not grow with the crawl; when
    there are more groups than that, a last EM step runs on every page so
    each group still sees its own. The moments and that last step run in
    chunks, so memory stays flat however many pages there are.

    Parameters
    ----------
    nc, tc, nu, tu : array_like
        Evidence of every page; a page whose evidence is not finite and ≥ 0
        counts as one without evidence (see the module docstring).
    groups : array_like of int, optional
        Group code of each page (0 … n_groups − 1); all pages in one group if
        omitted.
    mask : array_like of bool, optional
        Only these pages inform the priors (default: all).
    n_groups : int, optional
        Number of groups (default ``max(groups) + 1``).
    pseudo_pages : float
        Weight of the population in each group's fit, in pages.
    max_alpha, min_alpha : float
        Bounds on the prior's strength, in pseudo-changes: the prior never
        outweighs ``max_alpha`` observed changes, and never fades below
        ``min_alpha``.
    iterations : int
        EM iterations (0: the method-of-moments start alone).
    sample_pages : int
        About how many pages the EM uses at most.
    bins : ndarray, optional
        ``(n, 12)`` length bins of every page's changed intervals
        (:mod:`recrawl.records.evidence`); when given, each page's posterior
        in the EM is that of the binned censored likelihood (each changed
        interval read near its own length, :func:`estimate_rates`), and
        ``nc``, ``tc`` only start it.

    Returns
    -------
    GroupPriors

    Examples
    --------
    Pages changing about every two days, visited every ten: each visit finds
    a change, so the pages' own estimates only say "faster than the visits";
    the fitted prior mean is still well above one change in ten days.

    >>> rng = np.random.default_rng(0)
    >>> changed = rng.random((500, 12)) < -np.expm1(-0.5 * 10.0)
    >>> nc = changed.sum(axis=1).astype(float)
    >>> pri = fit_group_priors(nc, 10.0 * nc, 12.0 - nc, 10.0 * (12.0 - nc))
    >>> bool(pri.mean_rate[0] > 0.2)
    True
    """
    ncf, tcf, nuf, tuf = _evidence_arrays(nc, tc, nu, tu)
    bad = _bad_chunks(ncf, tcf, nuf, tuf, bins)  # once, for every pass below
    bins = None if bins is None else bins[:, :BIN_COLUMNS]  # (not the change-point test)
    g = None if groups is None else np.asarray(groups)
    msk = None if mask is None else np.asarray(mask, dtype=bool)
    if g is None:
        ng = 1
    else:
        ng = int(n_groups) if n_groups is not None else int(g.max(initial=-1)) + 1
        ng = max(ng, 1)
    # per group: pages with exposure, Σe, Σe·x, Σe·x²
    sums = np.zeros((4, ng))
    chunks = _chunks(ncf.shape[0])
    for sl, bad_sl in zip(chunks, bad, strict=True):
        c_n, c_t, u_t = _usable(bad_sl, ncf[sl], tcf[sl], tuf[sl])
        x = raw_rates(c_n, c_t, 0.0, u_t)
        e = c_t + u_t
        if msk is not None:
            e *= msk[sl]
        gc = np.zeros(x.shape[0], dtype=np.intp) if g is None else g[sl]
        ex = e * x
        sums[0] += np.bincount(gc, weights=(e > 0).astype(np.float64), minlength=ng)
        sums[1] += np.bincount(gc, weights=e, minlength=ng)
        sums[2] += np.bincount(gc, weights=ex, minlength=ng)
        sums[3] += np.bincount(gc, weights=ex * x, minlength=ng)
    m_all, v_all = _moments(sums.sum(axis=1, keepdims=True))
    m0 = float(m_all[0])
    v0 = float(v_all[0]) if np.isfinite(v_all[0]) else m0**2
    v0 = max(v0, (m0 / np.sqrt(max_alpha)) ** 2)
    if g is None:
        m = np.array([m0])
        v = np.array([v0])
    else:
        mg, vg = _moments(sums)
        k = sums[0]
        mg = np.where(np.isfinite(mg), mg, m0)
        vg = np.where(np.isfinite(vg), np.maximum(vg, 0.0), v0)
        m = (k * mg + pseudo_pages * m0) / (k + pseudo_pages)
        v = (k * vg + pseudo_pages * v0) / (k + pseudo_pages)
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = np.clip(m * m / v, min_alpha, max_alpha)
    alpha = np.where(np.isfinite(alpha), alpha, max_alpha)
    beta = alpha / m
    if iterations > 0:
        size = sums[0]  # pages with evidence in each group
        cap = _sample_cap(size, sample_pages)
        gz = np.zeros(_CHUNK, dtype=np.intp)

        def evidence(
            sl: slice, bad_sl: IntArray | None, thin: bool
        ) -> tuple[FloatArray, FloatArray, FloatArray, IntArray, NDArray[Any] | None]:
            c_n, c_t, u_t = _usable(bad_sl, ncf[sl], tcf[sl], tuf[sl])
            ok = (c_t + u_t) > 0
            if msk is not None:
                ok &= msk[sl]
            gc = gz[: ok.shape[0]] if g is None else g[sl].astype(np.intp)
            if thin:
                ok &= _hash_unit(sl) < cap / np.maximum(size[gc], 1.0)
            bn = None
            if bins is not None:  # only the rows kept
                bn = bins[sl][ok]
                if bad_sl is not None:
                    was_bad = np.zeros(ok.shape[0], dtype=bool)
                    was_bad[bad_sl] = True
                    bn[was_bad[ok]] = 0.0
            return c_n[ok], c_t[ok], u_t[ok], gc[ok], bn

        none: tuple[FloatArray, FloatArray, FloatArray, IntArray, NDArray[Any] | None] = (
            np.zeros(0),
            np.zeros(0),
            np.zeros(0),
            np.zeros(0, dtype=np.intp),
            None,
        )
        thin = bool(np.isfinite(cap))
        parts = [evidence(sl, b, thin) for sl, b in zip(chunks, bad, strict=True)] or [none]
        s_nc, s_tc, s_tu = (np.concatenate([p[i] for p in parts]) for i in range(3))
        s_g = np.concatenate([p[3] for p in parts])
        s_bins = None
        if bins is not None:
            s_bins = np.concatenate([p[4] for p in parts if p[4] is not None] or [_NO_BINS])
        del parts
        if s_nc.size:
            m_step = functools.partial(
                _m_step,
                size=size,
                pseudo_pages=pseudo_pages,
                min_alpha=min_alpha,
                max_alpha=max_alpha,
            )
            for _ in range(iterations):
                alpha, beta = m_step(*_e_step(alpha, beta, s_nc, s_tc, s_tu, s_g, s_bins))
            if cap < 1.0:
                # some groups had no page in the sample: one more step on every page
                step = np.zeros((3, ng))
                for sl, bad_sl in zip(chunks, bad, strict=True):
                    step += np.array(_e_step(alpha, beta, *evidence(sl, bad_sl, False)))
                alpha, beta = m_step(step[0], step[1], step[2])
    return GroupPriors(alpha=alpha, beta=beta)


def _e_step(
    alpha: FloatArray,
    beta: FloatArray,
    nc: FloatArray,
    tc: FloatArray,
    tu: FloatArray,
    g: IntArray,
    bins: NDArray[np.floating[Any]] | None = None,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per group: pages, Σ E[λ] and Σ E[ln λ] under the pages' posteriors.

    Each posterior is taken as the Gamma with its mode and curvature in
    ``ln λ`` (Laplace): Gamma(a, a/λ̂) with ``a = (λ̂/sd)²``, so
    ``E[λ] = λ̂`` and ``E[ln λ] = ln λ̂ + ψ(a) − ln a``.
    """
    ng = alpha.shape[0]
    sums = np.zeros((3, ng))
    for sl in _chunks(nc.shape[0]):
        gc = g[sl]
        bn = None if bins is None else bins[sl]
        lam, sd = _posterior_mode(alpha[gc], beta[gc], nc[sl], tc[sl], tu[sl], bn)
        a = (lam / sd) ** 2
        e_log = np.log(lam) + _digamma(a) - np.log(a)
        sums[0] += np.bincount(gc, minlength=ng)
        sums[1] += np.bincount(gc, weights=lam, minlength=ng)
        sums[2] += np.bincount(gc, weights=e_log, minlength=ng)
    return sums[0], sums[1], sums[2]


def _m_step(
    k: FloatArray,
    s_lam: FloatArray,
    s_log: FloatArray,
    *,
    size: FloatArray,
    pseudo_pages: float,
    min_alpha: float,
    max_alpha: float,
) -> tuple[FloatArray, FloatArray]:
    """The Gamma of each group fitted to its mean ``E[λ]`` and ``E[ln λ]``.

    ``k`` pages of each group were summed, out of ``size``. Each group's means
    are blended with the population's (every group weighted by its size) as
    if ``pseudo_pages`` pages of the population had joined it.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        up = np.where(k > 0, size / k, 0.0)  # pages each summed page stands for
    n = float(np.dot(up, k))
    p = max(pseudo_pages, 1e-9)  # a group without pages gets the population's means
    mean_lam = (s_lam + p * float(np.dot(up, s_lam)) / n) / (k + p)
    mean_log = (s_log + p * float(np.dot(up, s_log)) / n) / (k + p)
    alpha = np.clip(_gamma_shape(np.log(mean_lam) - mean_log), min_alpha, max_alpha)
    return alpha, alpha / mean_lam


def gamma_priors_from_posteriors(
    rate: ArrayLike,
    sd: ArrayLike,
    groups: ArrayLike,
    n_groups: int,
    *,
    pseudo_pages: float = 5.0,
    min_alpha: float = 0.1,
    max_alpha: float = 20.0,
) -> GroupPriors:
    """One M-step of :func:`fit_group_priors` from any estimator's posteriors.

    Each page's posterior is taken as the Gamma with mean ``rate`` and
    standard deviation ``sd`` (per day, both > 0); the prior of each group is
    the Gamma fitted to its pages' mean ``E[λ]`` and ``E[ln λ]``, blended with
    the population's as if ``pseudo_pages`` pages of it had joined the group,
    its shape clipped to ``[min_alpha, max_alpha]``. Lets an estimator with
    another likelihood (:mod:`recrawl.estimate.censored`) fit its priors by
    the same EM.

    >>> p = gamma_priors_from_posteriors([1.0, 1.0], [0.5, 0.5], [0, 0], 1)
    >>> round(float(p.mean_rate[0]), 3)
    1.0
    """
    lam = np.asarray(rate, dtype=np.float64)
    a = (lam / np.asarray(sd, dtype=np.float64)) ** 2
    e_log = np.log(lam) + _digamma(a) - np.log(a)
    g = np.asarray(groups, dtype=np.intp)
    k = np.bincount(g, minlength=n_groups).astype(np.float64)
    s_lam = np.bincount(g, weights=lam, minlength=n_groups).astype(np.float64)
    s_log = np.bincount(g, weights=e_log, minlength=n_groups).astype(np.float64)
    alpha, beta = _m_step(
        k, s_lam, s_log, size=k, pseudo_pages=pseudo_pages, min_alpha=min_alpha,
        max_alpha=max_alpha,
    )  # fmt: skip
    return GroupPriors(alpha, beta)


def _posterior_mode(
    alpha: FloatArray,
    beta: FloatArray,
    nc: FloatArray,
    tc: FloatArray,
    tu: FloatArray,
    bins: NDArray[np.floating[Any]] | None = None,
    bins_scale: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Mode of ln λ under the Gamma prior and censored likelihood; λ and sd(λ).

    Without ``bins`` every changed interval is read at the mean ``tc/nc``;
    with them (``(m, 12)``, :mod:`recrawl.records.evidence`, their counts
    times ``bins_scale`` when given: a decay), those of each length bin at
    the bin's own mean length (:func:`_binned_mode`) where more than one bin
    is in use.
    """
    if bins is not None:
        # pages with one bin in use (regular revisits, or bins read from the
        # four numbers) are the mean-length case: only the others need the bins
        lam, sd = _posterior_mode(alpha, beta, nc, tc, tu)
        many = np.flatnonzero(_bins_in_use(bins) > 1)
        if many.size:
            scale = None if bins_scale is None else bins_scale[many]
            lam[many], sd[many] = _binned_mode(
                alpha[many], beta[many] + tu[many], bins[many], scale, start=lam[many]
            )
        return lam, sd
    b = beta + tu
    lam = alpha / b  # the answer for pages that never showed a change
    hpp = -alpha  # h''(s) = −bλ there
    live = np.flatnonzero(nc > 0)
    if live.size:
        nl = nc[live]
        tau = np.maximum(tc[live] / nl, 1e-12)
        lam[live], hpp[live] = _mean_length_mode(alpha[live], b[live], nl, tau, tc[live])
    sd = lam / np.sqrt(-hpp)
    return lam, sd


def _bins_in_use(bins: NDArray[np.floating[Any]]) -> NDArray[np.integer[Any]]:
    """How many length bins of each page hold a changed interval (bins ≥ 0)."""
    bits = _AS_BITS.get(bins.dtype.itemsize)
    if bins.dtype.kind == "f" and bits is not None:  # nonzero bits: nonzero (bins ≥ 0)
        n = bins.view(bits[0])[:, :BINS] != 0
    else:
        n = bins[:, :BINS] > 0
    used: NDArray[np.int8] = n.sum(axis=1, dtype=np.int8)
    return used


def _mean_length_mode(
    al: FloatArray,
    bl: FloatArray,
    nl: FloatArray,
    tau: FloatArray,
    tc: FloatArray,
    steps: int = 3,
) -> tuple[FloatArray, FloatArray]:
    """λ and ``h''(s)`` of pages whose ``nl`` changed intervals are all read at ``tau`` days."""
    lo = np.log(al / bl)
    hi = np.log((al + nl) / bl)
    # start from the Gamma-style guess (α + nc) / (β + tc + tu), inside the bracket
    s = np.clip(np.log((al + nl) / (bl + tc)), lo, hi)
    h2 = -bl
    # safeguarded Newton on h'(s) = α + nc φ(u) − bλ, φ(u) = u/(e^u − 1), with
    # u φ'(u) = φ(1 − φ) − u φ; three steps reach a relative error below 3e-4,
    # far inside the estimate's own uncertainty (four: below 1e-7)
    with np.errstate(over="ignore"):
        for _ in range(steps):
            ll = np.exp(s)
            u = ll * tau
            phi = u / np.expm1(u)
            blam = bl * ll
            hp = nl * phi
            hp += al
            hp -= blam
            h2 = phi * (1.0 - phi - u)
            h2 *= nl
            h2 -= blam
            s = bracketed_newton_step(s, hp, h2, lo, hi)
    return np.exp(s), h2


def _binned_mode(
    alpha: FloatArray,
    b: FloatArray,
    bins: NDArray[np.floating[Any]],
    scale: FloatArray | None = None,
    *,
    start: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray]:
    """The posterior mode of ln λ from binned changed intervals; λ and sd(λ).

    ``bins`` holds each page's decayed counts ``n_k`` and length sums ``t_k``
    of its changed intervals per length bin (counts times ``scale``, when
    given); each bin is read at its mean length ``τ_k = t_k/n_k``, so the
    mode is the root of ::

        α + Σ_k n_k φ(λ τ_k) = b λ,     φ(u) = u/(e^u − 1),  b = β + tu

    in ``[α/b, (α + Σ n_k)/b]``: safeguarded Newton steps in ``s = ln λ``
    over the used bins only (flat, one entry per page and bin), from
    ``start`` (the mean-length estimate, a little low) or the Gamma-style
    guess, until every page moves less than 1e-6 in ``s`` (at most
    :data:`_BINNED_STEPS` steps).
    """
    m = alpha.shape[0]
    page, k = np.nonzero(bins[:, :BINS] > 0)  # flat: one entry per page and used bin
    n = bins[page, k].astype(np.float64)
    t = bins[page, BINS + k].astype(np.float64)
    tau = np.maximum(t / n, 1e-12)
    if scale is not None:
        n *= scale[page]
        t *= scale[page]
    nl = np.bincount(page, weights=n, minlength=m)
    lo = np.log(alpha / b)
    hi = np.log((alpha + nl) / b)
    if start is None:
        start = (alpha + nl) / (b + np.bincount(page, weights=t, minlength=m))
    s = np.clip(np.log(start), lo, hi)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for _ in range(_BINNED_STEPS):
            ll = np.exp(s)
            u = ll[page] * tau
            phi = u / np.expm1(u)
            phi[u > 700.0] = 0.0
            blam = b * ll
            hp = alpha + np.bincount(page, weights=n * phi, minlength=m) - blam
            h2 = np.bincount(page, weights=n * phi * (1.0 - phi - u), minlength=m) - blam
            new = bracketed_newton_step(s, hp, h2, lo, hi)
            done = bool(np.all(np.abs(new - s) <= 1e-6))
            s = new
            if done:
                break
        ll = np.exp(s)
        u = ll[page] * tau
        phi = u / np.expm1(u)
        phi[u > 700.0] = 0.0
        h2 = np.bincount(page, weights=n * phi * (1.0 - phi - u), minlength=m) - b * ll
    return ll, ll / np.sqrt(-h2)


def estimate_rates(
    nc: ArrayLike,
    tc: ArrayLike,
    nu: ArrayLike,
    tu: ArrayLike,
    groups: ArrayLike | None = None,
    *,
    priors: GroupPriors | None = None,
    elapsed_days: ArrayLike | None = None,
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS,
    bins: NDArray[np.floating[Any]] | None = None,
    hazard_per_day: float = 0.0,
) -> tuple[FloatArray, FloatArray]:
    """Estimate every page's change rate and its uncertainty.

    Parameters
    ----------
    nc, tc, nu, tu : array_like
        Evidence of every page (see module docstring); a page whose evidence
        is not finite and ≥ 0 gets its group's mean, as a page without any.
    groups : array_like of int, optional
        Group code of each page (site × page type); one group if omitted.
    priors : GroupPriors, optional
        Priors per group; fitted with :func:`fit_group_priors` if omitted.
    elapsed_days : array_like, optional
        Days since each page's evidence was last updated; the evidence is
        decayed by that much first, so a long-unvisited page leans more on its
        group (priors fitted here use the undecayed evidence).
    half_life_days : float
        Evidence half-life used with ``elapsed_days``, days.
    hazard_per_day : float
        Change-point hazard used with ``elapsed_days``, rate redraws per
        page-day (≥ 0): the evidence is weighed by :func:`evidence_weight`,
        so an unvisited page's estimate drifts toward its group's mean as the
        chance grows that its rate changed since its last fetch.
    bins : ndarray, optional
        ``(n, 12)`` length bins of every page's changed intervals
        (:mod:`recrawl.records.evidence`, kept by :func:`fold_revisits`):
        the censored likelihood then reads each bin's changed intervals at
        the bin's mean length instead of all of them at the mean ``tc/nc``,
        which is biased low when the revisit intervals vary (issue 29); a
        page's ``nc``, ``tc`` then only say whether its evidence is sound.
        The priors fitted here use the bins too.

    Returns
    -------
    rate_per_day : ndarray
        Estimated change rate, changes per day (> 0).
    sd_per_day : ndarray
        Approximate posterior standard deviation of the rate, changes per day.

    Examples
    --------
    Two pages in one group: one visited daily for 60 days that changed every
    time, one with no history. The first gets a rate well above one change a
    day; the second gets its group's mean.

    >>> rate, sd = estimate_rates([60.0, 0.0], [60.0, 0.0], [0.0, 0.0], [0.0, 0.0])
    >>> bool(rate[0] > 2.0), bool(0 < rate[1] < rate[0])
    (True, True)
    """
    ncf, tcf, nuf, tuf = _evidence_arrays(nc, tc, nu, tu)
    g = None if groups is None else np.asarray(groups)
    bad = _bad_chunks(ncf, tcf, nuf, tuf, bins)
    bins = None if bins is None else bins[:, :BIN_COLUMNS]  # (not the change-point test)
    if priors is None:
        priors = fit_group_priors(ncf, tcf, nuf, tuf, g, bins=bins)
    if not (0.0 <= hazard_per_day < math.inf):
        raise ValueError(f"hazard_per_day must be finite and ≥ 0, got {hazard_per_day}")
    el = None
    if elapsed_days is not None:
        el = np.broadcast_to(np.asarray(elapsed_days, dtype=np.float64), ncf.shape)
    n = ncf.shape[0]
    rate = np.empty(n)
    sd = np.empty(n)
    for sl, bad_sl in zip(_chunks(n), bad, strict=True):
        m = sl.stop - sl.start
        a = np.full(m, priors.alpha[0]) if g is None else priors.alpha[g[sl]]
        b = np.full(m, priors.beta[0]) if g is None else priors.beta[g[sl]]
        c_n, c_t, u_t = _usable(bad_sl, ncf[sl], tcf[sl], tuf[sl])
        bn = _usable_bins(bad_sl, None if bins is None else bins[sl])
        d = None
        if el is not None:
            d = evidence_weight(
                el[sl], half_life_days=half_life_days, hazard_per_day=hazard_per_day
            )
            c_n, c_t, u_t = c_n * d, c_t * d, u_t * d
        rate[sl], sd[sl] = _posterior_mode(a, b, c_n, c_t, u_t, bn, d)
    return rate, sd


RESOLUTION_WARN_SHARE: float = 0.25
"""Share of revisited pages changed at every revisit from which
:meth:`RateResolution.advice` speaks up."""

_UNCHANGED_FORGOTTEN = 0.1
"""Unchanged exposure below this many revisit intervals counts as none."""


def _days(d: float) -> str:
    if d < 1.0:
        h = d * 24.0
        return f"{h:.2g} hour" + ("" if h == 1 else "s")
    text = f"{d:,.0f}" if d >= 10 else f"{d:.2g}"
    return text + (" day" if text == "1" else " days")


@dataclass(frozen=True, slots=True)
class RateResolution:
    """How much the revisits made so far can say about the pages' rates.

    A page whose every remembered revisit found a change has a rate known only
    from below: at revisits ``τ`` days apart, a page changing every week and
    one changing every hour look the same. When many pages are like that, the
    budget is too small for the estimates to tell fast pages from very fast
    ones; the planner then leans on their group's prior, and a larger budget
    for a while, or fetches closer together, would teach it their rates.

    Attributes
    ----------
    revisited : int
        Pages with at least one revisit's worth of evidence (``nc + nu ≥ 1``;
        the evidence as it stood at each page's last revisit).
    changed_every_revisit : int
        Of those, pages that changed at every revisit they remember: at least
        two changed revisits in evidence (``nc ≥ 1 + ½ · 2^(−τ/h)``, with ``τ =
        tc/nc`` the mean changed interval and ``h`` the half-life, so that
        sparse revisits still count once decay has thinned them) and unchanged
        exposure below a tenth of an interval (``tu < τ/10``).
    median_interval_days : float
        Median revisit interval of those pages, days (NaN if there are none):
        their rates are known only to be above about ``1 / median_interval_days``.
    """

    revisited: int
    changed_every_revisit: int
    median_interval_days: float

    @property
    def share(self) -> float:
        """``changed_every_revisit / revisited`` (0 with no revisit)."""
        return self.changed_every_revisit / self.revisited if self.revisited else 0.0

    def summary(self) -> str:
        """One sentence for operators, e.g. ``"150 pages revisited; 5 (3%) changed at every
        revisit (median 47 days apart): their rates are only known to exceed about one
        change in 47 days"`` (no final full stop)."""
        line = (
            f"{self.revisited:,} pages revisited; {self.changed_every_revisit:,} "
            f"({self.share:.0%}) changed at every revisit"
        )
        if not self.changed_every_revisit:
            return line
        d = _days(self.median_interval_days)
        return (
            f"{line} (median {d} apart): their rates are only known to exceed about "
            f"one change in {d}"
        )

    def advice(self) -> str | None:
        """What to do when such pages are :data:`RESOLUTION_WARN_SHARE` or more of the
        revisited pages (None otherwise)."""
        if self.revisited == 0 or self.share < RESOLUTION_WARN_SHARE:
            return None
        return (
            "At this budget recrawl cannot tell which of them change much faster; it leans "
            "on their groups' priors. A larger budget for a while, or revisits closer "
            "together, would teach it their rates."
        )

    def as_dict(self) -> dict[str, float | int | None]:
        """Plain JSON: the attributes and ``share`` (a NaN interval as None)."""
        d = self.median_interval_days
        return {
            "revisited": self.revisited,
            "changed_every_revisit": self.changed_every_revisit,
            "share": self.share,
            "median_interval_days": None if math.isnan(d) else d,
        }


def rate_resolution(
    nc: ArrayLike,
    tc: ArrayLike,
    nu: ArrayLike,
    tu: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS,
) -> RateResolution:
    """Count the pages whose rate the revisits only bound from below.

    Parameters
    ----------
    nc, tc, nu, tu : array_like
        Evidence of every page (see the module docstring).
    mask : array_like of bool, optional
        Only these pages are counted (default: all).
    half_life_days : float
        The half-life the evidence was decayed with, days.

    Returns
    -------
    RateResolution

    Examples
    --------
    Two pages that changed at both their 40-day revisits, one that did not:

    >>> from recrawl.estimate.rates import update_evidence
    >>> ev = update_evidence(*update_evidence(0, 0, 0, 0, 40.0, True), 40.0, True)
    >>> r = rate_resolution(*zip(ev, ev, (0.0, 0.0, 2.0, 80.0)))
    >>> r.revisited, r.changed_every_revisit, r.median_interval_days
    (3, 2, 40.0)
    """
    ncf = np.atleast_1d(np.asarray(nc, dtype=np.float64))
    tcf, nuf, tuf = (
        np.broadcast_to(np.asarray(x, dtype=np.float64), ncf.shape) for x in (tc, nu, tu)
    )
    keep = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), ncf.shape)
    n_seen = 0
    taus = []
    # in chunks: no full-size temporaries on ten million pages
    for sl in _chunks(ncf.shape[0]):
        c = ncf[sl]
        seen = (c + nuf[sl]) >= 1.0
        if keep is not None:
            seen &= keep[sl]
        n_seen += int(np.count_nonzero(seen))
        with np.errstate(divide="ignore", invalid="ignore"):
            tau = tcf[sl] / c
            seen &= c >= 1.0 + 0.5 * _decay_factor(tau, half_life_days)
        seen &= tuf[sl] < _UNCHANGED_FORGOTTEN * tau
        taus.append(tau[seen])
    bounded = np.concatenate(taus) if taus else np.zeros(0)
    median = float(np.median(bounded)) if bounded.size else math.nan
    return RateResolution(n_seen, int(bounded.size), median)

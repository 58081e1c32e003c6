"""The exact censored-Poisson likelihood of each page's own revisit intervals (pure math).

A revisit after ``t`` days shows a change with probability ``1 − e^(−λt)``
(Poisson changes of rate λ per day). A page whose changed intervals were
``t_1 … t_m`` days and whose unchanged intervals sum to ``tu`` days has the
censored log-likelihood (Cho & Garcia-Molina 2003) ::

    ℓ(λ) = Σ_i ln(1 − e^(−λ t_i)) − λ · tu

:mod:`recrawl.estimate.rates` keeps only ``nc`` and ``tc = Σ t_i`` and replaces
every ``t_i`` by their mean ``tc/nc``. ``ln(1 − e^(−λt))`` is concave in
``t``, so with revisits of mixed lengths (a day or a month) that mean makes
the changed intervals look longer than they were and the rate comes out low
(issue 29: 0.24 a day for a page changing once a day, revisited after 1 or
30 days).

Here:

* :func:`censored_posterior` is the exact estimate over every interval,
  vectorised over a flat array of intervals tagged with their page, and
  :func:`censored_posterior_scalar` its one-page reference (bisection,
  plain floats). Both return the posterior mode of ``ln λ`` under a
  Gamma(α, β) prior on λ (the site × page type prior that
  :func:`recrawl.estimate.rates.fit_group_priors` fits), i.e. the root of ::

      α + Σ_i φ(λ t_i) = (β + tu) · λ,    φ(u) = u / (e^u − 1)

  and the Laplace standard deviation of λ from the observed information
  (the curvature of the log-posterior in ``ln λ``). α, β → 0 gives the
  censored maximum-likelihood estimate.
* :class:`CensoredEvidence` is the smallest fixed-size page state that
  carries that likelihood: the changed intervals' decayed count and length
  sum in :data:`BIN_EDGES_DAYS` six log-spaced length bins (factor 4 apart,
  2 hours to 21 days) plus the unchanged count and length, all float32:
  56 bytes a page, against today's four float64 numbers (32 bytes).
  Within a bin every changed interval is read at the bin's mean length, so
  the estimate is exact when the intervals of a bin are equal and, since
  ``ln(1 − e^(−λt))`` bends little over a factor of 4, within 2 % of the
  exact one otherwise (``benchmarks/rate_bias.py`` measures it).
  :func:`update_censored` folds revisits into it (pure: new arrays,
  with the same evidence half-life as :func:`~recrawl.estimate.rates.update_evidence`),
  :func:`estimate_censored` estimates every page from it, and
  :func:`fit_censored_priors` fits the group priors by the same EM as
  :func:`~recrawl.estimate.rates.fit_group_priors`, under this likelihood
  (:meth:`CensoredEvidence.collapsed` gives back today's four numbers).

The live path keeps the same bins (:mod:`recrawl.records.evidence`: a
page's ``ev_bins``, folded by :func:`recrawl.estimate.rates.fold_revisits`
and stored by the store) and estimates from them with
:func:`recrawl.estimate.rates.estimate_rates` (``bins=``), which the planner
calls; this module is its exact reference and the benchmark's.

Nothing here reads a store or a clock; rates are per day, lengths in days.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from recrawl.estimate.rates import (
    DEFAULT_HALF_LIFE_DAYS,
    GroupPriors,
    bracketed_newton_step,
    fit_group_priors,
    gamma_priors_from_posteriors,
)
from recrawl.records.evidence import BIN_EDGES_DAYS, BINS, length_bin

__all__ = [
    "BIN_EDGES_DAYS",
    "CensoredEvidence",
    "censored_posterior",
    "censored_posterior_scalar",
    "estimate_censored",
    "fit_censored_priors",
    "length_bin",
    "update_censored",
]

FloatArray = NDArray[np.float64]

_MAX_NEWTON: Final = 30
_TOL: Final = 1e-12
_CHUNK: Final = 1 << 16


def _phi(u: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``φ(u) = u/(e^u − 1)`` and ``u φ'(u) = φ(1 − φ − u)``, with φ(0) = 1."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        phi = np.where(u > 1e-12, u / np.expm1(u), 1.0 - 0.5 * u)
    phi = np.where(u > 700.0, 0.0, phi)
    return phi, phi * (1.0 - phi - u)


def _solve(
    alpha: FloatArray,
    b: FloatArray,
    n_changed: FloatArray,
    sums: Callable[[FloatArray], tuple[FloatArray, FloatArray]],
) -> tuple[FloatArray, FloatArray]:
    """Root in ``s = ln λ`` of ``h'(s) = α + Σ φ(λ t_i) − b λ``; λ and sd(λ).

    ``sums(λ)`` returns each page's ``Σ φ`` and ``Σ u φ'`` over its changed
    intervals. ``h'`` falls with ``s`` (φ falls with u), and φ ∈ (0, 1]
    brackets the root in ``[α/b, (α + N)/b]``: safeguarded Newton, halving
    the bracket whenever a step would leave it.
    """
    lo = np.log(alpha / b)
    hi = np.log((alpha + n_changed) / b)
    s = 0.5 * (lo + hi)
    h2 = -alpha
    for _ in range(_MAX_NEWTON):
        lam = np.exp(s)
        sphi, sdphi = sums(lam)
        hp = alpha + sphi - b * lam
        h2 = sdphi - b * lam
        new = bracketed_newton_step(s, hp, h2, lo, hi)
        done = bool(np.all(np.abs(new - s) <= _TOL * np.maximum(1.0, np.abs(s))))
        s = new
        if done:
            break
    lam = np.exp(s)
    _, sdphi = sums(lam)
    h2 = sdphi - b * lam
    return lam, lam / np.sqrt(-h2)


def censored_posterior(
    page: ArrayLike,
    interval_days: ArrayLike,
    changed: ArrayLike,
    n_pages: int,
    alpha: ArrayLike,
    beta: ArrayLike,
    *,
    weights: ArrayLike | None = None,
) -> tuple[FloatArray, FloatArray]:
    """The exact censored estimate of every page from all its intervals (vectorised).

    Parameters
    ----------
    page
        ``(I,)`` page number (0 … n_pages − 1) of each interval.
    interval_days
        ``(I,)`` length of each revisit interval, days (> 0).
    changed
        ``(I,)`` whether the revisit closing it found a change.
    n_pages
        Number of pages.
    alpha, beta
        Gamma prior of each page's rate (shape, pseudo-changes; rate,
        pseudo-days), ``(n_pages,)`` or scalars; both > 0.
    weights
        ``(I,)`` weight of each interval (an evidence decay); 1 if omitted.

    Returns
    -------
    rate_per_day, sd_per_day : ndarray
        The posterior mode of ``ln λ`` (changes per day) and the Laplace
        standard deviation of λ.

    Examples
    --------
    A page visited after 1 day or 30 days that changed every time: each
    1-day change says more than thirty 30-day ones.

    >>> rate, sd = censored_posterior([0, 0, 0, 0], [1, 30, 1, 30], [1, 1, 1, 1], 1, 1.0, 1.0)
    >>> bool(rate[0] > 1.0)
    True
    """
    p = np.asarray(page, dtype=np.intp)
    t = np.asarray(interval_days, dtype=np.float64)
    ch = np.asarray(changed, dtype=bool)
    w = np.ones_like(t) if weights is None else np.asarray(weights, dtype=np.float64)
    a = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (n_pages,))
    bt = np.broadcast_to(np.asarray(beta, dtype=np.float64), (n_pages,))
    tu = np.bincount(p[~ch], weights=(w * t)[~ch], minlength=n_pages).astype(np.float64)
    pc, tc, wc = p[ch], t[ch], w[ch]
    n_changed = np.bincount(pc, weights=wc, minlength=n_pages).astype(np.float64)

    def sums(lam: FloatArray) -> tuple[FloatArray, FloatArray]:
        phi, dphi = _phi(lam[pc] * tc)
        return (
            np.bincount(pc, weights=wc * phi, minlength=n_pages).astype(np.float64),
            np.bincount(pc, weights=wc * dphi, minlength=n_pages).astype(np.float64),
        )

    return _solve(a.copy(), bt + tu, n_changed, sums)


def censored_posterior_scalar(
    interval_days: Sequence[float],
    changed: Sequence[bool],
    alpha: float,
    beta: float,
) -> tuple[float, float]:
    """One page's :func:`censored_posterior`, the reference: plain floats, bisection.

    >>> rate, sd = censored_posterior_scalar([1.0, 30.0], [True, False], 1.0, 1.0)
    >>> round(rate, 4), round(sd, 4)
    (0.0635, 0.0449)
    """
    tu = sum(t for t, c in zip(interval_days, changed, strict=True) if not c)
    ts = [t for t, c in zip(interval_days, changed, strict=True) if c]
    b = beta + tu

    def phi(u: float) -> float:
        return 1.0 - 0.5 * u if u <= 1e-12 else (0.0 if u > 700 else u / math.expm1(u))

    def slope(s: float) -> float:
        lam = math.exp(s)
        return alpha + sum(phi(lam * t) for t in ts) - b * lam

    lo, hi = math.log(alpha / b), math.log((alpha + len(ts)) / b)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if slope(mid) > 0:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-14 * max(1.0, abs(mid)):
            break
    lam = math.exp(0.5 * (lo + hi))
    curv = -b * lam
    for t in ts:
        f = phi(lam * t)
        curv += f * (1.0 - f - lam * t)
    return lam, lam / math.sqrt(-curv)


@dataclass(frozen=True)
class CensoredEvidence:
    """Each page's revisit evidence, binned so the censored likelihood stays exact-ish.

    Attributes
    ----------
    n
        ``(P, BINS)`` decayed count of changed intervals per length bin.
    t
        ``(P, BINS)`` decayed sum of their lengths, days.
    nu
        ``(P,)`` decayed count of unchanged intervals.
    tu
        ``(P,)`` decayed sum of their lengths, days.

    All float32: ``(2 × 6 + 2) × 4 = 56`` bytes a page (:attr:`bytes_per_page`).
    """

    n: NDArray[np.float32]
    t: NDArray[np.float32]
    nu: NDArray[np.float32]
    tu: NDArray[np.float32]

    @classmethod
    def zeros(cls, pages: int) -> CensoredEvidence:
        """No evidence for ``pages`` pages."""
        z = np.zeros((pages, BINS), np.float32)
        return cls(z, z.copy(), np.zeros(pages, np.float32), np.zeros(pages, np.float32))

    @property
    def bytes_per_page(self) -> int:
        """Bytes of state one page takes."""
        return int(self.n.itemsize * BINS * 2 + self.nu.itemsize + self.tu.itemsize)

    def collapsed(self) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """Today's four numbers ``(nc, tc, nu, tu)`` (float64), for
        :func:`~recrawl.estimate.rates.fit_group_priors` and the old estimator."""
        return (
            self.n.sum(axis=1, dtype=np.float64),
            self.t.sum(axis=1, dtype=np.float64),
            self.nu.astype(np.float64),
            self.tu.astype(np.float64),
        )


def update_censored(
    ev: CensoredEvidence,
    index: ArrayLike,
    interval_days: ArrayLike,
    changed: ArrayLike,
    *,
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS,
) -> CensoredEvidence:
    """Fold one revisit into each of the pages ``index`` (none repeated); new arrays.

    The evidence of each page revisited is first multiplied by
    ``2^(−t / half_life_days)`` (as :func:`~recrawl.estimate.rates.update_evidence`
    does), then the interval of ``t`` days is added to its length bin if it
    showed a change, to ``nu``/``tu`` if not.

    >>> ev = update_censored(CensoredEvidence.zeros(2), [1, 0], [1.0, 30.0], [True, False])
    >>> ev.n[1].tolist(), ev.tu.tolist()
    ([0.0, 0.0, 1.0, 0.0, 0.0, 0.0], [30.0, 0.0])
    """
    idx = np.asarray(index, dtype=np.intp).ravel()
    if np.unique(idx).size != idx.size:
        raise ValueError("index repeats a page: fold one revisit per page per call, in time order")
    t = np.broadcast_to(np.asarray(interval_days, dtype=np.float64), idx.shape)
    if not np.all((t > 0) & (t < np.inf)):
        raise ValueError("interval_days must be positive and finite")
    ch = np.broadcast_to(np.asarray(changed, dtype=bool), idx.shape)
    d = np.ones_like(t) if not math.isfinite(half_life_days) else np.exp2(-t / half_life_days)
    n, tt, nu, tu = ev.n.copy(), ev.t.copy(), ev.nu.copy(), ev.tu.copy()
    n[idx] *= d[:, None].astype(np.float32)
    tt[idx] *= d[:, None].astype(np.float32)
    nu[idx] *= d.astype(np.float32)
    tu[idx] *= d.astype(np.float32)
    k = length_bin(t)
    c = idx[ch]
    n[c, k[ch]] += 1.0
    tt[c, k[ch]] += t[ch].astype(np.float32)
    u = idx[~ch]
    nu[u] += 1.0
    tu[u] += t[~ch].astype(np.float32)
    return CensoredEvidence(n, tt, nu, tu)


def fit_censored_priors(
    ev: CensoredEvidence,
    groups: ArrayLike | None = None,
    n_groups: int | None = None,
    *,
    pseudo_pages: float = 5.0,
    min_alpha: float = 0.1,
    max_alpha: float = 20.0,
    iterations: int = 20,
    sample_pages: int = 100_000,
) -> GroupPriors:
    """The Gamma prior of each group fitted by EM under the binned censored likelihood.

    Starts from :func:`~recrawl.estimate.rates.fit_group_priors` on the
    collapsed evidence (whose mean-length reading is biased low for mixed
    revisits) and then alternates :func:`estimate_censored` (E: each page's
    posterior) and :func:`~recrawl.estimate.rates.gamma_priors_from_posteriors`
    (M), on every ``P // sample_pages``-th page at most, so the cost does not
    grow with the crawl (a group no sampled page belongs to gets the
    population's prior).
    """
    pages = ev.n.shape[0]
    g = np.zeros(pages, np.intp) if groups is None else np.asarray(groups, np.intp)
    ng = int(g.max()) + 1 if n_groups is None and pages else (n_groups or 1)
    step = max(1, pages // max(1, sample_pages))
    sub = CensoredEvidence(ev.n[::step], ev.t[::step], ev.nu[::step], ev.tu[::step])
    gs = g[::step]
    priors = fit_group_priors(*sub.collapsed(), gs, n_groups=ng)
    for _ in range(iterations):
        rate, sd = estimate_censored(sub, gs, priors=priors)
        priors = gamma_priors_from_posteriors(
            rate, sd, gs, ng, pseudo_pages=pseudo_pages, min_alpha=min_alpha,
            max_alpha=max_alpha,
        )  # fmt: skip
    return priors


def estimate_censored(
    ev: CensoredEvidence,
    groups: ArrayLike | None = None,
    *,
    priors: GroupPriors | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Every page's rate (per day) and its sd from the binned censored likelihood.

    Each bin's changed intervals are read at the bin's mean length; the prior
    is each page's group's (fitted by :func:`fit_censored_priors` when not
    given).

    >>> ev = CensoredEvidence.zeros(1)
    >>> for k in range(30):
    ...     ev = update_censored(ev, [0], [1.0 if k % 2 else 30.0], [True], half_life_days=math.inf)
    >>> rate, _ = estimate_censored(ev, priors=GroupPriors(np.array([1.0]), np.array([1.0])))
    >>> bool(rate[0] > 1.0)
    True
    """
    g = np.zeros(ev.n.shape[0], np.intp) if groups is None else np.asarray(groups, np.intp)
    if priors is None:
        priors = fit_censored_priors(ev, g)
    pages = ev.n.shape[0]
    rate, sd = np.empty(pages), np.empty(pages)
    for lo in range(0, pages, _CHUNK):  # chunks keep the temporaries small at 10 M pages
        sl = slice(lo, min(pages, lo + _CHUNK))
        n = ev.n[sl].astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            tau = np.where(n > 0, ev.t[sl].astype(np.float64) / n, 0.0)

        def sums(
            lam: FloatArray, n: FloatArray = n, tau: FloatArray = tau
        ) -> tuple[FloatArray, FloatArray]:
            phi, dphi = _phi(lam[:, None] * tau)
            return (n * phi).sum(axis=1), (n * dphi).sum(axis=1)

        alpha = priors.alpha[g[sl]].astype(np.float64)
        b = priors.beta[g[sl]] + ev.tu[sl].astype(np.float64)
        rate[sl], sd[sl] = _solve(alpha, b, n.sum(axis=1), sums)
    return rate, sd

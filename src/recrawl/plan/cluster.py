"""Planning over partitions: the planner's answers for page sets no one machine holds.

The allocation of :func:`recrawl.plan.planner.reallocate` is separable: given
the budget's Lagrange multiplier μ, each page's visits are its own, so only μ
is global. Here the pages live in partitions (by a hash of the site, so a
site's and a host's pages, and their per-host caps, stay in one partition);
each step runs on every partition and returns a few numbers, and the driver
combines them:

* **estimates**: every partition estimates its pages' rates from the group
  priors (fitted once on a sample of the evidence gathered from the
  partitions, :func:`fit_priors`);
* **the multiplier**: each partition returns its spend for a vector of
  candidate ``ln μ`` (first from a fine log-histogram of its pages, then
  exactly, with the slope), so a few rounds find the root; pages under
  complete observation (:mod:`recrawl.plan.notified`) add a step to each
  partition's spend (an announced change is followed where its return is at
  least μ), the bracket closes on the step the budget falls in and its pages
  get the share of their changes the budget leaves, as on one machine; the final
  corrections of :func:`~recrawl.plan.freshness.optimal_allocation` (pages on
  the cut-off, the last Newton step, the exact rescale) and the learning and
  close-revisit floors are sums over partitions too;
* **the cycle**: each reserve and the score pool take the best candidates in a
  global order (``first_seen``, ``last_fetch``, or the priority, ties by page
  id) until their budget is spent; the cut-off is found by a search on the
  order's key, each partition returning the cost of its candidates before a
  vector of candidate thresholds, and the few pages around it are gathered.

The driver's random draws (the verification sample, a reserve's round-up) are
those :func:`~recrawl.plan.planner.plan_cycle` makes, in the same order, so
with page ids equal to the one-machine page numbers the same ``rng`` gives the
same plan (up to ties in priority and the order of float sums).

Limits: pages whose order keys tie exactly at a cut-off are gathered to
the driver together (a cold start whose new pages share one ``first_seen``
sends all of them); a host must belong to one site.

Pure: no I/O and no clock. Partitions run through a :class:`PartitionRunner`;
:class:`LocalRunner` runs them in this process (the reference and the tests),
:mod:`recrawl.plan.dask` on a Dask cluster over partitioned Parquet. Only the
``recrawl`` policy is planned here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from recrawl._exceptions import ConfigError
from recrawl.estimate.rates import GroupPriors, estimate_rates, fit_group_priors
from recrawl.plan.freshness import Objective, freshness_gain, inverse_marginal, marginal
from recrawl.plan.planner import (
    LAST_RESORT,
    PROBE_GAP,
    REASONS,
    STALE_FIRST,
    Plan,
    PlannerConfig,
    PlanPages,
    joined_at,
    policy_rule,
)

__all__ = [
    "SUPPORTED_POLICIES",
    "ClusterModel",
    "ClusterPlan",
    "LocalRunner",
    "Partition",
    "PartitionRunner",
    "cluster_plan_cycle",
    "cluster_reallocate",
    "fit_priors",
    "partition_of_sites",
    "split_pages",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
T = TypeVar("T")

DAY_S = 86_400.0
SUPPORTED_POLICIES: tuple[str, ...] = ("recrawl",)
"""The policies planned over partitions."""
SCORE, DISCOVERY, REESTIMATE, VERIFY = (REASONS.index(r) for r in REASONS)
_GATHER = 20_000  # pages around a cut-off gathered to the driver at most
_CANDIDATES = 64  # thresholds per round of a search (and multipliers per coarse round)


# -- partitions -----------------------------------------------------------------------


def partition_of_sites(site: NDArray[np.integer[Any]], n_partitions: int) -> IntArray:
    """The partition of each site code: a fixed 64-bit mix of the code, modulo
    ``n_partitions`` (the same on every machine and every run).

    >>> p = partition_of_sites(np.arange(1000), 8)
    >>> int(p.min()), int(p.max()), bool(p[7] == partition_of_sites(np.array([7]), 8)[0])
    (0, 7, True)
    """
    if n_partitions < 1:
        raise ValueError(f"n_partitions must be ≥ 1, got {n_partitions}")
    x = np.asarray(site).astype(np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return (x % np.uint64(n_partitions)).astype(np.int64)


@dataclass
class Partition:
    """The pages of one partition and what the planner keeps about them.

    Attributes
    ----------
    pages : PlanPages
        The partition's pages; site, host and group codes are global (the
        site arrays hold every site).
    page_id : ndarray of int
        Each page's global id, ascending (the one-machine page number when
        the partitions were split from one :class:`PlanPages`).
    rate_per_day, rate_sd_per_day, visits_per_day : ndarray of float, optional
        The partition's part of the model, set by :func:`cluster_reallocate`.
    notified : ndarray of bool, optional
        The live pages under complete observation
        (:attr:`~recrawl.plan.planner.Model.notified`), set by
        :func:`cluster_reallocate` where the pages have any.
    """

    pages: PlanPages
    page_id: IntArray
    rate_per_day: FloatArray | None = None
    rate_sd_per_day: FloatArray | None = None
    visits_per_day: FloatArray | None = None
    notified: BoolArray | None = None
    host_code: IntArray | None = field(default=None, repr=False)
    n_hosts: int = field(default=0, repr=False)
    scratch: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.page_id.shape != (len(self.pages),):
            raise ValueError("page_id must hold one id per page")
        if self.page_id.size > 1 and not bool(np.all(np.diff(self.page_id) > 0)):
            raise ValueError("page_id must be strictly ascending")

    def __len__(self) -> int:
        return len(self.pages)


def _subset(pages: PlanPages, idx: IntArray) -> PlanPages:
    def opt(a: NDArray[Any] | None) -> Any:
        return None if a is None else a[idx]

    return PlanPages(
        value=pages.value[idx],
        cost=pages.cost[idx],
        site=pages.site[idx],
        host=pages.host[idx],
        group=pages.group[idx],
        last_fetch=pages.last_fetch[idx],
        first_seen=pages.first_seen[idx],
        never_fetched=pages.never_fetched[idx],
        ev_nc=pages.ev_nc[idx],
        ev_tc=pages.ev_tc[idx],
        ev_nu=pages.ev_nu[idx],
        ev_tu=pages.ev_tu[idx],
        nutch_interval=pages.nutch_interval[idx],
        site_cost_multiplier=pages.site_cost_multiplier,
        site_paused=pages.site_paused,
        active=pages.active[idx],
        checked_at=opt(pages.checked_at),
        known_stale=opt(pages.known_stale),
        notified=opt(pages.notified),
        ev_bins=opt(pages.ev_bins),
    )


def split_pages(
    pages: PlanPages, n_partitions: int, page_ids: IntArray | None = None
) -> list[Partition]:
    """Split one :class:`PlanPages` into partitions by a hash of the site.

    ``page_ids`` default to the page numbers. Every host must belong to one
    site (its pages then share a partition, and so does its per-host cap):
    a host seen on pages of two partitions raises ValueError.
    """
    ids = np.arange(len(pages), dtype=np.int64) if page_ids is None else np.asarray(page_ids)
    part = partition_of_sites(pages.site, n_partitions)
    hp = np.unique(np.stack([pages.host.astype(np.int64), part]), axis=1)
    if hp.shape[1] and np.unique(hp[0]).size != hp.shape[1]:
        raise ValueError("a host has pages in two partitions: each host must belong to one site")
    out = []
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(n_partitions + 1))
    for p in range(n_partitions):
        idx = order[bounds[p] : bounds[p + 1]]
        idx = idx[np.argsort(ids[idx], kind="stable")]
        out.append(Partition(_subset(pages, idx), ids[idx].astype(np.int64)))
    return out


class PartitionRunner(Protocol):
    """Where the partitions live: runs one step on every partition.

    ``run(step, arg)`` calls ``step(partition, arg)`` for every partition,
    each returning ``(partition, result)``; the returned partition replaces
    the old one (it may be the same object, changed), and the results come
    back in partition order. ``arg`` is the same for every partition.
    """

    def run(self, step: Callable[[Partition, Any], tuple[Partition, T]], arg: Any) -> list[T]: ...


class LocalRunner:
    """A :class:`PartitionRunner` holding its partitions in this process."""

    def __init__(self, partitions: Sequence[Partition]) -> None:
        self.partitions = list(partitions)

    def run(self, step: Callable[[Partition, Any], tuple[Partition, T]], arg: Any) -> list[T]:
        out: list[T] = []
        for i, p in enumerate(self.partitions):
            self.partitions[i], r = step(p, arg)
            out.append(r)
        return out


# -- priors and estimates -------------------------------------------------------------


def _has_evidence(pages: PlanPages) -> BoolArray:
    e = pages.ev_tc + pages.ev_tu
    ok: BoolArray = (~pages.never_fetched) & (e > 0) & np.isfinite(e)
    return ok


def _s_group_sizes(part: Partition, _: Any) -> tuple[Partition, tuple[IntArray, IntArray, int]]:
    g, k = np.unique(part.pages.group[_has_evidence(part.pages)], return_counts=True)
    top = int(part.pages.group.max(initial=-1))
    return part, (g.astype(np.int64), k.astype(np.int64), top)


def _mix_unit(ids: IntArray) -> FloatArray:
    """A fixed pseudo-random number in [0, 1) per page id."""
    x = ids.astype(np.uint64)
    with np.errstate(over="ignore"):
        x *= np.uint64(0x9E3779B97F4A7C15)
    x >>= np.uint64(11)
    return x.astype(np.float64) * 2.0**-53


def _s_sample(part: Partition, keep: FloatArray) -> tuple[Partition, tuple[FloatArray, ...]]:
    pages = part.pages
    ok = _has_evidence(pages)
    if keep.size:  # thinned: about min(size, c) pages of each group
        ok &= _mix_unit(part.page_id) < keep[pages.group]
    i = np.flatnonzero(ok)
    bins = () if pages.ev_bins is None else tuple(pages.ev_bins[i].T.astype(np.float64))
    return part, (
        part.page_id[i].astype(np.float64),
        pages.ev_nc[i],
        pages.ev_tc[i],
        pages.ev_nu[i],
        pages.ev_tu[i],
        pages.group[i].astype(np.float64),
        *bins,
    )


def _cap(sizes: FloatArray, total: int) -> float:
    """The ``c`` with ``Σ min(size, c) = total``: small groups kept whole."""
    ks = np.sort(sizes[sizes > 0])
    if ks.sum() <= total:
        return math.inf
    before = np.r_[0.0, np.cumsum(ks)[:-1]]
    left = ks.size - np.arange(ks.size)
    j = int(np.searchsorted(before + ks * left, total, side="right"))
    return float((total - before[j]) / left[j]) if j < ks.size else float(ks[-1])


def fit_priors(runner: PartitionRunner, *, sample_pages: int = 100_000) -> GroupPriors:
    """The group priors, fitted with :func:`~recrawl.estimate.rates.fit_group_priors`
    on the evidence gathered from the partitions.

    When at most ``sample_pages`` fetched pages have evidence, all of it is
    gathered (in page-id order) and the priors are those of
    :func:`recrawl.plan.planner.group_priors` on the same pages. Beyond, each
    group sends about ``min(size, c)`` of its pages (``c`` chosen so the
    sample holds about ``sample_pages``, small groups whole, the same rule as
    the one-machine fit), so the driver never holds more than the sample; the
    fit then weighs each group by its sampled pages, not its full size, and
    can differ a little from the one-machine fit.
    """
    parts = runner.run(_s_group_sizes, None)
    n_groups = max(max((p[2] for p in parts), default=-1) + 1, 1)
    sizes = np.zeros(n_groups)
    for g, k, _ in parts:
        np.add.at(sizes, g, k)
    c = _cap(sizes, sample_pages)
    keep = np.zeros(0) if math.isinf(c) else c / np.maximum(sizes, 1.0)
    rows = runner.run(_s_sample, keep)
    width = min((len(r) for r in rows), default=6)  # 6, or 18 with the length bins
    cols = [np.concatenate([r[i] for r in rows]) for i in range(width)]
    order = np.argsort(cols[0], kind="stable")
    nc, tc, nu, tu, g = (cols[i][order] for i in range(1, 6))
    bins = np.stack([c[order] for c in cols[6:]], axis=1) if width > 6 else None
    return fit_group_priors(
        nc, tc, nu, tu, g.astype(np.int64), n_groups=n_groups, sample_pages=max(nc.size, 1),
        bins=bins,
    )  # fmt: skip


def _eff_cost(pages: PlanPages) -> FloatArray:
    if np.all(pages.site_cost_multiplier == 1.0):
        return pages.cost
    c: FloatArray = pages.cost * pages.site_cost_multiplier[pages.site]
    return c


# -- the allocation -------------------------------------------------------------------


@dataclass(frozen=True)
class _Realloc:
    now: float
    budget_per_day: float
    objective: str
    config: PlannerConfig
    priors: GroupPriors


def _s_estimate(part: Partition, a: _Realloc) -> tuple[Partition, tuple[float, ...]]:
    """Rates, the live pages, and the pages' ``a = cλ/w``, ``b = cλ`` (see
    :mod:`recrawl.plan.freshness`) with a local log-histogram of ``a``."""
    pages = part.pages
    fetched = ~pages.never_fetched
    elapsed = np.subtract(a.now, pages.last_fetch, dtype=np.float64) * (1.0 / DAY_S)
    elapsed[~fetched] = 0.0
    rate, sd = estimate_rates(
        pages.ev_nc,
        pages.ev_tc,
        pages.ev_nu,
        pages.ev_tu,
        pages.group,
        priors=a.priors,
        elapsed_days=elapsed,
        half_life_days=a.config.half_life_days,
        bins=pages.ev_bins,
        hazard_per_day=a.config.change_hazard_per_day,
    )
    part.rate_per_day, part.rate_sd_per_day = rate, sd
    eff = _eff_cost(pages)
    live = pages.active & fetched
    if np.any(pages.site_paused):
        live &= ~pages.site_paused[pages.site]
    cand = live & (rate > 0) & (pages.value > 0)
    nt = pages.notified
    told = np.zeros(0, dtype=np.int64)
    if nt is not None and np.any(nt & live):
        # under complete observation (recrawl.plan.notified): followed while
        # the return w / (λc) (events: w / c) is at least the multiplier, for
        # b = cλ a day; the others as usual
        told = np.flatnonzero(cand & nt)
        cand &= ~nt
    useful = np.flatnonzero(cand)

    def a_b(idx: IntArray) -> tuple[FloatArray, FloatArray]:
        """``a = cλ/w`` (events: ``c/w``) and ``b = cλ`` of the pages ``idx``."""
        c, w = eff[idx], pages.value[idx]
        b = c * rate[idx]
        return (b if a.objective == "freshness" else c) / w, b

    av, b = a_b(useful)
    lam, c = rate[useful], eff[useful]
    log_a = np.log(av)
    t_a, t_b = a_b(told)
    t_log = np.log(t_a)
    t_order = np.argsort(t_log, kind="stable")
    lo = float(min(log_a.min(initial=np.inf), t_log.min(initial=np.inf)))
    hi = float(max(log_a.max(initial=-np.inf), t_log.max(initial=-np.inf)))
    if useful.size:
        nb = int(min(max((hi - lo) / 2e-3, 1), 5_000))
        hist, edges = np.histogram(log_a, bins=nb, range=(lo, hi + 1e-9), weights=b)
        keep = hist > 0
        centres = np.exp(0.5 * (edges[:-1] + edges[1:]))[keep]
        hist = hist[keep]
    else:
        centres = hist = np.zeros(0)
    part.scratch = {
        "live": live,
        "useful": useful,
        "a": av,
        "b": b,
        "c": c,
        "lam": lam,
        "hist": (centres, hist),
        "eff": eff,
        "told": told,
        "told_log_a": t_log[t_order],  # ascending, with the running spend
        "told_cum": np.concatenate([[0.0], np.cumsum(t_b[t_order])]),
        "told_log_a_page": t_log,
        "told_b": t_b,
    }
    total_cost = float(np.sum(eff, where=live))
    start = float(np.sum(b / np.sqrt(2.0 * av)))
    n_cand = float(useful.size + told.size)
    return part, (lo, hi, start, n_cand, total_cost, float(np.count_nonzero(live)), told.size)


def _spend(a: FloatArray, b: FloatArray, log_mu: FloatArray, slope: bool) -> FloatArray:
    """Spend ``Σ b / r`` (and its derivative in ``ln μ``) at each candidate ``ln μ``."""
    out = np.zeros((2, log_mu.size))
    if not slope and a.size * log_mu.size <= 1 << 21:  # a histogram: every candidate at once
        r = inverse_marginal(np.exp(log_mu)[:, None] * a[None, :], polish=True)
        with np.errstate(divide="ignore"):
            q = np.where(np.isfinite(r) & (r > 0), b[None, :] / r, 0.0)
        out[0] = q.sum(axis=1)
        return out
    for j, m in enumerate(log_mu.tolist()):
        r = inverse_marginal(math.exp(m) * a, polish=True)
        ok = np.isfinite(r) & (r > 0)
        ro, bo = r[ok], b[ok]
        out[0, j] = float(np.sum(bo / ro))
        if slope:
            out[1, j] = -float(np.sum(bo * marginal(ro) * np.exp(ro) / ro**3))
    return out


def _told_spend(log_a: FloatArray, cum: FloatArray, log_mu: FloatArray) -> FloatArray:
    """What following the notified pages costs at each ``ln μ``: the ``b`` of
    those with ``μ a ≤ 1`` (``log_a`` ascending, ``cum`` its running ``Σ b``)."""
    out: FloatArray = cum[np.searchsorted(log_a, -log_mu, side="right")]
    return out


def _s_spend(part: Partition, q: tuple[FloatArray, bool]) -> tuple[Partition, FloatArray]:
    log_mu, exact = q
    s = part.scratch
    if exact:
        out = _spend(s["a"], s["b"], log_mu, True)
    else:
        centres, hist = s["hist"]
        out = _spend(centres, hist, log_mu, False)
    if s["told"].size:  # a step in μ: no slope
        out[0] += _told_spend(s["told_log_a"], s["told_cum"], log_mu)
    return part, out


def _solve_multiplier(
    runner: PartitionRunner, stats: list[tuple[float, ...]], budget: float, steps: bool = False
) -> tuple[float, float, float]:
    """``ln μ`` at which the partitions together spend ``budget`` a day, and
    the bracket ``(lo, hi)`` it was found in (both ``ln μ`` when the spend met
    the budget). With ``steps`` (notified pages: the spend jumps where one is
    followed or not) the budget may fall in a jump: the bracket then closes
    on it, by bisection where Newton's steps do not halve it."""
    lo_a = min(s[0] for s in stats)
    hi_a = max(s[1] for s in stats)
    lo, hi = -hi_a - 90.0, -lo_a  # a huge spend … nothing visited
    target = math.log(budget)
    # coarse rounds on the partitions' histograms: a vector of candidates each
    for _ in range(4):
        cand = np.linspace(lo, hi, _CANDIDATES)
        spend = np.sum([r[0] for r in runner.run(_s_spend, (cand, False))], axis=0)
        above = np.flatnonzero(spend > budget)
        if not above.size:
            break
        j = int(above[-1])
        lo, hi = float(cand[j]), float(cand[min(j + 1, cand.size - 1)])
        if hi - lo < 2e-4:
            break
    # exact rounds: safeguarded Newton on the pages themselves, from the
    # histograms' root, within the whole bracket (the histograms can be off)
    m = 0.5 * (lo + hi)
    lo, hi = -hi_a - 90.0, -lo_a
    width = [hi - lo] * 2  # the bracket's width two steps back
    for k in range(60 if not steps else 100):
        got = np.sum(runner.run(_s_spend, (np.array([m]), True)), axis=0)
        spend, slope = float(got[0][0]), float(got[1][0])
        if spend <= 0:
            hi = m
            m = 0.5 * (lo + hi)
            continue
        err = math.log(spend) - target
        if abs(err) < 1e-10:
            return m, m, m
        if hi - lo < 1e-12:
            break
        if err > 0:
            lo = m
        else:
            hi = m
        dlog = slope / spend
        step = m - err / dlog if dlog < 0 else 0.5 * (lo + hi)
        if steps and hi - lo > 0.5 * width[k % 2]:
            step = 0.5 * (lo + hi)  # Newton does not close on a jump: bisect
        width[k % 2] = hi - lo
        m = step if lo < step < hi else 0.5 * (lo + hi)
    return m, lo, hi


def _s_visits(
    part: Partition, q: tuple[float, float, float]
) -> tuple[Partition, tuple[float, ...]]:
    """Visits at ``ln μ``; the sums the final corrections need; what the
    notified pages surely followed cost, and those on the jump the budget fell in."""
    log_mu, lo, hi = q
    s = part.scratch
    av, b, c, lam = s["a"], s["b"], s["c"], s["lam"]
    x = math.exp(log_mu) * av
    r = inverse_marginal(x, polish=True)
    edge = np.flatnonzero(np.abs(x - 1.0) < 1e-9)
    r[edge] = np.inf
    steep = np.flatnonzero(r > 2.0)
    r_steep = r[steep]
    with np.errstate(divide="ignore"):
        f = np.divide(lam, r)
    finite = np.isfinite(r_steep)
    steep, r_steep = steep[finite], r_steep[finite]
    sens = marginal(r_steep) * np.exp(r_steep) / (r_steep * r_steep)
    cf = c[steep] * f[steep]
    s.update(f=f, edge=edge, steep=steep, sens=sens)
    t_log = s["told_log_a_page"]
    sure = t_log <= -hi  # followed at every μ of the bracket
    jump = ~sure & (t_log <= -lo)
    told_b = s["told_b"]
    s.update(told_sure=sure, told_jump=jump)
    return part, (
        float(np.dot(c, f)),
        float(np.sum(b[edge])),
        float(edge.size),
        float(np.dot(cf, sens)),
        float(cf.sum()),
        float(np.sum(told_b, where=sure)),
        float(np.sum(told_b, where=jump)),
    )


def _s_correct(part: Partition, q: tuple[str, float]) -> tuple[Partition, float]:
    mode, t = q
    s = part.scratch
    f, c = s["f"], s["c"]
    if mode == "edge":
        e = s["edge"]
        f[e] = t * s["b"][e] / c[e]
    elif mode == "newton":
        f *= 1.0 + 0.75 * t
        st = s["steep"]
        f[st] *= np.maximum(1.0 + s["sens"] * t, 0.0) / (1.0 + 0.75 * t)
    return part, float(np.dot(c, f))


@dataclass(frozen=True)
class _Floors:
    scale: float
    now: float
    config: PlannerConfig
    learn_floor: float  # visits per day (0: none)
    probe: bool
    jump_share: float = 0.0  # notified pages on the budget's jump: the share of changes followed
    allocated: bool = True  # False: no budget or no live page, no allocation (nor notified pages)


def _s_floors(part: Partition, q: _Floors) -> tuple[Partition, tuple[float, float]]:
    """The visits, rescaled; counts of the pages the learning floor and the
    close revisits would raise (applied once the driver knows they are a minority)."""
    s = part.scratch
    pages, cfg = part.pages, q.config
    visits = np.zeros(len(pages))
    if "f" in s:
        visits[s["useful"]] = s["f"] * q.scale
    live = s["live"]
    part.notified = None
    if q.allocated and pages.notified is not None and np.any(pages.notified & live):
        part.notified = pages.notified & live
        if "told_sure" in s:
            told, lam = s["told"], part.rate_per_day
            assert lam is not None
            share = np.where(s["told_sure"], 1.0, np.where(s["told_jump"], q.jump_share, 0.0))
            visits[told] = share * lam[told]
    part.visits_per_day = visits
    base = live & (pages.value > 0)
    n_learn = n_probe = 0.0
    if q.learn_floor > 0:
        since = q.now - cfg.learning_revisits / q.learn_floor * DAY_S
        learn = (pages.ev_nc + pages.ev_nu) < cfg.learning_revisits
        learn &= joined_at(pages, slice(None), cfg.half_life_days) > since
        learn &= base
        s["learn"] = learn
        n_learn = float(np.count_nonzero(learn))
    if q.probe:
        probe = pages.ev_nu < 0.5
        probe &= pages.ev_nc < cfg.probe_revisits - 0.5
        probe &= pages.first_seen > q.now - cfg.probe_window_days * DAY_S
        probe &= base
        s["probe"] = probe
        n_probe = float(np.count_nonzero(probe))
    return part, (n_learn, n_probe)


def _s_apply_floors(part: Partition, q: tuple[float, float]) -> tuple[Partition, None]:
    learn_floor, probe_floor = q
    s, v = part.scratch, part.visits_per_day
    assert v is not None
    if learn_floor > 0:
        np.maximum(v, learn_floor, out=v, where=s["learn"])
    if probe_floor > 0:
        probe = s["probe"] & (v < probe_floor / PROBE_GAP)
        np.maximum(v, probe_floor, out=v, where=probe)
    part.scratch = {}
    return part, None


@dataclass(frozen=True)
class ClusterModel:
    """What :func:`cluster_reallocate` solved (the per-page model stays in the partitions).

    Attributes
    ----------
    log_multiplier : float
        ``ln μ`` of the allocation (NaN: nothing to allocate).
    budget_per_day : float
        Billing units per day the allocation spends.
    objective, policy : str
    priors : GroupPriors
        The priors the rates were estimated with.
    """

    log_multiplier: float
    budget_per_day: float
    objective: str
    policy: str
    priors: GroupPriors


def _check_policy(policy: str) -> None:
    policy_rule(policy)
    if policy not in SUPPORTED_POLICIES:
        raise ConfigError(
            f"policy {policy!r} is not planned over partitions; choose from {', '.join(SUPPORTED_POLICIES)}"
        )


def cluster_reallocate(
    runner: PartitionRunner,
    budget_per_day: float,
    now: float,
    *,
    policy: str = "recrawl",
    objective: Objective = "freshness",
    config: PlannerConfig | None = None,
    priors: GroupPriors | None = None,
) -> ClusterModel:
    """:func:`~recrawl.plan.planner.reallocate` over partitions.

    Every partition gets its pages' rates, their uncertainty and their target
    visits (:attr:`Partition.visits_per_day`), as the one-machine planner
    would give them on the union of the partitions: the same estimates (from
    ``priors``, fitted by :func:`fit_priors` if omitted), the optimal
    allocation at the global multiplier, then the learning floor and the close
    revisits. Each step is a round over the partitions returning a few numbers.
    """
    _check_policy(policy)
    cfg = config or PlannerConfig()
    pri = priors if priors is not None else fit_priors(runner)
    budget = float(budget_per_day)
    stats = runner.run(_s_estimate, _Realloc(now, budget, objective, cfg, pri))
    n_useful = sum(s[3] for s in stats)
    total_cost, n_live = sum(s[4] for s in stats), sum(s[5] for s in stats)
    if n_live == 0 or budget <= 0:
        runner.run(_s_floors, _Floors(0.0, now, cfg, 0.0, False, allocated=False))
        runner.run(_s_apply_floors, (0.0, 0.0))
        return ClusterModel(math.nan, budget, objective, policy, pri)
    log_mu, scale, jump_share = math.nan, 0.0, 0.0
    if n_useful:
        steps = sum(s[6] for s in stats) > 0
        log_mu, lo, hi = _solve_multiplier(runner, stats, budget, steps)
        sums = np.sum(runner.run(_s_visits, (log_mu, lo, hi)), axis=0)
        spent, b_edge, n_edge, cf_sens, cf_steep, told_sure, told_jump = (float(x) for x in sums)
        # the notified pages followed in full, those on the jump the budget
        # fell in with the share it leaves them; the rest gets what is left
        # (recrawl.plan.notified.notified_allocation, at one multiplier)
        if told_jump > 0:
            jump_share = min(max((budget - spent - told_sure) / told_jump, 0.0), 1.0)
        target = max(budget - told_sure - jump_share * told_jump, 0.0)
        left = target - spent
        if left > 0 and n_edge:
            spent = sum(runner.run(_s_correct, ("edge", left / b_edge)))
        elif left != 0 and spent > 0:
            t = left / (cf_sens + 0.75 * (spent - cf_steep))
            spent = sum(runner.run(_s_correct, ("newton", t)))
        scale = target / spent if spent > 0 else 1.0
    learn = cfg.learning_boost > 0 and cfg.learning_revisits > 0 and total_cost > 0
    learn_floor = cfg.learning_boost * budget / total_cost if learn else 0.0
    probe = cfg.probe_days > 0 and cfg.probe_revisits > 0
    floors = _Floors(scale, now, cfg, learn_floor, probe, jump_share)
    counts = np.sum(runner.run(_s_floors, floors), axis=0)
    # the floors serve only while the new pages are a minority of the live pages
    lf = learn_floor if learn and 2 * counts[0] <= n_live else 0.0
    pf = 1.0 / cfg.probe_days if probe and 2 * counts[1] <= n_live else 0.0
    runner.run(_s_apply_floors, (lf, pf))
    return ClusterModel(log_mu, budget, objective, policy, pri)


# -- the cycle ------------------------------------------------------------------------


def _order_key(x: FloatArray) -> NDArray[np.uint64]:
    """Unsigned keys that sort like the floats ``x`` (NaN last)."""
    bits = np.ascontiguousarray(x, dtype=np.float64).view(np.uint64)
    neg = (bits >> np.uint64(63)).astype(bool)
    out: NDArray[np.uint64] = np.where(neg, ~bits, bits | np.uint64(1 << 63))
    return out


@dataclass(frozen=True)
class _Cycle:
    now: float
    config: PlannerConfig
    objective: str


def _s_scan(part: Partition, q: _Cycle) -> tuple[Partition, tuple[float, ...]]:
    pages = part.pages
    eff = _eff_cost(pages)
    f = pages.active & (eff > 0)
    if np.any(pages.site_paused):
        f &= ~pages.site_paused[pages.site]
    known = f & ~pages.never_fetched
    new = np.flatnonzero(f & pages.never_fetched)
    if part.host_code is None:  # once per partition: hosts do not change between cycles
        hosts, code = np.unique(pages.host, return_inverse=True)
        part.host_code, part.n_hosts = code.astype(np.int64), int(hosts.size)
    part.scratch = {
        "eff": eff,
        "known": known,
        "new": new,
        "taken": np.zeros(len(pages), dtype=bool),
        "host_code": part.host_code,
        "host_used": np.zeros(part.n_hosts, dtype=np.int64),
        "chosen": [],
        "cycle": q,
    }
    lo = float(eff[f].min(initial=np.inf))
    return part, (
        float(np.count_nonzero(known)),
        float(new.size),
        lo,
        float(np.sum(eff, where=f)),
        float(part.page_id[-1] + 1) if len(part) else 0.0,
    )


def _rank_within(keys: IntArray) -> IntArray:
    """Rank of each element among the earlier elements with the same key."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    start = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
    first = np.repeat(start, np.diff(np.r_[start, sk.shape[0]]))
    rank = np.empty_like(order)
    rank[order] = np.arange(sk.shape[0]) - first
    return rank


def _capped(part: Partition, ordered: IntArray, cap: int | None) -> IntArray:
    """``ordered`` without taken pages and without those past their host's cap."""
    s = part.scratch
    ordered = ordered[~s["taken"][ordered]]
    if cap is not None and ordered.size:
        hc = s["host_code"][ordered]
        ordered = ordered[_rank_within(hc) + s["host_used"][hc] < cap]
    return ordered


def _priority(part: Partition, q: _Cycle) -> FloatArray:
    """The ``recrawl`` priority (:class:`~recrawl.plan.planner.Overdue`): days
    since the page was last known unchanged × its visits per day; known stale
    first; a notified page not before its source has been silent for one
    mean change interval, its known change last where the allocation does
    not follow it."""
    pages, visits, nt = part.pages, part.visits_per_day, part.notified
    assert visits is not None
    last = (
        pages.last_fetch
        if pages.checked_at is None
        else np.fmax(pages.last_fetch, pages.checked_at)
    )
    p: FloatArray = np.maximum((q.now - last) * (1.0 / DAY_S), 0.0) * visits
    if nt is not None:
        p[nt & (p < 1.0)] = 0.0
    if pages.known_stale is not None:
        p[pages.known_stale & (visits > 0)] += STALE_FIRST
        if nt is not None:
            p[pages.known_stale & nt & (visits == 0)] = LAST_RESORT
    p[~part.scratch["known"]] = 0.0
    return p


@dataclass(frozen=True)
class _Queue:
    """A reserve's or the score pool's candidates, in a global order."""

    name: str  # "discovery", "reestimate" or "score"
    budget: float
    cutoff_s: float = 0.0  # reestimate: fetched at or before this (unix seconds)


def _local_order(part: Partition, q: _Queue) -> tuple[IntArray, NDArray[np.uint64]]:
    """This partition's candidates for ``q``, in order, cut where their own cost
    passes the budget (plus one); and their order keys."""
    s, pages = part.scratch, part.pages
    cfg: PlannerConfig = s["cycle"].config
    eff = s["eff"]
    if q.name == "discovery":
        idx, key = s["new"], pages.first_seen
    elif q.name == "reestimate":
        idx = np.flatnonzero(s["known"] & (pages.last_fetch <= q.cutoff_s))
        key = pages.last_fetch
    else:
        pr = s["priority"]
        idx = np.flatnonzero(pr > 0)
        key = -pr
    ok = _order_key(key[idx])
    bound = q.budget * (1 + 1e-9) + 1e-12
    lo = float(eff[idx].min(initial=np.inf))
    k = int(min(idx.size, bound / max(lo, 1e-300) + 1))
    kk = min(idx.size, k if cfg.max_per_host is None else 4 * k)
    while True:
        if kk < idx.size:
            v = np.partition(ok, kk - 1)[kk - 1]
            sel = np.flatnonzero(ok <= v)
        else:
            sel = np.arange(idx.size)
        sel = sel[np.lexsort((part.page_id[idx[sel]], ok[sel]))]
        cand = _capped(part, idx[sel], cfg.max_per_host)
        cum = np.cumsum(eff[cand])
        if sel.size >= idx.size or (cum.size and cum[-1] > bound):
            break
        kk = min(idx.size, 4 * max(kk, 1))
    n = int(np.searchsorted(cum, bound, side="right")) + 1
    cand = cand[:n]
    return cand, _order_key(key[cand])


def _s_queue(part: Partition, q: _Queue) -> tuple[Partition, tuple[float, float, int, int]]:
    cand, ok = _local_order(part, q)
    cost = part.scratch["eff"][cand]
    part.scratch["queue"] = (cand, ok, np.cumsum(cost), _float_of(ok))
    lo = int(ok[0]) if ok.size else -1
    hi = int(ok[-1]) if ok.size else -1
    return part, (float(cand.size), float(cost.sum()), lo, hi)


def _float_of(ok: NDArray[np.uint64]) -> FloatArray:
    """The floats whose :func:`_order_key` is ``ok``."""
    top = (ok >> np.uint64(63)).astype(bool)
    bits = np.where(top, ok & np.uint64((1 << 63) - 1), ~ok)
    out: FloatArray = bits.view(np.float64)
    return out


def _s_before(part: Partition, t: NDArray[np.uint64]) -> tuple[Partition, FloatArray]:
    """Count and cost of this partition's queue before each threshold key."""
    _, ok, cum, _ = part.scratch["queue"]
    j = np.searchsorted(ok, t, side="left")
    cost = np.where(j > 0, cum[np.maximum(j - 1, 0)] if cum.size else 0.0, 0.0)
    return part, np.stack([j.astype(np.float64), cost])


def _s_between(part: Partition, t: tuple[int, int]) -> tuple[Partition, tuple[Any, ...]]:
    """The queue's pages with keys in ``[t0, t1)``, and its first page from ``t1``."""
    cand, ok, _, _ = part.scratch["queue"]
    i0, i1 = np.searchsorted(ok, np.array(t, dtype=np.uint64), side="left")
    i2 = min(int(i1) + 1, cand.size)
    sl = slice(int(i0), i2)
    eff = part.scratch["eff"]
    return part, (ok[sl], part.page_id[cand[sl]], eff[cand[sl]])


def _s_take(part: Partition, q: tuple[int, int, int, int]) -> tuple[Partition, float]:
    """Take the queue's pages up to the cut-off ``(key, id)`` inclusive, for
    ``reason``, as step ``step`` of the cycle."""
    key, pid, reason, step = q
    cand, ok, _, fkey = part.scratch["queue"]
    ids = part.page_id[cand]
    n = int(np.searchsorted(ok, np.uint64(key), side="left"))
    n += int(np.searchsorted(ids[n:][ok[n:] == np.uint64(key)], pid, side="right"))
    return part, _commit(part, cand[:n], reason, step, fkey[:n])


def _commit(
    part: Partition, chosen: IntArray, reason: int, step: int, order: NDArray[Any]
) -> float:
    s = part.scratch
    s["taken"][chosen] = True
    np.add.at(s["host_used"], s["host_code"][chosen], 1)
    s["chosen"].append((chosen, reason, step, order))
    return float(s["eff"][chosen].sum())


class _Taker:
    """The driver's side of :class:`~recrawl.plan.planner._Selector` over partitions."""

    def __init__(self, runner: PartitionRunner, rng: np.random.Generator, limit: float) -> None:
        self.runner, self.rng, self.limit = runner, rng, limit
        self.used = 0.0
        self.step = 0

    def take(self, q: _Queue, reason: int, *, round_up: bool = False) -> float:
        if q.budget <= 0:
            return 0.0
        stats = self.runner.run(_s_queue, q)
        count = sum(s[0] for s in stats)
        if count == 0:
            return 0.0
        bound = q.budget * (1 + 1e-9) + 1e-12
        total = sum(s[1] for s in stats)
        if total <= bound:  # every candidate fits (and there is no next one)
            return self._commit(2**64 - 1, 2**63 - 1, reason, total)
        lo = min(s[2] for s in stats if s[0])
        hi = max(s[3] for s in stats if s[0]) + 1
        while True:
            # a search on the key: cost before each candidate threshold
            ts = sorted({lo + (hi - lo) * j // _CANDIDATES for j in range(_CANDIDATES + 1)})
            t = np.array(ts, dtype=np.uint64)
            got = np.sum(self.runner.run(_s_before, t), axis=0)
            j = int(np.flatnonzero(got[1] <= bound)[-1])
            j1 = min(j + 1, t.size - 1)
            lo, hi = ts[j], ts[j1]
            base = float(got[1][j])
            if got[0][j1] - got[0][j] <= _GATHER or hi - lo <= 1:
                break
        rows = self.runner.run(_s_between, (lo, hi))
        keys = np.concatenate([r[0] for r in rows])
        ids = np.concatenate([r[1] for r in rows])
        costs = np.concatenate([r[2] for r in rows])
        order = np.lexsort((ids, keys))
        keys, ids, costs = keys[order], ids[order], costs[order]
        cum = base + np.cumsum(costs)
        k = int(np.searchsorted(cum, bound, side="right"))
        used = float(cum[k - 1]) if k else base
        if round_up and k < ids.size:
            nxt = float(costs[k])
            fits = self.used + used + nxt <= self.limit * (1 + 1e-9) + 1e-12
            if fits and self.rng.random() < (q.budget - used) / nxt:
                k += 1
                used += nxt
        if k == 0:
            if base == 0:
                return 0.0
            # everything before the window fits: cut just before it
            return self._commit(int(lo) - 1, 2**63 - 1, reason, used) if lo > 0 else 0.0
        return self._commit(int(keys[k - 1]), int(ids[k - 1]), reason, used)

    def _commit(self, key: int, pid: int, reason: int, used: float) -> float:
        got = sum(self.runner.run(_s_take, (key, pid, reason, self.step)))
        self.step += 1
        self.used += got
        return got

    def take_listed(self, sample: IntArray, budget: float, reason: int) -> float:
        """Take the listed pages in list order (the verification sample), with round-up."""
        if budget <= 0 or sample.size == 0:
            return 0.0
        rows = self.runner.run(_s_listed, sample)
        pos = np.concatenate([r[0] for r in rows])
        costs = np.concatenate([r[1] for r in rows])
        order = np.argsort(pos, kind="stable")
        pos, costs = pos[order], costs[order]
        cum = np.cumsum(costs)
        k = int(np.searchsorted(cum, budget * (1 + 1e-9) + 1e-12, side="right"))
        used = float(cum[k - 1]) if k else 0.0
        if k < pos.size:
            nxt = float(costs[k])
            fits = self.used + used + nxt <= self.limit * (1 + 1e-9) + 1e-12
            if fits and self.rng.random() < (budget - used) / nxt:
                k += 1
        chosen = sample[pos[:k]]
        got = sum(self.runner.run(_s_take_listed, (sample, chosen, reason, self.step)))
        self.step += 1
        self.used += got
        return got


def _locate(part: Partition, ids: IntArray) -> tuple[IntArray, IntArray]:
    """Positions in ``ids`` of this partition's pages, and their local indices."""
    j = np.searchsorted(part.page_id, ids)
    j = np.minimum(j, max(len(part) - 1, 0))
    here = np.flatnonzero(part.page_id[j] == ids) if len(part) else np.zeros(0, dtype=np.int64)
    return here, j[here]


def _s_listed(part: Partition, sample: IntArray) -> tuple[Partition, tuple[IntArray, FloatArray]]:
    s = part.scratch
    cfg: PlannerConfig = s["cycle"].config
    pos, local = _locate(part, sample)
    order = np.argsort(pos, kind="stable")
    pos, local = pos[order], local[order]
    keep = ~s["taken"][local]
    pos, local = pos[keep], local[keep]
    if cfg.max_per_host is not None and local.size:
        hc = s["host_code"][local]
        ok = _rank_within(hc) + s["host_used"][hc] < cfg.max_per_host
        pos, local = pos[ok], local[ok]
    return part, (pos.astype(np.int64), s["eff"][local])


def _s_take_listed(
    part: Partition, q: tuple[IntArray, IntArray, int, int]
) -> tuple[Partition, float]:
    sample, chosen, reason, step = q
    _, local = _locate(part, np.sort(chosen))
    where = {int(v): i for i, v in enumerate(sample.tolist())}
    rank = np.array([where[int(v)] for v in part.page_id[local].tolist()], dtype=np.float64)
    o = np.argsort(rank)
    return part, _commit(part, local[o], reason, step, rank[o])


def _s_known_of(part: Partition, ids: IntArray) -> tuple[Partition, BoolArray]:
    out = np.zeros(ids.size, dtype=bool)
    here, local = _locate(part, ids)
    out[here] = part.scratch["known"][local]
    return part, out


def _s_known_ids(part: Partition, _: Any) -> tuple[Partition, IntArray]:
    return part, part.page_id[part.scratch["known"]]


def _s_priority(part: Partition, _: Any) -> tuple[Partition, None]:
    part.scratch["priority"] = _priority(part, part.scratch["cycle"])
    return part, None


def _s_tasks(part: Partition, _: Any) -> tuple[Partition, tuple[Any, ...]]:
    """The chosen pages: ids, reasons, step order, expected gain, cost,
    priority, rate and its uncertainty."""
    s, pages = part.scratch, part.pages
    q: _Cycle = s["cycle"]
    chosen = s.pop("chosen")
    if not chosen:
        z = np.zeros(0)
        return part, (z.astype(np.int64), z.astype(np.int8), z, z, z, z, z, z, z)
    idx = np.concatenate([c[0] for c in chosen]).astype(np.int64)
    reason = np.concatenate([np.full(c[0].size, c[1], dtype=np.int8) for c in chosen])
    step = np.concatenate([np.full(c[0].size, c[2], dtype=np.float64) for c in chosen])
    within = np.concatenate([np.asarray(c[3], dtype=np.float64) for c in chosen])
    last = pages.last_fetch[idx]
    if pages.checked_at is not None:
        last = np.fmax(last, pages.checked_at[idx])
    since = np.maximum(q.now - last, 0.0) / DAY_S
    unknown = pages.never_fetched[idx]
    if pages.known_stale is not None:
        unknown = unknown | pages.known_stale[idx]
    ds = np.where(unknown, np.inf, since)
    assert part.rate_per_day is not None and part.visits_per_day is not None
    lam = part.rate_per_day[idx]
    if q.objective == "freshness":
        f = part.visits_per_day[idx]
        horizon = np.where(f > 0, 1.0 / np.where(f > 0, f, 1.0), 1.0)
        gain = freshness_gain(lam, ds, horizon)
    else:
        with np.errstate(invalid="ignore"):
            gain = -np.expm1(-lam * ds)
    gain = np.nan_to_num(np.asarray(gain) * pages.value[idx])
    prio = s.get("priority")
    pr = prio[idx] if prio is not None else np.zeros(idx.size)
    part.scratch = {}
    sd = (
        part.rate_sd_per_day[idx] if part.rate_sd_per_day is not None else np.full(idx.size, np.nan)
    )
    return part, (part.page_id[idx], reason, step, within, gain, s["eff"][idx], pr, lam, sd)


@dataclass(frozen=True)
class ClusterPlan(Plan):
    """A :class:`~recrawl.plan.planner.Plan` made over partitions, with each
    task's change-rate estimate (the per-page model stays in the partitions).

    Attributes
    ----------
    rate_per_day, rate_sd_per_day : ndarray of float
        Each task's estimated change rate and its uncertainty, changes per
        day (what :attr:`~recrawl.plan.planner.Model.rate_per_day` holds for
        the page on one machine).
    """

    rate_per_day: FloatArray
    rate_sd_per_day: FloatArray


def cluster_plan_cycle(
    runner: PartitionRunner,
    budget: float,
    now: float,
    *,
    model: ClusterModel,
    config: PlannerConfig | None = None,
    rng: np.random.Generator | None = None,
) -> ClusterPlan:
    """:func:`~recrawl.plan.planner.plan_cycle` over partitions (``recrawl`` policy).

    ``model`` is what :func:`cluster_reallocate` solved for the same
    partitions (pass it the daily budget × :meth:`PlannerConfig.score_pool_share`,
    as the one-machine planner does). The plan's ``index`` holds page ids;
    its tasks come in the one-machine order: discovery, verify, reestimate,
    score, then discovery again with what the score pool left, each in its
    reserve's order.
    """
    _check_policy(model.policy)
    cfg = config or PlannerConfig()
    gen = rng if rng is not None else np.random.default_rng()
    cyc = _Cycle(now, cfg, model.objective)
    scans = runner.run(_s_scan, cyc)
    n_known = int(sum(s[0] for s in scans))
    n_new = int(sum(s[1] for s in scans))
    min_cost = max(min((s[2] for s in scans), default=math.inf), 1e-300)
    n = int(max((s[4] for s in scans), default=0))
    taker = _Taker(runner, gen, budget)
    used = 0.0
    if n_new:
        share = cfg.discovery_share
        if cfg.discover_first:
            kept = (cfg.verify_share + cfg.reestimate_share) if n_known else 0.0
            share = max(share, 1.0 - kept)
        used += taker.take(_Queue("discovery", budget * share), DISCOVERY, round_up=True)
    runner.run(_s_priority, None)
    if n_known:
        vb = budget * cfg.verify_share
        if vb > 0:
            k = int(min(n_known, vb / min_cost + 1))
            if k < n_known // 4:
                draw = gen.integers(0, n, size=8 * k + 16)
                known = np.any(runner.run(_s_known_of, np.sort(np.unique(draw))), axis=0)
                uniq = np.sort(np.unique(draw))
                draw = draw[known[np.searchsorted(uniq, draw)]]
                _, first = np.unique(draw, return_index=True)
                sample = draw[np.sort(first)][:k]
            else:
                ids = np.sort(np.concatenate(runner.run(_s_known_ids, None)))
                sample = gen.permutation(ids)[:k]
            used += taker.take_listed(sample.astype(np.int64), vb, VERIFY)
        rb = budget * cfg.reestimate_share
        if rb > 0:
            cutoff = now - cfg.reestimate_after_days * DAY_S
            used += taker.take(_Queue("reestimate", rb, cutoff), REESTIMATE, round_up=True)
    left = budget - used
    score = 0.0
    if left > 0:
        score = taker.take(_Queue("score", left), SCORE)
    left = budget - used - score
    if n_new and left > 0:
        taker.take(_Queue("discovery", left), DISCOVERY)
    rows = runner.run(_s_tasks, None)
    cols = [np.concatenate([r[i] for r in rows]) for i in range(9)]
    ids, reason, step, within = cols[0], cols[1], cols[2], cols[3]
    # steps run in the same order on every partition: (step, order within it, id)
    order = np.lexsort((ids, within, step))
    return ClusterPlan(
        index=ids[order].astype(np.int64),
        reason=reason[order].astype(np.int8),
        expected_gain=cols[4][order].astype(np.float64),
        cost=cols[5][order].astype(np.float64),
        priority=cols[6][order].astype(np.float64),
        rate_per_day=cols[7][order].astype(np.float64),
        rate_sd_per_day=cols[8][order].astype(np.float64),
    )

"""An upper bound on the freshness of any policy told the pages' rates and their business hours.

Usage::

    python benchmarks/timing_bound.py [--seeds 11 12 13] [--budget 0.02] [--iterations N] [--jobs 2]

The ``business_hours`` traces of ``benchmarks/replay.py`` (300 pages, one
year, generation seeds 11, 12, 13) change only Monday to Friday, 09:00 to
17:00 UTC. The replay's ``oracle`` knows each page's hindsight rate but
spaces its fetches evenly in wall time; a policy that also knew the hours
could fetch just after they close. This script bounds what that knowledge is
worth: an upper bound on the expected freshness of *any* policy that knows
each page's hindsight rate and the business-hours pattern and fetches within
the replay's pacing.

The model
    page ``i`` changes as a Poisson process on business time, at its
    hindsight rate ``λᵢ`` (changes per wall day), that is ``λᵢ × 7 / 40``
    per business hour: the process ``generate_traces("business_hours")``
    draws from, at the rate the ``oracle`` is told. A page fetched at ``a``
    and next at ``b`` is then fresh for ``∫ₐᵇ exp(−μᵢ B(a, u)) du`` seconds
    in expectation, ``B(a, u)`` the business seconds in ``(a, u]``: exact,
    not an approximation. Every page is fresh at the start (the replay counts
    it so), and freshness is the mean over pages of the fresh share of the
    year, as the replay measures it.
The pacing
    the replay's bank at one fetch per fetch (every page costs 1): each
    one-hour cycle adds ``budget × pages / 24`` fetches and carries at most
    one fetch over; the *slots* are the cycles in which it holds a whole
    fetch when every whole fetch is spent as soon as it is held, and each
    slot's *cap* is the whole fetches it then holds (at 0.02: one fetch every
    four hours). The bound assumes no budget held back beyond that carry of
    one fetch: a policy fetches in the slots, at most their caps. (One that
    let a whole fetch wait could spend it in a cycle that is no slot here, an
    hour to three later at 0.02, giving up what the carry cannot hold; such
    policies are not covered.) The ``oracle`` keeps its own clock, not the
    bank, so it is the yardstick here, not one of the policies bounded.
Why it is a bound
    weak duality: for any prices ``yₖ ≥ 0`` of a fetch in slot ``k``,
    ``D(y) = Σᵢ maxᵢ E[fresh secondsᵢ − Σₖ yₖ xᵢₖ] + Σₖ yₖ capₖ`` (over each
    page's fetch schedules ``xᵢ``; divided by pages × seconds of the year)
    is at least the expected freshness of every schedule within the caps,
    even of one that meets them only in expectation, so of randomised ones
    too. Reacting to what fetches find cannot help: under the model a fetch
    leaves the page fresh whatever it found and the changes ahead are
    independent of those behind, so no outcome tells a policy anything about
    the future, and the best policy is a (possibly randomised) fixed
    schedule. Each page's maximum is an exact dynamic programme over its
    fetch slots (:func:`page_values`). ``D`` is convex in ``y``; it is
    lowered by projected subgradient steps (Polyak's step length) from the
    best single price, and the least ``D`` met is reported: a valid bound
    however far the descent got. The best single price (found by bisection)
    is the bound with only the year's total of fetches fixed. Both are exact
    expectations under the model: nothing is sampled.

Prints one JSON object: the budget (fetches per page per day) and, per
generation seed, ``slots`` and ``slot_fetches`` (the slots and the fetches
their caps allow in the year), ``oracle_measured`` (the replay's
``oracle`` freshness, replay seed 0), ``oracle_expected`` (the same fetch
times' expected freshness under the model), ``oracle_reproduced`` (whether
the fetch times rebuilt here give the replay's measured figure),
``bound_yearly_total`` and ``bound_per_slot`` (upper bounds on expected
freshness; shares of page-time), their ratios to ``oracle_expected``
(``*_over_oracle``), ``steps`` (subgradient steps taken), ``price_hours``
(the per-slot prices' median and range, fresh page-hours per fetch) and
``seconds`` (wall time; each seed's solves are shared by ``--jobs``
processes). The bounds are on expected freshness, so the ratios compare
like with like; one replay's measured freshness differs from its
expectation by about as much as ``oracle_measured`` does from
``oracle_expected``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any

import numpy as np
from numpy.typing import NDArray

from recrawl.sim.replay import TracePages, generate_traces, oracle_schedule, replay, run_schedule

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

DAY_S = 86_400.0
HOUR_S = 3600.0
CYCLE_S = 3600.0  # the replay's default cycle, seconds
BUSINESS_HOURS_PER_WEEK = 40.0
GROUP = 50  # pages solved in lockstep (see page_values)
GAP_GROW, GAP_SHRINK, GAP_PATIENCE = 1.2, 0.5, 2  # Polyak's target (see bound)
LOG_SPAN = 300.0  # most e-folds of decay between a block's first row and its last


def business_intervals(t0: float, t1: float) -> FloatArray:
    """Boundaries ``[s₀, e₀, s₁, e₁, …]`` (unix seconds) of the Monday–Friday
    09:00–17:00 UTC intervals covering ``[t0, t1]``."""
    d0, d1 = math.floor(t0 / DAY_S) - 1, math.ceil(t1 / DAY_S) + 1
    days = np.arange(d0, d1 + 1)
    days = days[(days + 3) % 7 < 5]  # 0 = Monday: 1970-01-01 was a Thursday
    return np.column_stack([days * DAY_S + 9 * HOUR_S, days * DAY_S + 17 * HOUR_S]).ravel()


def segments(
    mu: FloatArray, edges: FloatArray, opening: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Expected fresh seconds and survival of each span between ``edges``.

    Parameters
    ----------
    mu : ndarray
        Change rates, per business second, one per page (shape ``(n,)``).
    edges : ndarray
        Non-decreasing unix seconds, shape ``(m + 1,)``.
    opening : ndarray
        Business-interval boundaries from :func:`business_intervals`.

    Returns
    -------
    fresh, survive : ndarray
        Shape ``(n, m)``: for the span ``(edges[k], edges[k + 1]]`` of a page
        fresh at its start, the expected seconds it stays fresh in the span
        (``∫ exp(−μ B) du``) and the chance it is still fresh at its end
        (``exp(−μ B)``, ``B`` the span's business seconds).
    """
    mu = np.asarray(mu, dtype=np.float64)
    m = edges.size - 1
    fresh = np.zeros((mu.size, m))
    survive = np.ones((mu.size, m))
    live = np.flatnonzero(np.diff(edges) > 0)
    if live.size == 0:
        return fresh, survive
    inner = opening[(opening > edges[0]) & (opening < edges[-1])]
    pts = np.unique(np.concatenate([edges, inner]))
    length = np.diff(pts)
    mid = pts[:-1] + 0.5 * length
    is_open = np.searchsorted(opening, mid, side="right") % 2 == 1
    biz = np.where(is_open, length, 0.0)  # business seconds of each piece
    span = np.searchsorted(edges, pts[:-1], side="right") - 1  # the span each piece is in
    first = np.searchsorted(span, live)  # each live span's first piece
    before = np.cumsum(biz) - biz  # business seconds before each piece, from the start
    before -= before[first][np.searchsorted(live, span)]  # … from its span's start
    mub = mu[:, None] * biz
    with np.errstate(divide="ignore", invalid="ignore"):
        piece = np.where(is_open, -np.expm1(-mub) / mu[:, None], length)
    piece = np.where(is_open & (mub == 0), length, piece)
    piece *= np.exp(-mu[:, None] * before)
    fresh[:, live] = np.add.reduceat(piece, first, axis=1)
    survive[:, live] = np.exp(-mu[:, None] * np.add.reduceat(biz, first))
    return fresh, survive


def business_seconds(t: FloatArray, opening: FloatArray) -> FloatArray:
    """Business seconds between ``t[0]`` and each of ``t`` (unix seconds)."""
    start, end = opening[0::2], opening[1::2]
    upto = np.clip(t[:, None] - start[None, :], 0.0, (end - start)[None, :]).sum(axis=1)
    return np.asarray(upto - upto[0], dtype=np.float64)


def slots(p: TracePages, budget: float, cycle_s: float = CYCLE_S) -> tuple[FloatArray, IntArray]:
    """The replay's pacing at unit cost: the times (unix seconds) of the cycles in
    which the bank holds a whole fetch when each is spent as soon as it is held,
    and how many it holds then (the replay's bank: carry capped at one fetch)."""
    n_cycles = math.ceil((p.t1 - p.t0) / cycle_s)
    bank = 0.0
    ts, caps = [], []
    for k in range(1, n_cycles + 1):
        t = p.t0 + k * cycle_s
        n_live = int(np.count_nonzero((p.start <= t) & ~(p.end < t)))
        if n_live == 0:
            continue
        bank = min(bank, 1.0) + budget * n_live * cycle_s / DAY_S
        whole = math.floor(bank * (1 + 1e-9) + 1e-12)  # the replay's tolerance
        if whole >= 1:
            ts.append(t)
            caps.append(whole)
            bank -= whole
    return np.array(ts), np.array(caps, dtype=np.int64)


class Problem:
    """One trace set's pages, slots and per-page spans, for the dual.

    ``pages`` (default all) are the pages whose programmes this instance
    solves, for splitting a solve between processes.

    ``cand`` are the candidate fetch times (the start, then every slot),
    ``fresh[:, j]`` and ``survive[:, j]`` (``j`` = 1 … S, S = ``cand.size``)
    the spans ``(cand[j − 1], cand[j]]``, the last ending at the year's end;
    ``stop[:, j]`` the expected fresh seconds from a fetch at ``cand[j]`` to
    the end with no further fetch, and ``decay[:, j]`` ``μ × B`` from the
    start to ``cand[j]``.
    """

    def __init__(self, seed: int, budget: float, pages: IntArray | None = None) -> None:
        traces = generate_traces("business_hours", pages=300, days=365.0, seed=seed)
        self.seed, self.budget, self.traces = seed, budget, traces
        self.p = p = TracePages(traces)
        if not (np.all(p.start == p.t0) and np.all(p.end == p.t1) and np.ptp(p.value) == 0):
            raise ValueError("the bound assumes every page watched all year, at equal value")
        self.opening = business_intervals(p.t0, p.t1)
        self.mu_all = p.hindsight_rates() * 7.0 / BUSINESS_HOURS_PER_WEEK / HOUR_S
        self.ts, self.caps = slots(p, budget)
        self.cand = np.concatenate([[p.t0], self.ts])
        self.seconds = p.t1 - p.t0
        idx = np.arange(p.n) if pages is None else np.asarray(pages)
        self.pages = idx[np.argsort(self.mu_all[idx], kind="stable")]
        mu = self.mu_all[self.pages]
        s = self.cand.size
        fresh, survive = segments(mu, np.concatenate([self.cand, [p.t1]]), self.opening)
        self.fresh = np.concatenate([np.zeros((mu.size, 1)), fresh], axis=1)  # column 0 unused
        self.survive = np.concatenate([np.ones((mu.size, 1)), survive], axis=1)
        stop = np.zeros((mu.size, s + 1))
        for j in range(s - 1, -1, -1):
            stop[:, j] = self.fresh[:, j + 1] + self.survive[:, j + 1] * stop[:, j + 1]
        self.stop = stop
        self.decay = mu[:, None] * business_seconds(self.cand, self.opening)[None, :]
        with np.errstate(divide="ignore"):
            self.log_stop = np.log(stop[:, :s]) - self.decay  # -inf where nothing is left
        self.mu = mu
        self.order = np.arange(mu.size)  # the order pages are grouped in (see page_values)


def page_values(pr: Problem, price: FloatArray) -> tuple[FloatArray, IntArray]:
    """Each page's best ``E[fresh seconds] − Σ price of its fetches``, and its fetches.

    The dynamic programme, for the pages of ``pr``: with ``A[j]`` the fresh
    seconds after a fetch at candidate ``j`` if no other follows, ``E[j, j']``
    the chance of no change between candidates ``j`` and ``j'`` and
    ``W[j'] = V[j'] − price[j']``, the best value after a fetch at ``j`` is
    ``V[j] = A[j] + max(0, max over j' > j of W[j'] − E[j, j'] A[j'])``
    (a next fetch at ``j'`` ends the stretch ``A[j]`` assumed to run to the
    end; the first fetch, at the start, is free). Two facts spare most of
    the ``S²`` work. The best next fetch after ``j`` is no later than after
    ``j + 1`` (the candidates are lines ``W[j'] − A[j'] E[0, j'] x`` in
    ``x = 1 / E[0, j]``, whose slopes increase with ``j'``, so the maximiser
    moves right as ``x`` grows), which bounds each row's window.
    And stopping is best after ``j`` as soon as ``W[j'] ≤ E[j, j'] A[j']`` for
    every ``j' > j``, a running maximum of ``log W[j'] − log A[j'] +
    log(1 / E[0, j'])`` against ``log(1 / E[0, j])``, which clears the rows
    of pages not worth another fetch. Rows are vectorised over groups of
    :data:`GROUP` pages of like numbers of fetches (in the previous call)
    and rates, each row over the widest window its pages need (the far part
    of it only for the few that need it); the terms ``E[j, j'] A[j']`` are formed as
    ``A[j'] E[j₀, j']`` times ``1 / E[j₀, j]`` within blocks of rows
    ``j₀ …`` spanning at most :data:`LOG_SPAN` e-folds, so nothing under- or
    overflows harmfully, and ``V`` carries absolute errors of a few ulps of
    the year's seconds (no cancellation by small survival chances).

    Parameters
    ----------
    pr : Problem
    price : ndarray
        Price of a fetch at each candidate, fresh seconds (``price[0]``, the
        start, is ignored).

    Returns
    -------
    value : ndarray
        ``V[0]`` of each of ``pr.pages``, seconds.
    use : ndarray
        Fetches of the pages' best schedules at each candidate (``use[0] = 0``).
    """
    s = pr.cand.size
    n = pr.pages.size
    value = np.empty(n)
    use = np.zeros(s, dtype=np.int64)
    fetches = np.zeros(n, dtype=np.int64)
    for lo in range(0, n, GROUP):
        at = pr.order[lo : lo + GROUP]
        v0, nxt = _group(pr.stop[at], pr.decay[at], pr.log_stop[at], price)
        value[at] = v0
        pos = np.zeros(at.size, dtype=np.int64)
        rows = np.arange(at.size)
        while True:
            pos = nxt[rows, pos]
            going = pos < s
            if not going.any():
                break
            np.add.at(use, pos[going], 1)
            fetches[at[rows[going]]] += 1
            rows, pos = rows[going], pos[going]
    # next time, group pages of like numbers of fetches (so of like windows)
    pr.order = np.lexsort((pr.mu, -fetches))
    return value, use


def _group(
    stop: FloatArray, decay: FloatArray, log_stop: FloatArray, price: FloatArray
) -> tuple[FloatArray, IntArray]:
    """:func:`page_values` for one group: ``(V[0], next fetch after each candidate)``,
    the next fetch ``S`` meaning none."""
    g, s1 = stop.shape
    s = s1 - 1  # candidates 0 … s − 1; ``s`` stands for stopping
    rows = np.arange(g)
    V = np.empty((g, s))
    W = np.full((g, s), -np.inf)
    nxt = np.full((g, s), s, dtype=np.int64)
    best_r = np.full(g, -np.inf)  # max over j' > j of log W[j'] − log A[j'] + decay[j']
    opt = np.full(g, s, dtype=np.int64)  # best next fetch after j + 1
    none = opt.copy()
    # blocks of rows with at most LOG_SPAN e-folds between their first and last row
    top = decay.max(axis=0)
    bounds = [0]
    for j in range(1, s):
        if top[j] - top[bounds[-1]] > LOG_SPAN:
            bounds.append(j)
    ends = [*bounds[1:], s]
    buf = np.empty((g, s))
    with np.errstate(under="ignore", divide="ignore", invalid="ignore"):
        for j0, j1 in zip(reversed(bounds), reversed(ends), strict=True):
            # A[j'] E[j0, j'] for j' >= j0, and 1 / E[j0, j] for the block's rows
            scaled = stop[:, j0:s] * np.exp(decay[:, j0, None] - decay[:, j0:s])
            grow = np.exp(decay[:, j0:j1] - decay[:, j0, None])
            for j in range(j1 - 1, j0 - 1, -1):
                a = stop[:, j]
                width = 0
                if j < s - 1:
                    reach = np.where(best_r <= decay[:, j], j, np.minimum(opt, s - 1)) - j
                    width = int(reach.max())
                if width > 0:
                    # the window every page needs, then its far part for the few that
                    # need it (pages of one or two fetches, whose windows are long)
                    near = width
                    wide = reach > width // 4
                    far = np.flatnonzero(wide)
                    if far.size * 4 <= g:
                        near = max(1, int(reach[~wide].max(initial=1)))
                    q = j + 1 - j0
                    seg = buf[:, :near]
                    np.multiply(scaled[:, q : q + near], grow[:, j - j0, None], out=seg)
                    np.subtract(W[:, j + 1 : j + 1 + near], seg, out=seg)
                    k = seg.argmax(axis=1)
                    gain = seg[rows, k]
                    if near < width:
                        tail = scaled[far, q + near : q + width] * grow[far, j - j0, None]
                        np.subtract(W[far, j + 1 + near : j + 1 + width], tail, out=tail)
                        kt = tail.argmax(axis=1)
                        gt = tail[np.arange(far.size), kt]
                        better = gt > gain[far]
                        gain[far] = np.where(better, gt, gain[far])
                        k[far] = np.where(better, near + kt, k[far])
                    go = gain > 0.0
                    V[:, j] = np.where(go, a + gain, a)
                    opt = np.where(go, j + 1 + k, s)
                else:
                    V[:, j] = a
                    opt = none
                nxt[:, j] = opt
                if j > 0:
                    w = V[:, j] - price[j]
                    W[:, j] = w
                    # log(w) is nan or -inf where w <= 0: such a fetch never beats stopping
                    r = np.log(w) - log_stop[:, j]
                    np.fmax(best_r, r, out=best_r)
    return V[:, 0], nxt


def oracle_times(p: TracePages, budget: float, seed: int = 0) -> list[FloatArray]:
    """The fetch times (unix seconds) of the replay's ``oracle`` in
    ``replay(traces, budget, policies=["oracle"], seed=seed)``, with its random
    stream."""
    rng = np.random.default_rng([seed, 0])
    return oracle_schedule(p, budget, CYCLE_S, "freshness", rng)


def expected_freshness(pr: Problem, times: list[FloatArray]) -> float:
    """Mean over pages of the expected fresh share of the year under the model."""
    p = pr.p
    total = 0.0
    for i, when in enumerate(times):
        edges = np.concatenate([[p.start[i]], when, [p.end[i]]])
        fresh, _ = segments(pr.mu_all[i : i + 1], edges, pr.opening)
        total += float(fresh.sum()) / (p.end[i] - p.start[i])
    return total / p.n


_PARTS: dict[tuple[int, float, int, int], Problem] = {}


def _solve_part(args: tuple[int, float, int, int, FloatArray]) -> tuple[float, IntArray]:
    """Sum of :func:`page_values` and the fetches per candidate of one share of a
    trace set's pages (pages ``part``, ``part + parts``, … by rate), built once
    per process."""
    seed, budget, part, parts, price = args
    key = (seed, budget, part, parts)
    if key not in _PARTS:
        whole = Problem(seed, budget, pages=np.zeros(0, dtype=np.int64))
        by_rate = np.argsort(whole.mu_all, kind="stable")
        _PARTS[key] = Problem(seed, budget, pages=by_rate[part::parts])
    value, use = page_values(_PARTS[key], price)
    return float(value.sum()), use


def bound(
    pr: Problem,
    iterations: int,
    pool: Executor | None,
    parts: int,
    floor: float,
) -> dict[str, Any]:
    """The two bounds for the trace set of ``pr``: the best single price
    (bisection), then per-slot prices by projected subgradient steps from it.

    Polyak's step aims at ``target = best − gap``: ``gap`` starts at half the
    distance from the single-price bound down to ``floor`` (the oracle's
    expected freshness, which the least bound stays above), grows by
    :data:`GAP_GROW` at each new best (to at most ``best − floor``) and
    shrinks by :data:`GAP_SHRINK` after :data:`GAP_PATIENCE` steps without
    one. The step lengths do not touch the bound's validity. Returns the
    bounds (shares of page-time), the steps taken and the prices' summary.
    """
    seed, budget = pr.seed, pr.budget
    scale = pr.seconds * pr.p.n  # D is in shares of page-time; prices in fresh seconds
    caps = pr.caps.astype(np.float64)

    def dual(price: FloatArray) -> tuple[float, FloatArray]:
        tasks = [(seed, budget, k, parts, price) for k in range(parts)]
        results = list(pool.map(_solve_part, tasks)) if pool else [_solve_part(t) for t in tasks]
        total = sum(v for v, _ in results) + float(price[1:] @ caps)
        use = np.sum([u for _, u in results], axis=0)
        return total / scale, use[1:].astype(np.float64)

    # 1. one price for every slot: only the year's total is held (bisection on the
    #    sign of the subgradient, the total fetches' excess over the budget)
    lo, hi = 0.0, 30 * DAY_S
    best, best_price = math.inf, np.zeros(pr.cand.size)
    for _ in range(20):
        mid = 0.5 * (lo + hi)
        price = np.full(pr.cand.size, mid)
        price[0] = 0.0
        d, use = dual(price)
        if d < best:
            best, best_price = d, price
        if use.sum() > caps.sum():
            lo = mid
        else:
            hi = mid
    yearly = best
    print(
        f"seed {seed}: one price {best_price[1] / HOUR_S:.1f} h, bound {best:.5f}", file=sys.stderr
    )
    # 2. a price per slot
    price = best_price.copy()
    gap = 0.5 * max(best - floor, 1e-4)
    stale = 0
    steps = 0
    for it in range(1, iterations + 1):
        d, use = dual(price)
        steps = it
        if d < best:
            best, best_price, stale = d, price.copy(), 0
            gap = min(GAP_GROW * gap, max(best - floor, 1e-4))
        else:
            stale += 1
            if stale >= GAP_PATIENCE:
                gap, stale = GAP_SHRINK * gap, 0
        g = caps - use
        gg = float(g @ g)
        if gg == 0.0:
            break
        price[1:] = np.maximum(0.0, price[1:] - (d - (best - gap)) * scale / gg * g)
        if it % 10 == 0 or it == iterations:
            print(f"seed {seed}: step {it}, bound {d:.5f}, best {best:.5f}", file=sys.stderr)
    hours = best_price[1:] / HOUR_S
    return {
        "bound_yearly_total": yearly,
        "bound_per_slot": best,
        "steps": steps,
        "price_hours": {
            "median": round(float(np.median(hours)), 1),
            "min": round(float(hours.min()), 1),
            "max": round(float(hours.max()), 1),
        },
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[11, 12, 13])
    ap.add_argument("--budget", type=float, default=0.02, help="fetches per page per day")
    ap.add_argument(
        "--iterations",
        type=int,
        default=200,
        help="subgradient steps per seed (0: the single-price bound only); each solves "
        "every page's programme once",
    )
    ap.add_argument("--jobs", type=int, default=2, help="processes sharing each solve")
    args = ap.parse_args(argv)
    if args.jobs < 1 or args.iterations < 0 or args.budget <= 0:
        ap.error("--jobs must be at least 1, --iterations at least 0, --budget positive")
    out: dict[str, Any] = {"budget": args.budget, "cycle_hours": CYCLE_S / HOUR_S, "seeds": {}}
    pool = ProcessPoolExecutor(max_workers=args.jobs) if args.jobs > 1 else None
    try:
        for seed in args.seeds:
            t0 = time.perf_counter()
            pr = Problem(seed, args.budget, pages=np.zeros(0, dtype=np.int64))
            measured = replay(pr.traces, args.budget, policies=["oracle"], seed=0)
            measured_f = float(measured["policies"]["oracle"]["freshness"])
            times = oracle_times(pr.p, args.budget)
            expected = expected_freshness(pr, times)
            res = bound(pr, args.iterations, pool, args.jobs, expected)
            out["seeds"][str(seed)] = {
                "slots": int(pr.ts.size),
                "slot_fetches": int(pr.caps.sum()),
                "oracle_measured": round(measured_f, 5),
                "oracle_expected": round(expected, 5),
                "oracle_reproduced": abs(run_schedule(pr.p, times)["freshness"] - measured_f)
                < 1e-9,
                "bound_yearly_total": round(res["bound_yearly_total"], 5),
                "bound_per_slot": round(res["bound_per_slot"], 5),
                "yearly_total_over_oracle": round(res["bound_yearly_total"] / expected, 4),
                "per_slot_over_oracle": round(res["bound_per_slot"] / expected, 4),
                "steps": res["steps"],
                "price_hours": res["price_hours"],
                "seconds": round(time.perf_counter() - t0, 1),
            }
    finally:
        if pool is not None:
            pool.shutdown()
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()

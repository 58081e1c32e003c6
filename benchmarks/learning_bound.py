"""How close any revisit policy can come to the known-rate optimum when it must learn the rates.

Usage::

    python benchmarks/learning_bound.py [--budget B ...] [--unit-days U] [--intervals K,K,...]
        [--paced-iterations N] [--prior log-uniform|real]

The generated traces of ``benchmarks/replay.py`` (rates log-uniform between
one change a year and one a day, one year) ask a policy to reach 0.97 of the
hindsight optimum at 0.02 fetches per page per day: about seven visits per
page in the year. This script computes the best any policy can do there.

Pages are independent and alike before they are visited, so with the budget
met on average over pages (a Lagrangian relaxation: the price ``mu`` of a
visit replaces the budget), the best policy is the best single-page policy,
found by dynamic programming. Its state is the page's revisit history
(unchanged time, and how many changed revisits of each interval), which
fixes the exact posterior of the rate under the log-uniform prior; at each
visit it chooses the next interval among ``K × U`` days, or never again.
Freshness is exact for Poisson changes.

``bayes``
    the best policy that learns each page's rate from its revisits, as every
    policy must;
``known_rates``
    the best policy told each page's rate (the same intervals, so the
    comparison is fair; the allocation of ``replay.py``'s oracle is
    within about 1 % of it on these traces, and it is itself slightly
    ahead of the oracle's fixed intervals);
``uniform``
    every page every ``1 / B`` days;
``bayes_over_known``
    the ceiling of any learning policy's ratio to the known-rate optimum;
``bayes_paced``, ``known_rates_paced``, ``bayes_paced_over_known``
    the same ceilings with the budget paced as a replay (and a crawl) gets
    it: at most ``B × U`` visits per page in every ``U`` days, not only over
    the year. Every page of a fresh crawl is fetched at the start, so the
    year-long relaxation lets every page be revisited early, which a crawl
    paid hour by hour cannot do (300 pages at 6 fetches a day take 50 days
    for one round). It is a bound by weak duality: a price per unit of time
    on visits (:func:`paced`), lowered by projected subgradient steps
    (``--paced-iterations``; each figure is the least bound met, valid
    however far the descent went). It bounds every policy whose visits fall
    on the grid, provided the intervals are every whole number of units up
    to the longest, so that pages can spread their revisits over the units
    as a crawl does (with 6–96 days in powers of two they cannot, and the
    figure falls below uniform's). ``bayes_paced_over_known`` divides by the
    unpaced known-rate optimum, which a policy told the rates reaches under
    pacing too by spreading its phases (as the replay's oracle does). Run it
    with ``--unit-days 12 --intervals 1,2,3,4,5,6,7,8 --paced-iterations 150``;
``bayes_first_revisits``
    how the best learning policy starts: the first revisit, and what it does
    after one, two or three changed revisits in a row.

Both are matched to ``B × days`` visits per page by bisection on ``mu`` and
interpolation between the two nearest policies (a mixture, which the
relaxation allows). Prints one JSON object per run.

With ``--prior real`` the rates are drawn instead from the pooled hindsight
rates of the two real traces, as ``replay.py``'s ``generated_real_rates``
suite draws them (the grid then spans them, each counted at its nearest
point).

Visits fall on a grid of ``U`` days, so the figures are those of policies on
that grid; a finer grid moves the year-long ratio little (0.9425 with
12-day steps and 12–96-day intervals, 0.944 with 6-day steps).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
Result = tuple[float, float, float, int]  # value, visits, fresh days, next interval (-1: none)
NONE: Result = (0.0, 0.0, 0.0, -1)


class Problem:
    """One page's revisit problem on a grid of rates and a set of intervals."""

    def __init__(
        self,
        *,
        days: float,
        unit_days: float,
        intervals: tuple[int, ...],
        min_rate: float,
        max_rate: float,
        grid: int,
        prior_rates: FloatArray | None = None,
    ) -> None:
        self.unit = unit_days
        self.horizon = round(days / unit_days)
        self.intervals = tuple(sorted(intervals))
        if prior_rates is not None:  # the grid spans them, each counted at its nearest point
            min_rate, max_rate = float(prior_rates.min()), float(prior_rates.max())
        self.rate = np.exp(np.linspace(math.log(min_rate), math.log(max_rate), grid))
        self.prior = np.full(grid, 1.0 / grid)  # log-uniform: even on the log grid
        if prior_rates is not None:
            step = (math.log(max_rate) - math.log(min_rate)) / max(grid - 1, 1)
            at = np.rint((np.log(prior_rates) - math.log(min_rate)) / step).astype(np.int64)
            self.prior = np.bincount(at, minlength=grid) / prior_rates.size
        span = np.outer(np.array(self.intervals, dtype=np.float64) * unit_days, self.rate)
        self.p_change = -np.expm1(-span)
        self.log_p_change = np.log(self.p_change)
        self.fresh = self.p_change / self.rate  # E[min(time to change, interval)], days

    def stop_fresh(self, units_left: int) -> FloatArray:
        """Fresh days until the horizon with no further visit, per rate."""
        return -np.expm1(-self.rate * (units_left * self.unit)) / self.rate

    def posterior(self, unchanged: int, counts: tuple[int, ...]) -> FloatArray:
        """Posterior of the rate on the grid after ``unchanged`` units without a
        change and ``counts[j]`` changed revisits of interval ``j``."""
        ll = np.log(self.prior) - self.rate * (unchanged * self.unit)
        ll = ll + np.asarray(counts, dtype=np.float64) @ self.log_p_change
        w = np.exp(ll - ll.max())
        return np.asarray(w / w.sum(), dtype=np.float64)

    def elapsed(self, unchanged: int, counts: tuple[int, ...]) -> int:
        """Units since the start at the state's last visit."""
        return unchanged + sum(c * d for c, d in zip(counts, self.intervals, strict=True))

    def bayes(self, mu: float | FloatArray) -> tuple[Result, tuple[int, Callable[..., Result]]]:
        """Best learning policy at visit price ``mu``: its result, and its number of
        states and table (``table(unchanged, counts)``).

        ``mu`` is one price for every visit, or the price of a visit at each
        unit of time (``mu[t]``, ``t`` = 0 … horizon): the Lagrange multipliers
        of a budget per unit of time (see :func:`paced`)."""
        iv = self.intervals
        price = np.broadcast_to(np.asarray(mu, dtype=np.float64), (self.horizon + 1,))

        @functools.cache
        def value(unchanged: int, counts: tuple[int, ...]) -> Result:
            t = self.elapsed(unchanged, counts)
            left = self.horizon - t
            w = self.posterior(unchanged, counts)
            stay = float(w @ self.stop_fresh(left))
            best: Result = (stay, 0.0, stay, -1)
            for j, d in enumerate(iv):
                if d > left:
                    break
                pc = float(w @ self.p_change[j])
                fr = float(w @ self.fresh[j])
                bumped = list(counts)
                bumped[j] += 1
                vc = value(unchanged, tuple(bumped)) if pc > 1e-12 else NONE
                vu = value(unchanged + d, counts) if pc < 1.0 - 1e-12 else NONE
                v = fr - float(price[t + d]) + pc * vc[0] + (1.0 - pc) * vu[0]
                if v > best[0] + 1e-12:
                    visits = 1.0 + pc * vc[1] + (1.0 - pc) * vu[1]
                    best = (v, visits, fr + pc * vc[2] + (1.0 - pc) * vu[2], j)
            return best

        root = value(0, (0,) * len(iv))
        return root, (value.cache_info().currsize, value)

    def visits_by_time(self, table: Callable[..., Result]) -> FloatArray:
        """Expected visits at each unit of time (0 … horizon) of the policy
        ``table`` (from :meth:`bayes`), from the free visit at 0 on."""
        out = np.zeros(self.horizon + 1)
        # mass of the states at each time, taken in order of time so that each
        # state's mass is complete when it is taken
        at: list[dict[tuple[int, tuple[int, ...]], float]] = [{} for _ in out]
        at[0][(0, (0,) * len(self.intervals))] = 1.0
        for t, states in enumerate(at):
            for (unchanged, counts), p in states.items():
                j = table(unchanged, counts)[3]
                if j < 0:
                    continue
                d = self.intervals[j]
                out[t + d] += p
                pc = float(self.posterior(unchanged, counts) @ self.p_change[j])
                bumped = list(counts)
                bumped[j] += 1
                for nxt, q in (((unchanged, tuple(bumped)), pc), ((unchanged + d, counts), 1 - pc)):
                    if q * p > 0:
                        at[t + d][nxt] = at[t + d].get(nxt, 0.0) + q * p
        return out

    def known(self, mu: float | FloatArray) -> Result:
        """Best policy told the rate, averaged over the prior (time is the only state).

        ``mu`` as for :meth:`bayes`."""
        return self.known_policy(mu)[0]

    def known_policy(self, mu: float | FloatArray) -> tuple[Result, FloatArray]:
        """:meth:`known`'s result, and its expected visits at each unit of time."""
        n = self.rate.size
        price = np.broadcast_to(np.asarray(mu, dtype=np.float64), (self.horizon + 1,))
        v = np.zeros((self.horizon + 1, n))
        visits = np.zeros_like(v)
        fresh = np.zeros_like(v)
        choice = np.full((self.horizon + 1, n), -1)
        for t in range(self.horizon, -1, -1):
            left = self.horizon - t
            best = self.stop_fresh(left)
            bv, bf = np.zeros(n), best.copy()
            for j, d in enumerate(self.intervals):
                if d > left:
                    break
                cand = self.fresh[j] - price[t + d] + v[t + d]
                better = cand > best + 1e-12
                best = np.where(better, cand, best)
                bv = np.where(better, 1.0 + visits[t + d], bv)
                bf = np.where(better, self.fresh[j] + fresh[t + d], bf)
                choice[t] = np.where(better, j, choice[t])
            v[t], visits[t], fresh[t] = best, bv, bf
        mass = np.zeros((self.horizon + 1, n))
        mass[0] = self.prior
        by_time = np.zeros(self.horizon + 1)
        step = np.array(self.intervals)
        for t in range(self.horizon + 1):
            go = choice[t] >= 0
            nxt = t + step[choice[t][go]]
            np.add.at(mass, (nxt, np.flatnonzero(go)), mass[t][go])
            by_time[t] += mass[t].sum() if t else 0.0
        result = (
            float(self.prior @ v[0]),
            float(self.prior @ visits[0]),
            float(self.prior @ fresh[0]),
            -1,
        )
        return result, by_time

    def uniform(self, every_days: float) -> float:
        """Fresh days of visiting every ``every_days``, averaged over the prior."""
        days = self.horizon * self.unit
        starts = np.arange(0.0, days, every_days)
        spans = np.minimum(every_days, days - starts)
        return float(
            self.prior @ (-np.expm1(-np.outer(self.rate, spans)) / self.rate[:, None]).sum(1)
        )


def matched(
    solve: Callable[[float], tuple[Result, Any]], visits: float
) -> tuple[dict[str, float], Any]:
    """Fresh days at ``visits`` per page: bisection on log mu, then a mixture.

    ``solve(mu)`` returns the policy's result and anything else it wants kept;
    that of the policy at the bracket's low end (the mixture's busier part) is
    handed back.
    """
    lo, hi = 1e-3, 1e3  # mu: at lo more visits than asked, at hi fewer
    (r_lo, x_lo), (r_hi, _) = solve(lo), solve(hi)
    for _ in range(40):
        if hi / lo < 1.02:
            break
        mid = math.sqrt(lo * hi)
        r, x = solve(mid)
        if r[1] > visits:
            lo, r_lo, x_lo = mid, r, x
        else:
            hi, r_hi = mid, r
    span = r_lo[1] - r_hi[1]
    a = 0.0 if span <= 0 else (visits - r_hi[1]) / span  # weight of the policy at lo
    a = min(max(a, 0.0), 1.0)
    return {
        "mu": round(math.sqrt(lo * hi), 4),
        "visits_per_page": round(a * r_lo[1] + (1 - a) * r_hi[1], 3),
        "fresh_days": round(a * r_lo[2] + (1 - a) * r_hi[2], 3),
    }, x_lo


def real_rates(trace_dir: str) -> FloatArray:
    """The pooled hindsight rates of the real traces, changes per day (as
    ``replay.py``'s ``generated_real_rates`` suite draws them)."""
    from replay import pooled_real_rates  # benchmarks/replay.py, beside this script

    return np.asarray(pooled_real_rates(trace_dir), dtype=np.float64)


def paced(
    p: Problem,
    budget: float,
    mu0: float,
    *,
    learning: bool,
    iterations: int,
    on_step: Callable[[int, float], None] | None = None,
) -> dict[str, Any]:
    """The ceiling with the budget paced as a crawl gets it: at most ``budget``
    visits per page per day in every unit of time, not only over the year.

    Weak duality: for any prices ``mu[t] >= 0`` of a visit at each unit of
    time, ``D(mu) = max over single-page policies of E[fresh days - sum of
    mu[t] over its visits] + sum over t of mu[t] * budget * unit`` bounds the
    fresh days per page of every policy that keeps, at every unit of time,
    its expected visits per page within ``budget * unit`` (pages are
    exchangeable before they are visited, so the same prices serve every page).
    ``D`` is minimised by projected subgradient from the flat price ``mu0``
    (the year-long relaxation's, whose ``D`` is that relaxation's bound);
    the least ``D`` met is returned, a valid bound however far the descent got.
    """
    per_unit = budget * p.unit
    mu = np.full(p.horizon + 1, mu0)
    mu[0] = 0.0  # the first fetch, at the start, is free
    best: dict[str, Any] = {}
    for k in range(1, iterations + 1):
        if learning:
            (val, *_), (_, table) = p.bayes(mu)
            use = p.visits_by_time(table)
        else:
            (val, *_), use = p.known_policy(mu)
        bound = val + per_unit * float(mu[1:].sum())
        if not best or bound < best["fresh_days"]:
            over = use[1:] / per_unit
            best = {
                "fresh_days": round(bound, 3),
                "freshness": round(bound / (p.horizon * p.unit), 4),
                "iteration": k,
                "most_over_budget": round(float(over.max()), 2),
                "price_first_60_days": [round(float(x), 2) for x in mu[1 : 1 + round(60 / p.unit)]],
                "price_median": round(float(np.median(mu[1:])), 2),
            }
        if on_step is not None:
            on_step(k, bound)
        g = per_unit - use  # the subgradient of D in mu
        g[0] = 0.0
        mu = np.maximum(mu - (1.0 / math.sqrt(k)) * g / per_unit, 0.0)
    best["iterations"] = iterations
    return best


def first_revisits(table: Callable[..., Result], p: Problem) -> list[str]:
    """The best learning policy's first steps along a run of changed revisits."""
    steps = []
    counts = [0] * len(p.intervals)
    for n_changed in range(5):
        j = table(0, tuple(counts))[3]
        label = "first revisit" if n_changed == 0 else f"after {n_changed} changed in a row"
        if j < 0:
            steps.append(f"{label}: no more visits")
            break
        steps.append(f"{label}: next in {p.intervals[j] * p.unit:g} days")
        counts[j] += 1
    return steps


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, nargs="+", default=[0.02])
    ap.add_argument("--days", type=float, default=365.0)
    ap.add_argument("--unit-days", type=float, default=6.0)
    ap.add_argument("--intervals", default="1,2,4,8,16", help="multiples of --unit-days")
    ap.add_argument("--min-rate", type=float, default=1 / 365)
    ap.add_argument("--max-rate", type=float, default=1.0)
    ap.add_argument("--grid", type=int, default=64)
    ap.add_argument(
        "--prior",
        choices=("log-uniform", "real"),
        default="log-uniform",
        help="the rates pages are drawn from: log-uniform between --min-rate and --max-rate "
        "(replay.py's generated suite), or the pooled hindsight rates of the real traces "
        "(its generated_real_rates suite; --min-rate and --max-rate are then theirs)",
    )
    ap.add_argument("--traces", default="/work/shared/traces", help="for --prior real")
    ap.add_argument(
        "--paced-iterations",
        type=int,
        default=0,
        help="descent steps of the paced ceiling (0: skip it); each solves the programme "
        "once. Needs every interval from 1 to K units, e.g. --unit-days 12 --intervals 1,2,3,4,5,6,7,8",
    )
    args = ap.parse_args(argv)
    try:
        intervals = tuple(int(x) for x in args.intervals.split(","))
    except ValueError:
        ap.error("--intervals takes whole numbers separated by commas, e.g. 1,2,4,8,16")
    if not intervals or min(intervals) < 1 or args.unit_days <= 0 or min(args.budget) <= 0:
        ap.error("intervals, --unit-days and --budget must be positive")
    if args.paced_iterations > 0 and sorted(set(intervals)) != list(range(1, max(intervals) + 1)):
        ap.error(
            "the paced ceiling needs every interval from 1 to K units (--intervals 1,2,...,K): "
            "with gaps, pages cannot spread their revisits over the units, and the figure "
            "falls below what revisiting every page in turn reaches"
        )
    p = Problem(
        days=args.days,
        unit_days=args.unit_days,
        intervals=intervals,
        min_rate=args.min_rate,
        max_rate=args.max_rate,
        grid=args.grid,
        prior_rates=real_rates(args.traces) if args.prior == "real" else None,
    )
    most = p.horizon // p.intervals[0]
    if max(args.budget) * p.horizon * p.unit > most:
        ap.error(
            f"the shortest interval ({p.intervals[0] * p.unit:g} days) allows at most {most} "
            f"visits per page in {p.horizon * p.unit:g} days, fewer than the budget asks: "
            "pass a smaller --unit-days or shortest interval"
        )
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20 * p.horizon + 1000))
    out = []
    for budget in args.budget:
        t0 = time.perf_counter()
        visits = budget * p.horizon * p.unit
        b, (states, table) = matched(p.bayes, visits)
        k, _ = matched(lambda mu: (p.known(mu), None), visits)
        days = p.horizon * p.unit
        u = p.uniform(1.0 / budget)
        res = {
            "budget": budget,
            "days": days,
            "unit_days": p.unit,
            "intervals_days": [d * p.unit for d in p.intervals],
            "prior": args.prior,
            "rates_per_day": [float(p.rate[0]), float(p.rate[-1])],
            "states": states,
            "bayes": {**b, "freshness": round(b["fresh_days"] / days, 4)},
            "known_rates": {**k, "freshness": round(k["fresh_days"] / days, 4)},
            "uniform": {"visits_per_page": round(visits, 3), "freshness": round(u / days, 4)},
            "bayes_first_revisits": first_revisits(table, p),
        }
        kf = res["known_rates"]["freshness"]
        res["bayes_over_known"] = round(res["bayes"]["freshness"] / kf, 4)
        res["uniform_over_known"] = round(res["uniform"]["freshness"] / kf, 4)
        if args.paced_iterations > 0:

            def progress(i: int, bound: float) -> None:
                print(f"\rpaced ceiling: step {i}, {bound:.3f} fresh days", end="", file=sys.stderr)

            for name, learning, mu in (("bayes", True, b["mu"]), ("known_rates", False, k["mu"])):
                res[f"{name}_paced"] = paced(
                    p,
                    budget,
                    mu,
                    learning=learning,
                    iterations=args.paced_iterations,
                    on_step=progress,
                )
            print(file=sys.stderr)
            res["bayes_paced_over_known"] = round(res["bayes_paced"]["freshness"] / kf, 4)
        res["seconds"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(res), flush=True)
        out.append(res)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])

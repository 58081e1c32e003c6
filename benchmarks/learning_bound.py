"""How close any revisit policy can come to the known-rate optimum when it must learn the rates.

Usage::

    python benchmarks/learning_bound.py [--budget B ...] [--unit-days U] [--intervals K,K,...]

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
``bayes_first_revisits``
    how the best learning policy starts: the first revisit, and what it does
    after one, two or three changed revisits in a row.

Both are matched to ``B × days`` visits per page by bisection on ``mu`` and
interpolation between the two nearest policies (a mixture, which the
relaxation allows). Prints one JSON object per run.
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
    ) -> None:
        self.unit = unit_days
        self.horizon = round(days / unit_days)
        self.intervals = tuple(sorted(intervals))
        self.rate = np.exp(np.linspace(math.log(min_rate), math.log(max_rate), grid))
        self.prior = np.full(grid, 1.0 / grid)  # log-uniform: even on the log grid
        span = np.outer(np.array(self.intervals, dtype=np.float64) * unit_days, self.rate)
        self.p_change = -np.expm1(-span)
        self.log_p_change = np.log(self.p_change)
        self.fresh = self.p_change / self.rate  # E[min(time to change, interval)], days

    def stop_fresh(self, units_left: int) -> FloatArray:
        """Fresh days until the horizon with no further visit, per rate."""
        return -np.expm1(-self.rate * (units_left * self.unit)) / self.rate

    def bayes(self, mu: float) -> tuple[Result, tuple[int, Callable[..., Result]]]:
        """Best learning policy at visit price ``mu``: its result, and its number of
        states and table (``table(unchanged, counts)``)."""
        log_prior = np.log(self.prior)
        iv = self.intervals

        @functools.cache
        def value(unchanged: int, counts: tuple[int, ...]) -> Result:
            t = unchanged + sum(c * d for c, d in zip(counts, iv, strict=True))
            left = self.horizon - t
            ll = log_prior - self.rate * (unchanged * self.unit)
            ll = ll + np.asarray(counts, dtype=np.float64) @ self.log_p_change
            w = np.exp(ll - ll.max())
            w /= w.sum()
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
                v = fr - mu + pc * vc[0] + (1.0 - pc) * vu[0]
                if v > best[0] + 1e-12:
                    visits = 1.0 + pc * vc[1] + (1.0 - pc) * vu[1]
                    best = (v, visits, fr + pc * vc[2] + (1.0 - pc) * vu[2], j)
            return best

        root = value(0, (0,) * len(iv))
        return root, (value.cache_info().currsize, value)

    def known(self, mu: float) -> Result:
        """Best policy told the rate, averaged over the prior (time is the only state)."""
        n = self.rate.size
        v = np.zeros((self.horizon + 1, n))
        visits = np.zeros_like(v)
        fresh = np.zeros_like(v)
        for t in range(self.horizon, -1, -1):
            left = self.horizon - t
            best = self.stop_fresh(left)
            bv, bf = np.zeros(n), best.copy()
            for j, d in enumerate(self.intervals):
                if d > left:
                    break
                cand = self.fresh[j] - mu + v[t + d]
                better = cand > best + 1e-12
                best = np.where(better, cand, best)
                bv = np.where(better, 1.0 + visits[t + d], bv)
                bf = np.where(better, self.fresh[j] + fresh[t + d], bf)
            v[t], visits[t], fresh[t] = best, bv, bf
        return (
            float(self.prior @ v[0]),
            float(self.prior @ visits[0]),
            float(self.prior @ fresh[0]),
            -1,
        )

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
    args = ap.parse_args(argv)
    try:
        intervals = tuple(int(x) for x in args.intervals.split(","))
    except ValueError:
        ap.error("--intervals takes whole numbers separated by commas, e.g. 1,2,4,8,16")
    if not intervals or min(intervals) < 1 or args.unit_days <= 0 or min(args.budget) <= 0:
        ap.error("intervals, --unit-days and --budget must be positive")
    p = Problem(
        days=args.days,
        unit_days=args.unit_days,
        intervals=intervals,
        min_rate=args.min_rate,
        max_rate=args.max_rate,
        grid=args.grid,
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
            "rates_per_day": [args.min_rate, args.max_rate],
            "states": states,
            "bayes": {**b, "freshness": round(b["fresh_days"] / days, 4)},
            "known_rates": {**k, "freshness": round(k["fresh_days"] / days, 4)},
            "uniform": {"visits_per_page": round(visits, 3), "freshness": round(u / days, 4)},
            "bayes_first_revisits": first_revisits(table, p),
            "seconds": round(time.perf_counter() - t0, 1),
        }
        kf = res["known_rates"]["freshness"]
        res["bayes_over_known"] = round(res["bayes"]["freshness"] / kf, 4)
        res["uniform_over_known"] = round(res["uniform"]["freshness"] / kf, 4)
        print(json.dumps(res), flush=True)
        out.append(res)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])

"""How fast the planner is on a large crawl, against the seed's pure-Python loop.

Usage::

    python benchmarks/plan_speed.py [--pages N] [--budget B] [--seed-sample M]

Builds ``N`` pages (default 10,000,000) with a year of synthetic revisit
history, then times:

``reallocate_s``
    full re-estimation of every page's rate (empirical-Bayes priors per group,
    censored posterior mode) and re-solving the optimal allocation;
``cycle_s``
    one cycle's selection by the default ``recrawl`` policy (budget ``B``
    fetches per page per day, one-hour cycles, with reserves), given the
    allocation (best of three consecutive cycles, as a planner runs them);
``greedy_cycle_s``
    one cycle of the ``greedy`` policy: the seed's priority
    ``value × freshness_gain ÷ cost`` for every page, then the top of it;
``seed_loop_s``
    the seed's loop doing the same as ``greedy``: ``priority()`` per page and a
    heap, timed (best of three) on ``M`` pages (default 200,000) and scaled
    linearly to ``N`` (heap work grows as n log n, so the scaled figure
    flatters the seed).

``speedup_vs_seed_loop`` is ``seed_loop_s / greedy_cycle_s``. Prints one JSON
object; ``peak_rss_bytes`` is the process's peak resident set size.
"""

from __future__ import annotations

import argparse
import functools
import heapq
import json
import math
import resource
import sys
import time
from types import SimpleNamespace
from typing import Any

import numpy as np

from recrawl.plan.planner import PlannerConfig, PlanPages, plan_cycle, reallocate
from recrawl.records.evidence import BIN_COLUMNS, BINS, bins_from_totals, length_bin

DAY = 86_400.0
NOW = 1_800_000_000.0


def build_pages(n: int, rng: np.random.Generator, *, irregular: bool = False) -> PlanPages:
    """``n`` pages on ``n // 2000`` sites, with a year of revisits as evidence.

    Each page's changed intervals also go into its length bins
    (:attr:`~recrawl.plan.planner.PlanPages.ev_bins`), all in one bin (regular
    revisits), or with ``irregular`` half of them at half the page's interval
    and half at 1.5 times it (two bins for most pages: the binned estimator's
    Newton steps then work on every bin)."""
    n_sites = max(1, n // 2000)
    site = rng.integers(0, n_sites, n, dtype=np.int32)
    s = PlanPages(
        value=rng.choice(np.array([1.0, 2.0, 4.0, 8.0]), n),
        cost=rng.uniform(0.5, 2.0, n),
        site=site,
        host=site,
        group=(site * 2 + rng.integers(0, 2, n, dtype=np.int32)).astype(np.int32),
        last_fetch=NOW - rng.uniform(0.0, 60.0, n) * DAY,
        first_seen=np.full(n, NOW - 400 * DAY),
        never_fetched=rng.random(n) < 0.001,
        ev_nc=np.zeros(n),
        ev_tc=np.zeros(n),
        ev_nu=np.zeros(n),
        ev_tu=np.zeros(n),
        nutch_interval=np.full(n, 30 * DAY),
        site_cost_multiplier=np.ones(n_sites),
        site_paused=np.zeros(n_sites, dtype=bool),
    )
    # a year of visits every ~10 days, in closed form per page
    rate = np.exp(rng.uniform(math.log(1 / 365), math.log(3.0), n))
    visits = rng.integers(1, 40, n)
    interval = 365.0 / visits
    p = -np.expm1(-rate * interval)
    changes = rng.binomial(visits, p).astype(np.float64)
    s.ev_nc[:] = changes
    s.ev_tc[:] = changes * interval
    s.ev_nu[:] = visits - changes
    s.ev_tu[:] = (visits - changes) * interval
    del rate, p
    # the planner's read-only copy of the bins is float16 (as the engine's)
    bins = np.zeros((n, BIN_COLUMNS), dtype=np.float16)
    step = 1 << 20
    for lo in range(0, n, step):  # in chunks: the temporaries stay small
        sl = slice(lo, min(n, lo + step))
        c, iv = changes[sl], interval[sl]
        if irregular:
            rows = np.arange(c.size)
            chunk = np.zeros((c.size, BIN_COLUMNS), dtype=np.float32)
            half = np.floor(c / 2)
            for part, f in ((half, 0.5), (c - half, 1.5)):
                k = length_bin(iv * f)
                chunk[rows, k] += part
                chunk[rows, BINS + k] += part * iv * f
            s.ev_tc[sl] = half * iv * 0.5 + (c - half) * iv * 1.5
            bins[sl] = chunk
        else:
            bins[sl] = bins_from_totals(c, c * iv)
    s.ev_bins = bins
    return s


def seed_loop(pages: list[Any], today: float, budget: float, interval_days: float) -> list[int]:
    """The seed essay's scheduler: priority() per page, a heap, spend the budget."""

    def freshness_gain(rate: float, days_since_visit: float, interval_days: float) -> float:
        p_stale = 1 - math.exp(-rate * days_since_visit)
        fresh_after = (1 - math.exp(-rate * interval_days)) / rate if rate > 0 else interval_days
        return p_stale * fresh_after

    def priority(page: Any, today: float, interval_days: float = 1.0) -> float:
        gain = freshness_gain(page.change_rate, today - page.last_fetched, interval_days)
        return float(page.value * gain / page.cost)

    heap: list[tuple[float, int]] = []
    for i, page in enumerate(pages):
        heapq.heappush(heap, (-priority(page, today, interval_days), i))
    chosen: list[int] = []
    spent = 0.0
    while heap:
        _, i = heapq.heappop(heap)
        cost = pages[i].cost
        if spent + cost > budget:
            break
        spent += cost
        chosen.append(i)
    return chosen


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=10_000_000)
    ap.add_argument("--budget", type=float, default=0.1, help="fetches per page per day")
    ap.add_argument("--seed-sample", type=int, default=200_000)
    ap.add_argument(
        "--irregular",
        action="store_true",
        help="spread each page's changed intervals over two length bins",
    )
    ap.add_argument(
        "--no-bins", action="store_true", help="no length bins: today's mean-length estimator"
    )
    args = ap.parse_args(argv)
    n = args.pages
    rng = np.random.default_rng(0)
    cfg = PlannerConfig()
    per_day = args.budget * n * 1.0  # billing units a day (mean cost ≈ 1.25)
    per_cycle = per_day * cfg.cycle_hours / 24.0

    pages = build_pages(n, rng, irregular=args.irregular)
    if args.no_bins:
        pages.ev_bins = None

    t = time.perf_counter()
    model = reallocate(pages, per_day * cfg.score_pool_share(), NOW, config=cfg)
    reallocate_s = time.perf_counter() - t

    def timed(fn: Any) -> tuple[float, Any]:
        # a planner runs cycle after cycle; on a shared machine the best of
        # three is the figure least disturbed by other processes
        times, out = [], None
        for _ in range(3):
            t = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t)
        return min(times), out

    cycle_s, plan = timed(
        functools.partial(plan_cycle, pages, per_cycle, NOW, config=cfg, rng=rng, model=model)
    )
    del model
    greedy_model = reallocate(pages, per_day, NOW, policy="greedy", config=cfg)
    no_reserves = PlannerConfig(discovery_share=0, reestimate_share=0, verify_share=0)
    greedy_cycle_s, gplan = timed(
        lambda: plan_cycle(
            pages, per_cycle, NOW, policy="greedy", config=no_reserves, model=greedy_model
        )
    )

    m = min(args.seed_sample, n)
    interval_days = float(pages.cost.sum()) / per_day
    sample = [
        SimpleNamespace(
            change_rate=float(greedy_model.rate_per_day[i]),
            last_fetched=float(pages.last_fetch[i]) / DAY,
            value=float(pages.value[i]),
            cost=float(pages.cost[i]),
        )
        for i in range(m)
    ]
    sample_s, _ = timed(lambda: seed_loop(sample, NOW / DAY, per_cycle * m / n, interval_days))
    seed_loop_s = sample_s * n / m

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = {
        "pages": n,
        "length_bins": "none" if args.no_bins else "irregular" if args.irregular else "one",
        "cycle_s": round(cycle_s, 4),
        "reallocate_s": round(reallocate_s, 3),
        "peak_rss_bytes": int(peak),
        "speedup_vs_seed_loop": round(seed_loop_s / greedy_cycle_s, 1),
        "greedy_cycle_s": round(greedy_cycle_s, 4),
        "seed_loop_s": round(seed_loop_s, 2),
        "seed_loop_sampled_pages": m,
        "bytes_per_page": round(peak / n, 1),
        "cycle_fetches": len(plan),
        "greedy_cycle_fetches": len(gplan),
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])

"""How fast ``budget_for_freshness`` prices a mean freshness on a large crawl.

Usage::

    python benchmarks/budget_speed.py [--pages N] [--target F]

Draws ``N`` pages (default 10,000,000) with rates log-uniform between one
change a year and one a day, value tiers 1, 2, 4 and costs between 0.5 and
2, then times :func:`recrawl.freshness.budget_for_freshness` for the optimal
allocation and for one interval for every page (what ``recrawl budget`` runs
per target), and checks the mean freshness the optimal budget buys. Prints
one JSON object: ``optimal_s``, ``uniform_s``, the two budgets per page per
day, the freshness reached, and ``peak_rss_bytes``.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from typing import Any

import numpy as np

from recrawl.plan.freshness import budget_for_freshness, optimal_allocation, time_averaged_freshness


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=10_000_000)
    ap.add_argument("--target", type=float, default=0.95)
    args = ap.parse_args(argv)
    n = args.pages
    rng = np.random.default_rng(0)
    lam = np.exp(rng.uniform(np.log(1 / 365), 0.0, n))
    w = rng.choice([1.0, 2.0, 4.0], n)
    c = rng.uniform(0.5, 2.0, n)
    t = time.perf_counter()
    opt = budget_for_freshness(lam, args.target, weight=w, cost=c)
    optimal_s = time.perf_counter() - t
    t = time.perf_counter()
    uni = budget_for_freshness(lam, args.target, weight=w, cost=c, allocation="uniform")
    uniform_s = time.perf_counter() - t
    f = optimal_allocation(lam, opt, weight=w, cost=c).visits_per_day
    reached = float(np.dot(w, time_averaged_freshness(lam, f)) / w.sum())
    out = {
        "pages": n,
        "target": args.target,
        "optimal_s": round(optimal_s, 2),
        "uniform_s": round(uniform_s, 2),
        "optimal_per_page": round(opt / n, 5),
        "uniform_per_page": round(uni / n, 5),
        "optimal_over_uniform": round(opt / uni, 3),
        "freshness_reached": round(reached, 6),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()

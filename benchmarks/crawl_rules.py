"""The crawl loop's politeness, hygiene, budget and freshness, from a synthetic web's logs.

Usage::

    python benchmarks/crawl_rules.py [--days D] [--day-seconds S] [--budget B] [--seeds 7,8]

For each seed, :func:`recrawl.sim.crawl.run_crawls` crawls
:func:`recrawl.sim.crawl.politeness_web` (six sites on 127.0.0.1: one with
robots.txt rules, a Crawl-delay and faulty pages, three that behave, one that
turns hostile on day 10, one that answers 429 for a few hours) with ``recrawl`` and with ``uniform``, each on its own
copy of the same web, at ``B`` fetches a day (default 300) for ``D`` simulated
days (default 20) from a cold start, a simulated day lasting ``S`` real
seconds (default 4). Prints one JSON object: per seed, what
:func:`recrawl.sim.crawl.crawl_figures` reads from the servers' request logs
(requests to robots-disallowed paths, the share of gaps under 90 % of the
Crawl-delay, requests inside Retry-After windows, the hostile site's daily
requests before it turned and after its 403 wave and when it was paused, the
share of requests to a page that always answers 500, requests to a 404 page
and to a moved page's old URL, requests over budget, and freshness: from the
cold start per policy, and from each page's first fetch on against the
hindsight optimum at the same revisits), then the worst of each over seeds.

The simulation clock multiplies real latencies by the time scale: on a busy
machine fewer requests fit in a simulated day (``requests_over_budget`` drops),
so run it on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from recrawl.sim.crawl import crawl_figures, crawl_settings, politeness_web, run_crawls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=20.0)
    ap.add_argument("--day-seconds", type=float, default=4.0)
    ap.add_argument("--budget", type=float, default=300.0)
    ap.add_argument("--seeds", default="7,8")
    args = ap.parse_args()
    out: dict[str, Any] = {"days": args.days, "day_seconds": args.day_seconds,
                           "budget_per_day": args.budget, "seeds": {}}  # fmt: skip
    for seed in (int(s) for s in args.seeds.split(",")):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.monotonic()
            runs = run_crawls(
                politeness_web(), crawl_settings(args.budget), Path(d), days=args.days,
                scale=86400.0 / args.day_seconds, seed=seed,
            )  # fmt: skip
            fig = crawl_figures(runs)
            fig["real_seconds"] = time.monotonic() - t0
            fig["load_average"] = os.getloadavg()[0]
            for r in runs.values():
                r.engine.store.close()
        out["seeds"][str(seed)] = fig
    figs = list(out["seeds"].values())
    out["worst"] = {
        "to_disallowed_paths": max(f["to_disallowed_paths"] for f in figs),
        "crawl_delay_share_under_90pct": max(f["crawl_delay_share_under_90pct"] for f in figs),
        "requests_inside_retry_after": max(f["requests_inside_retry_after"] for f in figs),
        "hostile_after_over_before": max(
            f["hostile_daily_after_wave"] / f["hostile_daily_before"] for f in figs
        ),
        "always_500_share": max(f["always_500_share"] for f in figs),
        "gone_requests": max(f["gone_requests"] for f in figs),
        "moved_old_url_requests": max(f["moved_old_url_requests"] for f in figs),
        "requests_over_budget": [
            min(f["requests_over_budget"] for f in figs),
            max(f["requests_over_budget"] for f in figs),
        ],
        "ratio_to_oracle": min(f["freshness"]["ratio"] for f in figs),
        "recrawl_minus_uniform_cold": min(
            f["freshness"]["cold_start"]["recrawl"] - f["freshness"]["cold_start"]["uniform"]
            for f in figs
        ),
    }
    print(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()

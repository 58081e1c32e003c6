"""recrawl crawling a synthetic web, against uniform and Nutch's schedule, by the web's ground truth.

Usage::

    python benchmarks/closed_loop.py [--days D] [--budgets 150,300] [--seeds 7,8,9] [--day-seconds S]

For each seed and budget (fetches a day), :func:`recrawl.sim.crawl.closed_loop`
crawls :func:`recrawl.sim.crawl.closed_loop_web` (six sites on 127.0.0.1, one
turning hostile on day 10; on the four that behave, page types whose change
rates differ widely: products about daily, home and listing pages several
times a day, policies almost never) from a cold start for ``D`` simulated days (default
30) with ``recrawl``, ``uniform`` and ``nutch``, each on an identical web (same
seed, same change times) at the same budget, all at once, a simulated day
lasting ``S`` real seconds (default 4). Prints one JSON object: per run, each
policy's freshness on the four sites that behave (from the servers' logs),
fetches, changes detected, fetches per change detected, share of revisits
answered 304, wire bytes, spend over budget, the hostile site's requests after
it turned and when it was paused; recrawl's freshness from each page's first
fetch against the hindsight optimum at the same revisits; then, over all runs,
recrawl's worst ratio to the optimum, whether it was ahead of uniform on every
run, and its fetches per change against uniform's (issue 26 asks at most 0.70).

The simulation clock multiplies real latencies by the time scale, so run it
on a quiet machine (``load_average`` is printed with each run).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from recrawl.sim.crawl import closed_loop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--budgets", default="150,300")
    ap.add_argument("--seeds", default="7,8,9")
    ap.add_argument("--day-seconds", type=float, default=4.0)
    args = ap.parse_args()
    runs: list[dict[str, Any]] = []
    for budget in (float(b) for b in args.budgets.split(",")):
        for seed in (int(s) for s in args.seeds.split(",")):
            with tempfile.TemporaryDirectory() as d:
                t0 = time.monotonic()
                got = closed_loop(
                    Path(d), days=args.days, budget_per_day=budget, seed=seed,
                    day_seconds=args.day_seconds,
                )  # fmt: skip
                got["real_seconds"] = time.monotonic() - t0
                got["load_average"] = os.getloadavg()[0]
            runs.append(got)
    rec = [r["policies"]["recrawl"] for r in runs]
    uni = [r["policies"]["uniform"] for r in runs]
    summary = {
        "min_ratio_to_optimum": min(r["warm"]["ratio"] for r in runs),
        "ahead_of_uniform_every_run": all(
            a["freshness"] > b["freshness"] for a, b in zip(rec, uni, strict=True)
        ),
        "politeness_violations": {
            name: max(r["policies"][name]["politeness"]["violations"] for r in runs)
            for name in runs[0]["policies"]
        },
        "crawl_delay_gaps_under_90pct": {
            name: max(
                r["policies"][name]["politeness"]["crawl_delay_gaps_under_90pct"] for r in runs
            )
            for name in runs[0]["policies"]
        },
        "fetches_per_change_over_uniform": [
            a["fetches_per_change"] / b["fetches_per_change"]
            for a, b in zip(rec, uni, strict=True)
            if a["fetches_per_change"] and b["fetches_per_change"]
        ],
    }
    print(json.dumps({"runs": runs, "summary": summary}, indent=2, default=str))


if __name__ == "__main__":
    main()

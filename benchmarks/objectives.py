"""The default policy against Kolobov et al.'s harmonic-staleness allocation (issue 29, item 5).

Usage::

    python benchmarks/objectives.py [--traces DIR] [--jobs N] [--budgets 0.02 0.05 0.1 0.3]
        [--suites real generated real-rates] [--seeds N]

Replays under ``recrawl`` (the default policy) and ``harmonic`` (LambdaCrawl's
rule, ρ = (−μ + √(μ² + 4wμ/λ))/2, which never starves a page) at each budget
(fetches per page per day, one-hour cycles, SPEC §5 replay semantics), scored
on binary freshness as every replay is:

``real``
    ``ota-contrib.jsonl`` and ``ota-pga.jsonl`` (Open Terms Archive, ODC-By
    1.0), replay seeds 0 … N−1;
``generated``
    ``replay.py``'s generated suites (``bursts``, ``business_hours``,
    ``rate_jump``, ``poisson``; 300 pages, one year, rates log-uniform from one
    change a year to one a day), generation seeds 11 … 10+N, replay seed 0;
``real-rates``
    the same processes at the real traces' pooled hindsight rates.

Prints one JSON object: per trace and budget each policy's freshness (the
mean over seeds, and each seed's), ``recrawl − harmonic`` (of the means), and
whether the default is ahead of or level with harmonic within 0.002 (the
issue's test); ``all_level_or_ahead`` over every case.

Measured on 2026-12-05, both policies on the same estimates, which age an
unvisited page's evidence by a change-point hazard of one jump per page
every two years (``PlannerConfig.change_hazard_per_day``), ``--seeds 3``:
``--suites generated real-rates --budgets 0.02 0.1``: the default is ahead
or level within 0.002 in all 16 cases, by 0.004–0.008 at poisson and
business hours @ 0.02. ``rate_jump`` @ 0.02: 0.5059 against 0.5054 over
generation seeds 11–13 (without the hazard, the same hour: 0.5029 against
0.5063, −0.0033, the one case behind). Over seeds 11–20 it is 0.5089
against 0.5077 (without: 0.5073 against 0.5078): a single seed moves by
±0.005, so three seeds tell this case's sign only roughly. At this budget
every page is revisited about every 45 days by either policy on seed 11 (none is
starved); the estimates cannot tell a page changing once in ten days from
one changing daily, and the hazard's ageing leans each page a little more on
its group between visits. The real traces (``--suites real --seeds 2``):
level or ahead in all 8 cases (ota-pga @ 0.02: 0.8241 against 0.8126), each
recrawl figure within 0.0005 of the code without the hazard.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from recrawl.sim.replay import generate_traces, hindsight_rates, load_traces, replay

TRACES = ("ota-contrib.jsonl", "ota-pga.jsonl")
KINDS = ("bursts", "business_hours", "rate_jump", "poisson")
SUITES = {
    "real": TRACES,
    "generated": tuple(f"generated:{k}" for k in KINDS),
    "real-rates": tuple(f"real-rates:{k}" for k in KINDS),
}
POLICIES = ("recrawl", "harmonic")
TOLERANCE = 0.002
GEN_SEED = 11  # as replay.py


def _traces(name: str, trace_dir: str, k: int) -> tuple[Any, int]:
    """The traces of ``name`` for seed number ``k``, and the replay seed."""
    if name in TRACES:
        return load_traces(Path(trace_dir) / name), k
    suite, kind = name.split(":", 1)
    rates = None
    if suite == "real-rates":
        rates = np.concatenate([hindsight_rates(load_traces(Path(trace_dir) / n)) for n in TRACES])
    return generate_traces(kind, pages=300, days=365.0, seed=GEN_SEED + k, rates=rates), 0


def _run(args: tuple[str, str, float, str, int]) -> tuple[str, float, str, int, float, float]:
    name, trace_dir, budget, policy, k = args
    t = time.perf_counter()
    traces, seed = _traces(name, trace_dir, k)
    res = replay(traces, budget, policies=[policy], seed=seed)
    fresh = float(res["policies"][policy]["freshness"])
    return name, budget, policy, k, fresh, time.perf_counter() - t


def _case(name: str) -> str:
    return name.removesuffix(".jsonl")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default="/work/shared/traces")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--budgets", type=float, nargs="+", default=[0.02, 0.05, 0.1, 0.3])
    ap.add_argument("--suites", nargs="+", choices=tuple(SUITES), default=["real"])
    ap.add_argument("--seeds", type=int, default=1, help="seeds per trace and budget")
    args = ap.parse_args(argv)
    names = [n for s in args.suites for n in SUITES[s]]
    work = [
        (name, args.traces, b, p, k)
        for k in range(args.seeds)
        for name in names
        for b in args.budgets
        for p in POLICIES
    ]
    got: dict[tuple[str, float, str], dict[int, float]] = {}
    seconds = 0.0
    with ProcessPoolExecutor(args.jobs) as pool:
        for name, b, p, k, fresh, s in pool.map(_run, work):
            got.setdefault((name, b, p), {})[k] = fresh
            seconds += s
    out: dict[str, Any] = {"tolerance": TOLERANCE, "seeds": args.seeds, "cases": {}}
    level = True
    for name in names:
        for b in args.budgets:
            r, h = (got[(name, b, p)] for p in POLICIES)
            rm, hm = statistics.fmean(r.values()), statistics.fmean(h.values())
            ok = rm >= hm - TOLERANCE
            level &= ok
            case: dict[str, Any] = {
                "recrawl": round(rm, 5),
                "harmonic": round(hm, 5),
                "recrawl_minus_harmonic": round(rm - hm, 5),
                "level_or_ahead": ok,
            }
            if args.seeds > 1:
                case["per_seed"] = {
                    p: [round(v[k], 5) for k in sorted(v)]
                    for p, v in (("recrawl", r), ("harmonic", h))
                }
            out["cases"][f"{_case(name)}@{b}"] = case
    out["all_level_or_ahead"] = level
    out["replay_cpu_s"] = round(seconds, 1)
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])

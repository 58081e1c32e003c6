"""What a sitemap buys: replays of real change traces with and without one.

Usage::

    python benchmarks/sitemap.py [--traces DIR] [--jobs N] [--hours H]

Prints one JSON object. For ``ota-contrib.jsonl`` and ``ota-pga.jsonl`` (Open
Terms Archive) at budgets 0.02 and 0.1 fetches per page per day (SPEC §5
semantics, one-hour cycles), under ``real[trace][budget]``:

``oracle``
    the hindsight optimum's freshness, without a sitemap (the same yardstick
    as ``benchmarks/replay.py``);
``recrawl``
    for no sitemap (``none``) and each kind of simulated sitemap read every
    ``--hours`` (default 24, free: see :func:`recrawl.simulate.replay`):
    freshness, its ratio to ``oracle``, its gain over ``none``, fetches,
    changes detected, cost per change and, with a sitemap, the final trust
    verdicts recrawl reached from its own revisits (pooled over the trace's
    sites: covered revisits, recall, precision, how many sites trust its
    silence and its moves, and the fetches made on a trusted move or of a
    page its trusted silence vouched for);
``uniform``, ``greedy``
    freshness without a sitemap and with the honest one, and the ratio to
    ``oracle``.

``seconds`` gives each replay's wall time (replays run ``--jobs`` at a time,
so they include contention; the first key is trace@budget:policy:kind).

Traces derived from Open Terms Archive (ODC-By 1.0).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from recrawl.sim.replay import SITEMAP_KINDS, load_traces, replay

BUDGETS = (0.02, 0.1)
REAL = ("ota-contrib.jsonl", "ota-pga.jsonl")
NONE = "none"
Task = tuple[str, str, float, str, str, float]


@functools.cache
def _traces(trace_dir: str, name: str) -> Any:
    return load_traces(Path(trace_dir) / name)


def _run(task: Task) -> tuple[Task, dict[str, Any], float]:
    """Replay one trace under one policy, with a sitemap of one kind or none."""
    name, trace_dir, budget, policy, kind, hours = task
    kw: dict[str, Any] = {} if kind == NONE else {"sitemap_hours": hours, "sitemap_kind": kind}
    t = time.perf_counter()
    res = replay(_traces(trace_dir, name), budget, policies=[policy], **kw)
    return task, dict(res["policies"][policy]), time.perf_counter() - t


def _trust(v: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "sites",
        "revisits",
        "recall",
        "precision",
        "quiet_sites",
        "changes_sites",
        "quiet_page_share",
        "changes_page_share",
        "fetches_known_stale",
        "fetches_vouched",
    )
    return {k: v[k] for k in keys}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--traces", default="/work/shared/traces")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--hours", type=float, default=24.0, help="sitemap read interval, hours")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    if not args.hours > 0:
        ap.error("--hours must be positive")
    t0 = time.perf_counter()
    runs = [("oracle", NONE)]
    runs += [("recrawl", k) for k in (NONE, *SITEMAP_KINDS)]
    runs += [(p, k) for p in ("uniform", "greedy") for k in (NONE, "honest")]
    tasks: list[Task] = [
        (name, args.traces, b, p, k, args.hours) for name in REAL for b in BUDGETS for p, k in runs
    ]
    # the longest first, so the pool ends together: recrawl and greedy, contrib, large budget
    tasks.sort(key=lambda t: (t[3] in ("oracle", "uniform"), t[0] != REAL[0], -t[2]))
    got: dict[tuple[str, float, str, str], dict[str, Any]] = {}
    seconds: dict[str, float] = {}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for done, (task, res, sec) in enumerate(pool.map(_run, tasks), 1):
            name, _, b, p, k, _ = task
            got[(name, b, p, k)] = res
            seconds[f"{name}@{b}:{p}:{k}"] = round(sec, 1)
            print(
                f"{done}/{len(tasks)} replays, {time.perf_counter() - t0:,.0f} s",
                file=sys.stderr,
                flush=True,
            )

    real: dict[str, Any] = {}
    for name in REAL:
        real[name] = {}
        for b in BUDGETS:
            oracle = got[(name, b, "oracle", NONE)]["freshness"]
            base = got[(name, b, "recrawl", NONE)]["freshness"]
            recrawl: dict[str, Any] = {}
            for kind in (NONE, *SITEMAP_KINDS):
                r = got[(name, b, "recrawl", kind)]
                row: dict[str, Any] = {
                    "freshness": round(r["freshness"], 4),
                    "to_oracle": round(r["freshness"] / oracle, 4),
                    "gain": round(r["freshness"] - base, 4),
                    "fetches": r["fetches"],
                    "changes_detected": r["changes_detected"],
                    "cost_per_change": (
                        round(r["cost_per_change"], 3) if r["cost_per_change"] else None
                    ),
                }
                if "sitemap_trust" in r:
                    row["trust"] = _trust(r["sitemap_trust"])
                recrawl[kind] = row
            table: dict[str, Any] = {"oracle": round(oracle, 4), "recrawl": recrawl}
            for p in ("uniform", "greedy"):
                f = {k: got[(name, b, p, k)]["freshness"] for k in (NONE, "honest")}
                table[p] = {
                    **{k: round(v, 4) for k, v in f.items()},
                    "honest_to_oracle": round(f["honest"] / oracle, 4),
                }
            real[name][str(b)] = table
    out: dict[str, Any] = {
        "sitemap": {"hours": args.hours, "read_cost": 0},
        "real": real,
        "seconds": {"total": round(time.perf_counter() - t0, 1), "runs": seconds},
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])

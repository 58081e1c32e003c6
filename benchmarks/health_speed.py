"""Health scoring speed from a large store, and what bucket maintenance costs ingest.

Usage: python benchmarks/health_speed.py [--observations 10000000] [--sites 1000] [--days 7]
       [--compare 1000000] [--db PATH]

1. Generates ``--observations`` fetch observations spread over ``--sites``
   sites and ``--days`` days and ingests them through the normal path
   (``ingest_lines``) into a fresh SQLite store (or re-uses ``--db``).
2. Times ``Engine.health`` (read buckets, baselines, smoothing warm-up, score,
   no recording) for every site as of the end of the log.
3. Ingests ``--compare`` observations into fresh stores, with and without
   bucket maintenance (alternating, twice each), and reports both rates and
   the storing process's CPU per observation: first at the density of the
   large store (the same sites over ``days × compare / observations`` days),
   then, keys ending ``_sparse``, over ``--days`` days (about one fetch per
   site, route and 15 minutes: nearly one bucket row per observation, the
   worst case for bucket maintenance).

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Iterator

import numpy as np
import orjson

from recrawl.engine.engine import Engine
from recrawl.engine.ingest import ingest_lines
from recrawl.store import SQLiteStore

START = 1_767_225_600


def lines(n: int, sites: int, days: float, seed: int = 0) -> Iterator[str]:
    """JSONL observations in time order (chunks of 100k), ids unique."""
    rng = np.random.default_rng(seed)
    span = days * 86400.0
    chunk = 100_000
    done = 0
    while done < n:
        k = min(chunk, n - done)
        t = np.sort(rng.uniform(done / n * span, (done + k) / n * span, k)) + START
        site = rng.integers(0, sites, k)
        page = rng.integers(0, 200, k)
        u = rng.random(k)
        lat = rng.lognormal(5.8, 0.5, k)
        version = (t // 86400).astype(np.int64) + page % 3
        for i in range(k):
            s = int(site[i])
            o: dict[str, object] = {
                "url": f"https://s{s}.example/p/{int(page[i])}",
                "fetched_at": float(t[i]),
                "route": "pool-a" if i % 2 else "pool-b",
                "latency_ms": float(lat[i]),
                "bytes_received": 50_000,
                "id": f"h{done + i}",
            }
            if u[i] < 0.01:
                o["status"] = 429
            elif u[i] < 0.015:
                o["status"] = 200
                o["title"] = "Just a moment..."
            else:
                o["status"] = 200
                o["record_hash"] = f"v{int(version[i])}"
            yield orjson.dumps(o).decode()
        done += k


def ingest_rate(n: int, sites: int, days: float, maintain: bool, d: str) -> tuple[float, float]:
    """(observations per second, storing process CPU µs per observation) into a fresh store."""
    path = os.path.join(d, f"cmp-{maintain}.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    store = SQLiteStore(path, maintain_buckets=maintain)
    log = os.path.join(d, "cmp.jsonl")
    if not os.path.exists(log):
        with open(log, "w") as f:
            for line in lines(n, sites, days, seed=1):
                f.write(line + "\n")
    t = time.perf_counter()
    c = time.process_time()
    with open(log) as f:
        rep = ingest_lines(store, f)
    cpu = time.process_time() - c
    dt = time.perf_counter() - t
    store.close()
    return rep.stored / dt, cpu / rep.stored * 1e6


def compare(n: int, sites: int, days: float, d: str) -> dict[str, float]:
    """Ingest with and without bucket maintenance, alternating, twice each (best runs)."""
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    log = os.path.join(d, "cmp.jsonl")
    if os.path.exists(log):
        os.remove(log)
    for maintain in (True, False, True, False):
        runs[maintain].append(ingest_rate(n, sites, days, maintain, d))
    on = max(r for r, _ in runs[True])
    off = max(r for r, _ in runs[False])
    on_cpu = min(c for _, c in runs[True])
    off_cpu = min(c for _, c in runs[False])
    return {
        "compare_days": round(days, 3),
        "ingest_per_s_with_buckets": round(on),
        "ingest_per_s_without_buckets": round(off),
        "bucket_maintenance_slowdown": round(1 - on / off, 3),
        "ingest_cpu_us_per_obs_with_buckets": round(on_cpu, 2),
        "ingest_cpu_us_per_obs_without_buckets": round(off_cpu, 2),
        "bucket_maintenance_cpu_share": round(1 - off_cpu / on_cpu, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--observations", type=int, default=10_000_000)
    ap.add_argument("--sites", type=int, default=1000)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--compare", type=int, default=1_000_000)
    ap.add_argument("--db", default=None, help="Re-use (or build) the large store here.")
    args = ap.parse_args()
    out: dict[str, object] = {
        "observations": args.observations,
        "sites": args.sites,
        "days": args.days,
    }
    with tempfile.TemporaryDirectory() as d:
        db = args.db or os.path.join(d, "big.db")
        store = SQLiteStore(db)
        have = store.observation_count()
        if have < args.observations:
            t = time.perf_counter()
            rep = ingest_lines(store, lines(args.observations, args.sites, args.days))
            out["build_ingest_per_s"] = round(rep.stored / (time.perf_counter() - t))
        out["stored_observations"] = store.observation_count()
        at = START + args.days * 86400.0
        eng = Engine(store)
        eng.health(at, record=False)  # warm the page cache once
        times = []
        for _ in range(3):
            t = time.perf_counter()
            reports = eng.health(at, record=False)
            times.append(time.perf_counter() - t)
        out["sites_scored"] = len(reports)
        out["sites_with_score"] = sum(r["score"] is not None for r in reports)
        out["score_all_sites_s"] = round(min(times), 3)
        out["score_all_sites_s_runs"] = [round(x, 3) for x in times]
        store.close()
        if args.compare:
            # Same density as the large store (its first --compare observations'
            # worth of time), then --days: as sparse as a 1,000-site log gets,
            # about one fetch per site, route and 15 minutes, so nearly every
            # observation is a bucket row of its own (the worst case).
            dense_days = args.days * args.compare / args.observations
            for label, days in (("", dense_days), ("_sparse", float(args.days))):
                out.update(
                    {k + label: v for k, v in compare(args.compare, args.sites, days, d).items()}
                )
            out["load_average"] = round(os.getloadavg()[0], 2)
    out["targets"] = {"score_all_sites_s": 2.0, "bucket_maintenance_slowdown": 0.10}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

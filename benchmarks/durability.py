"""What ``durability = "full"`` costs: service-style batch commits into SQLite,
fsynced (``synchronous=FULL``) and not (``NORMAL``), in one run.

Usage: python benchmarks/durability.py [--batches 200] [--sizes 50,500,5000] [--dir DIR]

Each size: ``--batches`` transactions of that many new observations (what the
service's writer commits for one group of reports) into a fresh store in
``--dir`` (default: a temporary directory; give one on the disk a deployment
uses), alternating the two settings batch by batch in two stores, so both see
the same disk and load. Prints one JSON object: per setting and size, the
median and 95th-percentile commit in milliseconds and observations per second.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from typing import Any

from recrawl.engine.pipeline import store_batch
from recrawl.observe.observation import parse_observation
from recrawl.store import SQLiteStore

SETTINGS = ("full", "normal")


def batch(k: int, n: int) -> list[Any]:
    return [
        parse_observation(
            {
                "url": f"https://s{i % 50}.example/b{k}/p{i}",
                "fetched_at": 1_700_000_000 + k * n + i,
                "status": 200,
                "record_hash": f"h{k}-{i}",
                "bytes_received": 20_000,
            }
        )
        for i in range(n)
    ]


def run(size: int, batches: int, workdir: str) -> dict[str, dict[str, float]]:
    stores = {
        d: SQLiteStore(os.path.join(workdir, f"{d}-{size}.db"), durability=d)  # type: ignore[arg-type]
        for d in SETTINGS
    }
    times: dict[str, list[float]] = {d: [] for d in SETTINGS}
    for k in range(batches):
        obs = batch(k, size)
        for d in SETTINGS if k % 2 == 0 else reversed(SETTINGS):
            t = time.perf_counter()
            store_batch(stores[d], obs)
            times[d].append(time.perf_counter() - t)
    out = {}
    for d, ts in times.items():
        stores[d].close()
        ts.sort()
        out[d] = {
            "commit_ms_median": round(statistics.median(ts) * 1e3, 3),
            "commit_ms_p95": round(ts[int(0.95 * (len(ts) - 1))] * 1e3, 3),
            "obs_per_s": round(size * len(ts) / sum(ts)),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--sizes", default="50,500,5000")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(dir=args.dir) as workdir:
        result: dict[str, Any] = {
            "dir": args.dir or tempfile.gettempdir(),
            "load_before": round(os.getloadavg()[0], 2),
            "batches": args.batches,
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        for size in sizes:
            result[f"batch_{size}"] = run(size, max(4, args.batches * 50 // size), workdir)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

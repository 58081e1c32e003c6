"""Prune speed: shrink a SQLite store's observation log, keeping its newest part.

Usage: python benchmarks/prune.py [--observations 1000000] [--pages 100000] [--keep 0.1]

Builds a store from the same generated fetch log as ``benchmarks/ingest.py``,
then times ``recrawl.engine.pipeline.prune_log`` at the fetch time that keeps the newest
``--keep`` share of the observations, and a ``VACUUM`` after it. Prints one
JSON object: observations removed, pages checkpointed, seconds, and the file
size before, after the prune (SQLite reuses the space, the file keeps its
size) and after the vacuum. The load average before the run is printed:
other work on the machine slows it.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--observations", type=int, default=1_000_000)
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--keep", type=float, default=0.1, help="share of the log to keep (0–1)")
    args = ap.parse_args(argv)
    if not 0.0 <= args.keep < 1.0:
        ap.error("--keep must be at least 0 and below 1")

    from recrawl.engine.ingest import ingest_lines
    from recrawl.engine.pipeline import prune_log
    from recrawl.store import SQLiteStore
    from recrawl.testing.fetchlog import write_fetch_log

    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        log, db = os.path.join(d, "log.jsonl"), os.path.join(d, "s.db")
        write_fetch_log(log, args.observations, n_pages=args.pages)
        with SQLiteStore(db) as s, open(log) as f:
            ingest_lines(s, f)
        os.remove(log)
        with SQLiteStore(db) as s:
            total = s.observation_count()
            ((before,),) = s.execute(
                "SELECT fetched_at FROM observations ORDER BY fetched_at LIMIT 1 OFFSET ?",
                (int(total * (1.0 - args.keep)),),
            )
            size0 = s.size_bytes()
            t = time.perf_counter()
            rep = prune_log(s, before)
            prune_s = time.perf_counter() - t
            size1 = s.size_bytes()
            t = time.perf_counter()
            s.vacuum()
            vacuum_s = time.perf_counter() - t
            size2 = s.size_bytes()
    out = {
        "observations": total,
        "removed": rep.observations_removed,
        "pages_checkpointed": rep.pages_checkpointed,
        "prune_s": round(prune_s, 2),
        "removed_per_s": round(rep.observations_removed / prune_s) if prune_s > 0 else None,
        "vacuum_s": round(vacuum_s, 2),
        "bytes_before": size0,
        "bytes_after_prune": size1,
        "bytes_after_vacuum": size2,
        "load_before": round(load, 2),
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()

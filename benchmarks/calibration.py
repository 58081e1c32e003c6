"""Calibration check speed: ``Engine.calibration`` over a store's log.

Usage: python benchmarks/calibration.py [--observations 1000000] [--pages 100000] [--days 30]

Builds a SQLite store from a generated fetch log (``recrawl.testing``: Poisson
pages, the volatile ``fetched`` record field ignored as ``recrawl ingest``
would be told to), then times the check of the last ``--days`` of it: reading
the pages' content fetches, replaying their evidence and scoring every
revisit in the window. ``check_peak_bytes`` is the check's own peak of
allocations (tracemalloc, numpy's included), not the ingest's. Prints one
JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import tracemalloc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--observations", type=int, default=1_000_000)
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--days", type=float, default=30.0)
    args = ap.parse_args()

    from recrawl.engine.engine import Engine
    from recrawl.engine.ingest import ingest_lines
    from recrawl.observe.fingerprint import FieldRule
    from recrawl.store import SQLiteStore
    from recrawl.testing.fetchlog import write_fetch_log

    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "log.jsonl")
        write_fetch_log(log, args.observations, n_pages=args.pages)
        store = SQLiteStore(os.path.join(d, "s.db"))
        rule = FieldRule(ignore=("fetched",))
        rules = {pt: rule for pt in ("product", "category", "article", "listing", "page")}
        with open(log, encoding="utf-8") as f:
            ingest_lines(store, f, rules=rules)
        os.remove(log)
        engine = Engine(store)
        t = time.perf_counter()
        cal = engine.calibration(days=args.days)
        seconds = time.perf_counter() - t
        tracemalloc.start()  # a second run for memory: tracing slows it down
        engine.calibration(days=args.days)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        store.close()
    print(
        json.dumps(
            {
                "observations": args.observations,
                "pages": args.pages,
                "days": args.days,
                "revisits_checked": cal.overall.revisits,
                "seconds": round(seconds, 3),
                "revisits_per_s": round(cal.overall.revisits / seconds) if seconds else None,
                "check_peak_bytes": peak,
                "bytes_per_revisit": round(peak / max(cal.overall.revisits, 1)),
                "skill": round(cal.skill, 4),
                "verdict": cal.verdict(),
            }
        )
    )


if __name__ == "__main__":
    main()

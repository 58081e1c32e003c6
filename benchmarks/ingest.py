"""Ingest speed: observations per second into a fresh SQLite store, and peak memory.

Usage: python benchmarks/ingest.py [--observations 1000000] [--pages 100000] [--classifier]
Prints one JSON object. Memory is sampled as the peak RSS (ru_maxrss) of the
storing process and of its parsing workers, at two input sizes (a tenth and
the whole, over the same pages) to show whether it stays flat. ``--classifier`` also runs the content
checks that ``recrawl ingest`` runs (block-page markers, soft blocks). The load
average before the run is printed: other work on the machine slows it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def run_one(n: int, pages: int, workdir: str, classifier: bool) -> dict[str, float]:
    log = os.path.join(workdir, f"log-{n}.jsonl")
    from recrawl.testing.fetchlog import write_fetch_log

    write_fetch_log(log, n, n_pages=pages)
    code = (
        "import json, resource, sys, time\n"
        "from recrawl.engine.ingest import ContentClassifier, ingest_lines\n"
        "from recrawl.store import SQLiteStore\n"
        "s = SQLiteStore(sys.argv[2])\n"
        "c = ContentClassifier() if sys.argv[3] == '1' else None\n"
        "t = time.perf_counter()\n"
        "with open(sys.argv[1]) as f:\n"
        "    rep = ingest_lines(s, f, classifier=c)\n"
        "dt = time.perf_counter() - t\n"
        "s.close()\n"
        "ru = resource.getrusage\n"
        "print(json.dumps({'stored': rep.stored, 'seconds': dt,"
        " 'peak_rss_bytes': ru(resource.RUSAGE_SELF).ru_maxrss * 1024,"
        " 'worker_peak_rss_bytes': ru(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))\n"
    )
    db = os.path.join(workdir, f"bench-{n}.db")
    out = subprocess.run(
        [sys.executable, "-c", code, log, db, "1" if classifier else "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    res = json.loads(out.stdout)
    res["observations_per_s"] = res["stored"] / res["seconds"]
    res["db_bytes"] = os.path.getsize(db)
    os.remove(log)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--observations", type=int, default=1_000_000)
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--classifier", action="store_true", help="run the content checks too")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        # same pages, a tenth of the observations: what grows is due to the input size
        small = run_one(args.observations // 10, args.pages, d, args.classifier)
        big = run_one(args.observations, args.pages, d, args.classifier)
    print(
        json.dumps(
            {
                "observations": big["stored"],
                "seconds": round(big["seconds"], 2),
                "observations_per_s": round(big["observations_per_s"]),
                "peak_rss_bytes": big["peak_rss_bytes"],
                "peak_rss_bytes_at_tenth": small["peak_rss_bytes"],
                "worker_peak_rss_bytes": big["worker_peak_rss_bytes"],
                "worker_peak_rss_bytes_at_tenth": small["worker_peak_rss_bytes"],
                "content_checks": args.classifier,
                "load_average_before": round(load, 2),
                "observations_per_s_at_tenth": round(small["observations_per_s"]),
                "db_bytes": big["db_bytes"],
                "target_observations_per_s": 50_000,
                "cpu": os.cpu_count(),
                "resource_check": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > 0,
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )
    )


if __name__ == "__main__":
    main()

"""Health through the product path: the generated 12-site × 3-week log is written
as JSONL, ingested with ``recrawl ingest`` into a fresh SQLite store, and
reviewed with ``recrawl health review`` against its labelled incidents.

Usage: python benchmarks/health_store_eval.py [--seed 0]
Prints one JSON object: ingest time, per-incident detection delay, band reached,
top reason, and false alarms (the production scorer, as users run it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from recrawl.sim.health import default_scenario


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sc = default_scenario(args.seed)
    with tempfile.TemporaryDirectory() as d:
        log, inc, db = Path(d) / "log.jsonl", Path(d) / "incidents.jsonl", Path(d) / "h.db"
        n = 0
        with log.open("w") as f:
            for o in sc.observations():
                f.write(json.dumps(o) + "\n")
                n += 1
        inc.write_text(
            "".join(
                json.dumps(
                    {k: getattr(i, k) for k in ("site", "start", "end", "cause", "band", "route")}
                )
                + "\n"
                for i in sc.incidents
            )
        )
        cli = [sys.executable, "-m", "recrawl"]
        t = time.perf_counter()
        subprocess.run(
            [*cli, "ingest", str(log), "--db", str(db), "-q"], check=True, capture_output=True
        )
        ingest_s = time.perf_counter() - t
        t = time.perf_counter()
        out = subprocess.run(
            [*cli, "health", "review", "--incidents", str(inc), "--db", str(db), "--json"],
            check=True,
            capture_output=True,
            text=True,
        )
        review_s = time.perf_counter() - t
    rep = json.loads(out.stdout)
    print(
        json.dumps(
            {
                "seed": args.seed,
                "observations": n,
                "ingest_s": round(ingest_s, 1),
                "review_s": round(review_s, 1),
                "incidents": [
                    {
                        k: r[k]
                        for k in (
                            "site",
                            "cause",
                            "expected_band",
                            "moved_after_s",
                            "detected_after_s",
                            "band_reached",
                            "top_reason",
                            "cause_named",
                        )
                    }
                    for r in rep["incidents"]
                ],
                "all_detected_within_1_5_h": all(
                    r["detected_after_s"] is not None and r["detected_after_s"] <= 5400
                    for r in rep["incidents"]
                ),
                "false_alarms": rep["false_alarms"],
            }
        )
    )


if __name__ == "__main__":
    main()

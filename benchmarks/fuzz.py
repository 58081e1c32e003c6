"""The parsers fuzzed long: ``tests/observe/test_fuzz.py``'s targets, many examples each.

Usage: python benchmarks/fuzz.py [--examples 20000] [--targets observation,document,...]

Each target (an observation, lines of observations, a hint, hint lines, a
lastmod, a sitemap/feed document) runs ``--examples`` Hypothesis examples: the
parser must return a valid object or raise the error it documents, within
the test's deadline per example. Prints one JSON object: per target the
examples run, the failure found (shrunk, with its input) or null, and seconds;
then the totals. Exits 1 when a target failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "observe"))

import test_fuzz


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=20_000)
    ap.add_argument("--targets", default=",".join(test_fuzz.TARGETS))
    args = ap.parse_args()
    out: dict[str, Any] = {"examples_per_target": args.examples, "targets": {}}
    ran = failures = 0
    t0 = time.perf_counter()
    for name in args.targets.split(","):
        t = time.perf_counter()
        count = [0]
        failure = None
        try:
            count[0] = test_fuzz.run(name, args.examples)
        except Exception as exc:  # the shrunk failure Hypothesis found
            failures += 1
            failure = "".join(traceback.format_exception_only(exc)).strip()[-4000:]
        out["targets"][name] = {
            "examples": count[0],
            "failure": failure,
            "seconds": round(time.perf_counter() - t, 2),
        }
        ran += count[0]
    out |= {"examples": ran, "failures": failures, "seconds": round(time.perf_counter() - t0, 2)}
    print(json.dumps(out, indent=2))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

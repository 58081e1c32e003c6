"""What a trusted sitemap costs the ingest: fetch reports folded with and without one.

Usage::

    python benchmarks/hint_fold.py [--pages 100000] [--reads 30] [--batches 10]
                                   [--batch 10000] [--db URL_OR_PATH]

A revisit that found a change, on a site whose sitemap is trusted both ways,
is folded as unchanged until the sitemap's first move after the previous
fetch (:func:`recrawl.hints.quiet_until`): the store reads that move from its
hint log. This measures the worst case: every page was fetched once, then
the sitemap was read ``--reads`` times, a day apart, and moved every page at
every read (so each page has ``--reads`` log rows after its fetch); then
``--batches`` batches of ``--batch`` revisits, half of them changed, are
ingested into a copy of that store without a kept verdict (``bare``) and
with one trusting the sitemap (``trusted``). ``--db`` is a SQLite path
(default: a temporary file) or a ``postgresql://`` URL (its tables are
created in a fresh schema, dropped at the end).

Prints one JSON object: reports per second for both, the overhead
(``bare / trusted − 1``) and ``split``, the revisits folded as a quiet
stretch and a change.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from typing import Any

import numpy as np

from recrawl.engine.pipeline import store_batch
from recrawl.estimate.hints import Hint
from recrawl.observe.observation import Observation, with_keys
from recrawl.store import open_store

DAY = 86_400.0
T0 = 1_700_000_000.0
VERDICT = json.dumps(
    {
        "hour": 0,
        "days": 90,
        "trust": [{"site": "a.example", "source": "sitemap", "quiet": True, "changes": True}],
        "lags": [["a.example", "sitemap", 0.8 * DAY]],
    }
)


def _obs(url: str, t: float, version: int) -> Observation:
    return Observation(
        url=url, fetched_at=t, site="a.example", page_type="page", status=200,
        bytes_sent=500, bytes_received=40_000, record_hash=f"h{version}",
    )  # fmt: skip


def _seed(store: Any, urls: list[str], reads: int, batch: int) -> None:
    first = [_obs(u, T0 + (i % 1000), 0) for i, u in enumerate(urls)]
    with_keys(first)
    # listed (unchanged for ten days) before the first fetch: the sitemap vouches from there
    store.ingest_hints([Hint(u, T0 - DAY, "sitemap", T0 - 10 * DAY) for u in urls], add_urls=True)
    for k in range(0, len(first), batch):
        store_batch(store, first[k : k + batch])
    rng = np.random.default_rng(0)
    for d in range(1, reads + 1):
        seen = T0 + d * DAY
        lastmod = seen - rng.uniform(0.05, 0.9, len(urls)) * DAY
        store.ingest_hints(
            [Hint(u, seen, "sitemap", float(m)) for u, m in zip(urls, lastmod, strict=True)]
        )


def _batches(urls: list[str], reads: int, n: int, size: int) -> list[list[Observation]]:
    rng = np.random.default_rng(1)
    out = []
    for b in range(n):
        pages = rng.choice(len(urls), size, replace=False)
        at = T0 + (reads + 1) * DAY + b * 3600.0
        changed = rng.random(size) < 0.5
        o = [
            _obs(urls[i], at + i % 600, int(c))
            for i, c in zip(pages.tolist(), changed, strict=True)
        ]
        with_keys(o)
        out.append(o)
    return out


def _run(store: Any, batches: list[list[Observation]]) -> tuple[float, float]:
    store_batch(store, batches[0][:10])  # warm the store's caches
    nu0 = store.execute("SELECT sum(ev_nu) FROM pages")[0][0]
    t = time.perf_counter()
    n = sum(store_batch(store, b).stored for b in batches)
    spent = time.perf_counter() - t
    nu = store.execute("SELECT sum(ev_nu) FROM pages")[0][0]
    return n / spent, nu - nu0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--reads", type=int, default=30)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--db", default=None, help="SQLite path or postgresql:// URL")
    args = ap.parse_args()
    urls = [f"https://a.example/p/{i}" for i in range(args.pages)]
    batches = _batches(urls, args.reads, args.batches, min(args.batch, args.pages))
    out: dict[str, Any] = {"pages": args.pages, "reads": args.reads}
    rates: dict[str, float] = {}
    quiet: dict[str, float] = {}
    pg = args.db is not None and args.db.startswith("postgres")
    tmp = tempfile.mkdtemp()
    try:
        base = os.path.join(tmp, "base.db")
        if not pg:
            store = open_store(args.db or base)
            _seed(store, urls, args.reads, args.batch)
            store.close()
        for name in ("bare", "trusted"):
            if pg:  # a fresh schema each: the same seed, then the run
                import psycopg

                schema = f"bench_hint_fold_{name}"
                with psycopg.connect(args.db, autocommit=True) as admin:
                    admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
                    admin.execute(f"CREATE SCHEMA {schema}")
                sep = "&" if "?" in args.db else "?"
                store = open_store(f"{args.db}{sep}options=-csearch_path%3D{schema}")
                _seed(store, urls, args.reads, args.batch)
            else:
                path = os.path.join(tmp, f"{name}.db")
                shutil.copy(args.db or base, path)
                store = open_store(path)
            if name == "trusted":
                store.set_hint_verdict(VERDICT)
            rates[name], quiet[name] = _run(store, batches)
            store.close()
            if pg:
                with psycopg.connect(args.db, autocommit=True) as admin:
                    admin.execute(f"DROP SCHEMA {schema} CASCADE")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["bare_per_s"] = round(rates["bare"])
    out["trusted_per_s"] = round(rates["trusted"])
    out["overhead"] = round(rates["bare"] / rates["trusted"] - 1.0, 3)
    # each split revisit adds one quiet stretch to ev_nu (decayed a little since)
    out["split"] = round(quiet["trusted"] - quiet["bare"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()

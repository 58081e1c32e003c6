"""Hint ingest speed: a sitemap of N known URLs into a SQLite store, read again unchanged.

Usage::

    python benchmarks/hint_ingest.py [--urls 1000000] [--db PATH]

Prints one JSON object: hints per second for a first read (every hint new),
an unchanged re-read in a fresh process's store handle (only ``last_seen``
moves), the same with the page ids cached, the identical read ingested
twice, parsing a sitemap of N entries (:func:`recrawl.hints.read_sitemap`, no
store) and a sitemap end to end (parse and store); ``log_rows`` shows that
an unchanged re-read adds no rows to the hint log.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import tempfile
import time
from collections.abc import Iterator

from recrawl.estimate.hints import Hint, read_sitemap
from recrawl.store import open_store

T = 1_700_000_000.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--urls", type=int, default=1_000_000)
    ap.add_argument("--db", default=None, help="store path (default: a temporary file)")
    args = ap.parse_args()
    n = args.urls
    db = args.db or os.path.join(tempfile.mkdtemp(), "hints.db")
    urls = [f"https://s{i % 100}.example/p/{i}" for i in range(n)]
    store = open_store(db)
    for i in range(0, n, 100_000):
        store.add_urls([(u, u.split("/")[2], "page", 1.0) for u in urls[i : i + 100_000]], 0.0)
    store.close()

    def hints(seen: float) -> Iterator[Hint]:
        return (Hint(u, seen, "sitemap", T - (i % 1000) * 3600.0) for i, u in enumerate(urls))

    def rate(seen: float, *, fresh: bool, expect: str) -> int:
        nonlocal store
        if fresh:  # a cold page-id cache, as a separate `recrawl hints add` has
            store.close()
            store = open_store(db)
        t0 = time.perf_counter()
        r = store.ingest_hints(hints(seen))
        spent = time.perf_counter() - t0
        assert getattr(r, expect) == n, r
        return round(n / spent)

    store = open_store(db)
    out: dict[str, object] = {"urls": n}
    out["first_read_per_s"] = rate(T, fresh=True, expect="stored")
    out["unchanged_read_per_s"] = rate(T + 86_400, fresh=True, expect="unchanged")
    out["unchanged_warm_ids_per_s"] = rate(T + 2 * 86_400, fresh=False, expect="unchanged")
    out["same_read_again_per_s"] = rate(T + 2 * 86_400, fresh=False, expect="unchanged")
    out["log_rows"] = store.execute("SELECT count(*) FROM hint_log")[0][0]
    xml = io.BytesIO(
        (
            "<?xml version='1.0'?><urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'>"
            + "".join(
                f"<url><loc>{u}</loc><lastmod>2024-05-{1 + i % 28:02d}T10:00:00+00:00</lastmod></url>"
                for i, u in enumerate(urls)
            )
            + "</urlset>"
        ).encode()
    )
    t0 = time.perf_counter()
    k = sum(1 for _ in read_sitemap(xml, seen_at=T))
    out["sitemap_parse_per_s"] = round(k / (time.perf_counter() - t0))
    xml.seek(0)
    store.close()
    store = open_store(db)
    t0 = time.perf_counter()
    store.ingest_hints(h for h in read_sitemap(xml, seen_at=T + 3 * 86_400) if isinstance(h, Hint))
    out["sitemap_end_to_end_per_s"] = round(n / (time.perf_counter() - t0))
    store.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""Bytes per change detected, with and without a page type's ``json_url``.

Two crawls from a cold start, at once, each on an identical synthetic web
(same seed, same change times) at the same budget in fetches: one shop whose
pages serve a JSON twin (``SiteSpec(json_twin=True)``: ``/p/<i>.json``, the
record alone). One crawl reads the pages' HTML (``fields`` by CSS), the other
their twins (``json_url = "{url}.json"``, ``fields`` by JMESPath). From the
server's request log and the stores: requests, 200s and 304s, wire bytes
(request and answer, headers included: what a bandwidth-billed proxy
charges), changes detected, bytes per change detected, freshness.

Prints JSON. ``python benchmarks/json_endpoints.py`` (3 days at 8 real seconds
a day: about 25 seconds). On 2026-12-05 (a shared machine), 40 pages changing
about twice a day, 160 fetches a day, seeds 7 / 8, HTML against ``json_url``:

- requests 424 / 422 against 426 / 426 (about 65 % of them 304s either way);
- wire bytes 1,279,559 / 1,352,552 against 194,961 / 197,499;
- changes detected 107 / 121 against 107 / 125;
- bytes per change detected 11,959 / 11,178 against 1,822 / 1,580 (0.152 /
  0.141 of the HTML's: 6.6x / 7.1x fewer);
- freshness 0.804 / 0.790 against 0.825 / 0.810.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from recrawl.clock import ScaledClock
from recrawl.config import Settings
from recrawl.crawl.loop import Crawler, EmbeddedSource
from recrawl.engine.engine import Engine
from recrawl.sim.web import SimWeb, SiteSpec
from recrawl.store import open_store

DAY = 86400.0
ORIGIN = 1_800_000_000.0


def settings(budget: float, json_url: bool) -> Settings:
    rule: dict[str, Any] = (
        {"json_url": "{url}.json", "fields": {"price": "jmespath:price", "stock": "jmespath:stock"}}
        if json_url
        else {"fields": {"price": ".price::text", "stock": ".stock::text"}}
    )
    return Settings.model_validate(
        {
            "budget_per_day": budget,
            "durability": "normal",
            "cycle_hours": 1,
            "page_types": {"product": rule},
            "crawl": {"allow_private_networks": True, "min_delay_s": 30},
        }
    )


async def crawl(web: SimWeb, s: Settings, db: Path, days: float) -> dict[str, Any]:
    host = web.sites[0]
    urls = web.urls(host)
    store = open_store(str(db))
    try:
        engine = Engine(store, s, clock=web.clock)
        engine.add_urls([{"url": u, "site": host, "page_type": "product"} for u in urls])
        start = web.clock()
        await Crawler(EmbeddedSource(engine), s, clock=web.clock).run(start + days * DAY)
        changes = sum(p.changes for u in urls if (p := store.page(u)) is not None)
    finally:
        store.close()
    log = [r for r in web.request_log.snapshot() if r.path.startswith("/p/")]
    wire = sum(r.bytes_in + r.bytes_out for r in log)
    return {
        "requests": len(log),
        "ok": sum(1 for r in log if r.status == 200),
        "not_modified": sum(1 for r in log if r.status == 304),
        "json_requests": sum(1 for r in log if r.served == "json"),
        "wire_bytes": wire,
        "bytes_per_request": round(wire / max(len(log), 1), 1),
        "changes_detected": changes,
        "bytes_per_change": round(wire / changes, 1) if changes else None,
        "requests_per_change": round(len(log) / changes, 3) if changes else None,
        "freshness": round(web.freshness_from_log(urls, start, web.clock()), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=40)
    ap.add_argument("--rate", type=float, default=2.0, help="changes per page per day")
    ap.add_argument("--budget", type=float, default=160.0, help="fetches per day")
    ap.add_argument("--days", type=float, default=3.0)
    ap.add_argument("--day-seconds", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    clock = ScaledClock(DAY / a.day_seconds, real_origin=time.time(), virtual_origin=ORIGIN)
    spec = SiteSpec("shop", n_pages=a.pages, rate_per_day=a.rate, json_twin=True)
    with (
        tempfile.TemporaryDirectory() as tmp,
        SimWeb([spec], clock=clock, seed=a.seed, origin=ORIGIN) as web_html,
        SimWeb([spec], clock=clock, seed=a.seed, origin=ORIGIN) as web_json,
    ):

        async def both() -> list[dict[str, Any]]:
            return list(
                await asyncio.gather(
                    crawl(web_html, settings(a.budget, False), Path(tmp, "h.db"), a.days),
                    crawl(web_json, settings(a.budget, True), Path(tmp, "j.db"), a.days),
                )
            )

        html, js = asyncio.run(both())
    out = {
        "pages": a.pages,
        "rate_per_day": a.rate,
        "budget_per_day": a.budget,
        "days": a.days,
        "seed": a.seed,
        "html": html,
        "json_url": js,
        "bytes_per_change_ratio": (
            round(js["bytes_per_change"] / html["bytes_per_change"], 4)
            if js["bytes_per_change"] and html["bytes_per_change"]
            else None
        ),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

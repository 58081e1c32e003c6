"""Freshness of the Scrapy add-on against recrawl crawl and a plain Scrapy spider, same web and budget.

Usage::

    python benchmarks/scrapy_freshness.py [--days D] [--day-seconds S] [--budget B]

Three identical synthetic webs (``recrawl.sim.web.SimWeb``, four sites of 40
pages changing 2, 1, 0.5 and 0.2 times a day, seed 7) on one simulation clock
(a simulated day lasting ``S`` real seconds, default 4), crawled at the same
time for ``D`` simulated days (default 20) at ``B`` fetches a day (default 300)
from a cold start: by ``recrawl crawl``'s loop in this process, by a Scrapy
spider with ``recrawl.scrapy.RecrawlAddon`` in a child process, and by a plain
Scrapy spider revisiting every URL in turn at the same rate in another.
Prints one JSON object: per crawler, page requests, 304s and freshness from
its web's request log, over the whole run and from day 1 on (the add-on starts
a few simulated hours late: Scrapy's start-up at 21,600× is hours); the
add-on's ``recrawl/*`` stats. Run it on a quiet machine: the simulation clock
multiplies real latencies by the time scale.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from recrawl.clock import ScaledClock
from recrawl.config import load_settings
from recrawl.crawl.loop import Crawler, EmbeddedSource
from recrawl.engine.engine import Engine
from recrawl.sim.web import SimWeb, SiteSpec
from recrawl.store import open_store

DAY = 86400.0
ORIGIN = 1_800_000_000.0
CONFIG = """budget_per_day = {budget}
cycle_hours = 1
site_concurrency = 1
[page_types.product.fields]
name = "h1.name::text"
price = ".price::text"
stock = ".stock::text"
[crawl]
allow_private_networks = true
min_delay_s = 30
"""
ADDON = """
import json, sys
from scrapy.crawler import CrawlerProcess
from recrawl.scrapy import RecrawlSpider
class Shop(RecrawlSpider):
    name = "shop"
    def parse(self, response):
        yield {"name": response.css("h1.name::text").get(), "price": response.css(".price::text").get(),
               "stock": response.css(".stock::text").get()}
p = CrawlerProcess(json.loads(sys.argv[1])); c = p.create_crawler(Shop); p.crawl(c); p.start()
print(json.dumps({k: v for k, v in c.stats.get_stats().items() if k.startswith("recrawl/")}, default=str))
"""
PLAIN = """
import asyncio, json, sys, time
import scrapy
from scrapy.crawler import CrawlerProcess
cfg = json.loads(sys.argv[1])
class Plain(scrapy.Spider):
    name = "plain"
    async def start(self):
        urls, per_s, end = cfg["urls"], cfg["per_real_s"], time.time() + cfg["real_s"]
        i, t0 = 0, time.time()
        while time.time() < end:
            due = t0 + i / per_s
            if due > time.time():
                await asyncio.sleep(due - time.time()); continue
            yield scrapy.Request(urls[i % len(urls)], dont_filter=True, callback=self.parse)
            i += 1
    def parse(self, response):
        yield {"price": response.css(".price::text").get()}
p = CrawlerProcess({"TELNETCONSOLE_ENABLED": False, "LOG_LEVEL": "WARNING", "ROBOTSTXT_OBEY": True,
                    "CONCURRENT_REQUESTS_PER_DOMAIN": 1, "DOWNLOAD_DELAY": cfg["delay"], "ITEM_PIPELINES": {}})
p.crawl(Plain); p.start()
"""


def specs() -> list[SiteSpec]:
    return [
        SiteSpec("news", n_pages=40, rate_per_day=2.0),
        SiteSpec("listings", n_pages=40, rate_per_day=1.0),
        SiteSpec("shop", n_pages=40, rate_per_day=0.5),
        SiteSpec("docs", n_pages=40, rate_per_day=0.2),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=20.0)
    ap.add_argument("--day-seconds", type=float, default=4.0)
    ap.add_argument("--budget", type=float, default=300.0)
    args = ap.parse_args()
    days, scale, budget = args.days, DAY / args.day_seconds, args.budget
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "recrawl.toml").write_text(CONFIG.format(budget=budget))
        (tmp / "addon.py").write_text(ADDON)
        (tmp / "plain.py").write_text(PLAIN)
        real0 = time.time() + 3.0
        clock = ScaledClock(scale, real_origin=real0, virtual_origin=ORIGIN)
        settings = load_settings(tmp / "recrawl.toml")
        horizon = (days + 2) * DAY
        webs = {
            k: SimWeb(specs(), clock=clock, seed=7, origin=ORIGIN, horizon_s=horizon).start()
            for k in ("crawl", "addon", "plain")
        }
        try:
            engines = {}
            for name in ("crawl", "addon"):
                store = open_store(str(tmp / f"{name}.db"))
                engine = Engine(store, settings, clock=clock)
                w = webs[name]
                rows = [
                    {"url": u, "site": h, "page_type": "product"}
                    for h in w.sites
                    for u in w.urls(h)
                ]
                engine.add_urls(rows, now=ORIGIN)
                engines[name] = engine
            engines["addon"].store.close()
            while time.time() < real0:
                time.sleep(0.01)
            start = clock()
            until = start + days * DAY
            real_s = days * DAY / scale
            addon_cfg = {
                "ADDONS": {"recrawl.scrapy.RecrawlAddon": 500},
                "RECRAWL_DB": str(tmp / "addon.db"),
                "RECRAWL_CONFIG": str(tmp / "recrawl.toml"),
                "RECRAWL_RUN_FOR": f"{days * DAY}",
                "RECRAWL_TIME_SCALE": scale,
                "RECRAWL_CLOCK_ORIGIN": f"{real0}={ORIGIN}",
                "TELNETCONSOLE_ENABLED": False,
                "LOG_LEVEL": "WARNING",
            }
            run = [sys.executable]
            addon = subprocess.Popen(
                [*run, "addon.py", json.dumps(addon_cfg)], cwd=tmp,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            purls = [u for h in webs["plain"].sites for u in webs["plain"].urls(h)]
            plain_cfg = {"urls": purls, "per_real_s": budget / DAY * scale, "real_s": real_s,
                         "delay": 30 / scale}  # fmt: skip
            plain = subprocess.Popen(
                [*run, "plain.py", json.dumps(plain_cfg)], cwd=tmp,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            crawler = Crawler(EmbeddedSource(engines["crawl"]), settings, clock=clock)
            asyncio.run(crawler.run(until))
            aout, aerr = addon.communicate(timeout=real_s + 60)
            _, perr = plain.communicate(timeout=real_s + 60)
            engines["crawl"].store.close()
            out: dict[str, Any] = {"days": days, "real_s_per_day": args.day_seconds,
                                   "budget": budget * days}  # fmt: skip
            for k, w in webs.items():
                log = w.request_log.snapshot()
                pages = [r for r in log if r.path.startswith("/p/")]
                urls = [u for h in w.sites for u in w.urls(h)]
                out[k] = {
                    "requests": len(pages),
                    "freshness": w.freshness_from_log(urls, start, until, log=log),
                    "freshness_after_day1": w.freshness_from_log(urls, start + DAY, until, log=log),
                    "not_modified": sum(r.status == 304 for r in pages),
                }
            lines = aout.strip().splitlines()
            out["addon_stats"] = json.loads(lines[-1]) if lines else aerr[-2000:]
            if perr.strip():
                out["plain_stderr"] = perr[-1500:]
            print(json.dumps(out, indent=2))
        finally:
            for w in webs.values():
                w.stop()


if __name__ == "__main__":
    main()

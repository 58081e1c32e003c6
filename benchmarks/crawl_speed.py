"""Pages per second the recrawl crawl loop sustains on loopback, side by side with Scrapy.

Usage::

    python benchmarks/crawl_speed.py [--pages 2000] [--sites 4] [--repeat 3]

A synthetic web (:class:`recrawl.sim.web.SimWeb`) serves ``--sites`` sites of
``pages / sites`` product pages each (``/p/<i>``, 5-9 KB of HTML with
``h1.name``, ``.price``, ``.stock``) from this process; its robots.txt
disallows only ``/private/`` and has no Crawl-delay. Each site is its own
SimWeb on its own loopback address (``127.0.0.1``, ``127.0.0.2``, ...): Scrapy
keys its per-domain slots by host name without the port, so sites sharing
``127.0.0.1`` would share one slot of 8 and handicap it. The clients run in
child processes (so neither shares the server's GIL), one after the other on
a fresh web each time, interleaved ``recrawl, scrapy, ceiling, recrawl, ...``
``--repeat`` times:

``recrawl``
    ``Crawler(EmbeddedSource(Engine(store)))`` on the system clock, a fresh
    SQLite store with the pages registered (not timed), ``budget_per_day =
    24 × pages`` and one-hour cycles (one cycle's budget = all the pages),
    ``concurrency`` 32, ``site_concurrency`` 8, ``min_delay_s`` 0, fields
    extracted per page type, observations written to the store. Timed from
    ``crawler.run()`` until it returns: a watcher sets ``crawler.stop`` once
    every page was requested (or the first cycle ended, should its plan not
    cover every page); the stop lets the fetches in flight finish and flushes
    every observation to the store before ``run`` returns. The planner's
    first-cycle call (health bands, plan) is inside the timed window.
``scrapy``
    a plain ``scrapy.Spider`` (``start_urls`` = the same pages) extracting the
    same three fields with ``response.css`` into items dropped by a no-op
    pipeline; ``CONCURRENT_REQUESTS`` 32, ``CONCURRENT_REQUESTS_PER_DOMAIN``
    8, ``DOWNLOAD_DELAY`` 0, ``ROBOTSTXT_OBEY``, no AutoThrottle, run by
    ``CrawlerProcess``. Timed from ``spider_opened`` to ``spider_closed``.
``ceiling``
    what the server answers at most to one light client: an aiohttp loop (C
    HTTP parser, 8 connections per site, 32 in all) GETting the same pages and
    reading the bodies, nothing else. When both crawlers come close to it, the
    server, not the crawler, sets the pace; ``cpu_ms_per_page`` (the client
    process's user + system CPU inside its timed window, per page) then still
    compares the clients' own cost.

``pages_per_s`` is pages stored (recrawl), items scraped (scrapy) or bodies
read (ceiling) per wall second of the timed window; ``ratio_median`` is
recrawl's median over scrapy's (the target: at least 1). Every run is checked
against the server's request log (each page requested exactly once, all 200).
Prints one JSON object; ``loadavg_1m`` (before, after) shows how busy the
machine was besides (rates on a shared machine vary run to run; the CPU per
page varies less).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CLIENT_TIMEOUT_S = 300.0
ROBOTS = "User-agent: *\nDisallow: /private/\n"
FIELDS = {"name": "h1.name::text", "price": ".price::text", "stock": ".stock::text"}
CONCURRENCY = 32
PER_SITE = 8


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# -- clients (child processes) -------------------------------------------------------------


def _child_recrawl(job: dict[str, Any], profile: str | None) -> dict[str, Any]:
    from recrawl.clock import system_clock
    from recrawl.config import Settings
    from recrawl.crawl.loop import Crawler, CrawlTask, EmbeddedSource
    from recrawl.engine.engine import Engine
    from recrawl.store import open_store

    urls: list[str] = job["urls"]
    n = len(urls)
    settings = Settings.model_validate(
        {
            "budget_per_day": n * 24,
            "cycle_hours": 1,
            "site_concurrency": PER_SITE,
            "page_types": {"product": {"fields": FIELDS}},
            "crawl": {
                "allow_private_networks": True,
                "min_delay_s": 0,
                "concurrency": CONCURRENCY,
            },
        }
    )
    planned: list[int] = []

    class CountingSource(EmbeddedSource):
        async def tasks(self, *args: Any, **kwargs: Any) -> list[CrawlTask]:
            # (whatever TaskSource.tasks takes; only the count is wanted)
            out: list[CrawlTask] = await super().tasks(*args, **kwargs)
            planned.append(len(out))
            return out

    with tempfile.TemporaryDirectory(prefix="crawl-speed-") as tmp:
        store = open_store(str(Path(tmp) / "bench.db"))
        clock = system_clock
        engine = Engine(store, settings, clock=clock)
        engine.add_urls(
            [{"url": u, "site": u.split("/")[2], "page_type": "product"} for u in urls],
            now=clock(),
        )
        crawler = Crawler(CountingSource(engine), settings, clock=clock)

        async def watch() -> None:
            # stop once every page was requested, or once the first cycle is
            # over (run() sets real_seconds after each cycle, before waiting
            # out the rest of the hour)
            while not crawler.stop.is_set():
                if crawler.stats.requests >= n or crawler.stats.real_seconds > 0:
                    crawler.stop.set()
                    return
                await asyncio.sleep(0.002)

        async def go() -> tuple[float, float, Any]:
            watcher = asyncio.create_task(watch())
            cpu0, t0 = _cpu_s(), time.perf_counter()
            # until two hours on: run() pro-rates a cycle cut short by `until`, and
            # clock() + 3600 taken before run() starts would leave a budget a hair under n
            stats = await asyncio.wait_for(crawler.run(clock() + 7200), CLIENT_TIMEOUT_S)
            wall, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
            watcher.cancel()
            return wall, cpu, stats

        if profile:
            import cProfile
            import io
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            wall, cpu, stats = asyncio.run(go())
            prof.disable()
            buf = io.StringIO()
            ps = pstats.Stats(prof, stream=buf).sort_stats("cumulative")
            ps.print_stats(25)
            ps.sort_stats("tottime").print_stats(25)
            Path(profile).write_text(buf.getvalue())
        else:
            wall, cpu, stats = asyncio.run(go())
        store.close()
    return {
        "pages": stats.stored,
        "wall_s": wall,
        "cpu_s": cpu,
        "requests": stats.requests,
        "ok": stats.ok,
        "stored": stats.stored,
        "rejected": stats.rejected,
        "robots_requests": stats.robots_requests,
        "first_cycle_planned": sum(planned),
        "task_calls": len(planned),
        "cycles": stats.cycles,
        "crawl_real_seconds": stats.real_seconds,
    }


def _child_scrapy(job: dict[str, Any]) -> dict[str, Any]:
    import scrapy
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess

    timing: dict[str, float] = {}
    count = {"items": 0, "empty": 0}

    class BenchSpider(scrapy.Spider):
        name = "bench"
        start_urls = job["urls"]

        @classmethod
        def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> Any:
            spider = super().from_crawler(crawler, *args, **kwargs)
            crawler.signals.connect(spider.opened, signal=signals.spider_opened)
            crawler.signals.connect(spider.closed_, signal=signals.spider_closed)
            crawler.signals.connect(spider.scraped, signal=signals.item_scraped)
            return spider

        def opened(self, spider: Any) -> None:
            timing["cpu0"], timing["t0"] = _cpu_s(), time.perf_counter()

        def closed_(self, spider: Any, reason: str) -> None:
            timing["t1"], timing["cpu1"] = time.perf_counter(), _cpu_s()
            timing["reason"] = reason  # type: ignore[assignment]

        def scraped(self, item: Any, response: Any, spider: Any) -> None:
            count["items"] += 1
            if not item.get("name"):
                count["empty"] += 1

        def parse(self, response: Any) -> Any:
            yield {k: response.css(sel).get() for k, sel in FIELDS.items()}

    class NoOpPipeline:
        def process_item(self, item: Any) -> Any:
            return item

    mod = sys.modules[__name__]
    mod.NoOpPipeline = NoOpPipeline  # type: ignore[attr-defined]
    process = CrawlerProcess(
        settings={
            "CONCURRENT_REQUESTS": CONCURRENCY,
            "CONCURRENT_REQUESTS_PER_DOMAIN": PER_SITE,
            "DOWNLOAD_DELAY": 0,
            "ROBOTSTXT_OBEY": True,
            "AUTOTHROTTLE_ENABLED": False,
            "LOG_LEVEL": "WARNING",
            "TELNETCONSOLE_ENABLED": False,
            "ITEM_PIPELINES": {f"{mod.__name__}.NoOpPipeline": 100},
            "CLOSESPIDER_TIMEOUT": CLIENT_TIMEOUT_S,
        }
    )
    process.crawl(BenchSpider)
    process.start()
    return {
        "pages": count["items"],
        "wall_s": timing["t1"] - timing["t0"],
        "cpu_s": timing["cpu1"] - timing["cpu0"],
        "empty_names": count["empty"],
        "close_reason": timing.get("reason"),
    }


def _child_ceiling(job: dict[str, Any]) -> dict[str, Any]:
    import aiohttp

    urls: list[str] = job["urls"]
    by_site: dict[str, list[str]] = {}
    for u in urls:
        by_site.setdefault(u.split("/")[2], []).append(u)

    async def go() -> tuple[int, float, float]:
        conn = aiohttp.TCPConnector(limit=CONCURRENCY, limit_per_host=PER_SITE)
        timeout = aiohttp.ClientTimeout(total=CLIENT_TIMEOUT_S)
        got = 0
        async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:

            async def worker(queue: list[str]) -> None:
                nonlocal got
                while queue:
                    async with session.get(queue.pop()) as r:
                        body = await r.read()
                        if r.status == 200 and body:
                            got += 1

            cpu0, t0 = _cpu_s(), time.perf_counter()
            await asyncio.gather(*(worker(q) for q in by_site.values() for _ in range(PER_SITE)))
            return got, time.perf_counter() - t0, _cpu_s() - cpu0

    got, wall, cpu = asyncio.run(go())
    return {"pages": got, "wall_s": wall, "cpu_s": cpu}


# -- the parent: server, interleaving, checks ----------------------------------------------


def _one_run(
    kind: str, n_pages: int, n_sites: int, seed: int, profile: str | None
) -> dict[str, Any]:
    from recrawl.sim.web import SimWeb, SiteSpec

    per_site = [n_pages // n_sites + (1 if k < n_pages % n_sites else 0) for k in range(n_sites)]
    webs = [
        SimWeb(
            [SiteSpec(f"site{k}", n_pages=per_site[k], robots=ROBOTS)],
            seed=seed,
            host=f"127.0.0.{k + 1}",
        )
        for k in range(n_sites)
    ]
    try:
        for w in webs:
            w.start()
        urls = [u for w in webs for u in w.urls()]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"urls": urls}, f)
            job_path = f.name
        cmd = [sys.executable, __file__, "--child", kind, "--job", job_path]
        if profile:
            cmd += ["--profile-out", profile]
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S + 60
            )
        finally:
            os.unlink(job_path)
        if proc.returncode != 0:
            raise RuntimeError(f"{kind} client failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        log = [r for w in webs for r in w.request_log.snapshot()]
    finally:
        for w in webs:
            w.stop()
    pages = [r for r in log if r.path.startswith("/p/")]
    distinct = {(r.site, r.path) for r in pages}
    out["server_page_requests"] = len(pages)
    out["server_ok"] = all(r.status == 200 for r in pages)
    out["each_page_once"] = len(pages) == len(distinct) == n_pages
    out["pages_per_s"] = out["pages"] / out["wall_s"] if out["wall_s"] > 0 else None
    out["cpu_ms_per_page"] = 1000 * out["cpu_s"] / out["pages"] if out["pages"] else None
    return out


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    rates = [r["pages_per_s"] for r in runs]
    cpu = [r["cpu_ms_per_page"] for r in runs if r["cpu_ms_per_page"] is not None]
    return {
        "pages_per_s": [round(x, 1) for x in rates],
        "median": round(statistics.median(rates), 1),
        "cpu_ms_per_page_median": round(statistics.median(cpu), 3) if cpu else None,
        "pages_done": [r["pages"] for r in runs],
        "each_page_once": all(r["each_page_once"] and r["server_ok"] for r in runs),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=2000)
    ap.add_argument("--sites", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--profile", metavar="FILE", help="also run recrawl once under cProfile; stats to FILE"
    )
    ap.add_argument("--no-ceiling", action="store_true", help="skip the aiohttp ceiling runs")
    ap.add_argument("--child", choices=["recrawl", "scrapy", "ceiling"], help=argparse.SUPPRESS)
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--profile-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        job = json.loads(Path(args.job).read_text())
        if args.child == "recrawl":
            res = _child_recrawl(job, args.profile_out)
        elif args.child == "scrapy":
            res = _child_scrapy(job)
        else:
            res = _child_ceiling(job)
        print(json.dumps(res))
        return res

    if not 1 <= args.sites <= 254 or args.pages < args.sites:
        ap.error("need 1 <= --sites <= 254 and --pages >= --sites")
    kinds = ["recrawl", "scrapy"] + ([] if args.no_ceiling else ["ceiling"])
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    load_before = os.getloadavg()[0]
    for rep in range(args.repeat):
        for kind in kinds:
            runs[kind].append(_one_run(kind, args.pages, args.sites, args.seed + rep, None))
    rec, scr = _summary(runs["recrawl"]), _summary(runs["scrapy"])
    first_plan = [r["first_cycle_planned"] for r in runs["recrawl"]]
    ceiling = _summary(runs["ceiling"]) if "ceiling" in runs else None
    out: dict[str, Any] = {
        "pages": args.pages,
        "sites": args.sites,
        "recrawl": {**rec, "first_cycle_planned": first_plan},
        "scrapy": scr,
        "ratio_median": round(rec["median"] / scr["median"], 3),
        "cpu_ratio_median": (
            round(rec["cpu_ms_per_page_median"] / scr["cpu_ms_per_page_median"], 3)
            if rec["cpu_ms_per_page_median"] and scr["cpu_ms_per_page_median"]
            else None
        ),
        "server_ceiling_pages_per_s": ceiling["median"] if ceiling else None,
        "ceiling": ceiling,
        "machine": os.cpu_count(),
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    notes = []
    if any(p < args.pages for p in first_plan):
        notes.append(
            f"the first cycle's plan covered {min(first_plan)} of {args.pages} pages "
            "(planner); rates are over the pages stored"
        )
    if ceiling:
        top = max(rec["median"], scr["median"])
        if top > 0.8 * ceiling["median"]:
            notes.append(
                "a crawler reaches over 80% of the server's ceiling: the server sets the pace; "
                "compare cpu_ms_per_page"
            )
        else:
            notes.append(
                f"the server answers {ceiling['median'] / top:.0f}x faster than the faster "
                "crawler: the clients, not the server, set the pace"
            )
    notes.append(
        "ratio_median = recrawl/scrapy pages per wall second (target >= 1); "
        "cpu_ratio_median = recrawl/scrapy client CPU per page (lower is better)"
    )
    out["note"] = "; ".join(notes)
    if args.profile:
        _one_run("recrawl", args.pages, args.sites, args.seed, args.profile)
        out["profile"] = args.profile
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])

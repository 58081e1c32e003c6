"""The add-on's politeness in a real Scrapy crawl with AutoThrottle on.

One crawl (module fixture, a ``CrawlerProcess`` in a subprocess as in
``test_addon.py``): two simulated days at a day per 6 real seconds over a
synthetic web on 127.0.0.1 whose ``slow`` site asks for a 20-minute
``Crawl-delay`` in its robots.txt while the plan would give it most of the
budget (120 pages changing three times a day), beside two quiet sites, a site
answering 429 with a two-hour ``Retry-After`` for half a day, and a paused
site; checked against the server's request log and the store.
"""

from __future__ import annotations

import collections
import itertools
import json
import math
import time
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("scrapy")

from scrapy_run import crawl_with_scrapy, product_rows

from recrawl.clock import ScaledClock
from recrawl.engine.engine import Engine
from recrawl.sim.web import RequestRecord, SimWeb, SiteSpec
from recrawl.store import open_store

DAY = 86400.0
HOUR = 3600.0
DAYS = 2
ORIGIN = 1_800_000_000.0
SCALE = DAY / 6.0
BUDGET_PER_DAY = 240.0
CRAWL_DELAY = 1200.0  # seconds of crawl time: at most three requests an hour
BUSY = [(0.5 * DAY, 1.0 * DAY, "429")]

CONFIG = f"""\
budget_per_day = {BUDGET_PER_DAY:g}
cycle_hours = 1
site_concurrency = 1

[page_types.product.fields]
name = "h1.name::text"
price = ".price::text"
stock = ".stock::text"

[crawl]
allow_private_networks = true
min_delay_s = 60
user_agent = "acme-bot/1 (+https://acme.example/bot)"
"""

SPIDER = """
class Shop(RecrawlSpider):
    name = "shop"

    def parse(self, response):
        yield {
            "name": response.css("h1.name::text").get(),
            "price": response.css(".price::text").get(),
            "stock": response.css(".stock::text").get(),
        }
"""


@dataclass
class Run:
    log: list[RequestRecord]
    stats: dict[str, Any]
    db: str
    sites: dict[str, str]  # name -> host:port
    log_text: str


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("scrapy_politeness")
    real0 = time.time()
    clock = ScaledClock(SCALE, real_origin=real0, virtual_origin=ORIGIN)
    robots = f"User-agent: *\nDisallow: /private/\nCrawl-delay: {CRAWL_DELAY:g}\n"
    specs = [
        SiteSpec("slow", n_pages=120, rate_per_day=3.0, robots=robots),
        SiteSpec("a", n_pages=15, rate_per_day=0.5),
        SiteSpec("b", n_pages=15, rate_per_day=0.5),
        SiteSpec("busy", n_pages=10, rate_per_day=1.0, hostile=BUSY, retry_after_s=7200),
        SiteSpec("paused", n_pages=5, rate_per_day=1.0),
    ]
    with SimWeb(specs, clock=clock, seed=23, origin=ORIGIN, horizon_s=(DAYS + 1) * DAY) as web:
        sites = {s.name: web.site(s.name) for s in specs}
        rows = product_rows(web, sites.values())
        got, db = crawl_with_scrapy(
            tmp,
            clock,
            config=CONFIG,
            spider=SPIDER,
            rows=rows,
            run_for=f"{DAYS}d",
            paused=[sites["paused"]],
            AUTOTHROTTLE_ENABLED=True,
        )
        yield Run(web.request_log.snapshot(), got.stats, db, sites, got.stderr)


def _pages(run: Run, site: str | None = None) -> list[RequestRecord]:
    host = None if site is None else run.sites[site]
    return sorted(
        (r for r in run.log if r.path != "/robots.txt" and (host is None or r.site == host)),
        key=lambda r: r.t,
    )


@pytest.mark.slow  # the add-on's AutoThrottle crawl (14 s); make test-slow
def test_autothrottle_is_on_and_every_request_is_one_observation(run: Run) -> None:
    assert "scrapy.extensions.throttle.AutoThrottle" in run.log_text  # enabled extension
    seen = collections.Counter(r.url for r in _pages(run))
    with open_store(run.db) as store:
        logged = store.outcomes_many(list(seen))
        total = Engine(store).stats()["total"]["fetches"]
    assert collections.Counter({u: len(v) for u, v in logged.items()}) == seen
    assert total == sum(seen.values()) == run.stats["recrawl/observations"]
    assert run.stats["recrawl/stored"] == total


@pytest.mark.slow  # the add-on's AutoThrottle crawl (14 s); make test-slow
def test_requests_to_a_crawl_delay_site_are_that_far_apart(run: Run) -> None:
    """robots.txt says 1200 s; the add-on's own delay is 60 s."""
    slow = _pages(run, "slow")
    assert len(slow) >= 20
    gaps = [b.t - a.t for a, b in itertools.pairwise(slow)]
    assert min(gaps) >= 0.9 * CRAWL_DELAY, sorted(gaps)[:5]


@pytest.mark.slow  # the add-on's AutoThrottle crawl (14 s); make test-slow
def test_a_slow_sites_surplus_goes_to_the_other_sites(run: Run) -> None:
    """The plan would give the slow site more than three fetches an hour;
    each cycle hands it no more than its Crawl-delay lets it make, and the
    rest of the budget is spent on the other sites, within 10 %."""
    slow = _pages(run, "slow")
    per_hour = collections.Counter(math.floor((r.t - ORIGIN) / HOUR) for r in slow)
    assert max(per_hour.values()) <= math.floor(HOUR / CRAWL_DELAY) + 1
    budget = BUDGET_PER_DAY * DAYS
    spent = run.stats["recrawl/spent"]
    assert 0.9 * budget <= spent <= budget + 1, (spent, budget)
    others = len(_pages(run)) - len(slow)
    assert others >= 0.9 * budget - len(slow)
    mine = {k: v for k, v in run.stats.items() if k.startswith("recrawl/")}
    print(json.dumps({"slow": len(slow), "others": others, "slow_max_per_hour":
                      max(per_hour.values()), **mine}))  # fmt: skip
    assert run.stats["recrawl/fitted_out"] > 0  # the plan asked for more


@pytest.mark.slow  # the add-on's AutoThrottle crawl (14 s); make test-slow
def test_retry_after_is_honoured_with_autothrottle(run: Run) -> None:
    busy = _pages(run, "busy")
    windows = [(r.t, r.retry_after_until) for r in busy if r.retry_after_until is not None]
    assert windows, "the busy site never answered 429"
    inside = [r for r in busy if any(t < r.t < u - 1.0 for t, u in windows if u is not None)]
    assert inside == []


@pytest.mark.slow  # the add-on's AutoThrottle crawl (14 s); make test-slow
def test_a_paused_site_gets_no_request_with_autothrottle(run: Run) -> None:
    assert [r for r in run.log if r.site == run.sites["paused"]] == []

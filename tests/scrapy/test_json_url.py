"""The Scrapy add-on honours a page type's ``json_url`` as ``recrawl crawl`` does.

One crawl (module fixture) of a synthetic web on 127.0.0.1 by a ``CrawlerProcess``
in a subprocess, a simulated day at a day per 6 real seconds: a shop whose
pages have a JSON twin (``/p/<i>.json``) and one whose twins answer 404, the
page type reading the JSON with ``jmespath:`` fields and the page with
``html_fields`` when its twin is missing; and a shop whose robots.txt
disallows the twins. Checked against the server's own
request log and the store.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("scrapy")

from scrapy_run import crawl_with_scrapy, product_rows

from recrawl.clock import ScaledClock
from recrawl.sim.web import RequestRecord, SimWeb, SiteSpec
from recrawl.store import open_store

DAY = 86400.0
ORIGIN = 1_800_000_000.0
SCALE = DAY / 6.0

CONFIG = """\
budget_per_day = 120
cycle_hours = 1
site_concurrency = 1

[page_types.product]
json_url = "{url}.json"
fields = { price = "jmespath:price", stock = "jmespath:stock" }
html_fields = { price = ".price::text", stock = ".stock::text" }

[crawl]
allow_private_networks = true
min_delay_s = 60
"""

SPIDER = """
class Shop(RecrawlSpider):
    name = "shop"

    def parse(self, response):
        kind = "json" if response.meta.get("recrawl_json") else "page"
        self.crawler.stats.inc_value(f"test/parsed_{kind}")
        # no item: the record is the page type's fields, read from the body
"""


@dataclass
class Run:
    log: list[RequestRecord]
    stats: dict[str, Any]
    db: str
    sites: dict[str, str]
    stderr: str


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("scrapy_json")
    real0 = time.time()
    clock = ScaledClock(SCALE, real_origin=real0, virtual_origin=ORIGIN)
    specs = [
        SiteSpec("twin", n_pages=8, rate_per_day=3.0, json_twin=True),
        SiteSpec("html", n_pages=8, rate_per_day=3.0),  # every /p/<i>.json answers 404
        SiteSpec(
            "robots", n_pages=8, json_twin=True, robots="User-agent: *\nDisallow: /p/*.json\n"
        ),
    ]
    with SimWeb(specs, clock=clock, seed=5, origin=ORIGIN, horizon_s=2 * DAY) as web:
        sites = {s.name: web.site(s.name) for s in specs}
        rows = product_rows(web, sites.values())
        got, db = crawl_with_scrapy(
            tmp, clock, config=CONFIG, spider=SPIDER, rows=rows, run_for="1d", timeout=60
        )
        yield Run(web.request_log.snapshot(), got.stats, db, sites, got.stderr)


def _requests(run: Run, site: str) -> list[RequestRecord]:
    return sorted(
        (r for r in run.log if r.site == run.sites[site] and r.path != "/robots.txt"),
        key=lambda r: r.t,
    )


def test_pages_with_a_twin_are_fetched_as_json_only(run: Run) -> None:
    got = _requests(run, "twin")
    assert len(got) > 16  # every page, then revisits
    assert all(r.path.endswith(".json") and r.served == "json" for r in got)
    assert run.stats["test/parsed_json"] >= sum(r.status == 200 for r in got)
    assert run.stats["recrawl/json_requests"] >= len(got)


def test_a_missing_twin_falls_back_to_the_page_once_per_page(run: Run) -> None:
    got = _requests(run, "html")
    twins = [r for r in got if r.path.endswith(".json")]
    assert sorted(r.path for r in twins) == sorted({r.path for r in twins})  # once each
    assert {r.status for r in twins} == {404}
    pages = [r for r in got if not r.path.endswith(".json")]
    assert {r.path + ".json" for r in pages} == {r.path for r in twins}
    for tw in twins:  # the page follows its twin's 404 at once
        first = min(r.t for r in pages if r.path + ".json" == tw.path)
        assert first >= tw.t
    assert len(twins) == 8
    assert "for the JSON of" in run.stderr  # logged once for the site


def test_a_twin_robots_txt_disallows_falls_back_to_the_page(run: Run) -> None:
    got = _requests(run, "robots")
    assert got and not [r for r in got if r.path.endswith(".json")]
    assert len({r.path for r in got}) == 8  # every page, read from its HTML
    assert run.stats["recrawl/json_fallbacks"] == 16  # 8 missing twins, 8 disallowed
    assert run.stats.get("recrawl/disallowed", 0) == 0


def test_one_observation_per_planned_fetch_and_no_twin_404_reported(run: Run) -> None:
    """Each planned fetch is one observation of the page's URL (a twin's 404
    and the page after it: one), none of them a 404: no page is gone."""
    with open_store(run.db) as store:
        cols = store.page_columns()
        fetches = int(cols["fetches"].sum())
        assert not cols["gone"].any()
    planned = (
        len(_requests(run, "twin"))
        + sum(not r.path.endswith(".json") for r in _requests(run, "html"))
        + len(_requests(run, "robots"))
    )
    assert fetches == planned == run.stats["recrawl/observations"]


def test_changes_are_told_by_the_records_from_either_body(run: Run) -> None:
    """A 200 revisit is changed when the server's version moved (the JSON's
    ``jmespath:`` fields on one site, the page's ``html_fields`` on the other),
    as the store judged from the records."""
    last: dict[str, int] = {}
    changed = unchanged = 0
    for r in sorted(run.log, key=lambda r: r.t):
        if r.version is None or r.status not in (200, 304):
            continue
        page = r.url.removesuffix(".json")
        if r.status == 200 and page in last:
            changed += r.version != last[page]
            unchanged += r.version == last[page]
        last[page] = r.version
    assert changed > 5
    assert run.stats["recrawl/changed"] == changed
    assert run.stats.get("recrawl/unchanged", 0) == unchanged

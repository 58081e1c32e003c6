"""What each cheap signal costs per change it finds, and items that leave the
listings: crawls of the synthetic web, read from the store, the CLI, the
service's API and ``/metrics``."""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from recrawl.cli.main import app as cli
from recrawl.clock import ScaledClock
from recrawl.crawl.loop import Crawler, EmbeddedSource, ServiceSource
from recrawl.engine.engine import Engine
from recrawl.observe.observation import parse_observation
from recrawl.records.signals import signal_costs, spend_rows
from recrawl.store import open_store

DAY = 86400.0
ORIGIN = 1_800_000_000.0
LISTINGS = {
    "category": {
        "items": "li.item",
        "url": "a.link::attr(href)",
        "summary": {"price": ".price::text", "stock": ".stock::text"},
        "item_type": "product",
    }
}


def _pages(web: Any, host: str) -> list[dict[str, Any]]:
    return [{"url": u, "site": host, "page_type": "product"} for u in web.urls(host)] + [
        {"url": f"http://{host}/list/0", "site": host, "page_type": "category"}
    ]


def _starved(crawler: Crawler) -> None:
    if crawler.stats.spent < 0.4 * crawler.stats.budget:
        # a starved machine: cycles late, budget unspent, too few revisits to judge
        pytest.skip(
            f"the crawl spent {crawler.stats.spent / crawler.stats.budget:.0%} of its budget"
        )


def test_spend_rows_count_reads_caused_fetches_and_their_changes() -> None:
    def obs(**kw: Any) -> Any:
        return parse_observation(
            {"url": "http://a.example/p", "fetched_at": 0, "status": 200, **kw}
        )

    rows = spend_rows(
        [
            obs(signal="listing", signal_read=True, bytes_received=500),
            obs(signal="listing", bytes_received=900),
            obs(signal="listing", bytes_received=900),
            obs(bytes_received=900),
            obs(canary="ok"),
        ],
        ["unchanged", "changed", "unchanged", "changed", "unchanged"],
    )
    assert sorted(rows) == [
        ("a.example", "listing", 1, 500.0, 1.0, 2, 1800.0, 2.0, 1),
        ("a.example", "schedule", 0, 0.0, 0.0, 1, 900.0, 1.0, 1),
    ]
    by_bytes = {c.signal: c for c in signal_costs(rows, "bytes")}
    assert by_bytes["listing"].cost == 2300.0 and by_bytes["listing"].per_change == 2300.0
    assert signal_costs(rows, "fetches")[0].per_change == 1.0  # schedule: 1 fetch, 1 change


def test_a_listing_finds_changes_cheaper_than_the_schedule_and_notes_an_item_that_left(
    tmp_path: Path,
) -> None:
    from recrawl.sim.crawl import crawl_settings
    from recrawl.sim.web import SimWeb, SiteSpec

    clock = ScaledClock(DAY / 3, real_origin=time.time(), virtual_origin=ORIGIN)
    # /p/5 leaves the listing after a day: it is still a page, and still changes
    spec = SiteSpec("shop", n_pages=30, rate_per_day=2.0, listing="fresh", delisted={"/p/5": 1.0})
    db = str(tmp_path / "l.db")
    with SimWeb([spec], clock=clock, seed=5, origin=ORIGIN, horizon_s=4 * DAY) as web:
        host = web.site("shop")
        settings = crawl_settings(150, listings=LISTINGS)
        with open_store(db) as store:
            engine = Engine(store, settings, clock=clock)
            engine.add_urls(_pages(web, host))
            crawler = Crawler(EmbeddedSource(engine), settings, clock=clock)
            asyncio.run(crawler.run(clock() + 2.5 * DAY))
            costs = {c.signal: c for c in engine.signal_costs(site=host)}
            states = {r["url"]: r["state"] for r in engine.pages(site=host).as_dict()["pages"]}
            pages, cols = engine.page_arrays(clock())
            report = engine.signal_report()
    _starved(crawler)
    listing, schedule = costs["listing"], costs["schedule"]
    # the listing's reads are its cost, with the item fetches it caused; every
    # change those found counts, and one change found costs less than by the schedule
    assert listing.reads >= 10 and listing.fetches >= 10 and listing.changes >= 10, listing
    assert schedule.fetches >= 50 and schedule.changes >= 5, schedule
    assert listing.per_change is not None and schedule.per_change is not None
    assert listing.per_change < 0.6 * schedule.per_change, (listing, schedule)
    # all fetches are counted once, under one signal or the schedule
    counted = sum(c.reads + c.fetches for c in costs.values())
    assert counted == crawler.stats.requests + crawler.stats.signal_requests
    # the item that left the listing is noted, and the listing no longer vouches for it
    gone = f"http://{host}/p/5"
    assert states[gone] == "delisted"
    assert [u for u, s in states.items() if s == "delisted"] == [gone]
    assert report["delisted"] == {host: 1} and crawler.stats.delisted == 1
    i = list(cols["url"]).index(gone)
    assert pages.checked_at is None or math.isnan(pages.checked_at[i])
    assert pages.known_stale is None or not pages.known_stale[i]
    # the CLI shows the same figures
    res = CliRunner().invoke(cli, ["signals", "--db", db, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    per = {r["signal"]: r["per_change"] for r in doc["signals"]}
    assert per["listing"] == pytest.approx(listing.per_change)
    assert doc["delisted"] == {host: 1}


def test_a_crawl_leasing_from_the_service_reports_what_caused_each_fetch(
    tmp_path: Path,
) -> None:
    from recrawl.service.app import create_app
    from recrawl.sim.crawl import crawl_settings
    from recrawl.sim.web import SimWeb, SiteSpec
    from recrawl.testing.server import serve_in_thread

    clock = ScaledClock(DAY / 3, real_origin=time.time(), virtual_origin=ORIGIN)
    spec = SiteSpec("shop", n_pages=30, rate_per_day=2.0, listing="fresh", sitemap="honest")
    auth = {"Authorization": "Bearer w"}
    with SimWeb([spec], clock=clock, seed=5, origin=ORIGIN, horizon_s=4 * DAY) as web:
        host = web.site("shop")
        settings = crawl_settings(150, listings=LISTINGS).model_copy(update={"token": "w"})
        with open_store(str(tmp_path / "s.db")) as store:
            engine = Engine(store, settings, clock=clock)
            engine.add_urls(_pages(web, host))
            with serve_in_thread(create_app(engine, settings, replan_min_s=0.0)) as url:
                crawler = Crawler(ServiceSource(url, "w", worker="w"), settings, clock=clock)
                asyncio.run(crawler.run(clock() + 2 * DAY))
                doc = httpx.get(f"{url}/v1/signals", headers=auth).json()
                metrics = httpx.get(f"{url}/metrics", headers=auth).text
    _starved(crawler)
    rows = {r["signal"]: r for r in doc["signals"] if r["site"] == host}
    # the sitemap's reads (no observation: posted to /v1/signals) and the
    # fetches its leases caused (the lease's signal, reported back)
    sitemap = rows["sitemap"]
    assert sitemap["reads"] >= 5 and sitemap["fetches"] >= 5, sitemap
    assert sitemap["changes"] >= 0.8 * sitemap["fetches"], sitemap  # an honest sitemap
    assert rows["listing"]["reads"] >= 1  # the listing page's fetches, marked as its reads
    assert sitemap["per_change"] < rows["schedule"]["per_change"], rows
    # every read and fetch is counted, under the crawl's site names
    assert {r["site"] for r in doc["signals"]} == {host}
    counted = sum(r["reads"] + r["fetches"] for r in doc["signals"])
    assert counted == crawler.stats.requests + crawler.stats.signal_requests
    line = next(
        ln
        for ln in metrics.splitlines()
        if ln.startswith("recrawl_signal_cost_per_change{") and 'signal="sitemap"' in ln
    )
    assert float(line.rsplit(" ", 1)[1]) == pytest.approx(sitemap["per_change"])
    assert np.isfinite(float(line.rsplit(" ", 1)[1]))

"""The crawl reads sitemaps and feeds itself: a small site on 127.0.0.1.

The site names a sitemap index in its robots.txt (one gzipped sitemap, one
plain), and serves an RSS feed the configuration names; every document
answers conditional requests with 304. A few simulated hours of crawling are
judged by the site's own request log and the store.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from recrawl.clock import ScaledClock
from recrawl.config import Settings
from recrawl.crawl.loop import Crawler, CrawlStats, EmbeddedSource, ServiceSource
from recrawl.crawl.signals import read_interval
from recrawl.engine.engine import Engine
from recrawl.store import open_store

HOUR = 3600.0
ORIGIN = 1_800_000_000.0


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


@dataclass
class Site:
    """Pages /p/0../p/14 (all changed at ORIGIN - 1 day) and /p/99, listed in
    the second sitemap but not in the store; the feed dates /p/3 and /p/4."""

    clock: ScaledClock
    log: list[tuple[float, str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    robots_extra: str = ""

    def docs(self, base: str) -> dict[str, tuple[bytes, str]]:
        t = ORIGIN - 86400
        s1 = "".join(
            f"<url><loc>{base}/p/{i}</loc><lastmod>{_iso(t)}</lastmod></url>" for i in range(10)
        )
        s2 = "".join(f"<url><loc>{base}/p/{i}</loc></url>" for i in (*range(10, 15), 99))
        ns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        index = (
            f"<sitemapindex {ns}><sitemap><loc>{base}/s1.xml.gz</loc>"
            f"<lastmod>{_iso(t)}</lastmod></sitemap>"
            f"<sitemap><loc>{base}/s2.xml</loc></sitemap>"
            "<sitemap><loc>http://elsewhere.example/s.xml</loc></sitemap></sitemapindex>"
        )
        rss = (
            '<rss version="2.0"><channel><title>n</title>'
            + "".join(
                f"<item><link>{base}/p/{i}</link><pubDate>{formatdate(t)}</pubDate></item>"
                for i in (3, 4)
            )
            + "</channel></rss>"
        )
        return {
            "/robots.txt": (f"User-agent: *\nSitemap: {base}/index.xml\n{self.robots_extra}"
                            .encode(), "text/plain"),
            "/index.xml": (f'<?xml version="1.0"?>{index}'.encode(), "application/xml"),
            "/s1.xml.gz": (gzip.compress(f"<urlset {ns}>{s1}</urlset>".encode(), mtime=0),
                           "application/gzip"),
            "/s2.xml": (f"<urlset {ns}>{s2}</urlset>".encode(), "application/xml"),
            "/feed.xml": (rss.encode(), "application/rss+xml"),
        }  # fmt: skip


@pytest.fixture
def site() -> Iterator[tuple[Site, str]]:
    clock = ScaledClock(HOUR * 2, real_origin=time.time(), virtual_origin=ORIGIN)
    state = Site(clock)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            base = f"http://127.0.0.1:{self.server.server_address[1]}"
            docs = state.docs(base)
            path = self.path
            if path in docs:
                body, ctype = docs[path]
                etag = f'"{hash(body) & 0xFFFFFFFF:x}"'
                status = 304 if self.headers.get("If-None-Match") == etag else 200
            elif path.startswith("/p/"):
                body, ctype, etag, status = b"<h1>page</h1>", "text/html", '"p"', 200
            else:
                body, ctype, etag, status = b"", "text/plain", "", 404
            with state.lock:
                state.log.append((state.clock(), path, status))
            self.send_response(status)
            if etag:
                self.send_header("ETag", etag)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(0 if status == 304 else len(body)))
            self.end_headers()
            if status != 304:
                self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _settings(base: str, **crawl: Any) -> Settings:
    return Settings.model_validate(
        {
            "budget_per_day": 960,
            "cycle_hours": 1,
            "crawl": {
                "allow_private_networks": True,
                "min_delay_s": 60,
                "feeds": [f"{base}/feed.xml"],
                **crawl,
            },
        }
    )


def _crawl(tmp_path: Path, site: Site, base: str, hours: float, **crawl: Any) -> dict[str, Any]:
    settings = _settings(base, **crawl)
    host = base.removeprefix("http://")
    with open_store(str(tmp_path / "s.db")) as store:
        engine = Engine(store, settings, clock=site.clock)
        engine.add_urls([{"url": f"{base}/p/{i}", "site": host} for i in range(15)])
        crawler = Crawler(EmbeddedSource(engine), settings, clock=site.clock)
        stats = asyncio.run(crawler.run(site.clock() + hours * HOUR))
        cols = store.page_columns()
        hs = store.hint_state()
        url_of = dict(zip(cols["id"].tolist(), cols["url"], strict=True))
        hinted = {
            (url_of[int(p)], hs.sources[int(s)]) for p, s in zip(hs.page, hs.source, strict=True)
        }
        site_of = dict(zip(cols["url"], cols["site"], strict=True))
        return {"stats": stats, "hinted": hinted, "sites": site_of, "host": host}


def test_the_crawl_reads_robots_sitemaps_indexes_gzip_and_feeds(
    tmp_path: Path, site: tuple[Site, str]
) -> None:
    state, base = site
    got = _crawl(tmp_path, state, base, hours=4)
    stats: CrawlStats = got["stats"]
    paths = [p for _, p, _ in state.log]
    # the index from robots.txt, both of its sitemaps (one gzipped), the configured feed
    for doc in ("/index.xml", "/s1.xml.gz", "/s2.xml", "/feed.xml"):
        assert doc in paths, doc
    assert paths.index("/robots.txt") < paths.index("/index.xml")
    assert {(f"{base}/p/{i}", "sitemap") for i in range(10)} <= got["hinted"]
    assert {(f"{base}/p/3", "feed"), (f"{base}/p/4", "feed")} <= got["hinted"]
    # a page only the sitemap lists is registered, under the site of its origin's pages
    assert got["sites"][f"{base}/p/99"] == got["host"]
    assert not any("elsewhere" in u for u in got["sites"])  # another origin: not taken
    # every document request is counted, and within the budget
    docs = [p for p in paths if not p.startswith(("/p/", "/robots"))]
    assert stats.signal_requests == len(docs)
    assert stats.spent <= stats.budget + 1e-9
    assert stats.requests + stats.signal_requests == len(paths) - paths.count("/robots.txt")


def test_documents_are_read_again_conditionally_and_spaced_by_the_site_gate(
    tmp_path: Path, site: tuple[Site, str]
) -> None:
    state, base = site
    got = _crawl(tmp_path, state, base, hours=5, signal_min_interval_s=HOUR, min_delay_s=600)
    feed = [(t, s) for t, p, s in state.log if p == "/feed.xml"]
    # read hourly at first, then, unchanged, less often: a 304 each time after the first
    assert 2 <= len(feed) <= 4, feed
    assert feed[0][1] == 200 and all(s == 304 for _, s in feed[1:])
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(feed)]
    assert all(g >= 0.9 * HOUR for g in gaps), gaps
    # the site's own gate spaces documents and pages alike (min_delay_s 600; the
    # server's clock adds 7.2 simulated seconds of jitter per real millisecond on a
    # loaded machine; a document sent outside the gate would come within seconds)
    log = sorted((t, p) for t, p, _ in state.log if p != "/robots.txt")
    near = [
        (b - a, pa, pb)
        for (a, pa), (b, pb) in itertools.pairwise(log)
        if not (pa.startswith("/p/") and pb.startswith("/p/"))
    ]
    assert min(near)[0] >= 0.5 * 600, near
    assert got["stats"].signal_requests >= 5


def test_a_sitemap_robots_txt_disallows_is_not_read(tmp_path: Path, site: tuple[Site, str]) -> None:
    state, base = site
    state.robots_extra = "Disallow: /index.xml\nDisallow: /feed.xml\n"
    got = _crawl(tmp_path, state, base, hours=2)
    paths = {p for _, p, _ in state.log}
    assert "/index.xml" not in paths and "/feed.xml" not in paths
    assert got["stats"].signal_requests == 0


def test_no_sitemaps_when_switched_off(tmp_path: Path, site: tuple[Site, str]) -> None:
    state, base = site
    got = _crawl(tmp_path, state, base, hours=2, robots_sitemaps=False, feeds=[])
    paths = {p for _, p, _ in state.log}
    assert not paths & {"/index.xml", "/s1.xml.gz", "/s2.xml", "/feed.xml"}
    assert got["stats"].signal_requests == 0 and f"{base}/p/99" not in got["sites"]


def test_a_source_that_changes_at_every_read_is_read_most_often() -> None:
    hourly_changes = read_interval(6.0, 0.25, 0.0, 0.0, HOUR, min_s=HOUR, max_s=24 * HOUR)
    never = read_interval(0.0, 0.0, 6.0, 2.0, 12 * HOUR, min_s=HOUR, max_s=24 * HOUR)
    costly = read_interval(
        6.0, 0.25, 0.0, 0.0, HOUR, min_s=HOUR, max_s=24 * HOUR, cost_floor_s=6 * HOUR
    )
    assert (hourly_changes, never, costly) == (HOUR, 24 * HOUR, 6 * HOUR)


def test_the_service_source_posts_hints(tmp_path: Path) -> None:
    from recrawl.observe.sitemaps import Hint
    from recrawl.service.app import create_app
    from recrawl.testing.server import serve_in_thread

    settings = Settings.model_validate({"budget_per_day": 10, "token": "w"})
    db = str(tmp_path / "svc.db")
    with serve_in_thread(create_app(db, settings)) as url:
        source = ServiceSource(url, "w", worker="w")

        async def go() -> None:
            now = time.time()
            await source.hints(
                [Hint("https://shop.example/p/1", now, "sitemap", now - 3600)],
                [{"url": "https://shop.example/p/1"}],
            )
            await source.close()

        asyncio.run(go())
        r = httpx.get(
            f"{url}/v1/pages/https://shop.example/p/1", headers={"Authorization": "Bearer w"}
        )
        assert r.status_code == 200  # registered by the hint


def test_a_listing_page_registers_its_items_and_next_page(tmp_path: Path) -> None:
    from recrawl.sim.crawl import crawl_settings
    from recrawl.sim.web import SimWeb, SiteSpec

    day = 86400.0
    clock = ScaledClock(day / 4, real_origin=time.time(), virtual_origin=ORIGIN)
    listings = {
        "category": {
            "items": "li.item",
            "url": "a.link::attr(href)",
            "summary": {"price": ".price::text", "stock": ".stock::text"},
            "next": "a[rel=next]::attr(href)",
            "item_type": "product",
        }
    }
    spec = SiteSpec("shop", n_pages=80, rate_per_day=2.0, listing="fresh")
    with SimWeb([spec], clock=clock, seed=3, origin=ORIGIN, horizon_s=3 * day) as web:
        host = web.site("shop")
        settings = crawl_settings(150, listings=listings)
        with open_store(str(tmp_path / "l.db")) as store:
            engine = Engine(store, settings, clock=clock)
            known = web.urls(host)[:60]
            engine.add_urls(
                [{"url": u, "site": host, "page_type": "product"} for u in known]
                + [{"url": f"http://{host}/list/0", "site": host, "page_type": "category"}]
            )
            crawler = Crawler(EmbeddedSource(engine), settings, clock=clock)
            asyncio.run(crawler.run(clock() + 1.5 * day))
            cols = store.page_columns()
            types = dict(zip(cols["url"], cols["page_type"], strict=True))
            sites = set(cols["site"])
    assert crawler.signals.listing_reads >= 1
    # the items the store lacked, under the listing's site as products; the next page
    assert {u: types.get(u) for u in web.urls(host)[60:]} == dict.fromkeys(
        web.urls(host)[60:], "product"
    )
    assert types[f"http://{host}/list/1"] == "category"
    assert sites == {host}


LISTINGS = {
    "category": {
        "items": "li.item",
        "url": "a.link::attr(href)",
        "summary": {"price": ".price::text"},
        "item_type": "product",
    }
}


def _reader() -> tuple[Any, list[Any]]:
    from recrawl.crawl.signals import SignalReader

    settings = Settings.model_validate({"budget_per_day": 100, "crawl": {"listings": LISTINGS}})
    got: list[Any] = []

    async def sink(hints: Any, rows: Any) -> None:
        got.extend(hints)

    async def fetch(url: str, headers: Any, end: float) -> None:
        return None

    reader = SignalReader(
        settings, fetch=fetch, sink=sink, clock=lambda: 0.0, cost=lambda r: 1.0,
        commit=lambda d: None, room=lambda: 1.0, mean_cost=lambda: 1.0,
    )  # fmt: skip
    return reader, got


def _page(prices: dict[int, str]) -> bytes:
    rows = "".join(
        f'<li class="item"><a class="link" href="/p/{i}">{i}</a><span class="price">{p}</span></li>'
        for i, p in prices.items()
    )
    return f"<ul>{rows}</ul>".encode()


def test_a_summary_move_is_dated_by_the_fetch_between_two_reads() -> None:
    reader, hints = _reader()
    url = "https://shop.example/list/0"

    def read(t: float, prices: dict[int, str]) -> dict[str, float]:
        hints.clear()
        asyncio.run(reader.listing(url, "shop", "category", _page(prices), t))
        return {h.url.rsplit("/", 1)[1]: h.lastmod for h in hints}

    five = dict.fromkeys(range(1, 5), "5")
    assert read(0.0, five) == {}  # first sighting: nothing to say yet
    for i in range(1, 5):
        reader.fetched(f"https://shop.example/p/{i}", 100.0, {"price": "5"}, digest="a")
    # unchanged summaries, the items fetched since: vouched for, as of their first sighting
    assert read(200.0, five) == {"1": 0.0, "2": 0.0, "3": 0.0, "4": 0.0}
    page = "https://shop.example/p/"
    reader.fetched(page + "1", 250.0, {"price": "6"}, digest="b")  # saw the new price
    reader.fetched(page + "2", 250.0, {"price": "5"}, digest="a")  # changed after
    reader.fetched(page + "3", 250.0, {"name": "x"}, digest="c")  # cannot tell
    reader.fetched(page + "4", 250.0, {"name": "x"}, digest="c")  # cannot tell
    # moved: /p/1 changed before its fetch (the hint dates it then: no false
    # change), /p/2 after it (a change since the fetch), /p/3 and /p/4 say
    # nothing until their next fetch tells
    six = dict.fromkeys(range(1, 5), "6")
    assert read(300.0, six) == {"1": 250.0, "2": 300.0}
    reader.fetched(page + "3", 350.0, {"name": "x"}, digest="d")  # changed since: after
    reader.fetched(page + "4", 350.0)  # a 304: the same as at 250, so before
    assert read(400.0, six) == {"1": 250.0, "2": 300.0, "3": 300.0, "4": 250.0}


def test_a_listing_a_day_behind_is_caught_by_the_fetches_and_stops_vouching() -> None:
    # ten items whose price moves once a day (item i at i/10 of the day), each
    # fetched two hours after its move; the listing read every three hours,
    # showing the prices as they are, or as they were a day before
    day, url = 86400.0, "https://shop.example/list/0"

    def price(i: int, t: float) -> str:
        return str(int((t - i * day / 10) // day))

    fetches = sorted((k * day + i * day / 10 + 2 * HOUR, i) for k in range(5) for i in range(10))
    got = {}
    for behind in (0.0, day):
        reader, hints = _reader()
        todo = list(fetches)
        last_day = []
        for step in range(1, 5 * 8):
            t = step * 3 * HOUR
            while todo and todo[0][0] < t:
                at, i = todo.pop(0)
                reader.fetched(f"https://shop.example/p/{i}", at, {"price": price(i, at)})
            hints.clear()
            shown = {i: price(i, t - behind) for i in range(10)}
            asyncio.run(reader.listing(url, "shop", "category", _page(shown), t))
            if t > 4 * day:
                last_day += hints
        got[behind] = (reader, last_day)
    (late, late_hints), (fresh, fresh_hints) = got[day], got[0.0]
    # the listing a day behind showed, hours after a fetch, the price the fetch
    # replaced: it vouches for nothing more (its unchanged prices would pass
    # items changed in the last day for unchanged)
    assert late_hints == [], late_hints[:3]
    assert late.late_sites() == {"shop"} and late.listing_figures()[0]["late"]
    # the one showing the prices as they are goes on speaking for its items
    assert len(fresh_hints) >= 10 and fresh.late_sites() == set()


def test_a_listing_still_showing_the_price_a_fetch_replaced_is_judged_late_at_that_read() -> None:
    # four items at price 1, fetched (agreeing with the listing), then fetched
    # again at price 2; the listing, read two hours later, still shows 1
    url, item = "https://shop.example/list/0", "https://shop.example/p/"
    ones = dict.fromkeys(range(1, 5), "1")
    got = {}
    for name, later in (("late", ones), ("fresh", dict.fromkeys(range(1, 5), "2"))):
        reader, hints = _reader()
        asyncio.run(reader.listing(url, "shop", "category", _page(ones), 0.0))
        for i in range(1, 5):
            reader.fetched(item + str(i), 1 * HOUR, {"price": "1"}, digest="a")
            reader.fetched(item + str(i), 2 * HOUR, {"price": "2"}, digest="b")
        hints.clear()
        asyncio.run(reader.listing(url, "shop", "category", _page(later), 4 * HOUR))
        got[name] = (reader, list(hints))
    (late, late_hints), (fresh, fresh_hints) = got["late"], got["fresh"]
    # judged late at its second read, without waiting for it to show price 2
    # (main: only once it moved to the fetched price, a day later here)
    [figures] = late.listing_figures()
    assert late.late_sites() == {"shop"} and late_hints == []
    assert (figures["late"], figures["late_at"], figures["late_reads"]) == (True, 4 * HOUR, 2)
    # the listing showing price 2 is not late, and vouches for its items
    assert fresh.late_sites() == set() and len(fresh_hints) == 4
    assert fresh.listing_figures()[0]["late_at"] is None


def test_every_listing_page_of_a_site_judged_late_shows_it_in_the_crawls_figures() -> None:
    # two pages of one shop's listing read; the site is then judged late at
    # the first page's read: the second, not read since, is late too
    reader, _ = _reader()
    first, second = "https://shop.example/list/0", "https://shop.example/list/1"
    item = "https://shop.example/p/"
    ones = dict.fromkeys(range(1, 5), "1")
    asyncio.run(reader.listing(first, "shop", "category", _page(ones), 0.0))
    asyncio.run(reader.listing(second, "shop", "category", _page({9: "5"}), 0.0))
    for i in range(1, 5):
        reader.fetched(item + str(i), 1 * HOUR, {"price": "1"}, digest="a")
        reader.fetched(item + str(i), 2 * HOUR, {"price": "2"}, digest="b")
    asyncio.run(reader.listing(first, "shop", "category", _page(ones), 4 * HOUR))
    assert reader.late_sites() == {"shop"}
    late = {f["url"]: f["late"] for f in reader.listing_figures()}
    assert late == {first: True, second: True}


def test_a_listing_is_judged_late_only_on_the_very_summary_a_fetch_replaced() -> None:
    """Not by a format (the listing writes 1.00, the pages 1), a page lagging
    its listing (its fetches never showed the listing's price), or items back
    on the listing after leaving it; by the listing's own former summary."""
    url, item = "https://shop.example/list/0", "https://shop.example/p/"
    four = range(1, 5)

    def judged(listed: str, fetches: tuple[str, str], gone_between: bool = False) -> set[str]:
        reader, _ = _reader()
        asyncio.run(reader.listing(url, "shop", "category", _page(dict.fromkeys(four, listed)), 0))
        for i in four:
            for k, price in enumerate(fetches, start=1):
                reader.fetched(item + str(i), k * HOUR, {"price": price}, digest=price)
        if gone_between:  # the items left the listing, and came back
            asyncio.run(reader.listing(url, "shop", "category", _page({9: "5"}), 3 * HOUR))
        shown = dict.fromkeys(four, listed)
        asyncio.run(reader.listing(url, "shop", "category", _page(shown), 4 * HOUR))
        return set(reader.late_sites())

    assert judged("1.00", ("1", "2")) == set()  # a format, never the same fields' values
    assert judged("2", ("1", "1")) == set()  # the page lags: no fetch replaced the listing's 2
    assert judged("1", ("1", "2"), gone_between=True) == set()  # back after leaving it
    assert judged("1.00", ("1.00", "2.00")) == {"shop"}  # still the summary 2.00 replaced
    assert judged("1", ("1", "2")) == {"shop"}


def test_a_listing_moving_to_the_fetched_price_after_showing_another_is_late() -> None:
    # the shop's first listing page read, four items of its second page
    # fetched at price 2; that page, first read two hours later, shows 1, then
    # 2 three hours after that: it showed the items late, though no listing
    # showed them before the fetch (main: not counted, the fetch not kept)
    first, url = "https://shop.example/list/0", "https://shop.example/list/1"
    item = "https://shop.example/p/"
    got = {}
    for name, before in (("late", "1"), ("fresh", "2")):
        reader, _ = _reader()
        asyncio.run(reader.listing(first, "shop", "category", _page({9: "5"}), 0.0))
        for i in range(1, 5):
            reader.fetched(item + str(i), 0.5 * HOUR, {"price": "2"}, digest="b")
        for t, price in ((2 * HOUR, before), (5 * HOUR, "2")):
            shown = dict.fromkeys(range(1, 5), price)
            asyncio.run(reader.listing(url, "shop", "category", _page(shown), t))
            if t < 5 * HOUR:
                assert reader.late_sites() == set()
        got[name] = reader.late_sites()
    assert got == {"late": {"shop"}, "fresh": set()}


def test_a_refused_listing_keeps_its_own_value_while_its_items_come_and_go() -> None:
    # two listings refused, read ten times each: one always shows the same
    # items, the other a new item at each read
    url = "https://shop.example/list/0"
    values = {}
    for name, step, reads, start in (
        ("same", 0, 5, 1.0),
        ("new", 1, 10, 1.0),
        ("again", 0, 10, 0.2),
    ):
        reader, _ = _reader()
        for k in range(reads):
            prices = {i: "5" for i in range(k * step, k * step + 4)}
            asyncio.run(reader.listing(url, "shop", "category", _page(prices), k * HOUR))
        worth = dict(reader.listing_worth(reads * HOUR, {url: start}, {"shop"}))
        values[name] = worth.get(url, reader.listing_pages[url].base)
    # all a refused listing still tells is which items are listed: read for
    # that as often as it told something new; a crawl started again from the
    # value the last one wrote (0.2) goes no lower than a tenth of its items'
    assert values == pytest.approx({"same": 1.0 / 5, "new": 1.0, "again": 0.1}), values


def _read_four_days(reader: Any, url: str) -> None:
    """Forty items whose price moves once a day each, their listing ``url``
    read every two hours for four days."""
    for k in range(4 * 12):
        t = k * 2 * HOUR
        prices = {i: str(int((t / 86400.0) + i / 40.0)) for i in range(40)}
        asyncio.run(reader.listing(url, "shop", "category", _page(prices), t, rate_per_day=40.0))


def test_a_listing_is_worth_reading_for_its_items_unless_refused() -> None:
    import numpy as np

    from recrawl.plan.freshness import optimal_allocation

    reader, _ = _reader()
    url = "https://shop.example/list/0"
    _read_four_days(reader, url)  # forty items moving daily, the listing read every two hours
    now = 4 * 86400.0
    [(got_url, value)] = reader.listing_worth(now, {})
    assert got_url == url and value > 2.0, value
    # the allocation (forty items, the listing, 1.6 fetches an item a day) then
    # reads the listing several times a day; valued as a page of its own, hardly
    rates, items = np.r_[np.ones(40), 40.0], np.ones(40)
    worth = optimal_allocation(rates, 64.0, weight=np.r_[items, value]).visits_per_day[-1]
    own = optimal_allocation(rates, 64.0, weight=np.r_[items, 1.0]).visits_per_day[-1]
    assert worth >= 4.0 and own < 1.0, (worth, own)
    # a site whose listing moves the revisits refused: back to the listing's own
    # value, at the share of its reads that changed which items it shows (none
    # of its 48 did: the first read counts as one), a tenth of it at the least
    assert reader.listing_worth(now, {}, {"shop"}) == [(url, 0.1)]


def test_a_listing_not_judged_yet_is_worth_the_items_a_read_can_check() -> None:
    # forty items whose price moves once a day each, the listing read every two
    # hours for four days; the revisits have judged it neither way yet
    reader, _ = _reader()
    url, item = "https://shop.example/list/0", "https://shop.example/p/"
    _read_four_days(reader, url)
    now = 4 * 86400.0
    # no item fetched since its last read: a read would check nothing, it
    # stays at its own value
    assert reader.listing_worth(now, {}, trusted=set()) == []
    # half its items fetched since: worth half what it would be, trusted
    for i in range(20):
        reader.fetched(item + str(i), now - HOUR, {"price": "9"}, digest="a")
    [(_, half)] = reader.listing_worth(now, {}, trusted=set())
    [(_, full)] = reader.listing_worth(now, {}, trusted={"shop"})
    assert half > 1.0 and half == pytest.approx(full / 2, rel=0.1), (half, full)
    # without a word on trust (None), as if trusted
    fresh, _ = _reader()
    _read_four_days(fresh, url)
    assert fresh.listing_worth(now, {}) == [(url, pytest.approx(full))]


def test_a_listing_read_in_a_burst_is_read_again_once_its_items_had_time_to_change() -> None:
    import numpy as np

    from recrawl.plan.freshness import optimal_allocation

    reader, _ = _reader()
    url = "https://shop.example/list/0"
    # forty items whose price moves once a day each, the listing read every
    # hour for two days: each read found little, its value went low
    for k in range(2 * 24):
        t = k * HOUR
        prices = {i: str(int((t / 86400.0) + i / 40.0)) for i in range(40)}
        asyncio.run(reader.listing(url, "shop", "category", _page(prices), t, rate_per_day=40.0))
    last = 47 * HOUR
    rates = np.r_[np.ones(40), 40.0]

    def due(hours: float) -> float:
        """How far into its allocated interval the listing is, ``hours`` after
        its last read, the crawl setting its value at each hourly cycle."""
        reader.listing_worth(last + hours * HOUR, {})
        value = reader.listing_pages[url].value or 1.0
        # the allocation: the forty items and the listing, a fetch an item a day
        f = optimal_allocation(rates, 40.0, weight=np.r_[np.ones(40), value]).visits_per_day[-1]
        return float(f) * hours / 24.0

    overdue = [due(h) for h in range(1, 13)]
    # not read again straight away (no burst): just read, it reveals little
    assert overdue[0] < 1.0, overdue
    # but read again within hours, once the items have had time to change,
    # however low its value went (main: its value at the read rate last
    # measured, hourly, never got it read again)
    assert max(overdue) >= 1.0, overdue


def test_a_trusted_listing_is_read_for_its_items_and_a_stale_one_is_refused(
    tmp_path: Path,
) -> None:
    from recrawl.sim.crawl import crawl_settings
    from recrawl.sim.web import SimWeb, SiteSpec

    day = 86400.0
    clock = ScaledClock(day / 3, real_origin=time.time(), virtual_origin=ORIGIN)
    listings = {"category": {**LISTINGS["category"],
                             "summary": {"price": ".price::text", "stock": ".stock::text"}}}  # fmt: skip
    specs = [
        SiteSpec("fresh", n_pages=30, rate_per_day=2.0, listing="fresh"),
        SiteSpec("stale", n_pages=30, rate_per_day=2.0, listing="stale"),
    ]
    with SimWeb(specs, clock=clock, seed=5, origin=ORIGIN, horizon_s=4 * day) as web:
        hosts = {s.name: web.site(s.name) for s in specs}
        settings = crawl_settings(150, listings=listings)
        with open_store(str(tmp_path / "l.db")) as store:
            engine = Engine(store, settings, clock=clock)
            engine.add_urls(
                [{"url": u, "site": h, "page_type": "product"}
                 for h in hosts.values() for u in web.urls(h)]
                + [{"url": f"http://{h}/list/0", "site": h, "page_type": "category"}
                   for h in hosts.values()]
            )  # fmt: skip
            crawler = Crawler(EmbeddedSource(engine), settings, clock=clock)
            start = clock()
            asyncio.run(crawler.run(start + 2.5 * day))
            trust = {t.site: t for t in engine.hint_trust(until=clock())}
            cols = store.page_columns()
            value = dict(zip(cols["url"], cols["value"].tolist(), strict=True))
        log = sorted(web.request_log.snapshot(), key=lambda r: r.t)
    got = {}
    for name, host in hosts.items():
        seen: dict[str, int] = {}
        items = changes = reads = 0
        for r in log:
            if r.site != host or r.path == "/robots.txt":
                continue
            if not r.path.startswith("/p/"):
                reads += 1
                continue
            late = r.t > start + 1.5 * day  # once the listing could be judged
            items += late
            if r.version is not None and r.status in (200, 304):
                changes += late and r.url in seen and seen[r.url] != r.version
                seen[r.url] = r.version
        got[name] = {"items": items, "changes": changes, "reads": reads}
    if crawler.stats.spent < 0.75 * crawler.stats.budget:
        # a starved machine: cycles late, budget unspent, too few revisits to judge
        pytest.skip(
            f"the crawl spent {crawler.stats.spent / crawler.stats.budget:.0%} of its budget"
        )
    fresh, stale = trust[hosts["fresh"]], trust.get(hosts["stale"])
    # the fresh listing is trusted to prove changes; the stale one's moves are
    # not (judged late by the crawl's fetches, it may have given no hint to judge)
    assert fresh.changes and (stale is None or not stale.changes), (fresh, stale)
    # and it is told apart: judged late, or trusted neither to vouch nor to prove
    refused = stale is not None and not (stale.changes or stale.quiet)
    assert hosts["stale"] in crawler.signals.late_sites() or refused, stale
    assert hosts["fresh"] not in crawler.signals.late_sites()
    # valued for its items' worth, the fresh listing is read more often; the
    # refused one is back to its own value at most
    assert value[f"http://{hosts['fresh']}/list/0"] > 1.0
    assert value[f"http://{hosts['stale']}/list/0"] <= 1.0
    assert got["fresh"]["reads"] > got["stale"]["reads"], got
    # and the shop it watches costs fewer item fetches per change found (the last day)
    per = {n: g["items"] / max(g["changes"], 1) for n, g in got.items()}
    assert per["fresh"] < 0.8 * per["stale"], (got, per)

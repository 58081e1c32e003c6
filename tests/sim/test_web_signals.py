"""The simweb's cheap signals (sitemaps, feeds, listings), validator modes and volatile parts."""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from datetime import datetime
from email.utils import parsedate_to_datetime
from pathlib import Path

import httpx
import numpy as np
import pytest
from parsel import Selector

from recrawl import ConfigError
from recrawl.clock import ManualClock
from recrawl.sim.web import LISTING_PAGE_ITEMS, PageGroup, SimWeb, SiteSpec, load_scenario

T0 = 1_700_000_000.0
DAY = 86400.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5.0) as c:
        yield c


def _lastmods(xml: str) -> dict[str, float]:
    sel = Selector(text=xml, type="xml")
    sel.remove_namespaces()
    return {
        u.xpath("loc/text()").get(""): datetime.fromisoformat(
            u.xpath("lastmod/text()").get("")
        ).timestamp()
        for u in sel.xpath("//url")
    }


def _last_change(web: SimWeb, url: str, t: float) -> float:
    """The time of the page's last change at or before ``t`` (the origin if none)."""
    host, path = url.removeprefix("http://").split("/", 1)
    ch = web.change_times(host, "/" + path)
    before = ch[ch <= t]
    return float(before[-1]) if len(before) else web.origin


def test_sitemaps_honest_read_time_lazy_absent(clock: ManualClock, client: httpx.Client) -> None:
    specs = [
        SiteSpec("honest", n_pages=8, rate_per_day=3.0, sitemap="honest", gone=["/p/7"]),
        SiteSpec("stamp", n_pages=8, rate_per_day=3.0, sitemap="read_time"),
        SiteSpec("lazy", n_pages=8, rate_per_day=3.0, sitemap="lazy", sitemap_lag_s=DAY),
        SiteSpec("none", n_pages=8, rate_per_day=3.0),
    ]
    with SimWeb(specs, clock=clock, seed=5, origin=T0) as web:
        now = T0 + 2.5 * DAY
        clock.t = now
        robots = client.get(web.base_url("honest") + "/robots.txt").text
        assert f"Sitemap: {web.base_url('honest')}/sitemap.xml" in robots
        assert "Sitemap:" not in client.get(web.base_url("none") + "/robots.txt").text
        assert client.get(web.base_url("none") + "/sitemap.xml").status_code == 404

        honest = _lastmods(client.get(web.base_url("honest") + "/sitemap.xml").text)
        assert sorted(honest) == sorted(web.urls("honest"))  # normal pages only
        for url, t in honest.items():
            assert t == pytest.approx(_last_change(web, url, now), abs=1.0)
        stamp = _lastmods(client.get(web.base_url("stamp") + "/sitemap.xml").text)
        assert set(stamp.values()) == {now}  # every URL stamped with the read time
        lazy = _lastmods(client.get(web.base_url("lazy") + "/sitemap.xml").text)
        regen = T0 + 2 * DAY  # regenerated daily from the origin
        for url, t in lazy.items():
            assert t == pytest.approx(_last_change(web, url, regen), abs=1.0)
        late = [u for u in lazy if _last_change(web, u, now) > regen]
        assert late  # changes after the last regeneration do not show yet
        assert web.signal_urls("honest") == [web.base_url("honest") + "/sitemap.xml"]


def test_a_large_site_has_a_sitemap_index_over_gzipped_parts(
    clock: ManualClock, client: httpx.Client
) -> None:
    spec = SiteSpec(
        "big", n_pages=250, rate_per_day=1.0, sitemap="honest", sitemap_chunk=100, sitemap_gzip=True
    )
    with SimWeb([spec], clock=clock, seed=1, origin=T0) as web:
        clock.t = T0 + DAY
        index = client.get(web.base_url("big") + "/sitemap.xml")
        assert "<sitemapindex" in index.text
        sel = Selector(text=index.text, type="xml")
        sel.remove_namespaces()
        parts = sel.xpath("//sitemap/loc/text()").getall()
        assert parts == [f"{web.base_url('big')}/sitemap-{k}.xml.gz" for k in range(3)]
        urls: dict[str, float] = {}
        for part in parts:
            got = client.get(part)
            assert got.headers["Content-Type"] == "application/gzip"
            urls |= _lastmods(gzip.decompress(got.content).decode())
        assert sorted(urls) == sorted(web.urls())
        assert [r.served for r in web.request_log] == ["sitemap_index"] + ["sitemap"] * 3


@pytest.mark.parametrize("kind", ["rss", "atom"])
def test_a_feed_of_the_latest_changes(kind: str, clock: ManualClock, client: httpx.Client) -> None:
    spec = SiteSpec("blog", n_pages=30, rate_per_day=2.0, feed=kind, feed_items=10)  # type: ignore[arg-type]
    with SimWeb([spec], clock=clock, seed=3, origin=T0) as web:
        now = T0 + 3 * DAY
        clock.t = now
        (url,) = web.signal_urls()
        sel = Selector(text=client.get(url).text, type="xml")
        sel.remove_namespaces()
        if kind == "rss":
            items = [
                (
                    i.xpath("link/text()").get(""),
                    parsedate_to_datetime(i.xpath("pubDate/text()").get("")).timestamp(),
                )
                for i in sel.xpath("//item")
            ]
        else:
            items = [
                (
                    e.xpath("link/@href").get(""),
                    datetime.fromisoformat(e.xpath("updated/text()").get("")).timestamp(),
                )
                for e in sel.xpath("//entry")
            ]
        changes = sorted(
            (float(t), u) for u, ch in web.all_change_times().items() for t in ch if t <= now
        )[-10:][::-1]
        assert [(u, t) for t, u in changes] == [(u, pytest.approx(t, abs=1.0)) for u, t in items]


def test_listing_pages_show_price_and_stock_fresh_or_stale(
    clock: ManualClock, client: httpx.Client
) -> None:
    specs = [
        SiteSpec("fresh", n_pages=90, rate_per_day=4.0, listing="fresh"),
        SiteSpec("stale", n_pages=90, rate_per_day=4.0, listing="stale", listing_lag_s=DAY),
    ]
    with SimWeb(specs, clock=clock, seed=4, origin=T0) as web:
        clock.t = T0 + 3 * DAY

        def summaries(site: str) -> dict[str, tuple[str, str]]:
            out: dict[str, tuple[str, str]] = {}
            url: str | None = web.signal_urls(site)[0]
            pages = 0
            while url is not None and pages < 10:
                sel = Selector(text=client.get(url).text)
                items = sel.css("li.item")
                assert len(items) <= LISTING_PAGE_ITEMS
                for li in items:
                    link = li.css("a.link::attr(href)").get("")
                    out[link] = (li.css(".price::text").get(""), li.css(".stock::text").get(""))
                url = sel.css("a.next::attr(href)").get()
                pages += 1
            assert pages == 3  # 40 + 40 + 10
            return out

        def page(url: str) -> tuple[str, str]:
            sel = Selector(text=client.get(url).text)
            return sel.css(".price::text").get(""), sel.css(".stock::text").get("")

        fresh = summaries("fresh")
        assert sorted(fresh) == sorted(web.urls("fresh"))
        assert all(fresh[u] == page(u) for u in list(fresh)[:15])
        stale = summaries("stale")
        changed_lately = [
            u for u in stale if web.version_at(u, T0 + 2 * DAY) != web.version_at(u, T0 + 3 * DAY)
        ]
        assert changed_lately and all(stale[u] != page(u) for u in changed_lately[:10])
        assert {r.served for r in web.request_log if "/list/" in r.path} == {"listing"}


def test_validators_honoured_ignored_lying_none(clock: ManualClock, client: httpx.Client) -> None:
    modes = ["honoured", "ignored", "lying", "none"]
    specs = [SiteSpec(m, n_pages=5, rate_per_day=5.0, validators=m) for m in modes]  # type: ignore[arg-type]
    with SimWeb(specs, clock=clock, seed=6, origin=T0) as web:
        got: dict[str, list[int]] = {}
        for m in modes:
            url = web.urls(m)[0]
            clock.t = T0
            first = client.get(url)
            etag = first.headers.get("ETag")
            when = next(float(t) for t in web.change_times(m, "/p/0") if t > T0)
            clock.t = when + 1.0  # the record changed since
            statuses = [first.status_code]
            if etag is not None:
                statuses.append(client.get(url, headers={"If-None-Match": etag}).status_code)
                clock.t = T0 + 1.0
                statuses.append(client.get(url, headers={"If-None-Match": etag}).status_code)
            got[m] = statuses
        assert got == {
            "honoured": [200, 200, 304],
            "ignored": [200, 200, 200],
            "lying": [200, 304, 304],  # 304 although the record changed
            "none": [200],
        }
        lie = next(r for r in web.request_log if r.site == web.site("lying") and r.status == 304)
        assert (lie.version, lie.current_version) == (0, 1)  # the client keeps a stale copy
        assert web.freshness_from_log(web.urls("lying")[:1], lie.t, lie.t + 1.0) == 0.0


def test_volatile_parts_change_on_every_load_but_not_the_record(
    clock: ManualClock, client: httpx.Client
) -> None:
    with SimWeb([SiteSpec("shop", n_pages=3)], clock=clock, seed=1, origin=T0) as web:
        url = web.urls()[0]
        one = client.get(url).text
        clock.t += 1.0
        two = client.get(url).text

        def record(html: str) -> tuple[str | None, ...]:
            sel = Selector(text=html)
            return tuple(sel.css(f"{c}::text").get() for c in ("h1.name", ".price", ".stock"))

        def volatile(html: str) -> tuple[str | None, ...]:
            sel = Selector(text=html)
            return (
                sel.css(".ad::text").get(),
                sel.css(".served time::text").get(),
                sel.css("input[name=session]::attr(value)").get(),
            )

        assert record(one) == record(two)
        a, b = volatile(one), volatile(two)
        assert all(x is not None for x in a) and all(x != y for x, y in zip(a, b, strict=True))


def test_page_groups_change_at_their_own_rates(tmp_path: Path) -> None:
    path = tmp_path / "web.toml"
    path.write_text(
        '[[sites]]\nname = "shop"\ngroups = [\n'
        '  { page_type = "product", n_pages = 200, rate_per_day = 2.0 },\n'
        '  { page_type = "policy", n_pages = 100, rate_per_day = 0.02, rate_sigma = 0 },\n]\n'
    )
    (spec,) = load_scenario(path)
    assert spec.n_pages == 300 and [g.page_type for g in spec.groups] == ["product", "policy"]
    with SimWeb([spec], seed=2, origin=T0) as web:
        rates = web.rates("shop")
        assert np.mean(rates[:200]) == pytest.approx(2.0, rel=0.3)
        assert np.all(rates[200:] == 0.02)
        assert web.page_type(web.urls()[0]) == "product"
        assert web.page_type(web.urls()[250]) == "policy"
    with pytest.raises(ConfigError):
        SiteSpec("s", groups=[PageGroup("product", -1, 1.0)])
    with pytest.raises(ConfigError, match="sitemap"):
        SiteSpec("s", sitemap="sometimes")  # type: ignore[arg-type]
    assert re.fullmatch(r"s\.example", SiteSpec("s").hostname)

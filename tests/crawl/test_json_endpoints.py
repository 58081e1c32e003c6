"""Structured endpoints: a page type's ``json_url`` makes the crawl fetch each
page's JSON twin instead of its HTML (issue 28, item 3).

Crawls of the synthetic web (:class:`~recrawl.sim.web.SimWeb`, sites on
127.0.0.1 with ``json_twin``) on a scaled clock, judged by the servers' request
logs and the store: what was requested, what was reported, what changed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from recrawl import ConfigError
from recrawl.clock import ScaledClock
from recrawl.config import PageTypeRule, Settings, load_settings
from recrawl.crawl.loop import JSON_MISSING, Crawler, CrawlStats, EmbeddedSource
from recrawl.engine.engine import Engine
from recrawl.sim.web import SimWeb, SiteSpec
from recrawl.store import open_store

DAY = 86400.0
ORIGIN = 1_800_000_000.0

JSON_FIELDS = {"price": "jmespath:price", "stock": "jmespath:stock"}
HTML_FIELDS = {"price": ".price::text", "stock": ".stock::text"}


class Recording(EmbeddedSource):
    """The embedded source, keeping a copy of every observation reported."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.reported: list[dict[str, Any]] = []

    async def report(self, observations: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
        self.reported.extend(dict(o) for o in observations)
        return await super().report(observations)


def _settings(rule: Mapping[str, Any] | PageTypeRule, budget: float = 96) -> Settings:
    return Settings.model_validate(
        {
            "budget_per_day": budget,
            "durability": "normal",
            "cycle_hours": 1,
            "page_types": {"product": rule},
            "crawl": {"allow_private_networks": True, "min_delay_s": 60},
        }
    )


async def _crawl(
    web: SimWeb, settings: Settings, db: Path, days: float, hosts: Sequence[str] = ()
) -> tuple[CrawlStats, Recording, dict[str, Any]]:
    """Crawl ``web``'s pages (of ``hosts``, default every site) for ``days``
    simulated days; the stats, the source and each page's state."""
    clock = web.clock
    hosts = list(hosts) or list(web.sites)
    store = open_store(str(db))
    try:
        engine = Engine(store, settings, clock=clock)
        urls = [u for h in hosts for u in web.urls(h)]
        engine.add_urls(
            [{"url": u, "site": u.split("/")[2], "page_type": "product"} for u in urls],
            now=clock(),
        )
        source = Recording(engine)
        crawler = Crawler(source, settings, clock=clock)
        stats = await crawler.run(clock() + days * DAY)
        pages = {u: store.page(u) for u in urls}
    finally:
        store.close()
    return stats, source, pages


def _page_requests(web: SimWeb) -> list[Any]:
    return [r for r in web.request_log.snapshot() if r.path.startswith("/p/")]


def test_json_twins_are_fetched_instead_of_pages_with_fewer_bytes(tmp_path: Path) -> None:
    """The same site crawled twice at once (identical webs): with ``json_url``
    only ``/p/<i>.json`` is requested, conditionally, the records come from the
    JSON, every change the site made between two fetches is detected, and a
    fetch receives a fraction of the bytes of the HTML crawl's."""
    clock = ScaledClock(DAY / 5, real_origin=time.time(), virtual_origin=ORIGIN)
    spec = SiteSpec("shop", n_pages=12, rate_per_day=3.0, json_twin=True)
    with (
        SimWeb([spec], clock=clock, seed=11, origin=ORIGIN) as web_json,
        SimWeb([spec], clock=clock, seed=11, origin=ORIGIN) as web_html,
    ):
        json_rule = {"json_url": "{url}.json", "fields": JSON_FIELDS}

        async def both() -> Any:
            return await asyncio.gather(
                _crawl(web_json, _settings(json_rule), tmp_path / "j.db", 1.0),
                _crawl(web_html, _settings({"fields": HTML_FIELDS}), tmp_path / "h.db", 1.0),
            )

        (stats, source, pages), (html_stats, _, html_pages) = asyncio.run(both())
        host = web_json.sites[0]
        urls = web_json.urls(host)
        fresh = web_json.freshness_from_log(urls, ORIGIN, clock())

    requested = _page_requests(web_json)
    assert requested and all(r.path.endswith(".json") for r in requested)
    assert {r.served for r in requested} == {"json"}
    assert not any(r.path.endswith(".json") for r in _page_requests(web_html))
    assert stats.requests == stats.json_requests == len(requested)
    assert stats.json_fallbacks == stats.json_refused == 0
    # conditional: the twin's validators are kept for the page and sent to the twin
    assert stats.not_modified > 0
    assert any(r.if_none_match for r in requested)
    # observations are the pages', with the record read from the JSON by JMESPath
    ok = [o for o in source.reported if o.get("status") == 200]
    assert ok and {o["url"] for o in source.reported} <= set(urls)
    for o in ok:
        assert set(o["record"]) == {"price", "stock"}
        assert all(isinstance(v, str) and v for v in o["record"].values())
    # every change between two fetches of a page is detected, and nothing else
    for url in urls:
        path = url.split(host, 1)[1]
        seen = [r.version for r in requested if r.path == path + ".json" and r.version is not None]
        moved = sum(1 for a, b in itertools.pairwise(seen) if a != b)
        assert pages[url].changes == moved, url
        assert not pages[url].gone
    assert sum(p.changes for p in pages.values()) > 0
    assert sum(p.changes for p in html_pages.values()) > 0
    # a twin fetch keeps the page fresh in the ground truth
    assert fresh > 0.3
    # bytes on the wire per fetch: a fraction of the HTML's
    per_json = stats.bytes_received / stats.requests
    per_html = html_stats.bytes_received / html_stats.requests
    assert per_json < 0.2 * per_html, (per_json, per_html)


def test_a_template_to_another_host_is_refused_at_load(tmp_path: Path) -> None:
    path = tmp_path / "recrawl.toml"
    path.write_text(
        '[page_types.product]\njson_url = "https://api.other.example{path}.json"\n'
        'fields = { price = "jmespath:price" }\n'
    )
    with pytest.raises(ConfigError) as err:
        load_settings(path, env={})
    message = str(err.value)
    assert "page_types.product.json_url" in message
    assert "another site" in message and "api.other.example" in message
    path.write_text('[page_types.product]\njson_url = "{url}.{format}"\n')
    with pytest.raises(
        ConfigError, match=r"page_types\.product\.json_url.*unknown part \{format\}"
    ):
        load_settings(path, env={})
    path.write_text(
        '[page_types.product]\njson_url = "{url}.json"\n'
        'fields = { price = "jmespath:price" }\nhtml_fields = { cost = ".price::text" }\n'
    )
    with pytest.raises(ConfigError, match="html_fields must name the same fields"):
        load_settings(path, env={})
    rule = load_settings(None, env={}).model_validate(
        {"page_types": {"p": {"json_url": "{origin}/api{path}.json{search}"}}}
    )
    assert (
        rule.page_types["p"].json_url_for("http://a.example:8080/p/1?v=2")
        == "http://a.example:8080/api/p/1.json?v=2"
    )


def test_a_function_leading_to_another_host_is_refused_by_the_crawl(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """From Python, ``json_url`` may be a function of the URL; one that leads
    off the page's site is refused (logged once): the other host gets no
    request. Without ``html_fields`` the page is not fetched either; with
    them the page is fetched and read with them."""
    clock = ScaledClock(DAY / 10, real_origin=time.time(), virtual_origin=ORIGIN)
    specs = [
        SiteSpec("shop", n_pages=6, json_twin=True),
        SiteSpec("api", n_pages=6, json_twin=True),
    ]
    with SimWeb(specs, clock=clock, seed=2, origin=ORIGIN) as web:
        shop, api = web.sites

        def elsewhere(url: str) -> str:
            return url.replace(shop, api) + ".json"

        bare = PageTypeRule(json_url=elsewhere, fields=tuple(JSON_FIELDS.items()))
        kind = PageTypeRule(
            json_url=elsewhere,
            fields=tuple(JSON_FIELDS.items()),
            html_fields=tuple(HTML_FIELDS.items()),
        )
        with caplog.at_level(logging.WARNING, logger="recrawl.crawl"):
            stats, source, _ = asyncio.run(
                _crawl(web, _settings(bare), tmp_path / "a.db", 0.1, hosts=[shop])
            )
        assert _page_requests(web) == []
        assert stats.requests == 0 and stats.json_refused > 0
        refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert len(refused) == 1
        assert api in refused[0] and "not on the site" in refused[0]
        assert "no html_fields" in refused[0]

        stats, source, _ = asyncio.run(
            _crawl(web, _settings(kind), tmp_path / "b.db", 0.1, hosts=[shop])
        )
        got = _page_requests(web)
    assert got and {r.site for r in got} == {shop}
    assert {r.served for r in got} == {"page"}
    ok = [o for o in source.reported if o.get("status") == 200]
    assert ok and all(set(o["record"]) == {"price", "stock"} for o in ok)
    assert all(o["record"]["price"] for o in ok)


@pytest.mark.parametrize("html_fields", [True, False])
def test_a_missing_json_does_not_mark_the_page_gone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, html_fields: bool
) -> None:
    """A site without JSON twins answers 404 for them. With ``html_fields``:
    the page is fetched at once instead (two requests, one observation with
    both's bytes; another page's request may come between), then directly.
    Without: the error ``json_missing`` is reported (neither gone nor
    changed). Logged once for the site."""
    clock = ScaledClock(DAY / 10, real_origin=time.time(), virtual_origin=ORIGIN)
    rule: dict[str, Any] = {"json_url": "{url}.json", "fields": JSON_FIELDS}
    if html_fields:
        rule["html_fields"] = HTML_FIELDS
    with SimWeb([SiteSpec("shop", n_pages=6)], clock=clock, seed=4, origin=ORIGIN) as web:
        with caplog.at_level(logging.WARNING, logger="recrawl.crawl"):
            stats, source, pages = asyncio.run(_crawl(web, _settings(rule), tmp_path / "m.db", 0.5))
        got = _page_requests(web)
    missing = [r.getMessage() for r in caplog.records if "for the JSON of" in r.getMessage()]
    assert len(missing) == 1 and "404" in missing[0]
    assert not any(p.gone for p in pages.values())
    twins = [r for r in got if r.path.endswith(".json")]
    assert twins and all(r.status == 404 for r in twins)
    if html_fields:
        # each page's twin once, the page right after it, then the page alone
        assert len(twins) == len({r.path for r in twins}) == stats.json_fallbacks
        for twin in twins:  # (another page's request may come between the two)
            page = twin.path[:-5]
            after = next(r for r in got[got.index(twin) + 1 :] if r.path in (page, twin.path))
            assert after.path == page and after.status == 200
            assert page not in {r.path for r in got[: got.index(twin)]}
        assert len(got) > 2 * len(twins)  # later visits fetch the page directly
        assert stats.requests == len(got)
        assert len(source.reported) == len(got) - len(twins)
        first = next(o for o in source.reported if o.get("status") == 200)
        assert set(first["record"]) == {"price", "stock"} and first["record"]["price"]
        assert all(o["url"].startswith("http") and not o["url"].endswith(".json")
                   for o in source.reported)  # fmt: skip
    else:
        assert twins == got  # the page itself is never fetched
        assert {o.get("error") for o in source.reported} == {JSON_MISSING}
        assert all("status" not in o for o in source.reported)
        assert sum(p.changes for p in pages.values()) == 0
        assert stats.json_fallbacks == 0


@pytest.mark.parametrize("html_fields", [True, False])
def test_robots_txt_is_checked_for_the_json_url(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, html_fields: bool
) -> None:
    """robots.txt disallows the twins, not the pages: no twin is requested;
    the pages are fetched and read with ``html_fields``, or, without them,
    not fetched at all. Logged once."""
    clock = ScaledClock(DAY / 10, real_origin=time.time(), virtual_origin=ORIGIN)
    robots = "User-agent: *\nDisallow: /private/\nDisallow: /*.json$\n"
    spec = SiteSpec("shop", n_pages=6, json_twin=True, robots=robots)
    rule: dict[str, Any] = {"json_url": "{url}.json", "fields": JSON_FIELDS}
    if html_fields:
        rule["html_fields"] = HTML_FIELDS
    with SimWeb([spec], clock=clock, seed=5, origin=ORIGIN) as web:
        with caplog.at_level(logging.WARNING, logger="recrawl.crawl"):
            stats, source, _ = asyncio.run(_crawl(web, _settings(rule), tmp_path / "r.db", 0.1))
        got = _page_requests(web)
        paths = [r.path for r in web.request_log.snapshot()]
    assert "/robots.txt" in paths
    assert not any(p.endswith(".json") for p in paths)
    said = [r.getMessage() for r in caplog.records if "robots.txt disallows" in r.getMessage()]
    assert len(said) == 1 and ".json" in said[0]
    if html_fields:
        assert got and {r.served for r in got} == {"page"}
        ok = [o for o in source.reported if o.get("status") == 200]
        assert ok and all(o["record"]["price"] for o in ok)
    else:
        assert got == [] and stats.requests == 0 and stats.json_refused > 0

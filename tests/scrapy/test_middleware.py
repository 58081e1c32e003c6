"""The observation middleware on Scrapy's own Request and Response objects,
without a crawl: what one attempt's observation holds."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("scrapy")

from scrapy import Request
from scrapy.http import HtmlResponse

from recrawl.scrapy import RecrawlDownloaderMiddleware
from recrawl.scrapy._middleware import ATTEMPTS_KEY, HELD_KEY
from recrawl.scrapy._runtime import META_KEY

T0 = 1_800_000_000.0


class FakeRecrawl:
    """What the middleware asks of recrawl's runtime: a clock, its scale, the
    paused sites, and where observations go."""

    scale = 1.0

    def __init__(self) -> None:
        self.seen: list[tuple[dict[str, Any], bool]] = []
        self.stopped: set[str] = set()
        self.holds: dict[str, float] = {}
        self.slept: list[float] = []
        self.entered = 0

    def clock(self) -> float:
        return T0

    def paused(self, site: str) -> bool:
        return site in self.stopped

    def held_until(self, site: str) -> float:
        return self.holds.get(site, -1.0)

    def hold(self, site: str, retry_after: str, now: float) -> None:
        self.holds[site] = now + float(retry_after)

    async def enter(self, site: str) -> None:
        if self.holds.get(site, -1.0) > self.clock():
            self.slept.append(self.holds[site])
        self.entered += 1

    def leave(self, site: str) -> None:
        self.entered -= 1

    def observed(self, raw: dict[str, Any], *, hold: bool = False) -> int | None:
        self.seen.append((raw, hold))
        return len(self.seen) if hold else None


def _request(url: str = "http://shop.example/p/1", **meta: Any) -> Request:
    task = {"url": url, "site": "shop.example", "page_type": "product", "reason": "score",
            "lease_id": "L1", "cost": 1.0}  # fmt: skip
    return Request(url, headers={"If-None-Match": '"1-3"'}, meta={META_KEY: task, **meta})


def _mw() -> tuple[RecrawlDownloaderMiddleware, FakeRecrawl]:
    fake = FakeRecrawl()
    return RecrawlDownloaderMiddleware(fake, redirects=20), fake  # type: ignore[arg-type]


def test_a_304_is_reported_at_once_with_validators_route_and_lease() -> None:
    mw, fake = _mw()
    req = _request(proxy="http://proxy.example:3128", download_latency=0.25)
    asyncio.run(mw.process_request(req))
    resp = HtmlResponse(req.url, status=304, headers={"ETag": '"1-3"'}, request=req)
    assert mw.process_response(req, resp) is resp
    [(raw, hold)] = fake.seen
    assert not hold
    assert raw["status"] == 304 and raw["etag"] == '"1-3"' and raw["conditional"] is True
    assert raw["route"] == "http://proxy.example:3128"
    assert raw["lease_id"] == "L1" and raw["latency_ms"] == 250.0
    assert raw["bytes_sent"] > len("GET http://shop.example/p/1 HTTP/1.1\r\n")  # absolute: proxied
    assert req.meta[ATTEMPTS_KEY] == 1


def test_a_2xx_waits_for_its_record() -> None:
    mw, fake = _mw()
    req = _request()
    asyncio.run(mw.process_request(req))
    body = b"<html><title>Item 1</title><h1 class='name'>Item 1</h1></html>"
    resp = HtmlResponse(req.url, status=200, body=body, headers={"ETag": '"1-4"'}, request=req)
    mw.process_response(req, resp)
    [(raw, hold)] = fake.seen
    assert hold and req.meta[HELD_KEY] == 1
    assert raw["bytes_received"] >= len(body) and raw["route"] == ""


def test_a_redirect_chain_is_one_observation_of_the_planned_url() -> None:
    mw, fake = _mw()
    req = _request("http://shop.example/old/2")
    asyncio.run(mw.process_request(req))
    hop = HtmlResponse(req.url, status=301, headers={"Location": "/p/2"}, request=req)
    mw.process_response(req, hop)
    assert fake.seen == []  # Scrapy follows it: folded into what follows
    follow = req.replace(url="http://shop.example/p/2")
    follow.meta["redirect_times"] = 1
    asyncio.run(mw.process_request(follow))
    final = HtmlResponse(follow.url, status=200, body=b"<html></html>", request=follow)
    mw.process_response(follow, final)
    [(raw, _)] = fake.seen
    assert raw["url"] == "http://shop.example/old/2"
    assert raw["moved_to"] == "http://shop.example/p/2"
    assert raw["bytes_sent"] > 2 * len("GET /p/2 HTTP/1.1\r\n")  # both hops


def test_a_redirect_scrapy_will_not_follow_is_the_observation() -> None:
    mw, fake = _mw()
    req = _request(dont_redirect=True)
    asyncio.run(mw.process_request(req))
    mw.process_response(req, HtmlResponse(req.url, status=302, headers={"Location": "/x"}))
    [(raw, hold)] = fake.seen
    assert raw["status"] == 302 and not hold and "moved_to" not in raw


def test_a_failure_and_its_retry_are_two_observations() -> None:
    from twisted.internet.error import TCPTimedOutError

    mw, fake = _mw()
    req = _request()
    asyncio.run(mw.process_request(req))
    assert mw.process_exception(req, TCPTimedOutError()) is None  # Scrapy retries it
    retry = req.copy()
    retry.meta["retry_times"] = 1
    asyncio.run(mw.process_request(retry))
    mw.process_exception(retry, ConnectionRefusedError())
    assert [(r["error"], r["bytes_received"], r.get("retry")) for r, _ in fake.seen] == [
        ("timeout", 0, None),
        ("connection_reset", 0, True),
    ]
    assert retry.meta[ATTEMPTS_KEY] == 2 and fake.entered == 0


def test_requests_outside_the_plan_are_not_observed() -> None:
    mw, fake = _mw()
    req = Request("http://shop.example/robots.txt")
    asyncio.run(mw.process_request(req))
    mw.process_response(req, HtmlResponse(req.url, status=200, body=b"User-agent: *"))
    mw.process_exception(req, TimeoutError())
    assert fake.seen == []


def test_a_site_the_crawl_paused_gets_no_request() -> None:
    from scrapy.exceptions import IgnoreRequest

    mw, fake = _mw()
    fake.stopped.add("shop.example")
    req = _request()
    with pytest.raises(IgnoreRequest):
        asyncio.run(mw.process_request(req))
    assert ATTEMPTS_KEY not in req.meta and fake.entered == 0


def test_a_retry_after_holds_the_site() -> None:
    """A 429's Retry-After (crawl seconds) holds the site: the next request
    waits until then before it is stamped and sent."""
    mw, fake = _mw()
    req = _request()
    asyncio.run(mw.process_request(req))
    mw.process_response(req, HtmlResponse(req.url, status=429, headers={"Retry-After": "3600"}))
    assert fake.holds == {"shop.example": T0 + 3600}
    assert fake.entered == 0  # the answer freed the site's place
    asyncio.run(mw.process_request(req.copy()))
    assert fake.slept == [T0 + 3600] and fake.entered == 1

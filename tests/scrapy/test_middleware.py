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
        self.entered = 0
        self.answers: list[tuple[Any, Any, dict[str, str]]] = []

    def clock(self) -> float:
        return T0

    def paused(self, site: str) -> bool:
        return site in self.stopped

    def robots_allows(self, request: Any) -> bool:
        return True  # no robots.txt here

    async def enter(self, site: str, *, netloc: str | None = None, canary: bool = False) -> bool:
        if site in self.stopped:
            return False
        self.entered += 1
        return True

    def leave(self, site: str, status: Any, error: Any, latency: Any, headers: Any) -> None:
        self.entered -= 1
        self.answers.append((status, error, dict(headers)))

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


def test_every_answer_goes_back_to_the_sites_gate() -> None:
    """Each attempt takes a place at its site's gate and gives it back with
    what came (a 429's Retry-After for the hold, a failure for the back-off)."""
    mw, fake = _mw()
    req = _request()
    asyncio.run(mw.process_request(req))
    assert fake.entered == 1
    mw.process_response(req, HtmlResponse(req.url, status=429, headers={"Retry-After": "3600"}))
    retry = req.copy()
    asyncio.run(mw.process_request(retry))
    mw.process_exception(retry, TimeoutError())
    assert fake.entered == 0
    assert fake.answers == [(429, None, {"Retry-After": "3600"}), (None, "timeout", {})]


def test_kept_records_outlive_the_crawl(tmp_path: Any) -> None:
    """The next run of the spider still hands a 304 its record; a 304 to
    validators the add-on never saw gets none."""
    from recrawl.scrapy._records import Kept, RecordMemory

    path = tmp_path / "recrawl.db.records.jsonl"
    first = RecordMemory(path)
    first.remember("http://shop.example/p/1", Kept({"price": "9"}, "h0", etag='"1-3"'))
    first.remember("http://shop.example/p/1", Kept({"price": "7"}, "h1", etag='"1-4"'))
    first.remember("http://shop.example/p/2", Kept({"price": "5"}, "h2", last_modified="Tue"))
    first.close()
    assert len(path.read_text().splitlines()) == 2
    again = RecordMemory(path)
    url = "http://shop.example/p/1"
    assert again.confirmed(url, if_none_match='"1-4"', if_modified_since=None) == {"price": "7"}
    assert again.confirmed(url, if_none_match='"1-3"', if_modified_since=None) is None
    p2 = "http://shop.example/p/2"
    assert again.confirmed(p2, if_none_match=None, if_modified_since="Tue") == {"price": "5"}

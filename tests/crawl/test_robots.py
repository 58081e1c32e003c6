from __future__ import annotations

import asyncio

import pytest

from recrawl.crawl.robots import ERROR_RETRY_S, RobotsCache, RobotsRules

SITE = "http://127.0.0.1:8000"
UA = "recrawl/0.1 (+https://example.org/bot)"


class FakeSite:
    """An async robots.txt fetch whose answer the test changes; counts calls."""

    def __init__(self, status: int | None, text: str = "", delay_s: float = 0.0) -> None:
        self.status = status
        self.text = text
        self.delay_s = delay_s
        self.calls: list[str] = []

    async def __call__(self, url: str) -> tuple[int | None, str]:
        self.calls.append(url)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return self.status, self.text


def rules_at(cache: RobotsCache, now: float, site: str = SITE) -> RobotsRules:
    return asyncio.run(cache.rules(site, now))


def test_disallow_applies_to_our_token_not_to_others() -> None:
    site = FakeSite(200, "User-agent: recrawl\nDisallow: /p/\n\nUser-agent: *\nDisallow: /admin/\n")
    rules = rules_at(RobotsCache(UA, fetch=site), 0.0)
    assert not rules.allowed(f"{SITE}/p/1")
    assert rules.allowed(f"{SITE}/admin/")  # the * group is not ours once a recrawl group exists
    assert site.calls == [f"{SITE}/robots.txt"]

    other = rules_at(RobotsCache("otherbot/2.0", fetch=site), 0.0)
    assert other.allowed(f"{SITE}/p/1")
    assert not other.allowed(f"{SITE}/admin/x")


def test_allow_overrides_a_shorter_disallow() -> None:
    site = FakeSite(200, "User-agent: *\nDisallow: /private/\nAllow: /private/open/\n")
    rules = rules_at(RobotsCache(UA, fetch=site), 0.0)
    assert rules.allowed(f"{SITE}/private/open/page")
    assert not rules.allowed(f"{SITE}/private/closed")
    assert rules.allowed(f"{SITE}/robots.txt")


def test_crawl_delay_request_rate_and_sitemaps() -> None:
    site = FakeSite(200, "User-agent: *\nCrawl-delay: 2\nSitemap: http://x/sitemap.xml\n")
    rules = rules_at(RobotsCache(UA, fetch=site), 0.0)
    assert rules.crawl_delay_s == 2.0
    assert rules.sitemaps == ["http://x/sitemap.xml"]
    assert rules.status == 200 and rules.kind == "parsed"

    site.text = "User-agent: *\nRequest-rate: 1/5\n"
    assert rules_at(RobotsCache(UA, fetch=site), 0.0).crawl_delay_s == 5.0
    site.text = "User-agent: *\nDisallow:\n"
    assert rules_at(RobotsCache(UA, fetch=site), 0.0).crawl_delay_s is None


@pytest.mark.parametrize("status", [404, 403, 410])
def test_4xx_allows_everything(status: int) -> None:
    rules = rules_at(RobotsCache(UA, fetch=FakeSite(status, "Disallow: /")), 0.0)
    assert rules.allowed(f"{SITE}/anything") and rules.kind == "allow_all"
    assert rules.status == status


@pytest.mark.parametrize("status", [500, 503, 429, None])
def test_unreachable_disallows_then_recovers(status: int | None) -> None:
    site = FakeSite(status)
    cache = RobotsCache(UA, fetch=site)
    rules = rules_at(cache, 0.0)
    assert not rules.allowed(f"{SITE}/p/1") and rules.kind == "disallow_all"
    assert cache.disallowed_count(SITE) == 1

    site.status, site.text = 200, "User-agent: *\nDisallow: /private/\n"
    assert not rules_at(cache, ERROR_RETRY_S - 1).allowed(f"{SITE}/p/1")  # still the cached error
    assert len(site.calls) == 1
    recovered = rules_at(cache, ERROR_RETRY_S)
    assert recovered.allowed(f"{SITE}/p/1") and not recovered.allowed(f"{SITE}/private/a")
    assert len(site.calls) == 2
    assert cache.disallowed_count(SITE) == 3  # counted across both copies of the rules


def test_server_error_keeps_the_last_good_rules() -> None:
    site = FakeSite(200, "User-agent: *\nDisallow: /private/\n")
    cache = RobotsCache(UA, ttl_s=3600.0, fetch=site)
    good = rules_at(cache, 0.0)
    site.status = 503
    kept = rules_at(cache, 3600.0)
    assert kept is good and len(site.calls) == 2
    assert kept.allowed(f"{SITE}/p/1") and not kept.allowed(f"{SITE}/private/x")
    rules_at(cache, 3600.0 + ERROR_RETRY_S - 1)
    assert len(site.calls) == 2  # the error is retried after ten minutes, not after the TTL
    rules_at(cache, 3600.0 + ERROR_RETRY_S)
    assert len(site.calls) == 3


def test_ttl_refetch_on_the_callers_clock() -> None:
    site = FakeSite(200, "User-agent: *\nDisallow: /a/\n")
    cache = RobotsCache(UA, ttl_s=100.0, fetch=site)
    assert not rules_at(cache, 1000.0).allowed(f"{SITE}/a/1")
    site.text = "User-agent: *\nDisallow: /b/\n"
    assert not rules_at(cache, 1099.0).allowed(f"{SITE}/a/1")
    fresh = rules_at(cache, 1100.0)
    assert fresh.allowed(f"{SITE}/a/1") and not fresh.allowed(f"{SITE}/b/1")
    assert len(site.calls) == 2
    rules_at(cache, 1100.0, site="http://127.0.0.1:9000")  # another site, its own copy
    assert site.calls[-1] == "http://127.0.0.1:9000/robots.txt"


def test_concurrent_callers_share_one_fetch() -> None:
    site = FakeSite(200, "User-agent: *\nDisallow: /x/\n", delay_s=0.01)
    cache = RobotsCache(UA, fetch=site)

    async def many() -> list[bool]:
        got = await asyncio.gather(*(cache.rules(SITE, 0.0) for _ in range(20)))
        return [r is got[0] for r in got]

    assert all(asyncio.run(many()))
    assert len(site.calls) == 1 and cache.fetches == 1


def test_a_cancelled_caller_does_not_cancel_the_shared_fetch() -> None:
    site = FakeSite(200, "User-agent: *\nDisallow: /x/\n", delay_s=0.02)
    cache = RobotsCache(UA, fetch=site)

    async def run() -> bool:
        first = asyncio.ensure_future(cache.rules(SITE, 0.0))
        second = asyncio.ensure_future(cache.rules(SITE, 0.0))
        await asyncio.sleep(0)
        first.cancel()
        rules = await second
        return not rules.allowed(f"{SITE}/x/1")

    assert asyncio.run(run())
    assert len(site.calls) == 1


def test_a_failing_fetch_reaches_the_caller_and_is_not_cached() -> None:
    calls = 0

    async def broken(url: str) -> tuple[int | None, str]:
        nonlocal calls
        calls += 1
        raise OSError("boom")

    cache = RobotsCache(UA, fetch=broken)
    for _ in range(2):
        with pytest.raises(OSError):
            rules_at(cache, 0.0)
    assert calls == 2 and cache.cached(SITE) is None

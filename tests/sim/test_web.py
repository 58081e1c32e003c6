from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from email.utils import formatdate

import httpx
import numpy as np
import pytest

from recrawl import ConfigError, NotFound
from recrawl.clock import ManualClock, ScaledClock
from recrawl.sim.web import RequestRecord, SimWeb, SiteSpec

T0 = 1_700_000_000.0
DAY = 86400.0
UA = "recrawl-test/1.0"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def web(clock: ManualClock) -> Iterator[SimWeb]:
    spec = SiteSpec(
        "shop",
        n_pages=20,
        rate_per_day=2.0,
        robots="User-agent: *\nDisallow: /private/\nCrawl-delay: 2\n",
        always_500=["/broken"],
        gone=["/p/19"],
        moved={"/old/5": "/p/5"},
        soft_404=["/p/18"],
        hostile=[
            (1 * DAY, 1 * DAY + 3600, "429"),
            (2 * DAY, 2 * DAY + 60, "challenge"),
            (3 * DAY, 3 * DAY + 60, "403"),
        ],
        retry_after_s=120,
    )
    with SimWeb([spec, SiteSpec("news", n_pages=5)], clock=clock, seed=7, origin=T0) as w:
        yield w


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(headers={"User-Agent": UA}, timeout=5.0) as c:
        yield c


def test_same_seed_same_change_times_other_seed_differs() -> None:
    specs = [SiteSpec("a", n_pages=50, rate_per_day=3.0), SiteSpec("b", n_pages=10)]
    one = SimWeb(specs, seed=3, origin=T0)
    two = SimWeb(specs, seed=3, origin=T0)
    other = SimWeb(specs, seed=4, origin=T0)
    for i in range(50):
        assert np.array_equal(one.change_times("a", f"/p/{i}"), two.change_times("a", f"/p/{i}"))
    assert np.array_equal(one.rates("b"), two.rates("b"))
    assert not all(
        np.array_equal(one.change_times("a", f"/p/{i}"), other.change_times("a", f"/p/{i}"))
        for i in range(50)
    )
    times = one.change_times("a", "/p/0")
    assert np.all(np.diff(times) >= 0) and np.all((times >= T0) & (times <= T0 + 30 * DAY))
    # about rate × horizon changes per page on average
    mean = np.mean([len(one.change_times("a", f"/p/{i}")) for i in range(50)])
    assert 30 < mean < 150


def test_unchanged_page_answers_304_to_its_etag(web: SimWeb, client: httpx.Client) -> None:
    url = web.urls("shop")[0]
    first = client.get(url)
    assert first.status_code == 200
    etag = first.headers["ETag"]
    assert etag == '"0-0"' and "Last-Modified" in first.headers
    assert 5000 <= len(first.content) <= 10_000
    again = client.get(url, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert client.get(url, headers={"If-None-Match": '"0-99"'}).status_code == 200
    since = client.get(url, headers={"If-Modified-Since": first.headers["Last-Modified"]})
    assert since.status_code == 304
    records = web.request_log.snapshot()
    assert [(r.status, r.version, r.if_none_match) for r in records] == [
        (200, 0, None),
        (304, 0, etag),
        (200, 0, '"0-99"'),
        (304, 0, None),
    ]


def test_version_advances_at_its_change_time(
    web: SimWeb, clock: ManualClock, client: httpx.Client
) -> None:
    path = next(f"/p/{i}" for i in range(18) if len(web.change_times("shop", f"/p/{i}")) >= 2)
    url = web.base_url("shop") + path
    first_change, second_change = web.change_times("shop", path)[:2]
    i = int(path[3:])

    clock.t = float(first_change) - 1e-3
    before = client.get(url)
    assert before.headers["ETag"] == f'"{i}-0"'
    clock.t = float(first_change)
    after = client.get(url, headers={"If-None-Match": before.headers["ETag"]})
    assert after.status_code == 200 and after.headers["ETag"] == f'"{i}-1"'
    assert after.headers["Last-Modified"] == formatdate(float(first_change), usegmt=True)
    assert web.version_at(url, float(second_change)) == 2

    def field(html: str, cls: str) -> str:
        return html.split(f'class="{cls}">', 1)[1].split("<", 1)[0]

    assert field(before.text, "price") != field(after.text, "price")
    assert field(before.text, "name") == field(after.text, "name") == f"Item {i}"
    assert "<title>Item" in after.text and 'class="stock"' in after.text


def test_ad_slot_changes_on_every_load(web: SimWeb, client: httpx.Client) -> None:
    url = web.urls("shop")[1]
    assert client.get(url).text != client.get(url).text  # same version, different ad
    assert client.get(url).headers["ETag"] == client.get(url).headers["ETag"]


def test_robots_txt_and_private_pages(
    web: SimWeb, clock: ManualClock, client: httpx.Client
) -> None:
    robots = client.get(web.base_url("shop") + "/robots.txt")
    assert robots.status_code == 200 and "Crawl-delay: 2" in robots.text
    assert robots.headers["Content-Type"].startswith("text/plain")
    private = client.get(web.base_url("shop") + "/private/anything")
    assert private.status_code == 200
    assert web.request_log[-1].served == "private"
    clock.t = T0 + 1 * DAY + 10  # inside the 429 window: robots.txt is still served
    assert client.get(web.base_url("shop") + "/robots.txt").status_code == 200

    with SimWeb([SiteSpec("bare", n_pages=1, robots=None)], origin=T0) as bare, httpx.Client() as c:
        assert c.get(bare.base_url("bare") + "/robots.txt").status_code == 404


def test_faults(web: SimWeb, client: httpx.Client) -> None:
    root = web.base_url("shop")
    assert client.get(root + "/broken").status_code == 500
    assert client.get(root + "/p/19").status_code == 404
    moved = client.get(root + "/old/5")
    assert moved.status_code == 301 and moved.headers["Location"] == root + "/p/5"
    assert client.get(root + "/old/5", follow_redirects=True).headers["ETag"].startswith('"5-')
    soft = client.get(root + "/p/18")
    assert soft.status_code == 200 and "<title>Page not found</title>" in soft.text
    assert "ETag" not in soft.headers
    assert client.get(root + "/nowhere").status_code == 404
    served = [r.served for r in web.request_log]
    assert served == ["error_500", "gone", "moved", "moved", "page", "soft_404", "not_found"]
    assert [r.version for r in web.request_log][:4] == [None, None, None, None]


def test_hostile_windows(web: SimWeb, clock: ManualClock, client: httpx.Client) -> None:
    url = web.urls("shop")[0]
    clock.t = T0 + 1 * DAY - 1
    assert client.get(url).status_code == 200
    clock.t = T0 + 1 * DAY
    limited = client.get(url)
    assert limited.status_code == 429 and limited.headers["Retry-After"] == "120"
    assert web.request_log[-1].retry_after_until == T0 + 1 * DAY + 120
    clock.t = T0 + 1 * DAY + 3600  # windows are half-open
    assert client.get(url).status_code == 200
    clock.t = T0 + 2 * DAY + 30
    challenge = client.get(url)
    assert challenge.status_code == 200 and "<title>Are you a robot?</title>" in challenge.text
    assert web.request_log[-1].served == "challenge" and web.request_log[-1].version is None
    clock.t = T0 + 3 * DAY
    assert client.get(url).status_code == 403
    assert client.get(web.urls("news")[0]).status_code == 200  # other sites are unaffected


def test_request_log_records_each_request(
    web: SimWeb, clock: ManualClock, client: httpx.Client
) -> None:
    urls = web.urls()
    assert len(urls) == 18 + 5  # /p/18 and /p/19 are faults
    for k, url in enumerate(urls):
        clock.t = T0 + k
        client.get(url)
    client.head(urls[0])
    log = web.request_log.snapshot()
    assert len(log) == len(urls) + 1
    assert [r.url for r in log[:-1]] == urls
    assert [r.t for r in log[:-1]] == [T0 + k for k in range(len(urls))]
    assert all(r.user_agent == UA and r.status == 200 and r.version is not None for r in log)
    assert log[-1].method == "HEAD" and all(r.real > 0 for r in log)
    assert {r.site for r in log} == set(web.sites)
    assert web.urls("news", private=True)[-1].endswith("/private/2")
    assert web.base_url("shop") + "/broken" in web.urls("shop", faults=True)


def test_freshness_from_a_hand_made_log(web: SimWeb) -> None:
    site = web.site("shop")
    a, b = web.urls("shop")[:2]
    ca = web.change_times("shop", "/p/0")
    assert len(ca) >= 3
    c0, c1, c2 = (float(x) for x in ca[:3])
    start, end = c0 - 100.0, c2 + 100.0

    def rec(path: str, t: float, version: int, status: int = 200) -> RequestRecord:
        return RequestRecord(
            t=t, real=0.0, site=site, path=path, status=status, served="page", version=version
        )

    log = [
        rec("/p/0", c0 - 50.0, 0),  # fresh 50 s, until the first change
        rec("/p/0", c0 + 10.0, 0),  # a stale copy: no freshness
        rec("/p/0", c1 + 5.0, 2, status=304),  # fresh from here to c2
        rec("/p/0", c1 + 6.0, 2, status=500),  # not a fetch of content: ignored
        RequestRecord(c1 + 7.0, 0.0, site, "/p/0", 200, "page", 0, method="HEAD"),  # nor is a HEAD
    ]
    expected = (50.0 + (c2 - (c1 + 5.0))) / (2 * (end - start))  # /p/1 never fetched: stale
    assert web.freshness_from_log([a, b], start, end, log=log) == pytest.approx(expected)
    assert web.freshness_from_log([a], start, end, log=log) == pytest.approx(2 * expected)
    # the last fetch before the window carries into it
    assert web.freshness_from_log([a], c1 + 10.0, c2, log=log) == pytest.approx(1.0)
    assert web.freshness_from_log([a], start, end, log=[]) == 0.0
    with pytest.raises(ValueError):
        web.freshness_from_log([a], end, start, log=log)


def test_freshness_of_a_live_crawl(web: SimWeb, clock: ManualClock, client: httpx.Client) -> None:
    urls = web.urls()
    for url in urls:
        client.get(url)
    now = clock()
    nxt = min(float(t[t > now][0]) for t in web.all_change_times().values() if np.any(t > now))
    assert web.freshness_from_log(urls, now, nxt) == pytest.approx(1.0)
    assert web.freshness_from_log(urls, now, nxt + DAY) < 1.0


def test_scaled_clock_runs_days_in_seconds_and_serves_quickly() -> None:
    clock = ScaledClock(scale=DAY)  # one real second is a day
    with (
        SimWeb([SiteSpec("fast", n_pages=50, rate_per_day=24.0)], clock=clock, seed=1) as web,
        httpx.Client() as c,
    ):
        urls = web.urls()
        for k in range(300):
            assert c.get(urls[k % len(urls)]).status_code == 200
        log = web.request_log.snapshot()
        assert len(log) == 300
        assert log[-1].t - log[0].t > 0  # virtual time moved, many times faster than real
        assert (log[-1].t - log[0].t) == pytest.approx(
            (log[-1].real - log[0].real) * DAY, rel=0.01, abs=1.0
        )


def test_a_stopped_web_answers_nothing() -> None:
    web = SimWeb([SiteSpec("s", n_pages=2)], origin=T0).start()
    with httpx.Client() as c:
        url = web.urls()[0]
        assert c.get(url).status_code == 200
        web.stop()
        web.stop()
        with pytest.raises(httpx.TransportError):
            c.get(url)
    with pytest.raises(RuntimeError):
        web.start()


def test_lookups_and_spec_validation() -> None:
    web = SimWeb([SiteSpec("s", n_pages=2)], origin=T0)
    with pytest.raises(RuntimeError):
        web.urls()
    with pytest.raises(NotFound):
        web.change_times("s", "/p/2")
    with pytest.raises(NotFound):
        web.change_times("nope", "/p/0")
    assert web.change_times("s", "/private/x").size == 0
    with pytest.raises(ConfigError):
        SiteSpec("s", hostile=[(0.0, 10.0, "teapot")])
    with pytest.raises(ConfigError):
        SiteSpec("s", n_pages=3, moved={"/a": "/p/3"})
    with pytest.raises(ConfigError):
        SiteSpec("s", gone=["/x"], always_500=["/x"])
    with pytest.raises(ConfigError):
        SimWeb([SiteSpec("s"), SiteSpec("s")])


def test_concurrent_clients_are_all_logged(web: SimWeb) -> None:
    urls = web.urls()

    def crawl(k: int) -> list[int]:
        with httpx.Client(timeout=5.0) as c:
            return [c.get(urls[(k + j) % len(urls)]).status_code for j in range(25)]

    with ThreadPoolExecutor(8) as pool:
        statuses = [s for batch in pool.map(crawl, range(8)) for s in batch]
    assert statuses == [200] * 200
    assert len(web.request_log) == 200


def test_a_temporary_redirect_answers_302_and_the_crawl_keeps_the_page_at_its_url(
    clock: ManualClock,
) -> None:
    import asyncio

    from recrawl.crawl.fetch import Fetcher, FetchRequest

    spec = SiteSpec("s", n_pages=4, redirected={"/sale": "/p/2"}, moved={"/old/1": "/p/1"})
    with SimWeb([spec], clock=clock, seed=3, origin=T0) as web:
        root = f"http://{web.sites[0]}"
        with httpx.Client(timeout=5.0) as c:
            got = c.get(root + "/sale")
        assert got.status_code == 302 and got.headers["Location"] == root + "/p/2"
        assert web.request_log.snapshot()[-1].served == "redirected"

        async def fetch(url: str) -> tuple[int | None, str | None]:
            f = Fetcher(allow_private_networks=True)
            try:
                r = await f.fetch(FetchRequest(url=url))
            finally:
                await f.aclose()
            return r.status, r.moved_to

        # a 302 is followed and the page keeps its URL; a 301 moves it
        assert asyncio.run(fetch(root + "/sale")) == (200, None)
        assert asyncio.run(fetch(root + "/old/1")) == (200, root + "/p/1")
    with pytest.raises(ConfigError, match="not a normal page"):
        SiteSpec("s", n_pages=3, redirected={"/a": "/p/3"})

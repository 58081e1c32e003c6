"""The simweb's proxy front door: routes as proxy ports, route faults, billing, the admin port."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from recrawl import ConfigError
from recrawl.clock import ManualClock, ScaledClock
from recrawl.crawl.fetch import Fetcher, FetchRequest
from recrawl.sim.web import RouteSpec, SimWeb, SiteSpec, read_scenario, write_ground_truth

T0 = 1_700_000_000.0
DAY = 86400.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def web(clock: ManualClock) -> Iterator[SimWeb]:
    routes = [
        RouteSpec("pool-a/us"),
        RouteSpec("pool-b/de", faults=[(1 * DAY, 2 * DAY, "reset"), (2 * DAY, 3 * DAY, "502")]),
    ]
    sites = [
        SiteSpec("shop", n_pages=10, moved={"/old/2": "/p/2"}),
        SiteSpec("news", n_pages=5, hostile=[(4 * DAY, 5 * DAY, "challenge", "pool-b/de")]),
    ]
    with SimWeb(sites, clock=clock, seed=2, origin=T0, routes=routes) as w:
        yield w


def _get(web: SimWeb, route: str, url: str, **kw: object) -> httpx.Response:
    with httpx.Client(proxy=web.proxies[route], timeout=5.0) as c:
        return c.get(url, **kw)  # type: ignore[arg-type]


def test_httpx_reaches_the_sites_by_name_through_a_proxy_port(web: SimWeb) -> None:
    assert web.sites == ["shop.example", "news.example"]
    assert set(web.proxies) == {"pool-a/us", "pool-b/de"}
    url = web.urls("shop")[0]
    assert url == "http://shop.example/p/0"  # an ordinary URL: no DNS, the proxy knows it
    page = _get(web, "pool-a/us", url)
    assert page.status_code == 200 and page.headers["ETag"] == '"0-0"'
    again = _get(web, "pool-b/de", url, headers={"If-None-Match": '"0-0"'})
    assert again.status_code == 304
    moved = _get(web, "pool-a/us", "http://shop.example/old/2")
    assert moved.headers["Location"] == "http://shop.example/p/2"  # redirects stay behind the door
    assert _get(web, "pool-a/us", "http://nowhere.example/p/0").status_code == 502
    log = web.request_log.snapshot()
    assert [(r.site, r.route, r.status) for r in log] == [
        ("shop.example", "pool-a/us", 200),
        ("shop.example", "pool-b/de", 304),
        ("shop.example", "pool-a/us", 301),
        ("", "pool-a/us", 502),
    ]
    # each site's own port still answers, logged under the site's name, route ""
    with httpx.Client() as c:
        assert c.get(web.direct_url("news") + "/p/1").status_code == 200
    assert (web.request_log[-1].site, web.request_log[-1].route) == ("news.example", "")


def test_plain_http_only_no_connect(web: SimWeb) -> None:
    proxy = web.proxies["pool-a/us"]
    with httpx.Client(proxy=proxy, timeout=5.0) as c, pytest.raises(httpx.ProxyError):
        c.get("https://shop.example/p/0")  # CONNECT: refused
    with httpx.Client() as c:  # an origin-form request to a proxy port is not forwarded
        assert c.get(web.proxies["pool-a/us"] + "/p/0").status_code == 400
    assert {r.served for r in web.request_log} == {"bad_request"}


def test_a_dead_route_resets_then_answers_502_and_the_other_route_is_fine(
    web: SimWeb, clock: ManualClock
) -> None:
    url = web.urls("shop")[3]

    async def both() -> list[tuple[str, int | None, str | None]]:
        async with Fetcher(routes=web.proxies) as f:  # loopback proxies, public-looking names
            out = []
            for route in ("pool-a/us", "pool-b/de"):
                res = await f.fetch(FetchRequest(url=url, route=route))
                out.append((route, res.status, res.error))
            return out

    clock.t = T0 + 1.5 * DAY
    assert asyncio.run(both()) == [
        ("pool-a/us", 200, None),
        ("pool-b/de", None, "connection_reset"),
    ]
    clock.t = T0 + 2.5 * DAY
    assert asyncio.run(both()) == [("pool-a/us", 200, None), ("pool-b/de", 502, None)]
    clock.t = T0 + 3 * DAY  # windows are half-open
    assert asyncio.run(both()) == [("pool-a/us", 200, None), ("pool-b/de", 200, None)]
    served = [(r.route, r.served, r.credits) for r in web.request_log]
    assert served[1] == ("pool-b/de", "route_reset", 0.0)
    assert served[3] == ("pool-b/de", "bad_gateway", 0.0)
    assert served[0] == ("pool-a/us", "page", 1.0)


def test_a_hostile_window_on_one_route(web: SimWeb, clock: ManualClock) -> None:
    clock.t = T0 + 4.5 * DAY
    url = web.urls("news")[0]
    assert "Are you a robot?" in _get(web, "pool-b/de", url).text
    assert "Are you a robot?" not in _get(web, "pool-a/us", url).text
    assert [r.served for r in web.request_log] == ["challenge", "page"]


def test_a_slow_route_answers_late_on_the_simulation_clock() -> None:
    clock = ScaledClock(scale=3600.0)  # an hour per real second
    route = RouteSpec("slow/x", faults=[(0.0, DAY, "slow")], slow_s=1800.0)
    with SimWeb([SiteSpec("s", n_pages=2)], clock=clock, routes=[route, "fast/y"]) as web:
        t0 = time.monotonic()
        assert _get(web, "slow/x", web.urls()[0]).status_code == 200
        slow = time.monotonic() - t0
        t0 = time.monotonic()
        assert _get(web, "fast/y", web.urls()[0]).status_code == 200
        fast = time.monotonic() - t0
    assert slow >= 0.45 and fast < slow  # half a simulated hour is half a real second


def test_billing_counts_wire_bytes_and_credits_as_the_fetcher_does(
    web: SimWeb, clock: ManualClock
) -> None:
    urls = web.urls("shop")[:4]

    async def crawl() -> list[tuple[int, int]]:
        async with Fetcher(routes=web.proxies) as f:
            out = []
            for k, url in enumerate(urls):
                res = await f.fetch(FetchRequest(url=url, route=["pool-a/us", "pool-b/de"][k % 2]))
                out.append((res.bytes_sent, res.bytes_received))
            return out

    clock.t = T0 + 2.5 * DAY  # pool-b answers 502: bytes moved, no credit
    seen = asyncio.run(crawl())
    log = web.request_log.snapshot()
    assert [(r.bytes_in, r.bytes_out) for r in log] == seen  # headers included, both ways
    bill = web.billing()
    assert bill["total"]["bytes"] == sum(a + b for a, b in seen)
    assert bill["by_route"]["pool-a/us"]["credits"] == 2.0
    assert bill["by_route"]["pool-b/de"]["credits"] == 0.0
    assert bill["by_route"]["pool-b/de"]["bytes_out"] > 0


def test_the_admin_port_serves_the_ground_truth_files(web: SimWeb, tmp_path: Path) -> None:
    _get(web, "pool-a/us", web.urls("shop")[0])
    written = write_ground_truth(web, tmp_path)
    with httpx.Client() as c:
        assert c.get(web.admin_url + "/").json() == sorted(
            "/" + Path(p).name for p in written.values()
        )
        for path in written.values():
            name = Path(path).name
            assert c.get(f"{web.admin_url}/{name}").text == Path(path).read_text()
        assert c.get(web.admin_url + "/nope").status_code == 404
    assert len(web.request_log) == 1  # the admin port is not in the log
    assert json.loads(Path(written["sites.json"]).read_text())["shop"] == "http://shop.example"


def test_routes_in_a_scenario_file(tmp_path: Path) -> None:
    path = tmp_path / "web.toml"
    path.write_text(
        '[[routes]]\nname = "pool-a/us"\n[[routes]]\nname = "pool-b/de"\n'
        'faults = [[3, 4, "reset"]]\n'
        '[[sites]]\nname = "shop"\nhostile = [[1, 2, "403", "pool-b/de"]]\n'
    )
    scenario = read_scenario(path)
    assert [r.name for r in scenario.routes] == ["pool-a/us", "pool-b/de"]
    assert scenario.routes[1].faults == [(3 * DAY, 4 * DAY, "reset")]
    assert scenario.sites[0].hostile == [(DAY, 2 * DAY, "403", "pool-b/de")]
    path.write_text('[[routes]]\nname = "a"\nfaults = [[3, 4, "melt"]]\n[[sites]]\nname = "s"\n')
    with pytest.raises(ConfigError, match=r"route 'a'.*melt"):
        read_scenario(path)

"""The crawl loop against a synthetic web on 127.0.0.1, days running in seconds.

One 20-day crawl from a cold start (module fixture) is measured from the
server's own request log: robots.txt, Crawl-delay, Retry-After, a site that
turns hostile, pages that fail, are gone or moved, the budget, and freshness
against the web's ground truth. Smaller crawls check stopping and the CLI.
"""

from __future__ import annotations

import asyncio
import collections
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recrawl.clock import ScaledClock
from recrawl.config import Settings
from recrawl.crawl.loop import Crawler, CrawlStats, EmbeddedSource
from recrawl.engine.engine import Engine
from recrawl.observe.traces import Trace
from recrawl.sim.replay import replay
from recrawl.sim.web import RequestRecord, SimWeb, SiteSpec
from recrawl.store import open_store

DAY = 86400.0
DAYS = 20
ORIGIN = 1_800_000_000.0
SCALE = DAY / 4.0  # a simulated day in 4 real seconds
CRAWL_DELAY = 1200.0  # shop's robots.txt Crawl-delay, simulated seconds (55 ms real)
HOSTILE = [  # (start, end, kind), seconds after the web's origin
    (10 * DAY, 11 * DAY, "challenge"),
    (11 * DAY, 12 * DAY, "429"),
    (12 * DAY, 30 * DAY, "403"),
]
BUDGET_PER_DAY = 300.0


@dataclass
class Run:
    web: SimWeb
    log: list[RequestRecord]
    stats: CrawlStats
    engine: Engine
    start: float
    end: float
    sites: dict[str, str]  # name -> host:port


def _settings(**crawl: Any) -> Settings:
    return Settings.model_validate(
        {
            "budget_per_day": BUDGET_PER_DAY,
            "cycle_hours": 1,
            "site_concurrency": 1,
            "page_types": {
                "product": {
                    "fields": {
                        "name": "h1.name::text",
                        "price": ".price::text",
                        "stock": ".stock::text",
                    }
                }
            },
            "crawl": {"allow_private_networks": True, "min_delay_s": 30, **crawl},
        }
    )


def _specs() -> list[SiteSpec]:
    return [
        SiteSpec(
            "shop",
            n_pages=40,
            rate_per_day=0.5,
            robots=f"User-agent: *\nDisallow: /private/\nCrawl-delay: {CRAWL_DELAY:g}\n",
            always_500=["/p/0"],
            gone=["/p/1"],
            moved={"/old/2": "/p/2"},
            soft_404=["/p/3"],
        ),
        SiteSpec("news", n_pages=40, rate_per_day=2.0),
        SiteSpec("listings", n_pages=40, rate_per_day=1.0),
        SiteSpec("docs", n_pages=40, rate_per_day=0.2),
        SiteSpec("hostile", n_pages=60, rate_per_day=0.5, hostile=HOSTILE, retry_after_s=3600),
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """recrawl and uniform, each crawling its own copy of the same web (same
    seed, same change times) at the same budget, at the same time."""
    clock = ScaledClock(SCALE, real_origin=time.time(), virtual_origin=ORIGIN)
    horizon = (DAYS + 1) * DAY
    with (
        SimWeb(_specs(), clock=clock, seed=7, origin=ORIGIN, horizon_s=horizon) as web,
        SimWeb(_specs(), clock=clock, seed=7, origin=ORIGIN, horizon_s=horizon) as twin,
    ):
        settings = _settings()
        crawls = []
        for policy, w in (("recrawl", web), ("uniform", twin)):
            store = open_store(str(tmp_path_factory.mktemp(policy) / "crawl.db"))
            engine = Engine(store, settings, clock=clock)
            sites = {s.name: w.site(s.name) for s in _specs()}
            rows = [
                {"url": u, "site": host, "page_type": "product"}
                for host in sites.values()
                for u in w.urls(host, private=True, faults=True)
            ]
            engine.add_urls(rows, now=clock())
            crawler = Crawler(EmbeddedSource(engine, policy=policy), settings, clock=clock)
            crawls.append((w, engine, sites, crawler))
        start = clock()

        async def both() -> list[CrawlStats]:
            return list(await asyncio.gather(*(c.run(start + DAYS * DAY) for *_, c in crawls)))

        stats = asyncio.run(both())
        end = clock()
        out = {
            policy: Run(w, w.request_log.snapshot(), st, engine, start, end, sites)
            for policy, (w, engine, sites, _), st in zip(
                ("recrawl", "uniform"), crawls, stats, strict=True
            )
        }
        yield out
        for r in out.values():
            r.engine.store.close()


@pytest.fixture(scope="module")
def run(runs: dict[str, Run]) -> Run:
    return runs["recrawl"]


def _requests(run: Run, site: str) -> list[RequestRecord]:
    return sorted((r for r in run.log if r.site == run.sites[site]), key=lambda r: r.t)


def test_robots_disallowed_paths_get_no_request(run: Run) -> None:
    private = [r for r in run.log if r.path.startswith("/private/")]
    assert private == []
    assert run.stats.disallowed >= 1  # planned, refused by robots.txt, counted


def test_crawl_delay_kept_between_requests_to_a_site(run: Run) -> None:
    shop = [r for r in _requests(run, "shop") if r.path != "/robots.txt"]
    gaps = np.diff([r.t for r in shop])
    assert len(gaps) > 300
    short = float(np.mean(gaps < 0.9 * CRAWL_DELAY))
    assert short <= 0.02, f"{short:.1%} of gaps under 90% of the Crawl-delay"


def test_no_request_inside_a_retry_after_window(run: Run) -> None:
    hostile = _requests(run, "hostile")
    windows = [(r.t, r.retry_after_until) for r in hostile if r.retry_after_until is not None]
    assert windows, "the hostile site never answered 429"
    inside = [
        r
        for r in hostile
        if any(t < r.t < until for t, until in windows if until is not None)
        and r.path != "/robots.txt"
    ]
    assert inside == []


def test_hostile_site_paused_by_its_403_wave(run: Run) -> None:
    hostile = [r for r in _requests(run, "hostile") if r.path != "/robots.txt"]
    wave = ORIGIN + HOSTILE[2][0]
    before = [r for r in hostile if r.t < ORIGIN + HOSTILE[0][0]]
    after = [r for r in hostile if r.t >= wave + DAY]  # a day for the band to act
    daily_before = len(before) / ((ORIGIN + HOSTILE[0][0] - run.start) / DAY)
    daily_after = len(after) / ((run.end - wave - DAY) / DAY)
    assert daily_after < 0.05 * daily_before, (daily_before, daily_after)
    controls = run.engine.store.site_controls()
    assert controls[run.sites["hostile"]].get("paused")
    paused_at = run.stats.paused[0]["at"] if run.stats.paused else math.inf
    assert paused_at <= wave  # paused before or at the wave
    assert sum(r.status == 403 for r in hostile) < 0.05 * daily_before


def test_failing_gone_and_moved_pages_do_not_storm(run: Run) -> None:
    shop = run.sites["shop"]
    pages = [r for r in run.log if r.path != "/robots.txt"]
    by_path = collections.Counter(r.path for r in pages if r.site == shop)
    assert by_path["/p/0"] < 0.01 * len(pages), by_path["/p/0"]  # always 500
    assert by_path["/p/1"] <= 4  # 404
    assert by_path["/old/2"] <= 4  # 301 to /p/2


def test_soft_404_does_not_pause_a_healthy_site(run: Run) -> None:
    controls = run.engine.store.site_controls()
    assert not controls.get(run.sites["shop"], {}).get("paused")
    for name in ("news", "listings", "docs"):
        assert not controls.get(run.sites[name], {}).get("paused"), name


def test_requests_within_ten_percent_of_the_budget(run: Run) -> None:
    days = (run.end - run.start) / DAY
    budget = BUDGET_PER_DAY * days
    assert run.stats.spent <= run.stats.budget + 1e-6
    assert run.stats.over_budget_cycles == 0
    assert 0.9 * budget <= run.stats.requests <= 1.1 * budget, (run.stats.requests, budget)


def _first_fetches(run: Run, urls: list[str]) -> dict[str, float]:
    """Each page's first fetch that got its content (from the server's log)."""
    first: dict[str, float] = {}
    wanted = set(urls)
    for r in sorted(run.log, key=lambda r: r.t):
        if r.status == 200 and r.url in wanted:
            first.setdefault(r.url, r.t)
    return first


def _warm_traces(run: Run, first: dict[str, float]) -> list[Trace]:
    """The pages' true changes from each page's first fetch on: a replay fetches
    every page once at its trace's start, free (SPEC, replay semantics), so the
    optimum is compared with the crawl from the moment the crawl had the page."""
    out = []
    for url, t0 in first.items():
        site, path = url.split("/", 3)[2], "/" + url.split("/", 3)[3]
        ch = run.web.change_times(site, path)
        ch = ch[(ch > t0) & (ch <= run.end)]
        out.append(Trace(url, site, "product", t0, run.end, np.asarray(ch, float)))
    return out


def test_freshness_above_uniform_and_near_the_hindsight_optimum(runs: dict[str, Run]) -> None:
    """On the sites that behave, from the server's ground truth: over 20 days
    from a cold start recrawl is fresher than a uniform crawl at the same budget
    on an identical web; and, from each page's first fetch on, within a few
    percent of the hindsight optimum at the same number of revisits, computed on
    the same change times (the issue's target: 0.96 of it)."""
    behaving = ["shop", "news", "listings", "docs"]
    cold: dict[str, float] = {}
    for policy, r in runs.items():
        urls = [u for n in behaving for u in r.web.urls(r.sites[n])]
        cold[policy] = r.web.freshness_from_log(urls, r.start, r.end, log=r.log)
    run = runs["recrawl"]
    urls = [u for n in behaving for u in run.web.urls(run.sites[n])]
    first = _first_fetches(run, urls)
    assert len(first) == len(urls)  # every page fetched
    warm = float(
        np.mean(
            [run.web.freshness_from_log([u], t0, run.end, log=run.log) for u, t0 in first.items()]
        )
    )
    revisits = sum(1 for r in run.log if r.url in first and r.status in (200, 304)) - len(first)
    page_days = sum(run.end - t0 for t0 in first.values()) / DAY
    res = replay(
        _warm_traces(run, first), budget=revisits / page_days, policies=["oracle", "uniform"]
    )
    oracle = res["policies"]["oracle"]["freshness"]
    figures = {"cold_start": cold, "warm": warm, "oracle": oracle, "ratio": warm / oracle,
               "uniform_replay": res["policies"]["uniform"]["freshness"]}  # fmt: skip
    print(json.dumps(figures))
    assert cold["recrawl"] > cold["uniform"]
    assert warm >= 0.96 * oracle


def test_stop_finishes_in_flight_fetches_and_stores_them(tmp_path: Path) -> None:
    clock = ScaledClock(DAY / 20, real_origin=time.time(), virtual_origin=ORIGIN)
    with SimWeb([SiteSpec("s", n_pages=40)], clock=clock, seed=1, origin=ORIGIN) as web:
        host = web.sites[0]
        with open_store(str(tmp_path / "c.db")) as store:
            settings = _settings(min_delay_s=1)
            engine = Engine(store, settings, clock=clock)
            engine.add_urls([{"url": u, "site": host} for u in web.urls(host)], now=clock())
            crawler = Crawler(EmbeddedSource(engine), settings, clock=clock)

            async def go() -> CrawlStats:
                job = asyncio.create_task(crawler.run(clock() + 30 * DAY))
                await asyncio.sleep(1.5)
                crawler.stop.set()
                return await asyncio.wait_for(job, 10)

            stats = asyncio.run(go())
            pages = [r for r in web.request_log.snapshot() if r.path != "/robots.txt"]
            assert stats.requests == len(pages) > 0
            assert stats.stored == stats.requests
            assert engine.stats()["total"]["fetches"] == len(pages)


def test_recrawl_crawl_from_the_command_line(tmp_path: Path) -> None:
    """A handful of URLs crawled by `recrawl crawl` on the simulation clock."""
    import subprocess
    import sys

    real0 = time.time()
    scale = DAY / 10  # two simulated days in 20 real seconds
    clock = ScaledClock(scale, real_origin=real0, virtual_origin=ORIGIN)
    with SimWeb([SiteSpec("s", n_pages=12)], clock=clock, seed=3, origin=ORIGIN) as web:
        host = web.sites[0]
        (tmp_path / "urls.txt").write_text("\n".join(web.urls(host)) + "\n")
        (tmp_path / "recrawl.toml").write_text(
            "budget_per_day = 48\n"
            '[page_types.default.fields]\nname = "h1.name::text"\nprice = ".price::text"\n'
            '[crawl]\nallow_private_networks = true\nmin_delay_s = 60\nuser_agent = "acme-bot/2 (+https://acme.example/bot)"\n'
        )
        db = str(tmp_path / "c.db")
        cli = [sys.executable, "-m", "recrawl.cli.main"]
        subprocess.run([*cli, "urls", "add", "urls.txt", "--db", db], cwd=tmp_path, check=True)
        got = subprocess.run(
            [*cli, "crawl", "--db", db, "--for", "2d", "--json", "--time-scale", str(scale),
             "--clock-origin", f"{real0}={ORIGIN}"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert got.returncode == 0, got.stderr
        summary = json.loads(got.stdout)
        pages = [r for r in web.request_log.snapshot() if r.path.startswith("/p/")]
    assert summary["requests"] == len(pages) > 12  # every page, then revisits
    assert summary["stored"] == summary["requests"]
    assert {r.user_agent for r in pages} == {"acme-bot/2 (+https://acme.example/bot)"}
    assert 0.9 * 96 <= summary["requests"] <= 96  # two days at 48 a day
    assert summary["not_modified"] > 0  # revisits were conditional


def test_crawl_leases_from_a_running_service(tmp_path: Path) -> None:
    from recrawl.crawl.loop import ServiceSource
    from recrawl.service.app import create_app
    from recrawl.testing.server import serve_in_thread

    clock = ScaledClock(DAY / 20, real_origin=time.time(), virtual_origin=ORIGIN)
    with SimWeb([SiteSpec("s", n_pages=20)], clock=clock, seed=5, origin=ORIGIN) as web:
        host = web.sites[0]
        settings = _settings(min_delay_s=1).model_copy(
            update={"token": "t0k", "budget_per_day": 240}
        )
        with open_store(str(tmp_path / "svc.db")) as store:
            engine = Engine(store, settings, clock=clock)
            engine.add_urls([{"url": u, "site": host} for u in web.urls(host)], now=clock())
            with serve_in_thread(create_app(engine, settings)) as base:
                source = ServiceSource(base, "t0k", worker="w1", unit="fetches")
                crawler = Crawler(source, settings, clock=clock)
                stats = asyncio.run(crawler.run(clock() + 0.25 * DAY))
            pages = [r for r in web.request_log.snapshot() if r.path.startswith("/p/")]
            assert stats.requests == len(pages) >= 20
            assert stats.stored == stats.requests and stats.rejected == 0
            assert engine.stats()["total"]["fetches"] == len(pages)

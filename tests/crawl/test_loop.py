"""The crawl loop against a synthetic web on 127.0.0.1, days running in seconds.

One 16-day crawl from a cold start (module fixture) is measured from the
server's own request log: robots.txt, Crawl-delay, Retry-After, a site that
turns hostile, pages that fail, are gone or moved, the budget, and freshness
against the web's ground truth. Smaller crawls check stopping and the CLI.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest

from recrawl.clock import ScaledClock
from recrawl.crawl.loop import Crawler, CrawlStats, EmbeddedSource
from recrawl.engine.engine import Engine
from recrawl.sim.crawl import (
    CRAWL_DELAY_S,
    CrawlRun,
    crawl_figures,
    crawl_settings,
    politeness_web,
    run_crawls,
)
from recrawl.sim.web import SimWeb, SiteSpec
from recrawl.store import open_store

DAY = 86400.0
ORIGIN = 1_800_000_000.0
_settings = crawl_settings


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """recrawl and uniform, each crawling its own copy of the same web (same
    seed, same change times) at 300 fetches a day for 16 days from a cold start,
    at the same time; a simulated day lasts 4 real seconds. 16 days cover every
    event of the scenario (the throttled site's 429s on days 5 and 15, the
    hostile site's turn on day 10, its 403 wave from day 12 and three days from
    day 13 on to count its requests after it); a faster clock is not an option:
    the simulation clock multiplies real latencies, and fewer requests fit in a
    simulated day."""
    out = run_crawls(
        politeness_web(), crawl_settings(300.0), tmp_path_factory.mktemp("crawls"), days=16.0
    )
    yield out
    for r in out.values():
        r.engine.store.close()


@pytest.fixture(scope="module")
def run(runs: dict[str, CrawlRun]) -> CrawlRun:
    return runs["recrawl"]


@pytest.fixture(scope="module")
def figures(runs: dict[str, CrawlRun]) -> dict[str, Any]:
    got = crawl_figures(runs)
    print(json.dumps(got, default=str))
    return got


@pytest.mark.slow  # the 16-day two-policy crawl (65 s); make test-slow, benchmarks/closed_loop.py
def test_robots_disallowed_paths_get_no_request(figures: dict[str, Any]) -> None:
    assert figures["to_disallowed_paths"] == 0
    assert figures["disallowed_counted"] >= 1  # planned, refused by robots.txt, counted


@pytest.mark.slow  # the 16-day two-policy crawl (65 s); make test-slow, benchmarks/closed_loop.py
def test_crawl_delay_kept_between_requests_to_a_site(figures: dict[str, Any]) -> None:
    assert figures["crawl_delay_gaps"] > 300
    short = figures["crawl_delay_share_under_90pct"]
    assert short <= 0.02, f"{short:.1%} of gaps under 90% of the {CRAWL_DELAY_S:g} s Crawl-delay"


@pytest.mark.slow  # the 16-day two-policy crawl (65 s); make test-slow, benchmarks/closed_loop.py
def test_a_redirect_hop_waits_for_the_crawl_delay(run: CrawlRun) -> None:
    """The moved page's 301 is followed as a request to the site like any other:
    its hop to the new URL waits for the Crawl-delay (before: 44 s after the 301)."""
    shop = run.requests("shop")
    hops = [(a, b) for a, b in itertools.pairwise(shop) if a.status == 301]
    assert hops, "the moved page was never fetched"
    for a, b in hops:
        assert b.t - a.t >= 0.9 * CRAWL_DELAY_S, (a.path, b.path, b.t - a.t)


@pytest.mark.slow  # the 16-day two-policy crawl (65 s); make test-slow, benchmarks/closed_loop.py
def test_no_request_inside_a_retry_after_window(figures: dict[str, Any]) -> None:
    assert figures["retry_after_windows"] >= 1, "the hostile site never answered 429"
    assert figures["requests_inside_retry_after"] == 0


@pytest.mark.slow  # the 16-day two-policy crawl (65 s); make test-slow, benchmarks/closed_loop.py
def test_hostile_site_paused_by_its_403_wave(run: CrawlRun, figures: dict[str, Any]) -> None:
    before, after = figures["hostile_daily_before"], figures["hostile_daily_after_wave"]
    assert after < 0.05 * before, (before, after)
    assert run.sites["hostile"] in figures["paused_sites"]
    assert figures["hostile_paused_days_after_turning"] <= 2.0  # before or at the wave (day 12)
    assert figures["hostile_403s"] < 0.05 * before


@pytest.mark.slow  # the 16-day two-policy crawl (65 s); make test-slow, benchmarks/closed_loop.py
def test_failing_gone_and_moved_pages_do_not_storm(figures: dict[str, Any]) -> None:
    assert figures["always_500_share"] < 0.01
    assert figures["gone_requests"] <= 4  # 404
    assert figures["moved_old_url_requests"] <= 4  # 301 to /p/2


@pytest.mark.slow  # the 16-day two-policy crawl (65 s); make test-slow, benchmarks/closed_loop.py
def test_soft_404_does_not_pause_a_healthy_site(run: CrawlRun, figures: dict[str, Any]) -> None:
    assert figures["paused_sites"] == [run.sites["hostile"]]


@pytest.mark.slow  # the 16-day two-policy crawl (65 s); make test-slow, benchmarks/closed_loop.py
def test_requests_within_ten_percent_of_the_budget(run: CrawlRun, figures: dict[str, Any]) -> None:
    assert run.stats.spent <= run.stats.budget + 1e-6
    assert figures["over_budget_cycles"] == 0
    assert 0.9 <= figures["requests_over_budget"] <= 1.1, figures["requests_over_budget"]


@pytest.mark.slow  # the 16-day two-policy crawl (65 s); make test-slow, benchmarks/closed_loop.py
def test_freshness_above_uniform_and_near_the_hindsight_optimum(figures: dict[str, Any]) -> None:
    """On the sites that behave, from the servers' ground truth: over 16 days
    from a cold start recrawl is fresher than a uniform crawl at the same budget
    on an identical web; from each page's first fetch on, at least 0.96 of the
    hindsight optimum at the same number of revisits on the same change times."""
    f = figures["freshness"]
    assert f["pages_fetched"] == f["pages"]
    assert f["cold_start"]["recrawl"] > f["cold_start"]["uniform"]
    assert f["warm"] >= 0.96 * f["oracle"], f


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
            assert stats.requests + stats.signal_requests == len(pages) > 0
            assert stats.stored == stats.requests
            assert engine.stats()["total"]["fetches"] == len(pages)


def test_recrawl_crawl_from_the_command_line(tmp_path: Path) -> None:
    """A handful of URLs crawled by `recrawl crawl` on the simulation clock."""
    import subprocess
    import sys

    real0 = time.time()
    scale = DAY / 5  # two simulated days in 10 real seconds
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
            assert stats.requests + stats.signal_requests == len(pages) >= 20
            assert stats.stored == stats.requests and stats.rejected == 0
            assert engine.stats()["total"]["fetches"] == len(pages)


def test_ctrl_c_stops_the_crawl_and_nothing_fetched_is_lost(tmp_path: Path) -> None:
    """SIGINT to `recrawl crawl`: no new fetch, those in flight finish and are stored."""
    import signal
    import sqlite3
    import subprocess
    import sys

    real0 = time.time()
    scale = DAY / 10
    clock = ScaledClock(scale, real_origin=real0, virtual_origin=ORIGIN)
    with SimWeb([SiteSpec("s", n_pages=30)], clock=clock, seed=4, origin=ORIGIN) as web:
        host = web.sites[0]
        (tmp_path / "urls.txt").write_text("\n".join(web.urls(host)) + "\n")
        (tmp_path / "recrawl.toml").write_text(
            "budget_per_day = 240\n[crawl]\nallow_private_networks = true\nmin_delay_s = 20\n"
        )
        db = str(tmp_path / "c.db")
        cli = [sys.executable, "-m", "recrawl.cli.main"]
        subprocess.run([*cli, "urls", "add", "urls.txt", "--db", db], cwd=tmp_path, check=True)
        proc = subprocess.Popen(
            [*cli, "crawl", "--db", db, "--for", "30d", "--json", "--time-scale", str(scale),
             "--clock-origin", f"{real0}={ORIGIN}"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
            sum(r.path.startswith("/p/") for r in web.request_log.snapshot()) < 20
        ):
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, errs = proc.communicate(timeout=30)
        assert proc.returncode == 0, errs
        summary = json.loads(out)
        pages = [r for r in web.request_log.snapshot() if r.path.startswith("/p/")]
    with sqlite3.connect(db) as con:
        (stored,) = con.execute("SELECT COUNT(*) FROM observations").fetchone()
    assert summary["requests"] == len(pages) == stored >= 20
    assert "stopping" in errs


def test_observations_the_store_refuses_are_kept_for_ingest(tmp_path: Path) -> None:
    """A store that fails every write: the crawl goes on, and what it fetched is
    in the spool file, which `recrawl ingest` stores once the store is back."""
    from typer.testing import CliRunner

    from recrawl.cli.main import app

    class Broken(EmbeddedSource):
        async def report(self, observations: Any) -> tuple[int, int]:
            raise OSError("disk full")

    clock = ScaledClock(DAY / 20, real_origin=time.time(), virtual_origin=ORIGIN)
    with SimWeb([SiteSpec("s", n_pages=10)], clock=clock, seed=2, origin=ORIGIN) as web:
        host = web.sites[0]
        db = str(tmp_path / "c.db")
        with open_store(db) as store:
            settings = _settings(min_delay_s=1).model_copy(update={"budget_per_day": 240})
            engine = Engine(store, settings, clock=clock)
            engine.add_urls([{"url": u, "site": host} for u in web.urls(host)], now=clock())
            spool = tmp_path / "unreported.jsonl"
            crawler = Crawler(Broken(engine), settings, clock=clock, spool=str(spool))
            crawler.report_retry_s = 0.0
            stats = asyncio.run(crawler.run(clock() + 0.1 * DAY))
        pages = [r for r in web.request_log.snapshot() if r.path.startswith("/p/")]
    assert stats.stored == 0 and stats.spooled == stats.requests
    assert stats.requests + stats.signal_requests == len(pages) >= 10
    assert len(spool.read_text().splitlines()) == len(pages)
    # the crawl ran on a simulated clock, in 2027: ingest as of its time, not the wall's
    res = CliRunner().invoke(app, ["ingest", str(spool), "--db", db, "--at", str(clock())])
    assert res.exit_code == 0, res.output
    with open_store(db) as store:
        assert Engine(store, settings).stats()["total"]["fetches"] == len(pages)


@pytest.mark.slow  # the 16-day two-policy crawl (65 s); make test-slow, benchmarks/closed_loop.py
def test_policy_figures_agree_with_the_ground_truth(runs: dict[str, CrawlRun]) -> None:
    from recrawl.sim.crawl import BEHAVING, policy_figures

    for policy, r in runs.items():
        f = policy_figures(r)
        true_changes = sum(
            len(r.web.change_times(r.sites[n], "/" + u.split("/", 3)[3]))
            for n in BEHAVING
            for u in r.web.urls(r.sites[n])
        )
        assert 0 < f["changes_detected"] <= true_changes, policy
        assert f["fetches_per_change"] == f["fetches"] / f["changes_detected"]
        assert 0 < f["revisits_304_share"] < 1  # revisits were conditional, some found changes
        assert f["hostile_requests_after_turning"] < 20, policy  # paused early, both policies


def test_challenge_pages_pause_a_site(tmp_path: Path) -> None:
    """A site answering 200 with a captcha instead of its pages (title and fields
    gone) is paused after eight of them, and gets no page request afterwards."""
    specs = [
        SiteSpec("hostile", n_pages=30, rate_per_day=0.5, hostile=[(DAY, 3 * DAY, "challenge")]),
        SiteSpec("ok", n_pages=30),
    ]
    runs = run_crawls(specs, crawl_settings(100.0), tmp_path, policies=("recrawl",), days=2.5)
    r = runs["recrawl"]
    r.engine.store.close()
    (paused,) = r.stats.paused
    assert paused["site"] == r.sites["hostile"] and "challenge" in paused["reason"]
    challenges = [x for x in r.requests("hostile") if x.served == "challenge"]
    assert len(challenges) == 8
    assert all(x.t <= paused["at"] for x in r.requests("hostile"))


def test_each_cycle_spend_is_checked_against_the_plan(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Billing by bytes: every cycle sets what its fetches cost beside what the
    plan expected of them. The first plans know nothing of the pages (256 KiB
    a fetch, the prior) and are said to be off; the estimates then follow the
    pages' own reports, so the last cycle's gap is smaller than the third's."""
    clock = ScaledClock(DAY / 20, real_origin=time.time(), virtual_origin=ORIGIN)
    with SimWeb([SiteSpec("s", n_pages=40)], clock=clock, seed=1, origin=ORIGIN) as web:
        host = web.sites[0]
        with open_store(str(tmp_path / "c.db")) as store:
            settings = _settings(min_delay_s=1).model_copy(
                update={"billing_unit": "bytes", "budget_per_day": 24 * 4 * 262_144.0}
            )
            engine = Engine(store, settings, clock=clock)
            engine.add_urls([{"url": u, "site": host} for u in web.urls(host)], now=clock())
            crawler = Crawler(EmbeddedSource(engine), settings, clock=clock)
            with caplog.at_level("WARNING", logger="recrawl.crawl"):
                stats = asyncio.run(crawler.run(clock() + 0.4 * DAY))
    rows = stats.cycle_spend
    assert len(rows) == stats.cycles >= 8
    assert sum(r.spent for r in rows) == pytest.approx(stats.spent)
    assert sum(r.fetches for r in rows) == stats.requests
    assert all(r.reported > 0 and r.expected > 0 for r in rows)
    assert rows[0].ratio is not None and rows[0].ratio < 0.5  # the prior: far too dear
    assert "the plan's cost estimates are off" in caplog.text
    assert rows[-1].ratio is not None and rows[2].ratio is not None
    assert abs(rows[-1].ratio - 1) < abs(rows[2].ratio - 1)
    summary = stats.as_dict()["cycle_spend"][-1]
    assert summary["ratio"] == pytest.approx(rows[-1].ratio)

"""The Scrapy add-on in a real Scrapy crawl against a synthetic web on 127.0.0.1.

One crawl (module fixture): a ``CrawlerProcess`` script in a subprocess (the
Twisted reactor runs once per process; Scrapy's warnings stay out of this
one), two simulated days at a day per 6 real seconds, checked against the
server's own request log and the store.
"""

from __future__ import annotations

import collections
import json
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("scrapy")

from scrapy_run import addon_settings, crawl_with_scrapy, product_rows, run_script, spider_script

from recrawl.clock import ScaledClock
from recrawl.config import load_settings
from recrawl.engine.engine import Engine
from recrawl.sim.web import RequestRecord, SimWeb, SiteSpec
from recrawl.store import open_store

DAY = 86400.0
DAYS = 2
ORIGIN = 1_800_000_000.0
SCALE = DAY / 6.0  # a simulated day in 6 real seconds
BUDGET_PER_DAY = 60.0
AGENT = "acme-bot/1 (+https://acme.example/bot)"
BUSY = [(0.5 * DAY, 1.5 * DAY, "429")]  # seconds after the web's origin

CONFIG = f"""\
budget_per_day = {BUDGET_PER_DAY:g}
cycle_hours = 1
site_concurrency = 1

[page_types.product.fields]
name = "h1.name::text"
price = ".price::text"
stock = ".stock::text"

[crawl]
allow_private_networks = true
min_delay_s = 60
user_agent = "{AGENT}"
"""

SPIDER = """
class Shop(RecrawlSpider):
    name = "shop"
    last = {}  # planned URL -> the page type's fields of the last item parsed

    def parse(self, response):
        item = {
            "name": response.css("h1.name::text").get(),
            "price": response.css(".price::text").get(),
            "stock": response.css(".stock::text").get(),
            "ad": response.css(".ad::text").get(),  # changes on every load: not a field
        }
        self.last[response.meta["recrawl"]["url"]] = {k: item[k] for k in ("name", "price", "stock")}
        yield item

    def parse_not_modified(self, response):
        record = response.meta["recrawl_record"]
        last = self.last.get(response.meta["recrawl"]["url"])
        seen = "missing" if record is None else "same" if record == last else "other"
        self.crawler.stats.inc_value(f"test/304_record_{seen}")
        if record is not None:
            yield dict(record)  # the unchanged page's item, passed on again

"""


@dataclass
class Run:
    web: SimWeb
    log: list[RequestRecord]
    stats: dict[str, Any]
    db: str
    sites: dict[str, str]  # name -> host:port
    dead: str  # a URL whose port refuses connections
    hanging: str  # a URL whose server takes the connection and never answers
    real_seconds: float
    log_text: str  # the crawl's stderr (Scrapy's log)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("scrapy")
    real0 = time.time()
    clock = ScaledClock(SCALE, real_origin=real0, virtual_origin=ORIGIN)
    specs = [
        SiteSpec("a", n_pages=12, rate_per_day=2.0, always_500=["/p/0"], gone=["/p/1"]),
        SiteSpec("b", n_pages=12, rate_per_day=0.3, moved={"/old/2": "/p/2"}),
        SiteSpec("paused", n_pages=8, rate_per_day=1.0),
        SiteSpec("hostile", n_pages=20, rate_per_day=1.0, hostile=[(0.0, 30 * DAY, "403")]),
        SiteSpec("busy", n_pages=8, rate_per_day=3.0, hostile=BUSY, retry_after_s=7200),
    ]
    with SimWeb(specs, clock=clock, seed=11, origin=ORIGIN, horizon_s=(DAYS + 1) * DAY) as web:
        sites = {s.name: web.site(s.name) for s in specs}
        dead = f"http://127.0.0.1:{_free_port()}/p/0"
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # the kernel completes the handshake; nobody ever reads
        hanging = f"http://127.0.0.1:{silent.getsockname()[1]}/p/0"
        rows = product_rows(web, sites.values(), private=True, faults=True)
        rows.append({"url": dead, "site": "dead", "page_type": "product"})
        rows.append({"url": hanging, "site": "hanging", "page_type": "product"})
        with silent:
            got, db = crawl_with_scrapy(
                tmp,
                clock,
                config=CONFIG,
                spider=SPIDER,
                rows=rows,
                run_for=f"{DAYS}d",
                paused=[sites["paused"]],
                RETRY_TIMES=1,
                DOWNLOAD_TIMEOUT=0.5,
            )
        yield Run(
            web,
            web.request_log.snapshot(),
            got.stats,
            db,
            sites,
            dead,
            hanging,
            got.real_seconds,
            got.stderr,
        )


def _pages(run: Run) -> list[RequestRecord]:
    return [r for r in run.log if r.path != "/robots.txt"]


def test_every_request_the_server_saw_is_one_observation_in_the_store(run: Run) -> None:
    """Each request is one observation of its URL, a redirect chain one of the
    planned URL (as recrawl crawl counts it): the 301 of /old/2 and the
    request for /p/2 that followed are one observation of /old/2."""
    pages = _pages(run)
    seen = collections.Counter(r.url for r in pages)
    b = run.sites["b"]
    moved = seen[f"http://{b}/old/2"]
    seen[f"http://{b}/p/2"] -= moved
    with open_store(run.db) as store:
        logged = store.outcomes_many([*seen, run.dead, run.hanging])
        total = Engine(store).stats()["total"]["fetches"]
    stored = collections.Counter(
        {u: len(v) for u, v in logged.items() if u not in (run.dead, run.hanging)}
    )
    assert stored == seen
    dead, hanging = logged[run.dead], logged[run.hanging]
    assert dead and all(o == "hard_block" for _, o in dead)  # refused: connection_reset
    assert run.stats["recrawl/failed/connection_reset"] == len(dead)
    assert hanging and all(o == "error" for _, o in hanging)
    assert run.stats["recrawl/failed/timeout"] == len(hanging)
    assert total == sum(seen.values()) + len(dead) + len(hanging)
    assert run.stats["recrawl/observations"] == total
    assert run.stats["recrawl/stored"] == total
    assert run.stats.get("recrawl/rejected", 0) == 0
    assert {r.user_agent for r in pages} == {AGENT}


def test_the_crawl_logs_no_warning_or_error(run: Run) -> None:
    """No deprecation warning from the add-on's hooks on this Scrapy, no
    error but Scrapy's own "Gave up retrying" and robots.txt download errors
    (the failures are the sites', and they are observations)."""
    lines = run.log_text.splitlines()
    assert [x for x in lines if "Warning" in x] == []
    errors = [x for x in lines if "] ERROR:" in x]
    scrapys = ("[scrapy.downloadermiddlewares.retry]", "[scrapy.downloadermiddlewares.robotstxt]")
    assert [x for x in errors if not x.split(" ERROR:")[0].endswith(scrapys)] == []


def test_a_permanent_redirect_retires_the_old_url(run: Run) -> None:
    b = run.sites["b"]
    old = [r for r in _pages(run) if r.site == b and r.path == "/old/2"]
    assert len(old) == 1 and old[0].status == 301  # moved once, never planned again
    with open_store(run.db) as store:
        cols = store.page_columns()
    moved = dict(zip(cols["url"], cols["moved"], strict=True))
    assert moved[f"http://{b}/old/2"] and not moved[f"http://{b}/p/2"]


def test_retries_are_observations_too(run: Run) -> None:
    """The page that always answers 500 and the refused port are retried by
    Scrapy (RETRY_TIMES = 1): each attempt is a request, and an observation."""
    a = run.sites["a"]
    always_500 = [r for r in _pages(run) if r.site == a and r.path == "/p/0"]
    assert len(always_500) >= 2 and len(always_500) % 2 == 0  # every fetch retried once
    assert run.stats["recrawl/retries"] >= len(always_500) // 2
    assert run.stats["recrawl/failed"] >= len(always_500)


def test_revisits_are_conditional_and_304s_counted(run: Run) -> None:
    by_url: dict[str, list[RequestRecord]] = collections.defaultdict(list)
    for r in sorted(_pages(run), key=lambda r: r.t):
        by_url[r.url].append(r)
    revisits = [r for rs in by_url.values() if rs[0].status == 200 for r in rs[1:]]
    conditional = [r for r in revisits if r.if_none_match is not None]
    assert len(revisits) > 30
    assert len(conditional) >= 0.9 * len(revisits)  # the rest: unconditional verify samples
    not_modified = sum(r.status == 304 for r in _pages(run))
    assert not_modified > 10
    assert run.stats["recrawl/not_modified"] == not_modified


def test_a_304_hands_the_callback_the_stored_record(run: Run) -> None:
    """parse_not_modified gets, in response.meta["recrawl_record"], the record
    of the fetch the 304 confirms (the page type's fields of the item parse
    yielded then), without a body to parse; the records outlive the crawl in
    the file beside the store."""
    not_modified = run.stats["recrawl/not_modified"]
    assert run.stats["test/304_record_same"] == not_modified > 10
    assert "test/304_record_missing" not in run.stats
    assert "test/304_record_other" not in run.stats
    kept = [json.loads(x) for x in Path(f"{run.db}.records.jsonl").read_text().splitlines()]
    assert len({k["url"] for k in kept}) == len(kept)  # rewritten: one line per URL
    ok = {r.url for r in _pages(run) if r.status == 200 and r.version is not None}
    assert {k["url"] for k in kept if k["record"]} >= ok - {f"http://{run.sites['b']}/p/2"}


def test_changed_and_unchanged_match_the_servers_versions(run: Run) -> None:
    """A 200 revisit is changed when the server's version moved since the
    previous answer, else unchanged (the ad slot, on every load, is not one of
    the page type's fields), as the store judged from the items' records."""
    last: dict[str, int] = {}
    changed = unchanged = 0
    following = False  # the request that followed /old/2's 301 is /old/2's observation
    for r in sorted(_pages(run), key=lambda r: r.t):
        url = r.url
        if r.path == "/old/2":
            following = True
        elif following and r.site == run.sites["b"] and r.path == "/p/2":
            url, following = r.url.replace("/p/2", "/old/2"), False
        if r.version is None:
            continue
        if r.status == 200 and url in last:
            if r.version != last[url]:
                changed += 1
            else:
                unchanged += 1
        last[url] = r.version
    assert changed > 5
    assert run.stats["recrawl/changed"] == changed
    assert run.stats.get("recrawl/unchanged", 0) == unchanged


def test_a_paused_site_gets_no_request(run: Run) -> None:
    assert [r for r in run.log if r.site == run.sites["paused"]] == []


def test_a_site_refusing_every_request_is_paused_by_the_crawl(run: Run) -> None:
    """recrawl crawl's rule: PAUSE_AFTER (8) refusals in a row pause the site;
    its requests already queued in Scrapy are dropped."""
    from recrawl.crawl.loop import PAUSE_AFTER

    hostile = [r for r in _pages(run) if r.site == run.sites["hostile"]]
    assert PAUSE_AFTER <= len(hostile) <= PAUSE_AFTER + 1  # one may be in flight
    assert {r.status for r in hostile} == {403}
    with open_store(run.db) as store:
        assert store.site_controls()[run.sites["hostile"]].get("paused")
    assert run.stats["recrawl/paused_sites"] >= 1


def test_no_request_inside_a_retry_after_window(run: Run) -> None:
    busy = [r for r in _pages(run) if r.site == run.sites["busy"]]
    windows = [(r.t, r.retry_after_until) for r in busy if r.retry_after_until is not None]
    assert windows, "the busy site never answered 429"
    inside = [r for r in busy if any(t < r.t < u - 1.0 for t, u in windows if u is not None)]
    assert inside == []
    assert run.stats["recrawl/held"] >= len(windows)


def test_robots_disallowed_pages_get_no_request(run: Run) -> None:
    assert [r for r in run.log if r.path.startswith("/private/")] == []
    # /private/0-2 of a and b, and of busy and hostile when planned before their pauses
    assert 6 <= run.stats["recrawl/disallowed"] <= 12


def test_spend_within_ten_percent_of_the_budget(run: Run) -> None:
    budget = BUDGET_PER_DAY * DAYS
    assert run.stats["recrawl/budget"] == pytest.approx(budget, rel=0.02)
    spent = run.stats["recrawl/spent"]
    assert spent <= budget + 1
    assert 0.9 * budget <= spent, (spent, budget)
    assert spent == run.stats["recrawl/observations"]  # billing unit: fetches
    assert run.stats["recrawl/cycles"] >= DAYS * 24
    # the spider kept fetching over both days
    pages = _pages(run)
    t0 = min(r.t for r in pages)
    second_day = [r for r in pages if r.t >= t0 + DAY]
    assert len(second_day) >= 0.3 * len(pages)
    mine = {k: v for k, v in run.stats.items() if k.startswith("recrawl/")}
    print(json.dumps({"real_seconds": round(run.real_seconds, 1), "requests": len(pages), **mine}))


def test_addon_defaults_and_a_projects_own_setting(tmp_path: Path) -> None:
    """The add-on installs the middleware and recrawl's politeness defaults;
    a project's own setting wins over them."""
    from scrapy.settings import Settings as ScrapySettings

    from recrawl.scrapy import RecrawlAddon, RecrawlDownloaderMiddleware

    (tmp_path / "recrawl.toml").write_text(CONFIG)
    s = ScrapySettings()
    s.setdict({"RECRAWL_CONFIG": str(tmp_path / "recrawl.toml"), "RECRAWL_TIME_SCALE": 60,
               "CONCURRENT_REQUESTS_PER_DOMAIN": 3}, priority="project")  # fmt: skip
    RecrawlAddon().update_settings(s)
    assert s.getdict("DOWNLOADER_MIDDLEWARES")[RecrawlDownloaderMiddleware] == 950
    assert s["USER_AGENT"] == AGENT
    assert s.getbool("ROBOTSTXT_OBEY")
    assert s.getfloat("DOWNLOAD_DELAY") == pytest.approx(1.0)  # 60 s of crawl time at 60x
    assert s.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == 3


def test_download_failures_as_error_words() -> None:
    from twisted.internet import error
    from twisted.web._newclient import ResponseNeverReceived

    from recrawl.scrapy._observation import error_word

    assert error_word(error.TimeoutError()) == "timeout"
    assert error_word(error.TCPTimedOutError()) == "timeout"
    assert error_word(error.DNSLookupError()) == "dns"
    assert error_word(error.ConnectionRefusedError()) == "connection_reset"
    assert error_word(error.ConnectionLost()) == "connection_reset"
    assert error_word(ResponseNeverReceived([])) == "connection_reset"
    assert error_word(ValueError()) == "error"


def test_the_docs_example_with_scrapy_runspider(tmp_path: Path) -> None:
    """docs/scrapy.md's spider (tests/scrapy/shop.py), its URLs added with
    `recrawl urls add`, run by `scrapy runspider` for a simulated day."""
    import shutil

    real0 = time.time()
    scale = DAY / 5.0
    clock = ScaledClock(scale, real_origin=real0, virtual_origin=ORIGIN)
    with SimWeb([SiteSpec("s", n_pages=10)], clock=clock, seed=3, origin=ORIGIN) as web:
        host = web.sites[0]
        shutil.copy(Path(__file__).with_name("shop.py"), tmp_path / "shop.py")
        (tmp_path / "recrawl.toml").write_text(
            CONFIG.replace("budget_per_day = 60", "budget_per_day = 48")
        )
        (tmp_path / "urls.txt").write_text("\n".join(web.urls(host)) + "\n")
        recrawl = [sys.executable, "-m", "recrawl.cli.main"]
        subprocess.run(
            [*recrawl, "urls", "add", "urls.txt", "--page-type", "product"],
            cwd=tmp_path,
            check=True,
        )
        got = subprocess.run(
            [sys.executable, "-m", "scrapy", "runspider", "shop.py", "-s", "RECRAWL_RUN_FOR=1d",
             "-s", f"RECRAWL_TIME_SCALE={scale}", "-s", f"RECRAWL_CLOCK_ORIGIN={real0}={ORIGIN}",
             "-s", "TELNETCONSOLE_ENABLED=0", "-s", "LOG_LEVEL=INFO"],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert got.returncode == 0, got.stderr[-4000:]
        pages = [r for r in web.request_log.snapshot() if r.path.startswith("/p/")]
    with open_store(str(tmp_path / "recrawl.db")) as store:
        fetches = Engine(store).stats()["total"]["fetches"]
    assert fetches == len(pages) > 10  # every page, then revisits
    assert 0.9 * 48 <= len(pages) <= 48 + 1
    assert "'recrawl/not_modified'" in got.stderr  # Scrapy's stats dump


def _outcomes_from_versions(log: list[RequestRecord]) -> collections.Counter[str]:
    """new / changed / unchanged of each 200 as the server's versions tell them."""
    last: dict[str, int] = {}
    out: collections.Counter[str] = collections.Counter()
    for r in sorted(log, key=lambda r: r.t):
        if r.version is None:
            continue
        if r.status == 200:
            was = last.get(r.url)
            out["new" if was is None else "changed" if r.version != was else "unchanged"] += 1
        last[r.url] = r.version
    return out


def test_leases_from_a_running_service(tmp_path: Path) -> None:
    """RECRAWL_SERVICE_URL: the spider registers its start_urls with `recrawl
    serve` (POST /v1/urls), leases its tasks from it and reports every attempt
    to it, lease ids and all; its outcome stats (new, changed, unchanged) are
    the ones the server's versions give, as with an embedded store."""
    pytest.importorskip("fastapi")
    from recrawl.service.app import create_app
    from recrawl.testing.server import serve_in_thread

    real0 = time.time()
    scale = DAY / 10.0
    clock = ScaledClock(scale, real_origin=real0, virtual_origin=ORIGIN)
    specs = [SiteSpec("s", n_pages=20, rate_per_day=4.0), SiteSpec("t", n_pages=8)]
    with SimWeb(specs, clock=clock, seed=5, origin=ORIGIN) as web:
        host, fresh = web.site("s"), web.site("t")
        (tmp_path / "recrawl.toml").write_text(
            CONFIG.replace("min_delay_s = 60", "min_delay_s = 1")
        )
        settings = load_settings(tmp_path / "recrawl.toml").model_copy(
            update={"token": "t0k", "budget_per_day": 240}
        )
        (tmp_path / "crawl.py").write_text(spider_script(SPIDER))
        with open_store(str(tmp_path / "svc.db")) as store:
            engine = Engine(store, settings, clock=clock)
            rows = [{"url": u, "site": host, "page_type": "product"} for u in web.urls(host)]
            engine.add_urls(rows, now=clock())
            with serve_in_thread(create_app(engine, settings)) as base:
                scrapy_settings = addon_settings(
                    clock,
                    tmp_path / "recrawl.toml",
                    "12h",
                    RECRAWL_SERVICE_URL=base,
                    RECRAWL_TOKEN="t0k",
                )
                spider = {"start_urls": web.urls(fresh), "page_type": "product"}
                got = run_script(tmp_path, scrapy_settings, spider, timeout=60)
            stats = got.stats
            log = web.request_log.snapshot()
            pages = [r for r in log if r.path.startswith("/p/")]
            assert "Warning" not in got.stderr, got.stderr[-4000:]
            assert stats["recrawl/observations"] == len(pages) >= 20
            assert stats["recrawl/stored"] == len(pages)
            assert stats.get("recrawl/rejected", 0) == 0
            assert engine.stats()["total"]["fetches"] == len(pages)
            # start_urls: registered with the service, then fetched by the plan
            assert stats["recrawl/registered"] == len(web.urls(fresh))
            assert {r.url for r in pages if r.site == fresh} == set(web.urls(fresh))
            assert engine.page_info(web.urls(fresh)[0]) is not None
            expected = _outcomes_from_versions(pages)
            assert expected["new"] == len(web.urls(host)) + len(web.urls(fresh))
            assert expected["changed"] > 3, expected
            for name in ("new", "changed", "unchanged"):
                assert stats.get(f"recrawl/{name}", 0) == expected[name], name

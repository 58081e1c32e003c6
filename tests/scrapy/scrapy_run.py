"""What the Scrapy crawl tests share: a spider run as a ``CrawlerProcess``
script in a subprocess (the Twisted reactor runs once per process, and
Scrapy's warnings stay out of the test's own), on the clock of the synthetic
web it crawls, over a store the test fills first.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recrawl.clock import ScaledClock
from recrawl.config import load_settings
from recrawl.engine.engine import Engine
from recrawl.sim.web import SimWeb
from recrawl.store import open_store

SPIDER_HEAD = """\
import json
import sys

from scrapy.crawler import CrawlerProcess

from recrawl.scrapy import RecrawlSpider

"""

SPIDER_TAIL = """

process = CrawlerProcess(json.loads(sys.argv[1]))
crawler = process.create_crawler(Shop)
process.crawl(crawler, **(json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}))
process.start()
print(json.dumps(crawler.stats.get_stats(), default=str))
"""


def product_rows(web: SimWeb, hosts: Iterable[str], **urls: Any) -> list[dict[str, Any]]:
    """The store rows of the pages of ``hosts`` (``urls``: :meth:`SimWeb.urls`'s
    options), each a ``product``."""
    return [
        {"url": u, "site": host, "page_type": "product"}
        for host in hosts
        for u in web.urls(host, **urls)
    ]


def spider_script(spider: str) -> str:
    """A script running the spider class ``Shop`` defined by ``spider`` (it
    may use ``json``, ``sys`` and ``RecrawlSpider``): argv[1] its Scrapy
    settings as JSON, argv[2] (optional) the spider's arguments; it prints
    the crawl's stats as JSON on its last line."""
    return SPIDER_HEAD + spider.strip("\n") + "\n" + SPIDER_TAIL


@dataclass
class SpiderRun:
    stats: dict[str, Any]
    stderr: str  # Scrapy's log
    real_seconds: float


def run_script(
    cwd: Path,
    settings: Mapping[str, Any],
    spider_args: Mapping[str, Any] | None = None,
    *,
    timeout: float = 90.0,
) -> SpiderRun:
    """Run ``cwd/crawl.py`` (:func:`spider_script`) with these Scrapy settings;
    fails the test on a non-zero exit, with the end of its log."""
    argv = [sys.executable, "crawl.py", json.dumps(dict(settings))]
    if spider_args is not None:
        argv.append(json.dumps(dict(spider_args)))
    t0 = time.monotonic()
    got = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    real_seconds = time.monotonic() - t0
    assert got.returncode == 0, got.stderr[-4000:]
    return SpiderRun(json.loads(got.stdout.strip().splitlines()[-1]), got.stderr, real_seconds)


def addon_settings(clock: ScaledClock, config: Path, run_for: str, **more: Any) -> dict[str, Any]:
    """The add-on on, with recrawl's config, the crawl's length and the
    clock shared with the web (``more``: other settings, e.g. ``RECRAWL_DB``)."""
    return {
        "ADDONS": {"recrawl.scrapy.RecrawlAddon": 500},
        "RECRAWL_CONFIG": str(config),
        "RECRAWL_RUN_FOR": run_for,
        "RECRAWL_TIME_SCALE": clock.scale,
        "RECRAWL_CLOCK_ORIGIN": f"{clock.real_origin}={clock.virtual_origin}",
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
        **more,
    }


def crawl_with_scrapy(
    tmp: Path,
    clock: ScaledClock,
    *,
    config: str,
    spider: str,
    rows: Sequence[Mapping[str, Any]],
    run_for: str,
    paused: Sequence[str] = (),
    timeout: float = 90.0,
    **more: Any,
) -> tuple[SpiderRun, str]:
    """In ``tmp``: ``recrawl.toml`` (``config``), the store ``recrawl.db``
    holding ``rows`` (the sites ``paused`` paused) and the spider script
    (:func:`spider_script`); then the crawl over that store for ``run_for``.
    The run and the store's path."""
    (tmp / "recrawl.toml").write_text(config)
    (tmp / "crawl.py").write_text(spider_script(spider))
    db = str(tmp / "recrawl.db")
    with open_store(db) as store:
        engine = Engine(store, load_settings(tmp / "recrawl.toml"), clock=clock)
        engine.add_urls(list(rows), now=clock())
        for site in paused:
            engine.pause(site, reason="test", now=clock())
    settings = addon_settings(clock, tmp / "recrawl.toml", run_for, RECRAWL_DB=db, **more)
    return run_script(tmp, settings, timeout=timeout), db

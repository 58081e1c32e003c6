"""The crawl loop against a synthetic web, measured by the web's own ground truth.

:func:`run_crawls` runs :class:`~recrawl.crawl.loop.Crawler` for each policy,
each on its own copy of the same :class:`~recrawl.sim.web.SimWeb` (same seed,
same change times), at the same budget, at the same time, on one
:class:`~recrawl.clock.ScaledClock`. :func:`crawl_figures` reads what
happened from the servers' request logs: politeness (robots.txt, Crawl-delay,
Retry-After, a site that turns hostile), hygiene (pages that always fail, are
gone or moved), spend against budget, and freshness: from the cold start
against the other policies, and from each page's first fetch on against the
hindsight optimum at the same number of revisits on the same change times (a
replay fetches every page once at its start, free, so the optimum is compared
with the crawl from the moment the crawl had the page).

:func:`politeness_web` is the scenario ``tests/crawl/test_loop.py`` and
``benchmarks/crawl_rules.py`` use.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from recrawl.clock import ScaledClock
from recrawl.config import Settings
from recrawl.crawl.loop import Crawler, CrawlStats, EmbeddedSource
from recrawl.engine.engine import Engine
from recrawl.observe.traces import Trace
from recrawl.sim.replay import replay
from recrawl.sim.web import PageGroup, RequestRecord, RouteSpec, SimWeb, SiteSpec
from recrawl.store import open_store

__all__ = [
    "CRAWL_DELAY_S",
    "HOSTILE",
    "CrawlRun",
    "closed_loop",
    "closed_loop_web",
    "crawl_figures",
    "crawl_settings",
    "page_types",
    "policy_figures",
    "politeness",
    "politeness_web",
    "route_diagnosis",
    "run_crawls",
]

DAY = 86400.0
CRAWL_DELAY_S = 1200.0
"""The shop's robots.txt Crawl-delay in :func:`politeness_web`, simulated seconds."""
HOSTILE: tuple[tuple[float, float, str], ...] = (
    (10 * DAY, 11 * DAY, "challenge"),
    (11 * DAY, 12 * DAY, "429"),
    (12 * DAY, 30 * DAY, "403"),
)
"""The hostile site's schedule in :func:`politeness_web` (seconds after the origin)."""
BEHAVING: tuple[str, ...] = ("shop", "news", "listings", "docs")


@dataclass
class CrawlRun:
    """One policy's crawl: its web, the web's request log, the crawl's stats."""

    policy: str
    web: SimWeb
    log: list[RequestRecord]
    stats: CrawlStats
    engine: Engine
    start: float
    end: float
    sites: dict[str, str]
    """Spec name → ``host:port``."""

    def requests(self, site: str, *, robots: bool = False) -> list[RequestRecord]:
        """The requests one site (by spec name) saw, in time order."""
        host = self.sites[site]
        return sorted(
            (r for r in self.log if r.site == host and (robots or r.path != "/robots.txt")),
            key=lambda r: r.t,
        )


def politeness_web() -> list[SiteSpec]:
    """Six sites: a shop with robots.txt rules, a Crawl-delay and faulty pages
    (always 500, 404, a 301, a soft 404), three that behave, one that turns
    hostile on day 10 (challenges, then 429s with an hour's Retry-After, then a
    403 wave from day 12), and one asking to slow down for three hours on days
    5 and 15 (429 with an hour's Retry-After)."""
    return [
        SiteSpec(
            "shop",
            n_pages=40,
            rate_per_day=0.5,
            robots=f"User-agent: *\nDisallow: /private/\nCrawl-delay: {CRAWL_DELAY_S:g}\n",
            always_500=["/p/0"],
            gone=["/p/1"],
            moved={"/old/2": "/p/2"},
            soft_404=["/p/3"],
        ),
        SiteSpec("news", n_pages=40, rate_per_day=2.0),
        SiteSpec("listings", n_pages=40, rate_per_day=1.0),
        SiteSpec("docs", n_pages=40, rate_per_day=0.2),
        SiteSpec(
            "hostile", n_pages=60, rate_per_day=0.5, hostile=list(HOSTILE), retry_after_s=3600
        ),
        SiteSpec(
            "throttled",
            n_pages=30,
            rate_per_day=1.0,
            hostile=[(5 * DAY, 5 * DAY + 3 * 3600, "429"), (15 * DAY, 15 * DAY + 3 * 3600, "429")],
            retry_after_s=3600,
        ),
    ]


def closed_loop_web() -> list[SiteSpec]:
    """:func:`politeness_web` with the four sites that behave made of page types
    that change at very different rates, as real sites are: on the shop,
    products about daily, the home and category pages several times a day and
    policy pages (terms, shipping, about) almost never; on the news site
    section fronts many times a day, recent articles a few times, the archive
    of older articles and the policies almost never; listing and item pages
    and policies on the listings site; slow docs, a changelog and policies on
    the docs site. Same
    names, sizes, faults, hostile and throttled sites as :func:`politeness_web`
    (40 pages on each site that behaves)."""
    groups = {
        "shop": [("product", 24, 1.0, 1.0), ("home", 4, 6.0, 0.5), ("policy", 12, 0.02, 0.5)],
        "news": [
            ("section", 6, 8.0, 0.5),
            ("article", 8, 2.0, 0.5),
            ("archive", 20, 0.02, 0.5),
            ("policy", 6, 0.01, 0.5),
        ],
        "listings": [("listing", 10, 4.0, 0.5), ("item", 20, 1.0, 1.0), ("policy", 10, 0.02, 0.5)],
        "docs": [("doc", 28, 0.05, 1.0), ("changelog", 4, 1.0, 0.5), ("policy", 8, 0.01, 0.5)],
    }
    return [
        replace(spec, groups=[PageGroup(*g) for g in groups[spec.name]])
        if spec.name in groups
        else spec
        for spec in politeness_web()
    ]


def page_types(specs: Sequence[SiteSpec]) -> list[str]:
    """Every page type of ``specs``, in order of first appearance."""
    return list(dict.fromkeys(g.page_type for s in specs for g in s.page_groups()))


def crawl_settings(
    budget_per_day: float = 300.0, *, types: Sequence[str] = ("product",), **crawl: Any
) -> Settings:
    """Settings for a crawl of a :class:`SimWeb`: the record fields (name, price,
    stock) extracted for each page type of ``types``, loopback allowed, one request
    at a time per site (so that no request already in flight lands inside a
    Retry-After window), 30 s between requests. The stores are throwaway:
    ``durability = "normal"`` (no fsync a commit, which the simulation clock
    would multiply)."""
    fields = {"name": "h1.name::text", "price": ".price::text", "stock": ".stock::text"}
    return Settings.model_validate(
        {
            "budget_per_day": budget_per_day,
            "durability": "normal",
            "cycle_hours": 1,
            "site_concurrency": 1,
            "page_types": {t: {"fields": dict(fields)} for t in types},
            "crawl": {"allow_private_networks": True, "min_delay_s": 30, **crawl},
        }
    )


def run_crawls(
    specs: Sequence[SiteSpec],
    settings: Settings,
    workdir: Path,
    *,
    policies: Sequence[str] = ("recrawl", "uniform"),
    days: float = 20.0,
    scale: float = DAY / 4.0,
    seed: int = 7,
    origin: float = 1_800_000_000.0,
    routes: Sequence[RouteSpec] = (),
) -> dict[str, CrawlRun]:
    """Crawl an identical web per policy, all at once, for ``days`` simulated days
    from a cold start (every URL, private and faulty ones included, registered at
    the start, each normal page with its page type); ``scale`` simulated seconds
    per real second. With ``routes`` each web opens its proxy front door and the
    crawl goes through it, its ``crawl.routes`` set to the web's proxies. Stores
    are SQLite files under ``workdir``; close them with ``run.engine.store.close()``."""
    clock = ScaledClock(scale, real_origin=time.time(), virtual_origin=origin)
    horizon = (days + 1) * DAY
    webs = [
        SimWeb(
            specs, clock=clock, seed=seed, origin=origin, horizon_s=horizon, routes=routes
        ).start()
        for _ in policies
    ]
    try:
        crawls = []
        for policy, web in zip(policies, webs, strict=True):
            store = open_store(str(workdir / f"{policy}.db"))
            own = settings
            if routes:
                own = settings.model_copy(
                    update={"crawl": settings.crawl.model_copy(update={"routes": web.proxies})}
                )
            engine = Engine(store, own, clock=clock)
            sites = {s.name: web.site(s.name) for s in specs}
            rows = []
            for host in sites.values():
                pages = set(web.urls(host))
                rows += [
                    {
                        "url": u,
                        "site": host,
                        "page_type": web.page_type(u) if u in pages else "product",
                    }
                    for u in web.urls(host, private=True, faults=True)
                ]
            engine.add_urls(rows, now=clock())
            crawler = Crawler(EmbeddedSource(engine, policy=policy), own, clock=clock)
            crawls.append((policy, web, engine, sites, crawler))
        start = clock()

        async def together() -> list[CrawlStats]:
            return list(await asyncio.gather(*(c[-1].run(start + days * DAY) for c in crawls)))

        stats = asyncio.run(together())
        end = clock()
        return {
            policy: CrawlRun(policy, web, web.request_log.snapshot(), st, engine, start, end, sites)
            for (policy, web, engine, sites, _), st in zip(crawls, stats, strict=True)
        }
    finally:
        for web in webs:
            web.stop()


def _first_fetches(run: CrawlRun, urls: Sequence[str]) -> dict[str, float]:
    first: dict[str, float] = {}
    wanted = set(urls)
    for r in sorted(run.log, key=lambda r: r.t):
        if r.status == 200 and r.url in wanted:
            first.setdefault(r.url, r.t)
    return first


def _warm_traces(run: CrawlRun, first: dict[str, float]) -> list[Trace]:
    out = []
    for url, t0 in first.items():
        _, _, host, rest = url.split("/", 3)
        path = "/" + rest
        ch = run.web.change_times(host, path)
        ch = ch[(ch > t0) & (ch <= run.end)]
        kind = run.web.page_type(url)
        out.append(Trace(url, host, kind, t0, run.end, np.asarray(ch, float)))
    return out


def freshness(runs: dict[str, CrawlRun], behaving: Sequence[str] = BEHAVING) -> dict[str, Any]:
    """Freshness on the ``behaving`` sites from the servers' logs: ``cold_start``
    per policy over the whole crawl; for the first policy, ``warm`` (each page
    from its first fetch on), the hindsight ``oracle`` and ``uniform`` replayed
    on the same change times from the same first fetches at the same number of
    revisits, and ``ratio`` = warm / oracle. A crawl too short to revisit
    any page has no yardstick: ``oracle``, ``uniform_replay`` and ``ratio`` are None
    (and ``warm`` too when no page was fetched)."""
    cold = {}
    for policy, r in runs.items():
        urls = [u for n in behaving for u in r.web.urls(r.sites[n])]
        cold[policy] = r.web.freshness_from_log(urls, r.start, r.end, log=r.log)
    run = next(iter(runs.values()))
    urls = [u for n in behaving for u in run.web.urls(run.sites[n])]
    first = _first_fetches(run, urls)
    warm = (
        float(
            np.mean(
                [run.web.freshness_from_log([u], t, run.end, log=run.log) for u, t in first.items()]
            )
        )
        if first
        else None
    )
    revisits = sum(1 for r in run.log if r.url in first and r.status in (200, 304)) - len(first)
    page_days = sum(run.end - t for t in first.values()) / DAY
    oracle = uniform = ratio = None
    if revisits > 0 and page_days > 0:  # (a crawl too short to revisit has no yardstick)
        res = replay(
            _warm_traces(run, first), budget=revisits / page_days, policies=["oracle", "uniform"]
        )
        oracle = float(res["policies"]["oracle"]["freshness"])
        uniform = float(res["policies"]["uniform"]["freshness"])
        ratio = warm / oracle if warm is not None and oracle > 0 else None
    return {
        "cold_start": cold,
        "pages": len(urls),
        "pages_fetched": len(first),
        "warm": warm,
        "oracle": oracle,
        "uniform_replay": uniform,
        "ratio": ratio,
        "revisits_per_page_day": revisits / page_days if page_days > 0 else 0.0,
    }


def politeness(run: CrawlRun) -> dict[str, Any]:
    """Politeness of one crawl of :func:`politeness_web` (or
    :func:`closed_loop_web`) as its servers saw it: requests to robots-disallowed
    paths (the shop's ``/private/``), gaps between the shop's requests and those
    under 90 % of its Crawl-delay (arrival times: a gap can look shorter than
    the crawl kept it by the difference of two requests' latencies, which the
    simulation clock multiplies by its scale), Retry-After windows the hostile
    and throttled sites set and requests that arrived inside one. ``violations``
    adds the disallowed requests and those inside a Retry-After window."""
    pages = [r for r in run.log if r.path != "/robots.txt"]
    shop = run.requests("shop") if "shop" in run.sites else []
    gaps = np.diff([r.t for r in shop])
    inside = 0
    windows: list[tuple[float, float | None]] = []
    for name in ("hostile", "throttled"):
        if name not in run.sites:
            continue
        seen = run.requests(name)
        held = [(r.t, r.retry_after_until) for r in seen if r.retry_after_until is not None]
        inside += sum(1 for r in seen if any(t < r.t < u for t, u in held if u is not None))
        windows += held
    disallowed = sum(1 for r in pages if r.path.startswith("/private/"))
    return {
        "to_disallowed_paths": disallowed,
        "disallowed_counted": run.stats.disallowed,
        "crawl_delay_gaps": len(gaps),
        "crawl_delay_gaps_under_90pct": int(np.sum(gaps < 0.9 * CRAWL_DELAY_S)),
        "crawl_delay_share_under_90pct": float(np.mean(gaps < 0.9 * CRAWL_DELAY_S))
        if len(gaps)
        else None,
        "retry_after_windows": len(windows),
        "requests_inside_retry_after": inside,
        "violations": disallowed + inside,
    }


def crawl_figures(runs: dict[str, CrawlRun]) -> dict[str, Any]:
    """Everything :func:`politeness_web`'s crawl is judged by, from the first
    policy's request log (counts of requests as the servers saw them)."""
    run = next(iter(runs.values()))
    pages = [r for r in run.log if r.path != "/robots.txt"]
    shop = run.requests("shop")
    hostile = run.requests("hostile")
    polite = politeness(run)
    throttled = run.requests("throttled")
    turn, wave = run.web.origin + HOSTILE[0][0], run.web.origin + HOSTILE[2][0]
    before = sum(1 for r in hostile if r.t < turn)
    after = sum(1 for r in hostile if r.t >= wave + DAY)
    days = (run.end - run.start) / DAY
    by_path = collections.Counter(r.path for r in shop)
    controls = run.engine.store.site_controls()
    paused = [p["at"] for p in run.stats.paused if p["site"] == run.sites["hostile"]]
    paused_at = paused[0] if paused else math.inf
    return {
        "days": days,
        "requests": len(pages),
        "robots_requests": len(run.log) - len(pages),
        "to_disallowed_paths": polite["to_disallowed_paths"],
        "disallowed_counted": polite["disallowed_counted"],
        "crawl_delay_gaps": polite["crawl_delay_gaps"],
        "crawl_delay_share_under_90pct": polite["crawl_delay_share_under_90pct"],
        "retry_after_windows": polite["retry_after_windows"],
        "requests_inside_retry_after": polite["requests_inside_retry_after"],
        "throttled_daily": len(throttled) / days,
        "hostile_daily_before": before / ((turn - run.start) / DAY),
        "hostile_daily_after_wave": after / ((run.end - wave - DAY) / DAY),
        "hostile_paused_days_after_turning": (paused_at - turn) / DAY,
        "hostile_403s": sum(1 for r in hostile if r.status == 403),
        "always_500_share": by_path["/p/0"] / max(len(pages), 1),
        "gone_requests": by_path["/p/1"],
        "moved_old_url_requests": by_path["/old/2"],
        "paused_sites": sorted(s for s, c in controls.items() if c.get("paused")),
        "budget": run.stats.budget,
        "spent": run.stats.spent,
        "requests_over_budget": run.stats.requests / run.stats.budget if run.stats.budget else None,
        "over_budget_cycles": run.stats.over_budget_cycles,
        "freshness": freshness(runs),
    }


def policy_figures(run: CrawlRun, behaving: Sequence[str] = BEHAVING) -> dict[str, Any]:
    """What one policy's crawl bought, from its web's request log: on the
    ``behaving`` sites, page fetches, changes detected (a fetch that got another
    version than the page's previous fetch), fetches per change detected, the
    share of revisits answered 304, freshness over the crawl; over all sites,
    wire bytes and requests, :func:`politeness`; the hostile site's requests
    after it turned and when the crawl paused it (days after it turned; None
    when never)."""
    hosts = {run.sites[n] for n in behaving if n in run.sites}
    seen: dict[str, int] = {}
    fetches = changes = revisits = not_modified = 0
    for r in sorted(run.log, key=lambda r: r.t):
        if r.site not in hosts or r.path == "/robots.txt":
            continue
        fetches += 1
        if r.version is None or r.status not in (200, 304):
            continue
        before = seen.get(r.url)
        if before is not None:
            revisits += 1
            not_modified += r.status == 304
            changes += r.version != before
        seen[r.url] = r.version
    urls = [u for n in behaving if n in run.sites for u in run.web.urls(run.sites[n])]
    out: dict[str, Any] = {
        "freshness": run.web.freshness_from_log(urls, run.start, run.end, log=run.log),
        "fetches": fetches,
        "changes_detected": changes,
        "fetches_per_change": fetches / changes if changes else None,
        "revisits_304_share": not_modified / revisits if revisits else None,
        "requests": run.stats.requests,
        "bytes": run.stats.bytes_sent + run.stats.bytes_received,
        "spent_over_budget": run.stats.spent / run.stats.budget if run.stats.budget else None,
        "politeness": politeness(run),
    }
    if "hostile" in run.sites:
        turn = run.web.origin + HOSTILE[0][0]
        hostile = run.requests("hostile")
        paused = [p["at"] for p in run.stats.paused if p["site"] == run.sites["hostile"]]
        out["hostile_requests_after_turning"] = sum(1 for r in hostile if r.t >= turn)
        out["hostile_paused_days_after_turning"] = (paused[0] - turn) / DAY if paused else None
    return out


def closed_loop(
    workdir: Path,
    *,
    policies: Sequence[str] = ("recrawl", "uniform", "nutch"),
    days: float = 30.0,
    budget_per_day: float = 300.0,
    seed: int = 7,
    day_seconds: float = 4.0,
    specs: Sequence[SiteSpec] | None = None,
) -> dict[str, Any]:
    """Crawl ``specs`` (default :func:`closed_loop_web`) with each policy from a
    cold start, each on an identical web at the same budget, and compare them
    by the servers' logs (:func:`policy_figures`), with the first policy's
    freshness from each page's first fetch against the hindsight optimum
    (:func:`freshness`)."""
    specs = closed_loop_web() if specs is None else list(specs)
    settings = crawl_settings(budget_per_day, types=page_types(specs))
    runs = run_crawls(
        specs, settings, workdir, policies=policies,
        days=days, scale=DAY / day_seconds, seed=seed,
    )  # fmt: skip
    try:
        fresh = freshness(runs)
        return {
            "days": days,
            "budget_per_day": budget_per_day,
            "seed": seed,
            "policies": {p: policy_figures(r) for p, r in runs.items()},
            "warm": {k: fresh[k] for k in ("warm", "oracle", "ratio", "uniform_replay")},
        }
    finally:
        for r in runs.values():
            r.engine.store.close()


def route_diagnosis(
    workdir: Path, *, days: float = 0.4, dies_after_days: float = 0.2, seed: int = 7
) -> dict[str, Any]:
    """Two sites crawled through two routes of the web's proxy front door, one
    of which starts resetting every connection after ``dies_after_days``: what
    the servers saw on each route after that, and each site's health as the
    crawl's own observations score it at the end (``diagnosis`` ``route`` and
    the failing route named, rather than the site blamed). About 10 real
    seconds at the default ``days`` (an hour of simulated time a real second)."""
    dies = dies_after_days * DAY
    routes = [RouteSpec("pool-a/us"), RouteSpec("pool-b/de", faults=[(dies, 30 * DAY, "reset")])]
    specs = [
        SiteSpec("shop", n_pages=100, rate_per_day=4.0),
        SiteSpec("news", n_pages=100, rate_per_day=8.0),
    ]
    runs = run_crawls(
        specs, crawl_settings(6000.0, min_delay_s=10), workdir, policies=("recrawl",),
        days=days, scale=3600.0, seed=seed, routes=routes,
    )  # fmt: skip
    run = runs["recrawl"]
    try:
        after = [r for r in run.log if r.path != "/robots.txt" and r.t >= run.web.origin + dies]
        by_route: dict[str, collections.Counter[str]] = {}
        for r in after:
            by_route.setdefault(r.route, collections.Counter())[r.served or str(r.status)] += 1
        health = run.engine.health(at=run.end, record=False)
        return {
            "route_died_after_days": dies_after_days,
            "requests_after_by_route": {k: dict(v) for k, v in sorted(by_route.items())},
            "sites": [
                {
                    "site": h["site"],
                    "band": h["band"],
                    "diagnosis": h["diagnosis"],
                    "failing_routes": h["failing_routes"],
                }
                for h in sorted(health, key=lambda h: h["site"])
            ],
            "paused_by_crawl": [p["site"] for p in run.stats.paused],
        }
    finally:
        run.engine.store.close()

"""A crawl over two routes of the simweb's front door, one of which dies: the
health layer names the route, not the site, from the crawl's own observations."""

from __future__ import annotations

from pathlib import Path

from recrawl.sim.crawl import crawl_settings, run_crawls
from recrawl.sim.web import RouteSpec, SiteSpec

DAY = 86400.0


def test_a_dead_route_is_named_as_the_route_not_the_site(tmp_path: Path) -> None:
    dies = 0.2 * DAY
    routes = [RouteSpec("pool-a/us"), RouteSpec("pool-b/de", faults=[(dies, 30 * DAY, "reset")])]
    specs = [
        SiteSpec("shop", n_pages=100, rate_per_day=4.0),
        SiteSpec("news", n_pages=100, rate_per_day=8.0),
    ]
    runs = run_crawls(
        specs, crawl_settings(6000.0, min_delay_s=10), tmp_path, policies=("recrawl",),
        days=0.4, scale=3600.0, routes=routes,
    )  # fmt: skip
    run = runs["recrawl"]
    try:
        log = [r for r in run.log if r.path != "/robots.txt"]
        assert {r.site for r in log} == {"shop.example", "news.example"}
        after = [r for r in log if r.t >= run.web.origin + dies]
        # both routes carried the crawl; after its death pool-b only reset connections
        assert {r.served for r in after if r.route == "pool-b/de"} == {"route_reset"}
        assert {r.status for r in after if r.route == "pool-a/us"} <= {200, 304}
        assert sum(r.route == "pool-b/de" for r in after) >= 20
        # the route test needs some requests of each group in the last hour
        health = {h["site"]: h for h in run.engine.health(at=run.end, record=False)}
        for site in ("shop.example", "news.example"):
            assert health[site]["diagnosis"] == "route", health[site]
            assert health[site]["failing_routes"] == ["pool-b"]
            assert health[site]["band"] != "critical"
        assert not run.stats.paused  # the sites were not blamed
    finally:
        run.engine.store.close()

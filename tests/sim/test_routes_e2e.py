"""A crawl over two routes of the simweb's front door, one of which dies: the
health layer names the route, not the site, from the crawl's own observations."""

from __future__ import annotations

from pathlib import Path

from recrawl.sim.crawl import route_diagnosis


# `recrawl demo` runs route_diagnosis at these same defaults, and
# tests/cli/test_cli.py::test_demo_runs_the_main_job_and_writes_the_report
# checks all of the below from its output; that test is slow (80 s), so this
# one (10 s of simulated clock) is the route diagnosis end to end in `make test`.
def test_a_dead_route_is_named_as_the_route_not_the_site(tmp_path: Path) -> None:
    got = route_diagnosis(tmp_path)
    after = got["requests_after_by_route"]
    # both routes carried the crawl; after its death pool-b only reset connections
    assert set(after) == {"pool-a/us", "pool-b/de"}
    assert set(after["pool-b/de"]) == {"route_reset"}
    assert sum(after["pool-b/de"].values()) >= 20
    assert "route_reset" not in after["pool-a/us"]
    # the route test needs some requests of each group in the last hour
    assert [s["site"].split(":")[0] for s in got["sites"]] == ["news.example", "shop.example"]
    for site in got["sites"]:
        assert site["diagnosis"] == "route", site
        assert site["failing_routes"] == ["pool-b"]
        assert site["band"] != "critical"
    assert got["paused_by_crawl"] == []  # the sites were not blamed

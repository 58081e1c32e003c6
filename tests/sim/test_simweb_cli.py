"""`recrawl simweb` and `recrawl crawl` on one simulation clock, as two processes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recrawl.observe.traces import load_traces
from recrawl.sim.web import load_scenario

DAY = 86400.0
CLI = [sys.executable, "-m", "recrawl.cli.main"]


@pytest.mark.slow  # 19 s closed loop; make test-slow
def test_a_crawl_of_the_simweb_is_in_its_ground_truth(tmp_path: Path) -> None:
    (tmp_path / "web.toml").write_text(
        '[[sites]]\nname = "shop"\nn_pages = 15\nrate_per_day = 2.0\n'
        'robots = "User-agent: *\\nDisallow: /private/\\n"\n'
        '[[sites]]\nname = "blog"\nn_pages = 10\nrate_per_day = 0.5\n'
        'hostile = [[1.5, 3, "403"]]\n'
    )
    assert [s.name for s in load_scenario(tmp_path / "web.toml")] == ["shop", "blog"]
    real0, virtual0 = time.time() + 2.0, 1_800_000_000.0  # both processes start on one clock
    scale = DAY / 8  # a day in 8 real seconds
    clock = ["--time-scale", str(scale), "--clock-origin", f"{real0}={virtual0}"]
    web = subprocess.Popen(
        [*CLI, "simweb", "--scenario", "web.toml", "--seed", "3", "--for", "2.2d",
         "--urls", "urls.txt", "--truth", "truth", *clock],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert web.stdout is not None
        sites = json.loads(web.stdout.readline())["sites"]
        assert set(sites) == {"shop", "blog"}
        (tmp_path / "recrawl.toml").write_text(
            "budget_per_day = 60\n[crawl]\nallow_private_networks = true\nmin_delay_s = 60\n"
        )
        subprocess.run([*CLI, "urls", "add", "urls.txt", "--db", "c.db"], cwd=tmp_path, check=True)
        crawl = subprocess.run(
            [*CLI, "crawl", "--db", "c.db", "--for", "2d", "--json", *clock],
            cwd=tmp_path, capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        assert crawl.returncode == 0, crawl.stderr
        summary = json.loads(crawl.stdout)
        web.communicate(timeout=60)
    finally:
        web.kill()
        web.communicate()
    assert web.returncode == 0
    lines = (tmp_path / "truth/requests.jsonl").read_text().splitlines()
    requests = [json.loads(line) for line in lines]
    pages = [r for r in requests if r["path"] != "/robots.txt"]
    assert len(pages) == summary["requests"] > 25  # every page, then revisits
    assert not [r for r in pages if r["path"].startswith("/private/")]
    assert summary["disallowed"] >= 1
    blog = sites["blog"].split("//")[1]
    assert {r["status"] for r in pages if r["site"] == blog and r["t"] > virtual0 + 1.6 * DAY} <= {
        403
    }
    traces = load_traces(tmp_path / "truth/changes.jsonl")
    assert len(traces) == 25 and sum(len(t.changes) for t in traces) > 20


def test_a_bad_scenario_is_one_sentence_naming_the_site(tmp_path: Path) -> None:
    import pytest

    from recrawl import ConfigError

    bad = tmp_path / "bad.toml"
    bad.write_text('[[sites]]\nname = "shop"\nn_pagez = 3\n')
    with pytest.raises(ConfigError, match=r"site 'shop': unknown field\(s\) \['n_pagez'\]"):
        load_scenario(bad)
    bad.write_text('[[sites]]\nname = "shop"\nhostile = [[2, 1, "403"]]\n')
    with pytest.raises(ConfigError, match="empty"):
        load_scenario(bad)


def test_the_shipped_example_opens_the_proxy_front_door(tmp_path: Path) -> None:
    import signal

    import httpx

    web = subprocess.Popen(
        [*CLI, "simweb", "--scenario", "example", "--truth", "truth"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert web.stdout is not None
        ready = json.loads(web.stdout.readline())
        assert set(ready["routes"]) == {"pool-a/us", "pool-b/de", "pool-c/fr"}
        assert ready["sites"]["shop"] == "http://shop.example"
        with httpx.Client(proxy=ready["routes"]["pool-a/us"], timeout=10.0) as c:
            page = c.get("http://shop.example/p/5")
            robots = c.get("http://shop.example/robots.txt").text
        assert page.status_code == 200 and "Sitemap: http://shop.example/sitemap.xml" in robots
        with httpx.Client(timeout=10.0) as c:
            assert (
                c.get(ready["admin"] + "/billing.json").json()["by_route"]["pool-a/us"]["requests"]
                == 2
            )
        web.send_signal(signal.SIGTERM)
        web.communicate(timeout=30)
    finally:
        web.kill()
        web.communicate()
    requests = (tmp_path / "truth/requests.jsonl").read_text().splitlines()
    assert [json.loads(r)["route"] for r in requests] == ["pool-a/us", "pool-a/us"]

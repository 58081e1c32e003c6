from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recrawl.cli.main import app

runner = CliRunner()


def recrawl(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recrawl", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _log(tmp_path: Path) -> Path:
    p = tmp_path / "log.jsonl"
    rows = [
        {
            "url": "https://shop.example/p/1",
            "fetched_at": 1000,
            "status": 200,
            "record": {"p": 1},
            "page_type": "product",
        },
        {
            "url": "https://shop.example/p/1",
            "fetched_at": 90000,
            "status": 200,
            "record": {"p": 2},
            "page_type": "product",
        },
        {
            "url": "https://shop.example/p/1",
            "fetched_at": 180000,
            "status": 304,
            "page_type": "product",
        },
        {"url": "https://news.example/a", "fetched_at": 1000, "status": 200, "record": {"t": 1}},
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_stats_json_shape(tmp_path: Path):
    db = str(tmp_path / "s.db")
    assert runner.invoke(app, ["ingest", str(_log(tmp_path)), "--db", db]).exit_code == 0
    res = runner.invoke(app, ["stats", "--db", db, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert set(data["groups"][0]) == {
        "site", "page_type", "fetches", "revisits", "changes_detected",
        "fetches_without_change", "cost", "cost_per_change",
    }  # fmt: skip
    shop = next(g for g in data["groups"] if g["site"] == "shop.example")
    assert (
        shop["fetches"],
        shop["revisits"],
        shop["changes_detected"],
        shop["fetches_without_change"],
    ) == (3, 2, 1, 1)
    assert data["total"]["observations"] == 4
    table = runner.invoke(app, ["stats", "--db", db])
    assert "shop.example" in table.output and "total" in table.output


def test_ingest_bad_line_exits_nonzero_and_names_line(tmp_path: Path):
    db = str(tmp_path / "s.db")
    bad = '{"url":"https://a.example/","fetched_at":1,"status":200}\n{"url":"https://a.example/","fetched_at":"never","status":200}\n'
    res = recrawl("ingest", "-", "--db", db, input=bad)
    assert res.returncode == 1
    assert "line 2" in res.stderr and "fetched_at" in res.stderr
    assert "1 observations stored" in res.stdout
    assert "Traceback" not in res.stderr


def test_missing_file_is_one_clear_sentence(tmp_path: Path):
    res = recrawl("ingest", str(tmp_path / "nope.jsonl"), "--db", str(tmp_path / "x.db"))
    assert res.returncode != 0 and "not a readable file" in res.stderr
    assert "Traceback" not in res.stderr


def test_bad_config_is_one_clear_sentence(tmp_path: Path):
    cfg = tmp_path / "recrawl.toml"
    cfg.write_text('billing_unit = "gold"\n')
    res = recrawl("stats", "--db", str(tmp_path / "x.db"), "--config", str(cfg))
    assert res.returncode == 2 and "billing_unit" in res.stderr and "Traceback" not in res.stderr


def test_urls_add_then_plan_discovers_them(tmp_path: Path):
    db = str(tmp_path / "p.db")
    urls = tmp_path / "urls.txt"
    urls.write_text(
        "https://new.example/a\nhttps://new.example/b\nnot a url\nhttps://new.example/a\n"
    )
    res = runner.invoke(app, ["urls", "add", str(urls), "--db", db, "--page-type", "product"])
    assert res.exit_code == 1  # one rejected line
    assert "2 new URLs registered" in res.output
    res = runner.invoke(app, ["plan", "--db", db, "--budget", "5", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output)
    assert {t["url"] for t in plan["tasks"]} == {"https://new.example/a", "https://new.example/b"}
    assert {t["reason"] for t in plan["tasks"]} == {"discovery"}


def test_plan_spends_budget_on_known_pages(tmp_path: Path):
    db = str(tmp_path / "p.db")
    from recrawl.testing.fetchlog import write_fetch_log

    log = tmp_path / "log.jsonl"
    write_fetch_log(str(log), 4000, n_pages=400, days=20)
    assert runner.invoke(app, ["ingest", str(log), "--db", db, "-q"]).exit_code == 0
    res = runner.invoke(app, ["plan", "--db", db, "--budget", "40", "--at", "1769000000", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output)
    assert 0 < plan["spent"] <= 40 + 1e-9
    assert len({t["url"] for t in plan["tasks"]}) == len(plan["tasks"])
    assert plan["split"].get("score", 0) > 0
    table = runner.invoke(app, ["plan", "--db", db, "--budget", "40", "--at", "1769000000"])
    assert "reason" in table.output and "score" in table.output


def test_plan_says_when_revisits_cannot_tell_fast_pages_apart(tmp_path: Path):
    # 30 pages revisited every 40 days; those on fast.example changed every time
    rows = [
        {
            "url": f"https://{site}.example/p/{i}",
            "fetched_at": 1_700_000_000 + k * 40 * 86_400,
            "status": 200,
            "record": {"v": k if site == "fast" else 0},
        }
        for site, n in (("fast", 20), ("slow", 10))
        for i in range(n)
        for k in range(4)
    ]
    # a page that changed every time, then went away, is not the budget's concern
    rows += [
        {"url": "https://fast.example/gone", "fetched_at": 1_700_000_000 + k * 40 * 86_400,
         "status": 410 if k == 4 else 200, "record": {"v": k}}
        for k in range(5)
    ]  # fmt: skip
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    db = str(tmp_path / "r.db")
    assert runner.invoke(app, ["ingest", str(log), "--db", db, "-q"]).exit_code == 0
    args = ["plan", "--db", db, "--budget", "2", "--at", "1711000000"]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["rate_resolution"] == {
        "revisited": 30,
        "changed_every_revisit": 20,
        "share": 20 / 30,
        "median_interval_days": 40.0,
    }
    text = " ".join(runner.invoke(app, args).output.split())
    assert "20 (67%) changed at every revisit" in text
    assert "exceed about one change in 40 days." in text
    assert "A larger budget for a while" in text
    # a paused site learns nothing until a human resumes it: its pages do not count
    from recrawl.store import open_store

    with open_store(db) as store:
        store.set_site_controls("fast.example", now=1_711_000_000, paused=True, event="pause")
    paused = json.loads(runner.invoke(app, [*args, "--json"]).output)["rate_resolution"]
    assert (paused["revisited"], paused["changed_every_revisit"]) == (10, 0)


def test_postgres_store_through_the_cli(tmp_path: Path):
    from conftest import pg_schema

    gen = pg_schema()
    url = next(gen)
    try:
        assert runner.invoke(app, ["ingest", str(_log(tmp_path)), "--db", url]).exit_code == 0
        again = runner.invoke(app, ["ingest", str(_log(tmp_path)), "--db", url])
        assert "0 observations stored, 4 already known" in again.output
        data = json.loads(runner.invoke(app, ["stats", "--db", url, "--json"]).output)
        assert data["total"]["observations"] == 4 and data["total"]["changes_detected"] == 1
        res = runner.invoke(app, ["plan", "--db", url, "--budget", "2", "--at", "200000", "--json"])
        assert res.exit_code == 0, res.output
    finally:
        next(gen, None)


def test_unreachable_postgres_is_one_clear_sentence(tmp_path: Path):
    res = recrawl("stats", "--db", "postgresql://nobody@127.0.0.1:1/none")
    assert res.returncode == 2 and "cannot connect" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow  # 80 s: the whole demo; make test-slow
def test_demo_runs_the_main_job_and_writes_the_report(tmp_path: Path):
    res = subprocess.run(
        [sys.executable, "-m", "recrawl", "demo", "--crawl-days", "3"],  # make demo: 30
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "3,000 observations stored" in res.stdout
    # the next hour's plan: 2,000 fetches a day is 83 in the hour
    assert "what to fetch in the next hour" in res.stdout and "Plan: 83 tasks" in res.stdout
    assert "by reason: score" in res.stdout and "pages revisited" in res.stdout
    # the change model checked against the sample log's revisits
    assert "did the change model predict" in res.stdout
    assert "found a change where the model expected" in res.stdout
    assert "recrawl" in res.stdout and "oracle" in res.stdout and "Open Terms Archive" in res.stdout
    # a daily sitemap, trusted where the revisits proved it right, buys freshness
    flat = " ".join(res.stdout.split())
    got = re.search(r"recrawl's freshness is ([0-9.]+) instead of ([0-9.]+)", flat)
    assert got and float(got[1]) > float(got[2]), flat[-2000:]
    assert "hostile.example paused" in res.stdout
    # the closed loop: a synthetic web crawled by each policy, judged by its ground truth
    assert "Closed loop" in res.stdout and "nutch" in res.stdout
    assert re.search(r"of the hindsight optimum's [0-9.]+ at the same number", flat)
    # politeness as the servers saw it, and a dead proxy route blamed instead of the sites
    assert re.search(
        r"recrawl: 0 requests to robots-disallowed paths \(\d+ planned ones refused\), "
        r"0 inside \d+ Retry-After windows",
        flat,
    )
    assert flat.count("diagnosis route (failing routes: pool-b)") == 2, flat[-1500:]
    assert "Sites the crawl paused: none." in flat
    # route_diagnosis at its defaults, as tests/sim/test_routes_e2e.py checks it in make test:
    # both routes carried the crawl; after its death pool-b only reset connections
    routes = flat.split("is the route blamed, or the sites?", 1)[1]
    routes = routes.split("Sites the crawl paused")[0]
    after = re.search(r"by route: (.*?)\. ", routes)
    assert after, routes
    by_route = {
        r: (int(n), set(kinds.split(", ")))
        for r, n, kinds in re.findall(r"([\w./-]+): (\d+) \(([^)]*)\)", after[1])
    }
    assert set(by_route) == {"pool-a/us", "pool-b/de"}, after[1]
    assert by_route["pool-b/de"][1] == {"route_reset"} and by_route["pool-b/de"][0] >= 20
    assert "route_reset" not in by_route["pool-a/us"][1]
    # both sites diagnosed route with pool-b failing, neither critical (nor paused, above)
    sites = re.findall(r"(\S+): band (\w+), diagnosis (\w+) \(failing routes: ([^)]*)\)", routes)
    assert [s[0].split(":")[0] for s in sites] == ["news.example", "shop.example"], routes
    for _, band, diagnosis, failing in sites:
        assert diagnosis == "route" and failing == "pool-b" and band != "critical", routes
    html = (tmp_path / "report.html").read_text()
    assert "hostile.example" in html and "<script src=" not in html


def test_budget_prices_freshness_from_the_learned_rates(tmp_path: Path):
    from recrawl.testing import data_file

    db = str(tmp_path / "b.db")
    cfg = str(data_file("demo.toml"))
    sample = str(data_file("sample-fetches.jsonl"))
    assert runner.invoke(app, ["ingest", sample, "--db", db, "--config", cfg, "-q"]).exit_code == 0
    args = ["budget", "--db", db, "--config", cfg, "--at", "1769000000"]
    res = runner.invoke(app, [*args, "--per-day", "100", "--json"])
    assert res.exit_code == 0, res.output
    o = json.loads(res.output)
    assert o["pages"] == 150 and o["budget_per_day"] == 100
    assert [t["freshness"] for t in o["targets"]] == [0.8, 0.9, 0.95]
    # the planner's split needs less than one interval for every page, more for more freshness
    assert all(t["optimal"] < 0.9 * t["uniform"] for t in o["targets"])
    assert o["targets"][0]["optimal"] < o["targets"][1]["optimal"] < o["targets"][2]["optimal"]
    # the budget to configure leaves the split what it needs after verification and re-estimation
    share = o["reserve_share"]  # the default reserves: verification 2 % + re-estimation 3 %
    assert share == pytest.approx(0.05)
    for t in o["targets"]:
        assert t["configure"] == pytest.approx(t["optimal"] / (1 - share))
    f = o["freshness_at_budget"]
    assert 0 < f["uniform"] < f["optimal"] < 1
    # 100 a day sits between the budgets for 80 % and 90 %: so does its freshness
    assert o["targets"][0]["optimal"] < 100 < o["targets"][1]["optimal"]
    assert 0.8 < f["optimal"] < 0.9
    text = " ".join(runner.invoke(app, [*args, "--freshness", "0.5"]).output.split())
    assert "50%" in text and "planner's split" in text and "Model figures" in text
    bad = runner.invoke(app, [*args, "--freshness", "1.5"])
    assert bad.exit_code == 2 and "not between 0 and 1" in bad.output
    # a store with one URL not yet fetched: nothing to price, said in one sentence
    fresh = str(tmp_path / "fresh.db")
    (tmp_path / "one.txt").write_text("https://new.example/a\n")
    assert (
        runner.invoke(app, ["urls", "add", str(tmp_path / "one.txt"), "--db", fresh]).exit_code == 0
    )
    empty = runner.invoke(app, ["budget", "--db", fresh])
    assert empty.exit_code == 0 and "No revisitable page" in empty.output
    assert "1 never fetched" in empty.output
    # a mistyped --db is an error, not an empty crawl, and creates nothing
    typo = runner.invoke(app, ["budget", "--db", str(tmp_path / "none.db")])
    assert typo.exit_code != 0 and not (tmp_path / "none.db").exists()


def test_urls_are_taken_canonical_and_shown_as_stored(tmp_path: Path):
    db = str(tmp_path / "u.db")
    urls = tmp_path / "urls.txt"
    # brackets are console markup, commas are not columns in a plain list, a repeat is one URL;
    # a query is stored canonical (w3lib's canonicalize_url: reserved characters escaped)
    urls.write_text(
        "https://g.example/p?a=1&b[x]=2\n"
        "https://f.example/a[/]b\n"
        "https://c.example/q?x=1,2\n"
        "https://c.example/q?x=1,2\n"
    )
    res = runner.invoke(app, ["urls", "add", str(urls), "--db", db])
    assert res.exit_code == 0, res.output
    assert "3 new URLs registered" in res.output and "1 repeated in the input" in res.output
    plan = runner.invoke(app, ["plan", "--db", db, "--budget", "10"])
    assert plan.exit_code == 0, plan.output
    for url in ("https://g.example/p?a=1&b%5Bx%5D=2", "https://f.example/a[/]b"):
        assert url in plan.output
    tasks = json.loads(runner.invoke(app, ["plan", "--db", db, "--budget", "10", "--json"]).output)
    by_url = {t["url"]: t for t in tasks["tasks"]}
    assert by_url["https://c.example/q?x=1%2C2"]["site"] == "c.example"


def test_urls_add_reads_a_spreadsheets_csv_and_names_what_is_wrong(tmp_path: Path):
    db = str(tmp_path / "u.db")
    sheet = tmp_path / "urls.csv"
    # Excel's "CSV UTF-8" starts with a byte-order mark
    sheet.write_text(
        "\ufeffurl,value\nhttps://b.example/1,5\nhttps://b.example/2,lots\n", encoding="utf-8"
    )
    res = runner.invoke(app, ["urls", "add", str(sheet), "--db", db])
    assert res.exit_code == 1
    assert "1 new URLs registered" in res.output and "1 rejected" in res.output
    assert "line 3: field 'value': 'lots' is not a number" in " ".join(res.output.split())
    canary = runner.invoke(app, ["urls", "add", str(sheet), "--db", db, "--page-type", "canary"])
    assert canary.exit_code == 2 and "reserved for canaries" in canary.output
    nan = runner.invoke(app, ["urls", "add", str(sheet), "--db", db, "--value", "nan"])
    assert nan.exit_code == 2 and "--value" in nan.output


def test_json_output_is_strict_json_even_with_a_canary_due(tmp_path: Path):
    db = str(tmp_path / "j.db")
    assert runner.invoke(app, ["ingest", str(_log(tmp_path)), "--db", db, "-q"]).exit_code == 0
    add = ["canary", "add", "https://shop.example/p/1", "--expect", "price=19.99", "--db", db]
    assert runner.invoke(app, add).exit_code == 0
    res = runner.invoke(app, ["plan", "--db", db, "--budget", "5", "--json"])
    assert res.exit_code == 0, res.output

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} is not JSON")

    tasks = json.loads(res.output, parse_constant=refuse)["tasks"]
    canaries = [t for t in tasks if t["reason"] == "canary"]
    assert canaries and canaries[0]["priority"] is None  # infinitely urgent: null, as the service


def test_bad_numbers_and_times_are_usage_errors_not_tracebacks(tmp_path: Path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"page": "a", "start": 0, "end": 864000, "changes": [86400]}\n')
    for budget in ("nan", "inf", "1e9"):
        res = recrawl("simulate", "--trace", str(trace), "--budget", budget)
        assert res.returncode == 2 and "--budget" in res.stderr, res.stderr
        assert "Traceback" not in res.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    res = recrawl("simulate", "--trace", str(empty), "--budget", "0.1")
    assert res.returncode == 2 and "holds no traces" in res.stderr
    db = str(tmp_path / "b.db")
    assert runner.invoke(app, ["ingest", str(_log(tmp_path)), "--db", db, "-q"]).exit_code == 0
    res = recrawl("plan", "--db", db, "--at", "garbage")
    assert res.returncode == 2 and "'garbage' is not RFC 3339" in " ".join(res.stderr.split())
    res = recrawl("plan", "--db", db, "--budget", "-5")
    assert res.returncode == 2 and "--budget" in res.stderr
    text = " ".join(
        runner.invoke(app, ["budget", "--db", db, "--freshness", "0.999"]).output.split()
    )
    assert "99.9%" in text


def test_operator_slips_get_one_sentence_and_leave_nothing_behind(tmp_path: Path):
    import os
    import stat

    cfg = tmp_path / "recrawl.toml"
    db = str(tmp_path / "o.db")
    # a budget that cannot be loaded back is refused before anything is written
    res = recrawl("init", "--config", str(cfg), "--db", db, "--budget", "inf")
    assert res.returncode == 2 and "--budget" in res.stderr and not cfg.exists()
    # --force over a world-readable file still leaves the token readable by its owner only
    cfg.write_text("")
    cfg.chmod(0o644)
    assert runner.invoke(app, ["init", "--config", str(cfg), "--db", db, "--force"]).exit_code == 0
    assert stat.S_IMODE(os.stat(cfg).st_mode) == 0o600
    res = recrawl("init", "--config", str(tmp_path), "--db", db, "--force")
    assert res.returncode == 2 and "is a directory" in res.stderr
    res = recrawl("report", "--db", db, "--out", str(tmp_path / "no" / "such" / "r.html"))
    assert res.returncode == 1 and "No such file or directory" in res.stderr
    assert "Traceback" not in res.stderr and "FileNotFoundError" not in res.stderr
    for every in ("nan", "inf", "1e-9"):
        res = recrawl(
            "canary", "add", "https://a.example/p", "--expect", "x=1", "--every", every, "--db", db
        )
        assert res.returncode == 2 and "--every" in res.stderr
    incidents = tmp_path / "inc.jsonl"
    incidents.write_text('{"site": "a.example", "start": 1700000000, "end": 1700003600}\n')
    for opt, bad in (("--step", "0"), ("--step", "-15"), ("--margin", "1e9")):
        res = recrawl("health", "review", "--incidents", str(incidents), "--db", db, opt, bad)
        assert res.returncode == 2 and opt in res.stderr, res.stderr
    incidents.write_text('{"site": "a.example", "start": 1700003600, "end": 1700000000}\n')
    res = recrawl("health", "review", "--incidents", str(incidents), "--db", db)
    assert res.returncode == 2 and "ends before it starts" in res.stderr


def test_health_names_the_paused_sites(tmp_path: Path):
    from recrawl.store import open_store

    db = str(tmp_path / "h.db")
    assert runner.invoke(app, ["ingest", str(_log(tmp_path)), "--db", db, "-q"]).exit_code == 0
    with open_store(db) as store:
        store.set_site_controls("shop.example", now=1_711_000_000, paused=True, event="pause")
    res = runner.invoke(app, ["health", "--db", db, "--no-record"])
    assert res.exit_code == 0, res.output
    assert "paused" in res.output and "shop.example" in res.output
    o = json.loads(runner.invoke(app, ["health", "--db", db, "--no-record", "--json"]).output)
    assert o["paused"] == ["shop.example"]


def test_a_compressed_log_is_ingested_as_it_is(tmp_path: Path):
    import gzip

    plain = _log(tmp_path)
    packed = tmp_path / "log.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    db = str(tmp_path / "g.db")
    res = runner.invoke(app, ["ingest", str(packed), "--db", db, "-q"])
    assert res.exit_code == 0, res.output
    n = sum(1 for line in plain.read_text().splitlines() if line.strip())
    assert f"{n:,} observations stored" in res.output and "0 rejected" in res.output
    again = runner.invoke(app, ["ingest", str(plain), "--db", db, "-q"])
    assert f"{n:,} already known" in again.output  # the same observations, not new ones


def test_an_operator_pauses_a_site_by_hand_and_resumes_it(tmp_path: Path):
    db = str(tmp_path / "s.db")
    assert runner.invoke(app, ["ingest", str(_log(tmp_path)), "--db", db]).exit_code == 0

    def planned_sites() -> set[str]:
        res = runner.invoke(app, ["plan", "--db", db, "--budget", "10", "--at", "400000", "--json"])
        assert res.exit_code == 0, res.output
        return {t["site"] for t in json.loads(res.output)["tasks"]}

    assert planned_sites() == {"shop.example", "news.example"}
    res = runner.invoke(
        app, ["site", "pause", "shop.example", "--db", db, "--reason", "owner asked", "--by", "ana"]
    )
    assert res.exit_code == 0, res.output
    assert "paused" in res.output
    assert planned_sites() == {"news.example"}
    again = runner.invoke(app, ["site", "pause", "shop.example", "--db", db])
    assert "already paused" in again.output
    hist = json.loads(
        runner.invoke(app, ["site", "history", "shop.example", "--db", db, "--json"]).output
    )
    assert [(e["kind"], e["detail"]) for e in hist] == [("pause", "by ana: owner asked")]
    health = runner.invoke(app, ["health", "--db", db, "--json"])
    assert "shop.example" in json.dumps(json.loads(health.output).get("paused"))
    typo = recrawl("site", "pause", "shop.exmaple", "--db", db)
    assert typo.returncode != 0 and "no site 'shop.exmaple'" in typo.stderr
    assert "Traceback" not in typo.stderr
    assert runner.invoke(app, ["site", "resume", "shop.example", "--db", db]).exit_code == 0
    assert planned_sites() == {"shop.example", "news.example"}


def test_an_operator_re_tiers_known_urls_and_removes_others(tmp_path: Path):
    from recrawl.store import open_store

    db = str(tmp_path / "s.db")
    assert runner.invoke(app, ["ingest", str(_log(tmp_path)), "--db", db]).exit_code == 0
    tiers = tmp_path / "tiers.csv"
    tiers.write_text(
        "url,value\nhttps://shop.example/p/1,8\nhttps://news.example/a,\nhttps://new.example/x,2\n"
    )
    plain = runner.invoke(app, ["urls", "add", str(tiers), "--db", db])
    assert "1 new URLs registered, 2 already known, 0 rejected" in plain.output
    with open_store(db) as store:
        assert store.page("https://shop.example/p/1").value == 1.0  # type: ignore[union-attr]
    res = runner.invoke(app, ["urls", "add", str(tiers), "--db", db, "--update"])
    assert res.exit_code == 0, res.output
    assert "0 new URLs registered, 3 already known (1 re-tiered)" in res.output
    with open_store(db) as store:
        values = {
            u: store.page(u).value
            for u in ("https://shop.example/p/1", "https://news.example/a", "https://new.example/x")
        }  # type: ignore[union-attr]
    assert values == {
        "https://shop.example/p/1": 8.0,
        "https://news.example/a": 1.0,
        "https://new.example/x": 2.0,
    }

    before = json.loads(runner.invoke(app, ["stats", "--db", db, "--json"]).output)
    gone = tmp_path / "gone.txt"
    gone.write_text("https://SHOP.example/p/1\nhttps://never.example/1\nnot a url\n")
    res = runner.invoke(app, ["urls", "remove", str(gone), "--db", db])
    assert res.exit_code == 1  # one line rejected: named, the rest done
    assert "1 URLs removed, 1 not in the store, 1 rejected" in res.output
    with open_store(db) as store:
        assert store.page("https://shop.example/p/1") is None
        assert store.outcomes("https://shop.example/p/1") == []
    # what was fetched stays counted
    assert json.loads(runner.invoke(app, ["stats", "--db", db, "--json"]).output) == before
    plan = json.loads(
        runner.invoke(
            app, ["plan", "--db", db, "--budget", "10", "--at", "400000", "--json"]
        ).output
    )
    assert "https://shop.example/p/1" not in {t["url"] for t in plan["tasks"]}
    # reported again later: a new page
    again = tmp_path / "again.jsonl"
    again.write_text(
        json.dumps(
            {
                "url": "https://shop.example/p/1",
                "fetched_at": 500000,
                "status": 200,
                "record": {"p": 3},
            }
        )
        + "\n"
    )
    assert runner.invoke(app, ["ingest", str(again), "--db", db]).exit_code == 0
    with open_store(db) as store:
        assert [o for _, o in store.outcomes("https://shop.example/p/1")] == ["new"]


def test_site_show_gives_one_site_its_controls_and_events(tmp_path: Path):
    db = str(tmp_path / "one.db")
    assert runner.invoke(app, ["ingest", str(_log(tmp_path)), "--db", db, "-q"]).exit_code == 0
    args = ["site", "pause", "shop.example", "--db", db, "--reason", "owner asked", "--by", "ana"]
    assert runner.invoke(app, args).exit_code == 0
    res = runner.invoke(app, ["site", "show", "shop.example", "--db", db, "--no-record"])
    assert res.exit_code == 0, res.output
    assert "'paused': True" in res.output and "by ana: owner asked" in res.output
    doc = json.loads(
        runner.invoke(app, ["site", "show", "shop.example", "--db", db, "--json"]).output
    )
    assert doc["site"] == "shop.example" and doc["controls"]["paused"] is True
    assert [e["kind"] for e in doc["events"]] == ["pause"]
    # fetched in 1970: nothing in the scorer's window now, so nothing scored or kept
    assert (doc["score"], doc["band"], doc["history"]) == (None, "unknown", [])
    # every site's row carries the same controls
    rows = json.loads(runner.invoke(app, ["health", "--db", db, "--json"]).output)["sites"]
    assert next(r for r in rows if r["site"] == "shop.example")["controls"] == doc["controls"]
    typo = recrawl("site", "show", "shop.exmaple", "--db", db)
    assert typo.returncode == 2 and "no site 'shop.exmaple'" in typo.stderr
    assert "Traceback" not in typo.stderr

"""Issue 31's command-line rough edges, each as a user meets it.

In-process: ``recrawl`` is run through :func:`recrawl.cli.main.main` (the
entry point, with its one-sentence errors and exit codes) with stdout and
stderr captured as a log would get them (not a terminal)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from recrawl.cli.main import main


class Run:
    """``run(*args)`` → ``(exit code, stdout, stderr)`` of ``recrawl *args``."""

    def __init__(self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
        self.capsys = capsys
        self.monkeypatch = monkeypatch

    def __call__(self, *args: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        self.monkeypatch.setattr(sys, "argv", ["recrawl", *args])
        with pytest.raises(SystemExit) as done:
            main()
        got = self.capsys.readouterr()
        code = done.value.code
        return (code if isinstance(code, int) else 0), got.out, got.err


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    return Run(capsys, monkeypatch)


def _log(tmp_path: Path) -> Path:
    p = tmp_path / "log.jsonl"
    rows = [
        {"url": "https://shop.example/p/1", "fetched_at": 1000, "status": 200, "record": {"p": 1}},
        {"url": "https://shop.example/p/1", "fetched_at": 90000, "status": 200, "record": {"p": 2}},
        {"url": "https://news.example/a", "fetched_at": 1000, "status": 200, "record": {"t": 1}},
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


@pytest.fixture
def db(tmp_path: Path, run: Run) -> str:
    """A store holding :func:`_log`."""
    path = str(tmp_path / "s.db")
    assert run("ingest", str(_log(tmp_path)), "--db", path, "-q")[0] == 0
    return path


def test_an_error_is_one_line_of_a_log_however_long(tmp_path: Path, run: Run) -> None:
    deep = tmp_path / ("a-rather-long-directory-name-" * 4) / "store.db"
    code, _, err = run("stats", "--db", str(deep))
    assert code == 2
    assert err.count("\n") == 1 and f"no store at {deep}" in err, err


def test_a_mistyped_store_directory_is_refused_not_created(tmp_path: Path, run: Run) -> None:
    typo = tmp_path / "typo" / "dir" / "x.db"
    code, out, err = run("ingest", str(_log(tmp_path)), "--db", str(typo))
    assert code == 2 and f"no directory {typo.parent}" in err, err
    assert not (tmp_path / "typo").exists() and "stored" not in out
    code, _, err = run("urls", "add", str(_log(tmp_path)), "--db", str(typo))
    assert code == 2 and not (tmp_path / "typo").exists()
    # init says it creates the store: it may create its directory
    code, _, err = run("init", "--db", str(typo), "--config", str(tmp_path / "r.toml"))
    assert code == 0, err
    assert typo.is_file()


def test_site_history_of_an_unknown_site_names_it(db: str, run: Run) -> None:
    code, out, err = run("site", "history", "nosuch.example", "--db", db)
    assert code == 2 and "no site 'nosuch.example'" in err and out == ""
    # a known site with no event yet: an empty history, not an error
    code, out, err = run("site", "history", "shop.example", "--db", db, "--json")
    assert code == 0 and json.loads(out) == [], err


def test_report_into_a_new_directory_creates_it(db: str, tmp_path: Path, run: Run) -> None:
    pytest.importorskip("plotly")
    where = tmp_path / "some" / "new" / "dir"
    code, out, err = run("report", "--db", db, "--out", f"{where}/")
    assert code == 0, err
    assert (where / "report.html").is_file() and (where / "plotly.min.js").is_file()
    assert "report.html" in out


def test_a_csv_header_without_url_is_refused_not_read_by_position(tmp_path: Path, run: Run) -> None:
    path = str(tmp_path / "u.db")
    sheet = tmp_path / "urls.csv"
    sheet.write_text("link,site,n\nhttps://x.example/1,x.example,3\n")
    code, out, err = run("urls", "add", str(sheet), "--db", path)
    assert code == 2 and "names no url column" in err and "registered" not in out, err
    sheet.write_text("url,site,pagetype\nhttps://x.example/1,x.example,item\n")
    code, out, err = run("urls", "add", str(sheet), "--db", path)
    assert code == 2 and "(pagetype)" in err, err
    assert not Path(path).exists()  # refused before anything was written
    # a CSV without a header is still read in the documented order
    sheet.write_text("https://x.example/1,x.example,item,3\n")
    assert run("urls", "add", str(sheet), "--db", path)[0] == 0
    [row] = json.loads(run("urls", "list", "--db", path, "--json")[1])
    assert (row["site"], row["page_type"], row["value"]) == ("x.example", "item", 3)


def test_urls_list_shows_what_the_store_knows(db: str, tmp_path: Path, run: Run) -> None:
    new = tmp_path / "new.txt"
    new.write_text("https://shop.example/p/2\nhttps://shop.example/p/1\nnot a url\n")
    code, out, _ = run("urls", "add", str(new), "--db", db, "--value", "3", "--json")
    assert code == 1  # one line rejected
    assert json.loads(out) == {
        "received": 2, "added": 1, "known": 1, "updated": 0, "repeated": 0, "rejected": 1
    }  # fmt: skip
    code, out, err = run("urls", "list", "--db", db, "--site", "shop.example", "--json")
    assert code == 0, err
    rows = {r["url"]: r for r in json.loads(out)}
    assert set(rows) == {"https://shop.example/p/1", "https://shop.example/p/2"}
    assert (
        rows["https://shop.example/p/2"]["state"],
        rows["https://shop.example/p/2"]["value"],
    ) == (
        "new",
        3,
    )
    assert rows["https://shop.example/p/1"]["state"] == "known"
    assert rows["https://shop.example/p/1"]["last_fetch"] == 90000
    code, out, _ = run("urls", "list", "--db", db, "--limit", "1")
    assert code == 0 and "https://news.example/a" in out and "2 more" in out
    gone = tmp_path / "gone.txt"
    gone.write_text("https://news.example/a\nhttps://else.example/\n")
    code, out, _ = run("urls", "remove", str(gone), "--db", db, "--json")
    assert code == 0 and json.loads(out)["removed"] == 1 and json.loads(out)["unknown"] == 1
    listed = json.loads(run("urls", "list", "--db", db, "--json")[1])
    assert "https://news.example/a" not in {r["url"] for r in listed}


def test_prune_keep_days_counts_back_from_the_logs_newest_fetch(db: str, run: Run) -> None:
    # the log (fetched in 1970) ended long ago: --keep-days keeps its last day,
    # it does not count from the wall clock and delete it all
    code, out, err = run("prune", "--db", db, "--keep-days", "0.5", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["before"], doc["removed"]) == (90000 - 43200, 2)
    code, out, _ = run("stats", "--db", db, "--json")
    assert json.loads(out)["total"]["observations"] == 3  # what it taught stays
    # a --before after the newest fetch (but not in the future) would delete everything
    code, out, err = run("prune", "--db", db, "--before", "1971-01-01T00:00:00Z")
    assert code == 2 and "after the log's newest fetch (1970-01-02 01:00:00Z)" in err, err
    code, out, err = run("prune", "--db", db, "--before", "1971-01-01T00:00:00Z", "--force")
    assert code == 0 and "1 observations fetched before 1971-01-01" in out, err


def test_observations_dated_in_the_future_are_rejected_and_named(tmp_path: Path, run: Run) -> None:
    import time

    now = time.time()
    log = tmp_path / "future.jsonl"
    rows = [
        {"url": "https://f.example/a", "fetched_at": now - 60, "status": 200, "record": {"a": 1}},
        # a fetcher's clock a little ahead: within the hour allowed for skew
        {"url": "https://f.example/b", "fetched_at": now + 1800, "status": 200, "record": {"a": 1}},
        {"url": "https://f.example/c", "fetched_at": "2099-01-01T00:00:00Z", "status": 200},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = str(tmp_path / "f.db")
    code, out, err = run("ingest", str(log), "--db", path)
    assert code == 1
    assert "2 observations stored, 0 already known, 1 rejected" in out
    assert err.startswith(f"rejected {log}: line 3: field 'fetched_at': fetched at 2099-01-01")
    assert "more than 1 h after now" in err and "https://f.example/c" in err
    listed = json.loads(run("urls", "list", "--db", path, "--json")[1])
    assert [r["url"] for r in listed] == ["https://f.example/a", "https://f.example/b"]
    # a log of a crawl run on a simulated clock: ingested as of its own time
    code, out, err = run("ingest", str(log), "--db", path, "--at", "2099-01-01T00:30:00Z")
    assert code == 0 and "1 observations stored, 2 already known, 0 rejected" in out, err


def test_canaries_are_listed_and_withdrawn(db: str, run: Run) -> None:
    code, out, err = run("canary", "list", "--db", db, "--json")
    assert code == 0 and json.loads(out) == [], err
    add = ["canary", "add", "https://shop.example/p/1", "--expect", "p=2", "--db", db, "--json"]
    code, out, err = run(*add)
    assert code == 0, err
    declared = json.loads(out)
    assert (declared["url"], declared["site"], declared["expect"]) == (
        "https://shop.example/p/1", "shop.example", {"p": "2"}
    )  # fmt: skip
    assert declared["every_s"] == 3600 and declared["last_fetch"] == 90000
    add = ["canary", "add", "https://calm.example/about", "--expect", "t=x", "--every", "30"]
    assert run(*add, "--db", db)[0] == 0
    code, out, _ = run("canary", "list", "--db", db)
    assert code == 0 and "https://calm.example/about" in out and "30 min" in out
    # a canary on a page of its own: withdrawn with its page
    code, out, _ = run("canary", "remove", "https://calm.example/about", "--db", db)
    assert code == 0 and "withdrawn" in out
    # a canary on a crawled page: the page stays, planned as before
    code, out, _ = run("canary", "remove", "HTTPS://shop.example/p/1", "--db", db, "--json")
    assert code == 0 and json.loads(out) == {"url": "https://shop.example/p/1", "removed": True}
    assert json.loads(run("canary", "list", "--db", db, "--json")[1]) == []
    urls = {r["url"] for r in json.loads(run("urls", "list", "--db", db, "--json")[1])}
    assert "https://shop.example/p/1" in urls
    code, out, _ = run("plan", "--db", db, "--budget", "5", "--json")
    assert "https://calm.example/about" not in out and '"reason": "canary"' not in out
    code, _, err = run("canary", "remove", "https://shop.example/p/1", "--db", db)
    assert code == 2 and "no canary on https://shop.example/p/1" in err


def test_json_on_ingest_site_controls_and_init(tmp_path: Path, run: Run) -> None:
    path = str(tmp_path / "j.db")
    log = _log(tmp_path)
    with log.open("a") as f:
        f.write('{"url": "https://shop.example/p/9", "fetched_at": "never", "status": 200}\n')
    code, out, err = run("ingest", str(log), "--db", path, "--json")
    assert code == 1  # a line rejected, named on stderr; the document on stdout
    assert json.loads(out) == {
        "read": 4, "stored": 3, "duplicates": 0, "rejected": 1,
        "rejected_by_field": {"fetched_at": 1}, "reordered_pages": 0,
    }  # fmt: skip
    assert "line 4: field 'fetched_at'" in err
    code, out, _ = run("site", "pause", "shop.example", "--db", path, "--by", "ana", "--json")
    assert code == 0
    assert json.loads(out) == {
        "site": "shop.example", "paused": True, "changed": True, "by": "ana", "reason": ""
    }  # fmt: skip
    code, out, _ = run("site", "resume", "shop.example", "--db", path, "--by", "ana", "--json")
    assert json.loads(out) == {"site": "shop.example", "paused": False, "by": "ana"}
    code, out, _ = run("site", "validators", "shop.example", "off", "--db", path, "--json")
    assert code == 0 and json.loads(out)["validators"] is False
    cfg = tmp_path / "recrawl.toml"
    code, out, err = run("init", "--db", str(tmp_path / "i.db"), "--config", str(cfg), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["store"], doc["config"], doc["billing_unit"]) == (
        str(tmp_path / "i.db"), str(cfg), "fetches"
    )  # fmt: skip
    import tomllib

    token = tomllib.loads(cfg.read_text())["token"]
    assert token not in out and doc["read_token"] is False  # the secret stays in the file


def test_health_knobs_are_set_in_recrawl_toml(tmp_path: Path, run: Run) -> None:
    t0 = 1_700_000_000
    log = tmp_path / "h.jsonl"
    rows = [
        {"url": f"https://a.example/p/{k % 50}", "fetched_at": t0 + k * 75, "status": 200}
        for k in range(24 * 48)
    ]  # a day at 48 requests an hour: under the 50 a window needs by default
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = str(tmp_path / "h.db")
    assert run("ingest", str(log), "--db", path, "-q")[0] == 0
    at = str(t0 + 86400)
    code, out, err = run("health", "--db", path, "--at", at, "--json")
    assert code == 0, err
    assert json.loads(out)["sites"][0]["band"] == "unknown"
    cfg = tmp_path / "recrawl.toml"
    cfg.write_text("[health]\nmin_requests = 10\n")
    code, out, err = run("health", "--db", path, "--at", at, "--json", "--config", str(cfg))
    assert code == 0, err
    site = json.loads(out)["sites"][0]
    assert (site["band"], site["score"]) == ("healthy", 100)
    cfg.write_text("[health]\nhealthy_minimum = 90\n")
    code, _, err = run("health", "--db", path, "--config", str(cfg))
    assert code == 2 and "'healthy_minimum' is not a health knob" in err
    cfg.write_text("[health]\nhealthy_min = 40\n")  # below critical_below (50)
    code, _, err = run("health", "--db", path, "--config", str(cfg))
    assert code == 2 and "critical_below ≤ healthy_min" in err


def test_health_review_gives_a_false_alarm_rate_from_the_recorded_history(
    tmp_path: Path, run: Run
) -> None:
    from recrawl.store import SQLiteStore

    t0, hour = 1_699_999_200, 3600  # on the hour: buckets are 15 minutes of the clock
    log = tmp_path / "h.jsonl"
    # every other request refused (403) from 14:00 until the pause at 15:00
    rows = [
        {"url": f"https://a.example/p/{k % 50}", "fetched_at": t0 + k * 75,
         "status": 403 if 14 * 48 <= k < 15 * 48 and k % 2 else 200}
        for k in range(24 * 48)
    ]  # fmt: skip
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = str(tmp_path / "r.db")
    assert run("ingest", str(log), "--db", path, "-q")[0] == 0

    def report(band: str, reason: str | None) -> dict[str, object]:
        return {
            "site": "a.example", "score": 90, "band": band, "reasons": [reason] if reason else [],
            "diagnosis": "none" if band == "healthy" else "site", "failing_routes": [],
            "parser": {"score": 100, "band": "healthy", "reasons": []},
        }  # fmt: skip

    # what the operator saw, hourly: a false alarm at 05:00-06:00, the hard-block
    # incident of 14:00-16:00 caught at 15:00; the buckets alone would say otherwise
    with SQLiteStore(path) as store:
        for k in range(1, 25):
            band, reason = "healthy", None
            if k in (5, 6):
                band, reason = "degrading", "challenge"
            elif k == 15:
                band, reason = "critical", "hard_block"
            store.record_health(t0 + k * hour, [report(band, reason)], {})
    incidents = tmp_path / "inc.jsonl"
    incidents.write_text(
        json.dumps(
            {"site": "a.example", "start": t0 + 14 * hour, "end": t0 + 16 * hour,
             "cause": "hard_block"}
        ) + "\n"
    )  # fmt: skip
    args = ["health", "review", "--incidents", str(incidents), "--db", path, "--margin", "10"]
    code, out, err = run(*args, "--recorded", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["source"] == "recorded"
    [inc] = doc["incidents"]
    assert (inc["detected_after_s"], inc["cause_named"]) == (hour, True)
    # the band's action (critical at 15:00) was followed by fewer refusals
    action = inc["action"]
    assert (action["action_at"], action["helped"]) == (t0 + 15 * hour, True)
    assert (action["refusal_rate_before"], action["refusal_rate_after"]) == (0.5, 0.0)
    assert action["requests_before"] == action["requests_after"] == 48
    [alarm] = doc["false_alarms"]
    assert (alarm["start"], alarm["end"], alarm["band"]) == (
        t0 + 5 * hour,
        t0 + 6 * hour,
        "degrading",
    )
    # 21 hourly evaluations (04:00 to 24:00) reviewed: 0.875 site-days, one episode
    assert doc["site_days"] == pytest.approx(21 / 24)
    assert doc["false_alarms_per_site_day"] == pytest.approx(24 / 21)
    code, out, _ = run(*args, "--recorded")
    text = " ".join(out.split())
    assert code == 0 and "1.14 per site-day over 0.875 site-days" in text
    assert "yes (refusals 50% → 0%)" in text
    # scored again from the buckets (the default): no recorded alarm, its own rate
    code, out, err = run(*args, "--json")
    assert code == 0, err
    again = json.loads(out)
    assert again["source"] == "recomputed" and again["false_alarms_per_site_day"] == 0
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"site": "b.example", "start": t0, "end": t0 + hour}) + "\n")
    code, _, err = run("health", "review", "--incidents", str(other), "--db", path, "--recorded")
    assert code == 2 and "no recorded health of b.example" in err


def test_an_unknown_policy_is_refused_in_one_line(db: str, tmp_path: Path, run: Run) -> None:
    # already so before issue 31's fixes (the planner refuses it): pinned here
    code, out, err = run("plan", "--db", db, "--budget", "3", "--policy", "foo")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "unknown policy 'foo'; choose from recrawl" in err
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"page": "a", "start": 0, "end": 864000, "changes": [86400]}\n')
    code, _, err = run("simulate", "--trace", str(trace), "--budget", "0.1", "--policy", "foo")
    assert code == 2 and "unknown policy 'foo'" in err

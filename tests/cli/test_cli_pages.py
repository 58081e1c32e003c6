"""``recrawl pages``: what recrawl believes of each page (issue 29, item 6)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recrawl.cli.main import app

runner = CliRunner()

T0 = 1_700_000_000
DAY = 86400
AT = str(T0 + 13 * DAY)


def _log(tmp_path: Path) -> Path:
    """Twelve daily fetches: one page changes at every fetch, one never; a
    second site with a page that changes now and then, one that went gone and
    one whose last fetch failed."""
    rows = []
    for k in range(12):
        t = T0 + k * DAY
        rows += [
            {"url": "https://shop.example/fast", "fetched_at": t, "status": 200,
             "record": {"v": k}, "page_type": "product"},
            {"url": "https://shop.example/slow", "fetched_at": t, "status": 200,
             "record": {"v": 0}, "page_type": "product"},
            {"url": "https://news.example/a", "fetched_at": t, "status": 200,
             "record": {"v": k // 3}},
        ]  # fmt: skip
    rows += [
        {"url": "https://news.example/gone", "fetched_at": T0, "status": 200, "record": {"v": 1}},
        {"url": "https://news.example/gone", "fetched_at": T0 + DAY, "status": 404},
        {"url": "https://news.example/err", "fetched_at": T0, "status": 200, "record": {"v": 1}},
        {"url": "https://news.example/err", "fetched_at": T0 + 11 * DAY, "status": 503},
    ]
    p = tmp_path / "log.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "p.db")
    res = runner.invoke(app, ["ingest", str(_log(tmp_path)), "--db", path, "-q"])
    assert res.exit_code == 0, res.output
    return path


def _pages(db: str, *args: str) -> dict:
    res = runner.invoke(app, ["pages", "--db", db, "--at", AT, "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_rates_intervals_and_due_times(db: str):
    doc = _pages(db)
    assert doc["total"] == 5 and len(doc["pages"]) == 5 and doc["sort"] == "rate"
    assert doc["billing_unit"] == "fetches" and doc["at"] == float(AT)
    by = {p["url"]: p for p in doc["pages"]}
    fast, slow = by["https://shop.example/fast"], by["https://shop.example/slow"]
    assert fast["rate_per_day"] > 10 * slow["rate_per_day"]
    assert fast["rate_per_day"] > 1.0 > 0.1 > slow["rate_per_day"]
    # fastest first
    rates = [p["rate_per_day"] for p in doc["pages"]]
    assert rates == sorted(rates, reverse=True)
    for p in doc["pages"]:
        assert p["rate_low_per_day"] <= p["rate_per_day"] <= p["rate_high_per_day"]
        assert p["rate_sd_per_day"] >= 0 and p["cost"] == 1.0
    # the evidence: every revisit of the fast page changed, none of the slow one's
    assert fast["evidence_changed"] > 5 and fast["evidence_unchanged"] == 0
    assert slow["evidence_changed"] == 0 and slow["evidence_unchanged"] > 5
    assert fast["evidence_days"] == pytest.approx(slow["evidence_days"])
    for p in (fast, slow, by["https://news.example/a"]):
        assert p["state"] == "ok" and p["fails"] == 0
        assert p["visits_per_day"] > 0
        assert p["next_due"] > p["last_fetch"] == T0 + 11 * DAY
        assert p["cost_per_day"] == pytest.approx(p["cost"] * p["visits_per_day"])
    assert set(fast) == {
        "url", "site", "page_type", "value", "state", "rate_per_day", "rate_low_per_day",
        "rate_high_per_day", "rate_sd_per_day", "evidence_changed", "evidence_unchanged",
        "evidence_days", "cost", "visits_per_day", "cost_per_day", "next_due", "first_seen",
        "last_fetch", "last_ok", "fails",
    }  # fmt: skip
    # a gone page is re-checked a day after its 404; a failed fetch waits its back-off
    gone, err = by["https://news.example/gone"], by["https://news.example/err"]
    assert gone["state"] == "gone" and gone["next_due"] == T0 + 2 * DAY
    assert err["state"] == "backing_off" and err["fails"] == 1
    assert err["next_due"] > err["last_fetch"] > err["last_ok"]
    assert doc["states"] == {"ok": 3, "gone": 1, "backing_off": 1}


def test_site_filter_sort_and_limit(db: str):
    doc = _pages(db, "--site", "shop.example")
    assert doc["site"] == "shop.example" and doc["total"] == 2
    assert {p["site"] for p in doc["pages"]} == {"shop.example"}
    due = _pages(db, "--sort", "due", "--limit", "2")
    assert due["total"] == 5 and len(due["pages"]) == 2
    times = [p["next_due"] for p in _pages(db, "--sort", "due")["pages"]]
    assert times == sorted(times)
    bad = runner.invoke(app, ["pages", "--db", db, "--sort", "url"])
    assert bad.exit_code == 2


def test_a_paused_site_has_no_due_time(db: str):
    res = runner.invoke(app, ["site", "pause", "shop.example", "--db", db, "--reason", "asked"])
    assert res.exit_code == 0, res.output
    doc = _pages(db, "--site", "shop.example")
    assert {p["state"] for p in doc["pages"]} == {"paused"}
    assert all(p["next_due"] is None and p["visits_per_day"] == 0 for p in doc["pages"])


def test_the_table_shows_the_columns_and_what_is_left_out(db: str):
    res = runner.invoke(
        app, ["pages", "--db", db, "--at", AT, "--limit", "2"], env={"COLUMNS": "200"}
    )
    assert res.exit_code == 0, res.output
    for header in ("url", "state", "rate/day", "90 % interval", "evidence", "cost", "next due"):
        assert header in res.output
    assert "https://shop.example/fast" in res.output
    assert "3 more not shown" in res.output
    assert "by state: backing_off 1, gone 1, ok 3" in res.output


def test_an_unknown_site_is_one_line_and_exit_2(db: str):
    res = subprocess.run(
        [sys.executable, "-m", "recrawl", "pages", "--db", db, "--site", "nosuch.example"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip() == "error: no site 'nosuch.example' in the store"

"""``recrawl hints``: sitemaps and hint lines in, the sources' trust out."""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import pg_schema
from engine.test_hints_store import DAYS, T0, crawl, sitemap_reads
from typer.testing import CliRunner

from recrawl.cli.hints import LAG_MEANS, TRUSTED_MEANS
from recrawl.cli.main import app
from recrawl.store import SQLiteStore

runner = CliRunner()


def _unboxed(output: str) -> str:
    """Click's error box, as one line: where it wraps depends on the path's length."""
    return " ".join(output.replace("│", " ").split())


DAY = 86_400.0

SITEMAP = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>https://shop.example/p/1</loc><lastmod>2023-11-10</lastmod></url>
  <url><loc>https://shop.example/p/2</loc><lastmod>2023-11-16T08:00:00Z</lastmod></url>
  <url><loc>https://shop.example/p/9</loc><lastmod>2023-11-16</lastmod></url>
  <url><loc>https://shop.example/p/3</loc><lastmod>last week</lastmod></url>
</urlset>
"""


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store: a SQLite file, or a PostgreSQL schema's URL."""
    if request.param == "sqlite":
        yield str(tmp_path / "recrawl.db")
    else:
        yield from pg_schema()


def ingest(tmp_path: Path, db: str, rows: list[dict[str, object]]) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = runner.invoke(app, ["ingest", str(log), "--db", db])
    assert res.exit_code == 0, res.output


def test_hints_add_reads_sitemaps_and_lines_and_names_the_bad_ones(tmp_path: Path, db: str) -> None:
    ingest(tmp_path, db, [
        {"url": f"https://shop.example/p/{i}", "fetched_at": T0, "status": 200, "record_hash": "a"}
        for i in (1, 2, 3)
    ])  # fmt: skip
    sitemap = tmp_path / "sitemap.xml.gz"  # gzipped, and found a sitemap by its content
    sitemap.write_bytes(gzip.compress(SITEMAP))
    lines = tmp_path / "listing.jsonl"
    lines.write_text(
        '{"url": "https://shop.example/p/3", "lastmod": 1700000500}\n'
        '{"url": "https://shop.example/p/1", "lastmod": "yesterday"}\n'
        "\n"
        "not json\n"
    )
    res = runner.invoke(
        app,
        ["hints", "add", str(sitemap), str(lines), "--db", db, "--source", "listing",
         "--seen-at", "2023-11-17T00:00:00Z"],
    )  # fmt: skip
    assert res.exit_code == 1, res.output  # lines were rejected
    out = " ".join(res.output.split())
    assert f"{sitemap} (sitemap; listing 3): 2 stored, 0 unchanged, 1 for unknown URLs" in out
    assert f"{lines} (hint lines; listing 1): 1 stored" in out
    assert "entry 4: field 'lastmod'" in out and "https://shop.example/p/3" in out
    assert f"rejected {lines}: line 2: field 'lastmod'" in out
    assert f"rejected {lines}: line 4: not JSON" in out
    assert "--add-urls registers them" in out

    # read again a day later, as JSON: nothing new but the unknown URL, now registered
    res = runner.invoke(
        app,
        ["hints", "add", str(sitemap), "--db", db, "--json", "--add-urls", "--source", "listing",
         "--seen-at", "2023-11-18T00:00:00Z"],
    )  # fmt: skip
    assert res.exit_code == 1  # the bad entry again
    data = json.loads(res.stdout)
    (f,) = data["files"]
    assert f["format"] == "sitemap" and f["sources"] == {"listing": 3}
    assert (f["stored"], f["unchanged"], f["unknown"], f["added_urls"], f["rejected"]) == (
        1, 2, 0, 1, 1,
    )  # fmt: skip
    assert data["total"]["added_urls"] == 1

    report = json.loads(runner.invoke(app, ["hints", "--db", db, "--json"]).stdout)
    (listing,) = report["sources"]
    assert (listing["source"], listing["pages"], listing["lastmods"]) == ("listing", 4, 4)
    assert report["trust"] == []  # no revisit yet


def test_hints_add_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    db = str(tmp_path / "recrawl.db")
    index = tmp_path / "index.xml"
    index.write_text('<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"/>')
    res = runner.invoke(app, ["hints", "add", str(index), "--db", db, "--add-urls"])
    assert res.exit_code == 1 and "give the sitemaps it lists one by one" in _unboxed(res.output)
    res = runner.invoke(app, ["hints", "add", str(index), "--db", db, "--seen-at", "soon"])
    assert res.exit_code == 2 and "--seen-at" in _unboxed(res.output)
    res = runner.invoke(app, ["hints", "add", str(tmp_path / "none.xml"), "--db", db])
    assert res.exit_code == 2 and "not a readable file" in _unboxed(res.output)
    broken = tmp_path / "broken.xml"
    broken.write_bytes(SITEMAP[:-40])
    res = runner.invoke(app, ["hints", "add", str(broken), "--db", db, "--add-urls"])
    assert res.exit_code == 1 and "not well-formed XML" in _unboxed(res.output)
    assert "3 stored" in _unboxed(res.output)  # what came before the break is kept
    res = runner.invoke(app, ["hints", "--db", db, "--days", "0"])
    assert res.exit_code == 2 and "--days" in _unboxed(res.output)


def test_the_report_names_the_sources_trusted(tmp_path: Path, db: str) -> None:
    rows, changes = crawl()
    ingest(tmp_path, db, rows)
    res = runner.invoke(app, ["hints", "--db", db])
    assert res.exit_code == 0 and "No hints in the store" in _unboxed(res.output)
    lines = tmp_path / "sitemap.jsonl"
    lines.write_text(
        "".join(
            json.dumps({"url": h.url, "seen_at": h.seen_at, "lastmod": h.lastmod}) + "\n"
            for h in sitemap_reads(changes, "honest")
        )
    )
    res = runner.invoke(app, ["hints", "add", str(lines), "--db", db, "--source", "sitemap"])
    assert res.exit_code == 0, res.output
    assert f"{lines} (hint lines; sitemap {len(changes) * DAYS:,})" in " ".join(res.output.split())

    res = runner.invoke(app, ["hints", "--db", db])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "sitemap: 120 pages" in text
    assert "a.example │ sitemap" in text and text.count("│ trusted") == 2
    assert "┃ lag ┃" in text and "h │ trusted" in text, res.output  # the lag in hours
    assert " ".join(TRUSTED_MEANS.split()) in text

    data = json.loads(runner.invoke(app, ["hints", "--db", db, "--json", "--days", "30"]).stdout)
    assert data["days"] == 30 and data["trusted_means"] == TRUSTED_MEANS
    assert [(t["site"], t["source"], t["verdict"]) for t in data["trust"]] == [
        ("a.example", "sitemap", "trusted"),
        ("b.example", "sitemap", "trusted"),
    ]
    assert all(t["recall"] > 0.9 and t["precision"] > 0.9 for t in data["trust"])
    # read daily: each change reported within a day of it
    assert all(0.5 * DAY < t["lag_s"] < DAY for t in data["trust"]), data["trust"]
    assert data["lag_means"] == LAG_MEANS
    # judged as of an early time: few revisits the sitemap covered
    early = T0 + 5 * DAY
    data = json.loads(
        runner.invoke(app, ["hints", "--db", db, "--json", "--at", str(early)]).stdout
    )
    assert data["until"] == early
    assert all(t["verdict"] == "too few revisits to judge" for t in data["trust"])


def test_hints_add_rejects_hints_seen_in_the_future(tmp_path: Path, db: str) -> None:
    lines = tmp_path / "feed.jsonl"
    lines.write_text(
        '{"url": "https://shop.example/p/1", "lastmod": 1700000000, "seen_at": 1700000100}\n'
        '{"url": "https://shop.example/p/2", "lastmod": 1700000000, "seen_at": "2150-01-01"}\n'
    )
    res = runner.invoke(
        app, ["hints", "add", str(lines), "--db", db, "--add-urls", "--source", "feed"]
    )
    assert res.exit_code == 1, res.output
    out = " ".join(res.output.split())
    assert f"rejected {lines}: 1 hints seen after now" in out
    assert "more than 5 minutes after this machine's clock" in out
    assert "1 stored" in out and "1 rejected" in out
    report = json.loads(runner.invoke(app, ["hints", "--db", db, "--json"]).stdout)
    assert report["sources"][0]["pages"] == 1  # the good one kept


def test_hints_add_checks_every_path_before_storing(tmp_path: Path) -> None:
    db = tmp_path / "recrawl.db"
    good = tmp_path / "a.xml"
    good.write_bytes(SITEMAP)
    res = runner.invoke(
        app, ["hints", "add", str(good), str(tmp_path / "missing.xml"), "--db", str(db),
              "--add-urls"],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "is not a readable file" in re.sub(r"[│\s]+", " ", res.output)
    if db.exists():
        with SQLiteStore(db) as store:
            assert store.execute("SELECT count(*) FROM hints") == [(0,)]


def test_a_sitemap_file_is_dated_by_its_modification_time(tmp_path: Path) -> None:
    db = str(tmp_path / "recrawl.db")
    sitemap = tmp_path / "sitemap.xml"
    sitemap.write_bytes(SITEMAP)
    mtime = T0 + 3 * DAY
    os.utime(sitemap, (mtime, mtime))
    res = runner.invoke(app, ["hints", "add", str(sitemap), "--db", db, "--add-urls"])
    assert res.exit_code == 1, res.output  # the bad entry
    report = json.loads(runner.invoke(app, ["hints", "--db", db, "--json"]).stdout)
    (src,) = report["sources"]
    assert src["first_seen"] == src["last_seen"] == mtime
    res = runner.invoke(app, ["hints", "add", "--help"])
    assert "modification time" in " ".join(res.output.split())

"""``recrawl urls add`` and ``recrawl hints add`` name every rejected line, as
``recrawl ingest`` does (issue 30, item 4): before, the first 20 and "… and N more"."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def recrawl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recrawl", *args], capture_output=True, text=True, timeout=120
    )


def named_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("rejected ")]


def url_file(tmp_path: Path) -> Path:
    """Lines 1-60: the even ones good URLs, the odd ones (30) not http(s)."""
    p = tmp_path / "urls.txt"
    p.write_text(
        "".join(
            f"https://a.example/{n}\n" if n % 2 == 0 else f"ftp://a.example/{n}\n"
            for n in range(1, 61)
        )
    )
    return p


def hint_file(tmp_path: Path) -> Path:
    """Lines 1-60: the even ones good hints, the odd ones (30) with a bad lastmod."""
    p = tmp_path / "hints.jsonl"
    p.write_text(
        "".join(
            json.dumps(
                {
                    "url": f"https://a.example/{n}",
                    "lastmod": 1_700_000_000 if n % 2 == 0 else "yesterday",
                    "seen_at": 1_700_000_100,
                    "source": "feed",
                }
            )
            + "\n"
            for n in range(1, 61)
        )
    )
    return p


def test_urls_add_names_every_rejected_line(tmp_path: Path) -> None:
    urls = url_file(tmp_path)
    res = recrawl("urls", "add", str(urls), "--db", str(tmp_path / "s.db"))
    assert res.returncode == 1, res.stderr
    named = named_lines(res.stderr)
    assert len(named) == 30, res.stderr
    for n in range(1, 60, 2):
        assert sum(line.startswith(f"rejected {urls}: line {n}: field 'url': ") for line in named)
    assert "more rejected" not in res.stderr
    assert "30 lines rejected (by field: url: 30)" in res.stderr.splitlines()[-1]
    assert "30 new URLs registered" in res.stdout and "30 rejected" in res.stdout


def test_urls_add_and_remove_write_every_rejected_line_to_the_rejects_file(
    tmp_path: Path,
) -> None:
    urls, db = url_file(tmp_path), str(tmp_path / "s.db")
    for cmd in ("add", "remove"):
        out = tmp_path / f"{cmd}.jsonl"
        res = recrawl("urls", cmd, str(urls), "--db", db, "--rejects", str(out))
        assert res.returncode == 1, res.stderr
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["line"] for r in rows] == list(range(1, 60, 2))
        assert all(r["file"] == str(urls) and r["field"] == "url" and r["reason"] for r in rows)
        assert not named_lines(res.stderr) and f"each written to {out}" in res.stderr


def test_hints_add_names_every_rejected_line(tmp_path: Path) -> None:
    hints = hint_file(tmp_path)
    res = recrawl("hints", "add", str(hints), "--db", str(tmp_path / "s.db"), "--add-urls", "-q")
    assert res.returncode == 1, res.stderr
    named = named_lines(res.stderr)
    assert len(named) == 30, res.stderr
    for n in range(1, 60, 2):
        assert sum(
            line.startswith(f"rejected {hints}: line {n}: field 'lastmod': ") for line in named
        )
    assert "more rejected" not in res.stderr
    assert "30 lines or entries rejected (by field: lastmod: 30)" in res.stderr
    assert "30 stored" in res.stdout and "30 rejected" in res.stdout

    out = tmp_path / "rejects.jsonl"
    res = recrawl(
        "hints", "add", str(hints), "--db", str(tmp_path / "s.db"), "-q", "--rejects", str(out)
    )
    assert res.returncode == 1, res.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["line"], r["field"]) for r in rows] == [(n, "lastmod") for n in range(1, 60, 2)]
    assert not named_lines(res.stderr)

"""``recrawl ingest`` names every rejected line, splits lines on LF only (as the
service does) and echoes at most a bounded slice of a bad value (issue 30, item 4)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from recrawl.config import Settings
from recrawl.engine.engine import Engine
from recrawl.service import Service
from recrawl.store import SQLiteStore
from recrawl.testing.server import ManualClock


def recrawl(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "recrawl", *args], input=input, capture_output=True, timeout=120
    )


def good(i: int) -> str:
    return json.dumps({"url": f"https://a.example/{i}", "fetched_at": 1000 + i, "status": 200})


def bad_lines(tmp_path: Path) -> Path:
    """Lines 1-60: the even ones good, the odd ones bad (30 bad lines: 15 by URL,
    15 by time)."""
    rows = []
    for n in range(1, 61):
        if n % 2 == 0:
            rows.append(good(n))
        elif n % 4 == 1:
            rows.append(json.dumps({"url": f"ftp://a.example/{n}", "fetched_at": 1, "status": 200}))
        else:
            rows.append(
                json.dumps({"url": f"https://a.example/{n}", "fetched_at": "x", "status": 1})
            )
    p = tmp_path / "log.jsonl"
    p.write_text("\n".join(rows) + "\n")
    return p


def service_answer(db: Path, body: bytes) -> dict:
    """What ``POST /v1/observations`` answers for ``body`` (the service's own parser)."""
    store = SQLiteStore(db)
    svc = Service(Engine(store, Settings(), clock=ManualClock(2000.0)))
    try:
        return svc.ingest_body(body)
    finally:
        svc.writer.close()
        store.close()


def test_every_rejected_line_is_named_on_stderr(tmp_path: Path) -> None:
    res = recrawl("ingest", str(bad_lines(tmp_path)), "--db", str(tmp_path / "s.db"), "-q")
    assert res.returncode == 1
    err = res.stderr.decode()
    named = [line for line in err.splitlines() if line.startswith("rejected ")]
    assert len(named) == 30, err
    for n in range(1, 60, 2):
        assert sum(f": line {n}: " in line for line in named) == 1, (n, err)
    assert "more rejected" not in err
    # a closing summary, for an input whose rejections scroll by
    assert "30 lines rejected" in err.splitlines()[-1], err
    assert "30 observations stored, 0 already known, 30 rejected" in res.stdout.decode()


def test_rejects_file_holds_every_rejected_line_as_jsonl(tmp_path: Path) -> None:
    out = tmp_path / "rejects.jsonl"
    log = bad_lines(tmp_path)
    res = recrawl("ingest", str(log), "--db", str(tmp_path / "s.db"), "-q", "--rejects", str(out))
    assert res.returncode == 1, res.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["line"] for r in rows] == list(range(1, 60, 2))
    assert {r["field"] for r in rows} == {"url", "fetched_at"}
    assert all(r["file"] == str(log) and r["reason"] for r in rows)
    assert rows[0]["field"] == "url" and "is not an absolute http(s) URL" in rows[0]["reason"]
    assert rows[1]["field"] == "fetched_at"
    # stderr no longer lists them: it says where they went
    err = res.stderr.decode()
    assert "rejected " not in err.replace("30 lines rejected", "")
    assert str(out) in err and "30 lines rejected" in err


def test_a_carriage_return_inside_a_line_does_not_split_it(tmp_path: Path) -> None:
    """CR is JSON whitespace between tokens: the service takes such a line, and so
    does the CLI now (lines end at LF only; a CRLF ending still works)."""
    body = (
        b'{"url": "https://a.example/1",\r"fetched_at": 1000,\r "status": 200}\r\n'
        b'{"url": "https://a.example/2",\r"fetched_at": 1000, "status": 200}\n'
    )
    log = tmp_path / "cr.jsonl"
    log.write_bytes(body)
    res = recrawl("ingest", str(log), "--db", str(tmp_path / "c.db"), "-q")
    assert res.returncode == 0, res.stderr
    assert b"2 observations stored, 0 already known, 0 rejected" in res.stdout
    got = service_answer(tmp_path / "s.db", body)
    assert (got["stored"], got["rejected"]) == (2, [])
    # the same lines keyed the same way: posting the log after ingesting it stores nothing
    again = service_answer(tmp_path / "c.db", body)
    assert (again["stored"], again["duplicates"]) == (0, 2)
    # from stdin too
    res = recrawl("ingest", "-", "--db", str(tmp_path / "d.db"), "-q", input=body)
    assert b"2 observations stored, 0 already known, 0 rejected" in res.stdout


def test_a_raw_carriage_return_inside_a_string_rejects_its_line_alone(tmp_path: Path) -> None:
    """JSON has no raw control character inside a string: the service refuses the
    line (index 0) and takes the next; the CLI now does the same (line 1), where
    it read three lines, rejected two and named the good one "line 3"."""
    body = (
        b'{"url": "https://a.example/x\ry", "fetched_at": 1000, "status": 200}\n'
        b'{"url": "https://a.example/z", "fetched_at": 1000, "status": 200}\n'
    )
    got = service_answer(tmp_path / "s.db", body)
    assert got["stored"] == 1 and [r["index"] for r in got["rejected"]] == [0]
    log = tmp_path / "cr.jsonl"
    log.write_bytes(body)
    out = tmp_path / "rejects.jsonl"
    res = recrawl("ingest", str(log), "--db", str(tmp_path / "c.db"), "-q", "--rejects", str(out))
    assert b"1 observations stored, 0 already known, 1 rejected" in res.stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["line"] for r in rows] == [1]
    assert "control character" in rows[0]["reason"]


def test_a_2mb_url_is_echoed_in_a_line_under_1kb(tmp_path: Path) -> None:
    url = "ftp://a.example/" + "x" * (2 << 20)
    log = tmp_path / "big.jsonl"
    log.write_text(json.dumps({"url": url, "fetched_at": 1000, "status": 200}) + "\n" + good(1))
    res = recrawl("ingest", str(log), "--db", str(tmp_path / "s.db"), "-q")
    assert res.returncode == 1
    err = res.stderr.decode()
    named = [line for line in err.splitlines() if line.startswith("rejected ")]
    assert len(named) == 1 and len(named[0]) < 1024, len(err)
    assert len(err) < 1024
    assert "line 1" in named[0] and "is not an absolute http(s) URL" in named[0]
    assert f"{len(url):,} characters" in named[0]  # how long it was


def test_the_services_answer_to_a_2mb_url_is_bounded(tmp_path: Path) -> None:
    url = "ftp://a.example/" + "x" * (2 << 20)
    body = json.dumps({"url": url, "fetched_at": 1000, "status": 200}).encode()
    got = service_answer(tmp_path / "s.db", body)
    assert [(r["index"], r["field"]) for r in got["rejected"]] == [(0, "url")]
    assert len(json.dumps(got)) < 1024
    # the moved_to URL, an outcome and a port the same way
    for raw in (
        {"url": "https://a.example/", "moved_to": url},
        {"url": "https://a.example/", "outcome": "x" * (2 << 20)},
        {"url": "https://a.example:" + "9" * (2 << 20) + "/"},
    ):
        line = json.dumps({"fetched_at": 1000, "status": 200, **raw}).encode()
        got = service_answer(tmp_path / "s.db", line)
        assert len(got["rejected"]) == 1 and len(json.dumps(got)) < 1024, got["rejected"][0][
            "field"
        ]

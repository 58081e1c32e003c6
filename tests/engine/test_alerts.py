"""Alerts (issue 31): per owner and band, from a queue with retries, never blocking.

A webhook server of the test's own on 127.0.0.1 answers as told (a status per
request, or a long wait) and records what it was sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from recrawl.config import AlertSettings, Settings
from recrawl.engine.alerts import Alert, AlertQueue, alert_events
from recrawl.engine.engine import Engine
from recrawl.store import SQLiteStore


class _Hook:
    def __init__(self, statuses: list[int], delay_s: float = 0.0) -> None:
        self.statuses, self.delay_s = statuses, delay_s
        self.got: list[dict[str, Any]] = []
        self.paths: list[str] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hook.got.append(body)
                hook.paths.append(self.path)
                time.sleep(hook.delay_s)
                status = hook.statuses.pop(0) if hook.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Any]:
    made: list[_Hook] = []

    def make(statuses: list[int] | None = None, delay_s: float = 0.0) -> _Hook:
        h = _Hook(list(statuses or []), delay_s)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def _report(site: str, band: str, parser: str = "healthy") -> dict[str, Any]:
    return {"site": site, "band": band, "score": 20 if band == "critical" else 70,
            "reasons": ["challenge"], "action": {}, "parser": {"band": parser, "score": 50,
            "reasons": ["extract_failed"]}}  # fmt: skip


def test_each_alert_goes_to_its_owner_once_per_band() -> None:
    reports = [_report("a.example", "critical"), _report("b.example", "degrading"),
               _report("c.example", "healthy", parser="degrading"),
               _report("d.example", "healthy", parser="critical")]  # fmt: skip
    before = {"b.example": ("healthy", "healthy"), "d.example": ("healthy", "critical")}
    kw: dict[str, Any] = {"crawl_owner": "http://crawl", "parser_owner": "http://parser", "at": 1.0}
    got = alert_events(reports, before, paused=["a.example"], **kw)
    assert [(a.url, a.body["event"], a.body["site"]) for a in got] == [
        ("http://crawl", "site_paused", "a.example"),
        ("http://parser", "parser_degrading", "c.example"),  # d was critical already
    ]
    got = alert_events(reports, before, paused=[], bands=["degrading", "critical"], **kw)
    assert [a.body["event"] for a in got] == ["site_degrading", "parser_degrading"]
    again = alert_events(reports, {"b.example": ("degrading", "healthy")}, paused=[],
                         bands=["degrading"], **kw)  # fmt: skip
    assert "site_degrading" not in [a.body["event"] for a in again]


def test_a_failing_webhook_is_retried_until_it_takes_the_alert(hook: Any) -> None:
    h = hook([503, 500])
    q = AlertQueue(retries=3, backoff_s=0.01)
    q.post(Alert(h.url, {"event": "site_paused", "site": "a.example"}))
    assert q.drain(10.0)
    assert len(h.got) == 3 and q.delivered == 1 and q.failed == 0


def test_a_refusing_webhook_is_not_retried_and_a_slow_one_blocks_nobody(hook: Any) -> None:
    refusing = hook([404])
    q = AlertQueue(retries=3, backoff_s=0.01)
    q.post(Alert(refusing.url, {"event": "site_paused", "site": "a.example"}))
    assert q.drain(10.0) and len(refusing.got) == 1 and q.failed == 1
    slow = hook(delay_s=0.4)
    t = time.perf_counter()
    for i in range(3):
        q.post(Alert(slow.url, {"event": "site_paused", "site": f"s{i}.example"}))
    assert time.perf_counter() - t < 0.2  # queued: the caller does not wait 1.2 s
    assert q.drain(30.0) and q.delivered == 3


def test_a_pause_alerts_the_crawl_owner_and_a_failing_parser_its_owner(
    tmp_path: Path, hook: Any
) -> None:
    crawl, parser = hook(), hook()
    settings = Settings(token="t", alerts=AlertSettings(crawl_owner=crawl.url + "/crawl",
                                                        parser_owner=parser.url + "/parser"))  # fmt: skip
    engine = Engine(SQLiteStore(tmp_path / "s.db"), settings)
    now = 1_750_000_000.0
    engine._apply_actions(now, [_report("a.example", "critical"),
                                _report("c.example", "healthy", parser="degrading")])  # fmt: skip
    assert engine.store.site_controls()["a.example"]["paused"]
    assert engine._alerts is not None and engine._alerts.drain(10.0)
    assert [(b["event"], b["site"]) for b in crawl.got] == [("site_paused", "a.example")]
    assert [(b["event"], b["site"]) for b in parser.got] == [("parser_degrading", "c.example")]
    assert crawl.paths == ["/crawl"] and parser.paths == ["/parser"]
    engine.store.close()


def test_an_alert_webhook_must_be_a_url() -> None:
    with pytest.raises(ValueError, match="not an http"):
        AlertSettings(parser_owner="parser@example.com")

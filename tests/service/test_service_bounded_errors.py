"""The service's answers to a huge bad value stay small: the value is echoed
truncated, with its length (issue 30, item 4)."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson

from recrawl.config import Settings
from recrawl.engine.engine import Engine
from recrawl.service import create_app
from recrawl.store import open_store
from recrawl.testing.server import ManualClock, serve_in_thread

TOKEN = "write-secret"
BIG = 2 << 20


def test_a_2mb_url_gets_a_small_answer(tmp_path: Path) -> None:
    settings = Settings(token=TOKEN, budget_per_day=100.0)
    store = open_store(str(tmp_path / "s.db"))
    try:
        engine = Engine(store, settings, clock=ManualClock())
        app = create_app(engine, settings, replan_min_s=0.0)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with (
            serve_in_thread(app) as base,
            httpx.Client(base_url=base, headers=headers, timeout=60) as client,
        ):
            url = "ftp://a.example/" + "x" * BIG
            lines = [
                {"url": url, "fetched_at": 1000, "status": 200},
                {"url": "https://a.example/", "fetched_at": 1000, "status": 200},
            ]
            body = b"\n".join(orjson.dumps(x) for x in lines)
            r = client.post("/v1/observations", content=body)
            assert r.status_code == 200
            assert len(r.content) < 1024, len(r.content)
            data = r.json()
            assert data["accepted"] == 1
            [bad] = data["rejected"]
            assert (bad["index"], bad["field"]) == (0, "url")
            assert "is not an absolute http(s) URL" in bad["error"]
            assert f"{len(url):,} characters" in bad["error"]
            # all of them rejected: still a 200 naming each, still small
            r = client.post("/v1/observations", content=body.split(b"\n")[0])
            assert r.status_code == 200 and len(r.content) < 1024
            # a URL registration with a 2 MB port: rejected by name (issue 31), small
            port = "https://a.example:" + "9" * BIG + "/"
            r = client.post("/v1/urls", json=[{"url": port}])
            assert r.status_code == 200 and len(r.content) < 1024, len(r.content)
            [bad] = r.json()["rejected"]
            assert (bad["index"], bad["field"], r.json()["added"]) == (0, "url", 0)
    finally:
        store.close()

"""Issue 31's rough edges of the HTTP API, as a client meets them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from recrawl.clock import ManualClock
from recrawl.config import Settings
from recrawl.engine.engine import Engine
from recrawl.service import Service, create_app
from recrawl.store import SQLiteStore
from recrawl.testing.server import serve_in_thread

NOW = 1_780_000_000.0


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Service]:
    store = SQLiteStore(tmp_path / "s.db")
    service = Service(Engine(store, Settings(), clock=ManualClock(NOW)))
    try:
        yield service
    finally:
        service.writer.close()
        store.close()


def test_an_observation_dated_in_the_future_is_rejected_by_index(svc: Service) -> None:
    items = [
        {"url": "https://a.example/1", "fetched_at": NOW - 10, "status": 200},
        {"url": "https://a.example/2", "fetched_at": NOW + 7200, "status": 200},
        {"url": "https://a.example/3", "fetched_at": NOW + 600, "status": 200},
    ]
    got = svc.ingest_body("\n".join(json.dumps(i) for i in items).encode())
    assert (got["accepted"], got["stored"]) == (2, 2)
    [bad] = got["rejected"]
    assert (bad["index"], bad["field"]) == (1, "fetched_at")
    assert "more than 1 h after now" in bad["error"]
    # the clock catches up: the same report is stored then, not taken for a duplicate
    svc.engine.clock.advance(7200)  # type: ignore[attr-defined]
    again = svc.ingest_body(json.dumps(items[1]).encode())
    assert (again["stored"], again["rejected"]) == (1, [])


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[httpx.Client, SQLiteStore]]:
    """The service on a free port of 127.0.0.1, over a real SQLite file."""
    store = SQLiteStore(tmp_path / "u.db")
    settings = Settings(token="secret", budget_per_day=100.0)
    app = create_app(Engine(store, settings, clock=ManualClock(NOW)), settings)
    try:
        with (
            serve_in_thread(app) as base,
            httpx.Client(
                base_url=base, headers={"Authorization": "Bearer secret"}, timeout=30
            ) as c,
        ):
            yield c, store
    finally:
        store.close()


def test_post_urls_takes_the_readmes_body_and_names_the_bad_url(
    client: tuple[httpx.Client, SQLiteStore],
) -> None:
    c, store = client
    r = c.post("/v1/urls", json={"urls": ["https://a.example/1", "https://a.example/2"]})
    assert r.status_code == 200, r.text
    assert r.json() == {"received": 2, "added": 2, "updated": 0, "rejected": []}
    body = [
        "https://b.example/1",
        {"url": "mailto:x@y.example"},
        {"url": "https://b.example/2", "page_type": "item", "value": 2},
        {"url": "https://b.example/3", "value": -1},
        7,
    ]
    r = c.post("/v1/urls", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert (got["received"], got["added"]) == (5, 2)  # the good ones, despite the bad
    assert [(b["index"], b["url"], b["field"]) for b in got["rejected"]] == [
        (1, "mailto:x@y.example", "url"),
        (3, "https://b.example/3", "value"),
        (4, None, None),
    ]
    assert "absolute http(s) URL" in got["rejected"][0]["error"]
    kept = {
        u: t
        for u, t in zip(store.page_columns()["url"], store.page_columns()["page_type"], strict=True)
    }
    assert kept == {
        "https://a.example/1": "page",
        "https://a.example/2": "page",
        "https://b.example/1": "page",
        "https://b.example/2": "item",
    }
    # a body of another shape: one clear sentence, no pydantic union noise
    r = c.post("/v1/urls", json={"url": "https://a.example/9"})
    assert r.status_code == 422
    assert r.json()["detail"] == [
        {"field": "urls", "error": 'must be a list of URLs (the body is {"urls": [...]})'}
    ]
    # a re-tiering names the value it refuses and takes the others
    r = c.post(
        "/v1/urls",
        json={
            "urls": [{"url": "https://b.example/2", "value": 5}, "https://b.example/1"],
            "update": True,
        },
    )
    assert r.json()["updated"] == 1 and r.json()["rejected"] == []


def test_canaries_are_declared_listed_and_withdrawn_over_http(
    client: tuple[httpx.Client, SQLiteStore],
) -> None:
    c, store = client
    assert c.get("/v1/canaries").json() == {"canaries": []}
    body = {"url": "HTTPS://Shop.example/p/1", "expect": {"price": 19.99, "in_stock": True}}
    r = c.post("/v1/canaries", json={**body, "every_minutes": 30})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert (doc["url"], doc["site"], doc["every_s"]) == (
        "https://shop.example/p/1",
        "shop.example",
        1800,
    )
    assert doc["expect"] == {"price": "19.99", "in_stock": "true"}
    assert c.get("/v1/canaries").json()["canaries"] == [doc]
    plan = c.get("/v1/plan").json()
    assert [t["url"] for t in plan["tasks"] if t["reason"] == "canary"] == [doc["url"]]
    # refusals: a bad URL, no expectation, no token
    r = c.post("/v1/canaries", json={**body, "url": "ftp://x.example/"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "url"
    r = c.post("/v1/canaries", json={**body, "expect": {}})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "expect"
    r = c.post("/v1/canaries", json=body, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    r = c.post("/v1/canaries/remove", json={"url": "https://shop.example/p/1"})
    assert r.json() == {"url": "https://shop.example/p/1", "removed": True}
    assert c.get("/v1/canaries").json() == {"canaries": []}
    assert store.page("https://shop.example/p/1") is None  # a page made for it goes too
    plan = c.get("/v1/plan").json()
    assert not [t for t in plan["tasks"] if t["reason"] == "canary"]
    r = c.post("/v1/canaries/remove", json={"url": "https://shop.example/p/1"})
    assert r.json()["removed"] is False

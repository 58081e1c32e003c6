"""Issue 31's rough edges of the HTTP API, as a client meets them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from recrawl.clock import ManualClock
from recrawl.config import Settings
from recrawl.engine.engine import Engine
from recrawl.service import Service
from recrawl.store import SQLiteStore

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

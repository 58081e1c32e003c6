"""Canary declarations withdrawn: the same on SQLite, PostgreSQL and MemoryStore."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from recrawl.engine.engine import Engine
from recrawl.testing.memory import MemoryStore

T0 = 1_700_000_000.0


@pytest.fixture(params=["store", "memory"])
def any_store(request: pytest.FixtureRequest, make_store: Callable[[], Any]) -> Any:
    return make_store() if request.param == "store" else MemoryStore()


def test_a_canary_is_withdrawn_and_a_page_made_for_it_goes_too(any_store: Any) -> None:
    engine = Engine(any_store, clock=lambda: T0)
    engine.add_urls([{"url": "https://a.example/crawled"}])
    engine.add_canary("https://a.example/crawled", {"price": "3"})
    engine.add_canary("https://a.example/own", {"title": "x"}, every_s=600.0)
    assert [c["url"] for c in engine.canaries()] == [
        "https://a.example/crawled",
        "https://a.example/own",
    ]
    assert any_store.remove_canary("https://a.example/nothing") is False
    assert engine.remove_canary("https://a.example/crawled") is True
    assert any_store.page("https://a.example/crawled") is not None  # a crawled page stays
    assert engine.remove_canary("https://a.example/own") is True
    assert any_store.page("https://a.example/own") is None  # made for the canary: gone
    assert engine.canaries() == []
    assert engine.remove_canary("https://a.example/own") is False

"""Re-tiering and removing URLs, seen from the store and from a second connection."""

from __future__ import annotations

import json
from collections.abc import Callable

from recrawl.engine.ingest import ingest_lines
from recrawl.store import SQLStore

A = "https://shop.example/p/1"
B = "https://shop.example/p/2"


def obs(url: str, t: float, **kw: object) -> str:
    return json.dumps({"url": url, "fetched_at": t, "status": 200, **kw})


def _page_id(store: SQLStore, url: str) -> int:
    return int(store._db.execute("SELECT id FROM pages WHERE url = ?", (url,)).fetchone()[0])


def test_values_change_for_known_pages_only_and_survive_later_fetches(
    connect: Callable[[], SQLStore],
) -> None:
    a, b = connect(), connect()
    ingest_lines(a, [obs(A, 100, record={"v": 1}), obs(B, 100, record={"v": 1})])
    v0 = a.version()
    assert b.set_values([(A, 8.0), (B, 1.0), ("https://shop.example/none", 3.0)]) == 1
    assert a.version() != v0  # planners see the URLs changed
    ingest_lines(a, [obs(A, 200, record={"v": 2})])  # a's cached state predates the change
    assert a.page(A).value == 8.0  # type: ignore[union-attr]
    assert a.page(A).fetches == 2  # type: ignore[union-attr]
    assert a.page("https://shop.example/none") is None


def test_a_removed_page_leaves_its_log_and_comes_back_new_with_a_new_id(
    connect: Callable[[], SQLStore],
) -> None:
    a, b = connect(), connect()
    ingest_lines(a, [obs(A, 100, record={"v": 1}), obs(B, 100, record={"v": 1})])
    ingest_lines(a, [obs(B, 200, record={"v": 2})])  # B has the highest id and a cached one
    old = _page_id(a, B)
    count = a.observation_count()
    assert b.remove_urls([B, "https://shop.example/none"]) == 1
    assert a.page(B) is None and a.outcomes(B) == []
    assert a.observation_count() == count - 2
    # a still caches B's id: a new report must make a new page, not write to the old id
    ingest_lines(a, [obs(B, 300, record={"v": 3})])
    assert [o for _, o in a.outcomes(B)] == ["new"]
    assert _page_id(a, B) > old
    assert a.page(B).fetches == 1  # type: ignore[union-attr]
    # the old log sent again stays a duplicate: it does not bring the old history back
    report = ingest_lines(a, [obs(B, 100, record={"v": 1})])
    assert report.duplicates == 1
    # registering it on the connection that removed it works too
    b.remove_urls([B])
    assert b.add_urls([(B, "shop.example", "page", 1.0)], now=400) == 1
    assert a.add_urls([(B, "shop.example", "page", 1.0)], now=400) == 0


def test_removing_a_canary_or_a_leased_url_removes_its_declaration_and_lease(
    connect: Callable[[], SQLStore],
) -> None:
    s = connect()
    s.add_canary(A, "shop.example", {"price": "1"}, 3600, 100.0)
    assert [c["url"] for c in s.canaries()] == [A]
    assert s.remove_urls([A]) == 1
    assert s.canaries() == []

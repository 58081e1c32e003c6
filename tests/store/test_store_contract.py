"""The store contract: the same cases on the in-memory store, SQLite and PostgreSQL.

The ingest pipeline (:func:`recrawl.engine.pipeline.store_batch`) and the prune
run unchanged on every :class:`~recrawl.store.Store`; what a user reads back
(page states, outcomes in the log, bucket sums, totals per site) must not
depend on the backend. Each case asserts figures a user would see; the long
scenario, and an engine driven through a crawl (stats, plan, budget,
calibration, hints, leases, health and its actions), answer exactly as on SQLite.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import pg_schema

from recrawl.engine.pipeline import prune_log, store_batch
from recrawl.observe.observation import Observation, parse_observation
from recrawl.observe.sitemaps import Hint
from recrawl.records.pages import page_row
from recrawl.store import PostgresStore, SQLiteStore, Store
from recrawl.testing.memory import MemoryStore

BACKENDS = ["memory", "sqlite", "postgres"]
_REFERENCE: dict[str, Any] = {}
T0 = 1_767_225_600.0
H = 3600.0


@pytest.fixture
def make_any(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[str], Any]]:
    """Fresh, empty stores of a named backend."""
    opened: list[Any] = []
    schemas: list[Iterator[str]] = []

    def make(kind: str) -> Any:
        if kind == "memory":
            s: Any = MemoryStore()
        elif kind == "sqlite":
            s = SQLiteStore(tmp_path / f"s{len(opened)}.db")
        else:
            gen = pg_schema()
            schemas.append(gen)
            s = PostgresStore(next(gen))
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()
    for gen in schemas:
        next(gen, None)


def obs(url: str, t: float, status: int = 200, **kw: Any) -> Observation:
    raw = {"url": url, "fetched_at": t, "status": status, "id": f"{url}@{t}@{status}"} | kw
    return parse_observation(raw)


A = "https://shop.example/p/1"
B = "https://shop.example/p/2"


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_batch_is_stored_once_and_folded_into_its_pages(
    kind: str, make_any: Callable[[str], Any]
) -> None:
    store: Store = make_any(kind)
    batch = [
        obs(A, T0, record={"p": 1}, bytes_received=1000, latency_ms=50),
        obs(A, T0 + H, record={"p": 1}, bytes_received=1000),
        obs(A, T0 + 2 * H, record={"p": 2}, bytes_received=1200),
        obs(B, T0, 404),
        obs(B, T0 + H, 429, retry_after=60),
    ]
    res = store_batch(store, batch)
    assert res.stored == 5 and res.duplicates == 0
    assert res.outcomes == {"new": 1, "unchanged": 1, "changed": 1, "gone": 1, "hard_block": 1}
    again = store_batch(store, batch[:2])  # sent again: nothing new
    assert again.stored == 0 and again.duplicates == 2
    assert store.observation_count() == 5
    page = store.page(A)  # type: ignore[attr-defined]
    assert page.fetches == 3 and page.changes == 1 and page.last_change == T0 + 2 * H
    assert [o for _, o in store.outcomes(A)] == ["new", "unchanged", "changed"]  # type: ignore[attr-defined]
    (shop,) = store.group_totals()
    assert (shop.site, shop.fetches, shop.bytes_received) == ("shop.example", 5, 3200)
    assert shop.outcomes["changed"] == 1 and shop.outcomes["failed_first"] == 2
    b = store.buckets(T0, T0 + 3 * H)
    assert int(b.n.sum()) == 5 and int(b.latency.sum()) == 1


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_pages_sharing_a_slot_of_the_page_cache_fold_as_without_a_cache(
    kind: str, make_any: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SQL stores keep written pages' state in a cache of a bounded number
    of slots (page ``id`` in slot ``id % slots``): with 1,024 slots for 3,000
    pages, three pages share each slot, and five rounds over them, in batches
    that mix pages of one slot, fold every page as the in-memory store does."""
    monkeypatch.setattr("recrawl.store._sql._PAGE_SLOTS", 1024)
    store, ref = make_any(kind), make_any("memory")
    urls = [f"https://s{p % 3}.example/p/{p}" for p in range(3000)]
    rng = random.Random(5)
    for r in range(5):
        order = list(range(3000))
        rng.shuffle(order)
        for i in range(0, 3000, 700):
            batch = [
                obs(urls[p], T0 + r * H + p, 200 if (p + r) % 4 else 503,
                    record_hash=f"v{(p + r) // 2}", bytes_received=1000 + p)
                for p in order[i : i + 700]
            ]  # fmt: skip
            store_batch(store, batch)
            store_batch(ref, batch)
    assert len(store._slot_id) == 1024  # type: ignore[attr-defined]
    got, want = store.page_columns(), ref.page_columns()
    assert got["url"] == want["url"]
    for name in ("last_fetch", "last_ok", "fails", "fetches", "bytes_total", "ev_nc", "ev_tc",
                 "ev_nu", "ev_tu", "nutch_interval", "ev_bins"):  # fmt: skip
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert store.outcomes_many(urls[:50]) == ref.outcomes_many(urls[:50])


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_late_report_refolds_its_page_in_time_order(
    kind: str, make_any: Callable[[str], Any]
) -> None:
    store: Store = make_any(kind)
    store_batch(store, [obs(A, T0, record={"p": 1}), obs(A, T0 + 2 * H, record={"p": 2})])
    res = store_batch(store, [obs(A, T0 + H, record={"p": 2})])  # arrives after the later one
    assert res.reordered_pages == 1
    # in time order the change happened by T0 + H; the fetch at T0 + 2H saw none
    assert [o for _, o in store.outcomes(A)] == ["new", "changed", "unchanged"]  # type: ignore[attr-defined]
    (shop,) = store.group_totals()
    assert shop.outcomes["changed"] == 1 and shop.outcomes["unchanged"] == 1


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_failed_write_leaves_nothing(kind: str, make_any: Callable[[str], Any]) -> None:
    store: Store = make_any(kind)
    store_batch(store, [obs(A, T0, record={"p": 1})])
    with pytest.raises(RuntimeError), store.writing() as tx:
        tx.claim_keys([12345])
        tx.append_observations([(12345, 1, T0 + H, "changed", None, "[]")])
        raise RuntimeError("the fetcher went away")
    assert store.observation_count() == 1
    assert store_batch(store, [obs(B, T0)]).stored == 1


@pytest.mark.parametrize("kind", BACKENDS)
def test_prune_keeps_pages_whole_and_refuses_what_it_cannot_order(
    kind: str, make_any: Callable[[str], Any]
) -> None:
    store: Store = make_any(kind)
    store_batch(store, [obs(A, T0 + k * H, record={"p": k // 2}) for k in range(6)])
    before = store.page(A)  # type: ignore[attr-defined]
    rep = prune_log(store, T0 + 3.5 * H)
    assert (rep.observations_removed, rep.pages_checkpointed) == (4, 1)
    assert page_row(store.page(A)) == page_row(before)  # type: ignore[attr-defined]
    late = store_batch(store, [obs(A, T0 + 2.5 * H, record={"p": 9})])
    assert late.stored == 0 and len(late.refused) == 1
    later = store_batch(store, [obs(A, T0 + 4.5 * H, record={"p": 9})])  # after the horizon
    assert later.stored == 1 and later.reordered_pages == 1
    assert [o for _, o in store.outcomes(A)] == ["changed", "changed", "changed"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", BACKENDS)
def test_urls_values_and_removals(kind: str, make_any: Callable[[str], Any]) -> None:
    store: Store = make_any(kind)
    assert (
        store.add_urls([(A, "shop.example", "product", 2.0), (B, "shop.example", "p", 1.0)], T0)
        == 2
    )
    assert store.add_urls([(A, "shop.example", "product", 2.0)], T0) == 0
    assert store.set_values([(A, 5.0), (B, 1.0), ("https://nowhere.example/", 3.0)]) == 1
    assert store.page(A).value == 5.0  # type: ignore[attr-defined]
    store_batch(store, [obs(A, T0 + H, record={"p": 1})])
    assert store.remove_urls([A, "https://nowhere.example/"]) == 1
    assert store.page(A) is None and store.observation_count() == 0  # type: ignore[attr-defined]
    # the report's key stays claimed: the same log sent again brings nothing back
    assert store_batch(store, [obs(A, T0 + H, record={"p": 1})]).stored == 0


# -- one long scenario, answered exactly as SQLite answers it ------------------------------------


def _scenario() -> list[tuple[str, Any]]:
    """Steps of a messy crawl: batches with duplicates, late reports and
    redirects, hints from a sitemap trusted both ways, a canary, a prune,
    removals and new values."""
    rng = random.Random(7)
    sites = ["a.example", "b.example", "c.example"]
    urls = [f"https://{sites[i % 3]}/p/{i}" for i in range(24)]
    version = {u: 0 for u in urls}
    events: list[Observation] = []
    for k in range(400):
        u = rng.choice(urls)
        t = T0 + k * 900 + rng.random() * 600
        r = rng.random()
        if r < 0.06:
            events.append(
                obs(u, t, rng.choice([404, 410, 429, 503]), latency_ms=rng.random() * 900)
            )
            continue
        if r < 0.08:
            events.append(obs(u, t, 304, conditional=True))
            continue
        if rng.random() < 0.3:
            version[u] += 1
        kw: dict[str, Any] = {"record": {"v": version[u], "t": t}}
        if r > 0.97:
            kw["moved_to"] = rng.choice([u + "-new", rng.choice(urls)])
            kw["status"] = 301
        kw_status = kw.pop("status", 200)
        events.append(
            obs(u, t, kw_status, bytes_received=rng.randint(500, 5000), credits=rng.random(),
                latency_ms=rng.random() * 400, page_type=rng.choice(["product", "list"]), **kw)
        )  # fmt: skip
    batches = [events[i : i + 37] for i in range(0, len(events), 37)]
    for b in batches:  # arrival order inside a batch is shuffled; some reports come late
        rng.shuffle(b)
    for i in range(1, len(batches), 3):
        batches[i - 1].extend(batches[i][:4])  # resent
        batches[i] = batches[i][2:] + batches[i - 1][-6:-4]  # late
    hints = [
        Hint(u, T0 + d * 86400 / 4, "sitemap", T0 + d * 86400 / 4 - 3600)
        for d in range(6)
        for u in urls[:9]
        if u.startswith("https://a.")
    ]
    verdict = json.dumps(
        {"trust": [{"site": "a.example", "source": "sitemap", "quiet": True, "changes": True}],
         "lags": [["a.example", "sitemap", 1800]]}
    )  # fmt: skip
    steps: list[tuple[str, Any]] = [("urls", [(u, u.split("/")[2], "product", 1.0) for u in urls])]
    steps += [("hints", hints), ("verdict", verdict), ("canary", urls[3])]
    steps += [("batch", b) for b in batches[:7]]
    steps += [("prune", T0 + 200 * 900)]
    # reports dated before the prune's horizon: refused where the page's log was pruned
    steps += [("batch", [obs(u, T0 + 100 * 900 + k, record={"v": -1}) for k, u in enumerate(urls)])]
    steps += [("batch", b) for b in batches[7:]]
    steps += [("values", [(u, 2.0) for u in urls[::5]]), ("remove", urls[::7])]
    return steps


def _run(store: Any, steps: list[tuple[str, Any]]) -> list[Any]:
    """Each step's answer, then what a user reads back."""
    out: list[Any] = []
    for what, arg in steps:
        if what == "urls":
            out.append(store.add_urls(arg, T0))
        elif what == "hints":
            r = store.ingest_hints(arg)
            out.append((r.stored, r.unchanged, r.unknown))
        elif what == "verdict":
            store.set_hint_verdict(arg)
            out.append(None)
        elif what == "canary":
            store.add_canary(arg, "a.example", {"v": "0"}, 3600.0, T0)
            out.append(None)
        elif what == "batch":
            r = store_batch(store, arg)
            out.append((r.stored, r.duplicates, r.reordered_pages, sorted(r.outcomes.items()),
                        sorted(i for i, _ in r.refused)))  # fmt: skip
        elif what == "prune":
            r = prune_log(store, arg)
            out.append((r.observations_removed, r.pages_checkpointed, r.hint_log_removed))
        elif what == "values":
            out.append(store.set_values(arg))
        elif what == "remove":
            out.append(store.remove_urls(arg))
    urls = sorted({o.url for _, a in steps if _ == "batch" for o in a} | {o.moved_to or "" for _, a in steps if _ == "batch" for o in a})  # fmt: skip
    for u in urls:
        p = store.page(u)
        out.append((u, None if p is None else _rounded(page_row(p)), store.outcomes(u)))
    out.append([(g.site, g.page_type, g.fetches, sorted(g.outcomes.items()), g.bytes_received,
                 round(g.credits, 6)) for g in store.group_totals()])  # fmt: skip
    for daily in (False, True):
        b = store.buckets(T0 - 86400, T0 + 30 * 86400, daily=daily)
        rows = sorted(
            (b.sites[b.site[i]], b.page_types[b.page_type[i]], b.routes[b.route[i]],
             int(b.bucket_start[i]), int(b.n[i]), b.outcomes[i].tolist(), b.latency[i].tolist(),
             round(float(b.bytes_received[i])), round(float(b.credits[i]), 6),
             int(b.canary_ok[i]), int(b.canary_mismatch[i]))
            for i in range(len(b))
        )  # fmt: skip
        out.append(rows)
    out.append(store.observation_count())
    return out


def _rounded(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(round(v, 6) if isinstance(v, float) and np.isfinite(v) else v for v in row)


@pytest.mark.parametrize("kind", ["memory", "postgres"])
def test_every_backend_answers_a_messy_crawl_as_sqlite_does(
    kind: str, make_any: Callable[[str], Any]
) -> None:
    steps = _scenario()
    if "messy" not in _REFERENCE:  # SQLite's answers, once for both backends
        _REFERENCE["messy"] = _run(make_any("sqlite"), steps)
    reference = _REFERENCE["messy"]
    got = _run(make_any(kind), steps)
    assert got == reference
    # the scenario does reach what it is meant to: late reports, duplicates,
    # refusals after the prune, a prune that removed rows, a removal
    batches = [r for (w, _), r in zip(steps, reference, strict=False) if w == "batch"]
    assert sum(b[1] for b in batches) > 0 and sum(b[2] for b in batches) > 0
    assert sum(len(b[4]) for b in batches) > 0
    assert next(r for (w, _), r in zip(steps, reference, strict=False) if w == "prune")[0] > 0


# -- the engine on any store ---------------------------------------------------------------------


def _engine_answers(store: Any) -> list[Any]:
    """A sample crawl ingested through an :class:`~recrawl.engine.Engine`, then
    what its user reads: stats, the plan, the budget outlook, calibration, the
    hint report, health (recorded, with its actions), leases and page info."""
    from recrawl.config import Settings
    from recrawl.engine.engine import Engine
    from recrawl.testing import data_file, generate_fetch_log

    lines = data_file("sample-fetches.jsonl").read_text().splitlines()
    t_end = max(json.loads(x)["fetched_at"] for x in lines if x.strip())
    now = float(t_end) + 60.0 if isinstance(t_end, (int, float)) else None
    engine = Engine(store, Settings(budget_per_day=2000.0), clock=lambda: now or 0.0)
    out: list[Any] = []
    rep = engine.ingest_lines(lines)
    out.append((rep.stored, rep.rejected))
    urls = sorted({json.loads(x)["url"] for x in lines if x.strip()})
    hints = [
        Hint(u, now - 3600 * k, "sitemap", now - 86400 * (k + 1)) for k, u in enumerate(urls[:20])
    ]  # type: ignore[operator]
    out.append(engine.ingest_hints(hints).stored)
    out.append(engine.stats())
    plan = engine.plan(now=now, seed=1)
    out.append(engine.plan_dict(plan))
    out.append(engine.budget_outlook(now=now).as_dict())
    out.append(engine.calibration(days=30).as_dict())
    got = store.claim(
        [(t["url"], t["site"], t["reason"]) for t in engine.plan_dict(plan)["tasks"][:12]],
        worker="w", limit=10, now=now, ttl_s=60.0, site_caps={"shop.example": 3},
    )  # fmt: skip
    out.append(sorted((g["url"], g["site"]) for g in got))
    out.append(sorted(store.outstanding_leases(now).items()))
    out.append(engine.page_info(urls[0], now=now))
    out.append(engine.headers_for_many(urls[:5]))
    # half a day of dense traffic after it, for health to judge
    dense = [
        json.dumps(o)
        for o in generate_fetch_log(10000, n_pages=150, days=0.5, start=now + 3600, seed=3)
    ]  # type: ignore[operator]
    out.append(engine.ingest_lines(dense).stored)
    end = max(json.loads(x)["fetched_at"] for x in dense) + 60.0
    out.append(engine.health(at=end))
    out.append(engine.site_caps())
    out.append(store.site_controls())
    out.append(store.health_history())
    return out


def _normal(x: Any) -> Any:
    """Floats to 9 significant digits (two backends may sum in another order)."""
    if isinstance(x, float):
        return float(f"{x:.9g}") if np.isfinite(x) else str(x)
    if isinstance(x, dict):
        return {k: _normal(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_normal(v) for v in x]
    return x


@pytest.mark.parametrize("kind", ["memory", "postgres"])
def test_an_engine_answers_the_same_on_every_backend(
    kind: str, make_any: Callable[[str], Any]
) -> None:
    if "engine" not in _REFERENCE:  # SQLite's answers, once for both backends
        _REFERENCE["engine"] = _normal(_engine_answers(make_any("sqlite")))
    reference = _REFERENCE["engine"]
    got = _normal(_engine_answers(make_any(kind)))
    for i, (a, b) in enumerate(zip(got, reference, strict=True)):
        assert a == b, f"answer {i} differs"
    assert reference[0][0] == 3000  # the sample log, whole
    assert len(reference[3]["tasks"]) > 0
    assert {h["band"] for h in reference[-4]} == {"healthy"}  # judged, not "unknown"


@pytest.mark.parametrize("kind", BACKENDS)
def test_each_signal_counts_its_reads_the_fetches_it_caused_and_their_changes(
    kind: str, make_any: Callable[[str], Any]
) -> None:
    store: Any = make_any(kind)
    store_batch(
        store,
        [
            obs(A, T0, record={"p": 1}, bytes_received=1000),
            obs(A, T0 + H, record={"p": 2}, bytes_received=1000, signal="sitemap"),
            obs(B, T0, record={"p": 1}, bytes_received=4000, signal="listing", signal_read=True),
            obs(
                B, T0 + H, record={"p": 1}, bytes_received=4000, signal="listing", signal_read=True
            ),
        ],
    )
    store_batch(store, [obs(A, T0 + H, record={"p": 2}, signal="sitemap")])  # a duplicate
    store.add_signal_spend([("shop.example", "sitemap", 2, 300.0, 2.0, 0, 0.0, 0.0, 0)])
    assert store.signal_spend() == [
        ("shop.example", "listing", 2, 8000.0, 2.0, 0, 0.0, 0.0, 0),
        ("shop.example", "schedule", 0, 0.0, 0.0, 1, 1000.0, 1.0, 0),
        ("shop.example", "sitemap", 2, 300.0, 2.0, 1, 1000.0, 1.0, 1),
    ]
    store.set_listing_left([(A, "shop.example", T0), (B, "shop.example", T0)])
    store.set_listing_left([(B, "shop.example", None)])  # listed again
    assert store.listing_left() == {A: ("shop.example", T0)}

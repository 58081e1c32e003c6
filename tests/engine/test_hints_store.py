"""Cheap signals in the store and the engine: hints kept, judged against the
revisits, and acted on by the plan only once trusted."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recrawl.config import Reserves, Settings
from recrawl.engine.engine import HINT_TRUST_DAYS, Engine
from recrawl.engine.ingest import IngestReport, ingest_lines
from recrawl.engine.pipeline import prune_log
from recrawl.estimate.hints import (
    HINT_LAG_DEFAULT_S,
    Hint,
    HintVerdict,
    SourceTrust,
    trusted_lags,
)
from recrawl.estimate.pagestate import PageState
from recrawl.estimate.rates import DEFAULT_HALF_LIFE_DAYS, raw_rates, update_evidence
from recrawl.observe.observation import parse_timestamp
from recrawl.store import HintResult, SQLiteStore, SQLStore

DAY = 86_400.0
T0 = 1_700_000_000.0
A = "https://a.example/p/1"
B = "https://a.example/p/2"

MakeStore = Callable[[], SQLStore]


def log_rows(store: SQLStore) -> int:
    return int(store.execute("SELECT count(*) FROM hint_log")[0][0])


def latest(store: SQLStore) -> dict[tuple[str, str], tuple[float, float, float]]:
    """``(url, source) → (lastmod, first_seen, last_seen)`` of every latest hint."""
    rows = store.execute(
        "SELECT p.url, h.source, h.lastmod, h.first_seen, h.last_seen "
        "FROM hints h JOIN pages p ON p.id = h.page"
    )
    return {(u, s): (lm, f, ls) for u, s, lm, f, ls in rows}


def test_hints_round_trip(store: SQLStore) -> None:
    store.add_urls([(A, "a.example", "page", 1.0), (B, "a.example", "page", 1.0)], T0)
    got = store.ingest_hints(
        [
            Hint(A, T0 + DAY, "sitemap", T0 - 5 * DAY),
            Hint(B, T0 + DAY, "sitemap", T0 - 3 * DAY),
            Hint(A, T0 + DAY, "listing", T0 - 1 * DAY),
        ]
    )
    assert (got.stored, got.unchanged, got.unknown, got.added_urls) == (3, 0, 0, 0)
    # a day later A moved on the sitemap; B did not
    got = store.ingest_hints(
        [
            Hint(A, T0 + 2 * DAY, "sitemap", T0 + 1.5 * DAY),
            Hint(B, T0 + 2 * DAY, "sitemap", T0 - 3 * DAY),
        ]
    )
    assert (got.stored, got.unchanged) == (1, 1)
    assert latest(store) == {
        (A, "sitemap"): (T0 + 1.5 * DAY, T0 + DAY, T0 + 2 * DAY),
        (B, "sitemap"): (T0 - 3 * DAY, T0 + DAY, T0 + 2 * DAY),
        (A, "listing"): (T0 - DAY, T0 + DAY, T0 + DAY),
    }
    ids = dict(zip(store.page_columns()["url"], store.page_columns()["id"].tolist(), strict=True))
    state = store.hint_state()
    assert sorted(state.sources) == ["listing", "sitemap"]
    assert len(state) == 3 and state.page.tolist() == sorted(state.page.tolist())
    row = {
        (int(p), state.sources[int(s)]): (lm, ls)
        for p, s, lm, ls in zip(
            state.page, state.source, state.lastmod, state.last_seen, strict=True
        )
    }
    assert row[(ids[A], "sitemap")] == (T0 + 1.5 * DAY, T0 + 2 * DAY)
    log = store.hint_log()
    entries = sorted(
        (int(p), log.sources[int(s)], lm, f)
        for p, s, lm, f in zip(log.page, log.source, log.lastmod, log.first_seen, strict=True)
    )
    assert entries == sorted(
        [
            (ids[A], "sitemap", T0 - 5 * DAY, T0 + DAY),
            (ids[A], "sitemap", T0 + 1.5 * DAY, T0 + 2 * DAY),
            (ids[B], "sitemap", T0 - 3 * DAY, T0 + DAY),
            (ids[A], "listing", T0 - DAY, T0 + DAY),
        ]
    )
    assert np.isnan(log.last_seen).all()
    assert len(store.hint_log(T0 - 2 * DAY)) == 2  # lastmods after that time only
    by_source = {s["source"]: s for s in store.hint_sources()}
    assert by_source["sitemap"] == {
        "source": "sitemap", "pages": 2, "lastmods": 3, "first_seen": T0 + DAY,
        "last_seen": T0 + 2 * DAY,
    }  # fmt: skip
    # an older read arriving late: the latest stays, the source listed the page earlier
    got = store.ingest_hints([Hint(A, T0, "sitemap", T0 - 6 * DAY)])
    assert got.stored == 1
    assert latest(store)[(A, "sitemap")] == (T0 + 1.5 * DAY, T0, T0 + 2 * DAY)
    assert log_rows(store) == 5


def test_an_unchanged_sitemap_read_again_adds_no_log_rows(store: SQLStore) -> None:
    urls = [f"https://s.example/p/{i}" for i in range(2000)]
    store.add_urls([(u, "s.example", "page", 1.0) for u in urls], T0)

    def read(at: float) -> list[Hint]:
        return [Hint(u, at, "sitemap", T0 - i * 60.0) for i, u in enumerate(urls)]

    first = store.ingest_hints(read(T0 + DAY), batch_size=700)
    assert (first.stored, first.unchanged) == (2000, 0)
    assert log_rows(store) == 2000
    again = store.ingest_hints(read(T0 + 2 * DAY), batch_size=700)
    assert (again.stored, again.unchanged, again.unknown) == (0, 2000, 0)
    assert log_rows(store) == 2000
    assert {v[2] for v in latest(store).values()} == {T0 + 2 * DAY}  # last_seen moved
    assert {v[1] for v in latest(store).values()} == {T0 + DAY}
    # the same read once more writes nothing at all
    version = store.hints_version()
    assert store.ingest_hints(read(T0 + 2 * DAY)).unchanged == 2000
    assert store.hints_version() == version


def test_hints_for_unknown_urls_are_skipped_or_added(make_store: MakeStore) -> None:
    store = make_store()
    store.add_urls([(A, "a.example", "page", 1.0)], T0)
    hints = [
        Hint(A, T0 + DAY, "sitemap", T0),
        Hint("https://b.example:8080/new", T0 + DAY, "sitemap", T0),
        Hint("https://b.example:8080/new", T0 + 2 * DAY, "sitemap", T0 + DAY),
    ]
    got = store.ingest_hints(hints)
    assert (got.stored, got.unknown, got.added_urls) == (1, 2, 0)
    assert len(store.page_columns()["url"]) == 1 and len(store.hint_state()) == 1

    version = store.version()
    got = store.ingest_hints(hints, add_urls=True)
    assert (got.stored, got.unchanged, got.unknown, got.added_urls) == (2, 1, 0, 1)
    assert store.version() > version  # planners see a new URL
    page = store.page("https://b.example:8080/new")
    assert page is not None
    assert (page.site, page.page_type, page.value, page.first_seen) == (
        "b.example", "page", 1.0, T0 + DAY,
    )  # fmt: skip
    assert page.last_fetch is None  # waiting for discovery
    assert latest(store)[("https://b.example:8080/new", "sitemap")] == (
        T0 + DAY, T0 + DAY, T0 + 2 * DAY,
    )  # fmt: skip
    # removing a page removes its hints
    assert store.remove_urls(["https://b.example:8080/new"]) == 1
    assert len(store.hint_state()) == 1 and log_rows(store) == 1


def test_an_older_store_gains_the_hint_tables_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as db:  # as a store written before hints existed
        db.execute("DROP TABLE hints")
        db.execute("DROP TABLE hint_log")
    with SQLiteStore(path) as store:
        store.add_urls([(A, "a.example", "page", 1.0)], T0)
        assert store.ingest_hints([Hint(A, T0, "sitemap", T0)]).stored == 1
        assert store.hints_version() == 1


# -- a crawl with a sitemap ---------------------------------------------------------------------

PAGES = 120
DAYS = 120


def crawl(*, seed: int = 0) -> tuple[list[dict[str, object]], list[np.ndarray]]:
    """Fetch logs of Poisson pages on two sites (rates from once in 60 days to
    once in 3), revisited every 2 to 12 days, and each page's change times."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, object]] = []
    changes: list[np.ndarray] = []
    for i in range(PAGES):
        rate = math.exp(rng.uniform(math.log(1 / 60), math.log(1 / 3)))
        ch = np.sort(T0 + rng.uniform(0, DAYS * DAY, rng.poisson(rate * DAYS)))
        changes.append(ch)
        t = T0 + rng.uniform(0, 2) * DAY
        while t < T0 + DAYS * DAY:
            rows.append(
                {"url": f"https://{'ab'[i % 2]}.example/p/{i}", "fetched_at": t, "status": 200,
                 "record_hash": f"v{int(np.searchsorted(ch, t, side='right'))}"}
            )  # fmt: skip
            t += rng.uniform(2, 12) * DAY
    rows.sort(key=lambda r: float(str(r["fetched_at"])))
    return rows, changes


def sitemap_reads(changes: list[np.ndarray], kind: str) -> list[Hint]:
    """A sitemap read daily: ``honest`` gives each page's last change (before
    the first, a day before the crawl began), ``silent`` always that first date."""
    out = []
    for d in range(1, DAYS + 1):
        at = T0 + d * DAY
        for i, ch in enumerate(changes):
            k = int(np.searchsorted(ch, at, side="right"))
            lastmod = ch[k - 1] if kind == "honest" and k else T0 - DAY
            out.append(Hint(f"https://{'ab'[i % 2]}.example/p/{i}", at, "sitemap", float(lastmod)))
    return out


NOW = T0 + DAYS * DAY + 600.0
SETTINGS = Settings(reserves=Reserves(discovery=0, reestimate=0, verify=0), budget_per_day=240)


def crawled_store(make_store: MakeStore) -> tuple[SQLStore, list[np.ndarray]]:
    store = make_store()
    rows, changes = crawl()
    ingest_lines(store, (json.dumps(r) + "\n" for r in rows))
    return store, changes


def plan_urls(engine: Engine, budget: float) -> list[str]:
    return [t["url"] for t in engine.plan(budget=budget, now=NOW).tasks]


def stale_pages(store: SQLStore, changes: list[np.ndarray]) -> set[str]:
    """Pages that changed after their last fetch, before the last sitemap read."""
    out = set()
    for i, ch in enumerate(changes):
        url = f"https://{'ab'[i % 2]}.example/p/{i}"
        page = store.page(url)
        assert page is not None and page.last_ok is not None
        if np.any((ch > page.last_ok) & (ch <= T0 + DAYS * DAY)):
            out.add(url)
    return out


def test_an_honest_sitemap_is_trusted_and_the_plan_follows_it(make_store: MakeStore) -> None:
    store, changes = crawled_store(make_store)
    engine = Engine(store, SETTINGS)
    assert engine.hint_trust() == []  # no hints: nothing to judge
    blind = plan_urls(engine, 10)
    stale = stale_pages(store, changes)
    assert len(stale) > 20

    got = engine.ingest_hints(sitemap_reads(changes, "honest"))
    assert got.stored >= PAGES and got.unknown == 0
    trust = engine.hint_trust()
    assert [(t.site, t.source) for t in trust] == [
        ("a.example", "sitemap"),
        ("b.example", "sitemap"),
    ]
    for t in trust:
        assert t.verdict == "trusted", t.to_dict()
        assert t.recall > 0.95 and t.precision > 0.95 and t.changed >= 10

    # the pages known to be stale go first; those vouched for wait
    plan = engine.plan(budget=10, now=NOW)
    urls = [t["url"] for t in plan.tasks]
    assert len(urls) == 10 and set(urls) <= stale
    assert all(t["expected_gain"] > 0 for t in plan.tasks)
    vouched = [u for u in blind if u not in stale]
    assert vouched, "the blind plan should hold pages the sitemap vouches for"
    assert not set(vouched) & set(urls)

    # with budget to spare, no page the sitemap vouches for is fetched (under
    # complete observation it needs no visit of its own); a new lastmod after
    # a page's last fetch sends it to the front at once
    wider = set(plan_urls(engine, len(stale) + 1))
    assert stale == wider
    calm = sorted(u for u in store.page_columns()["url"] if u not in wider)[0]
    engine.ingest_hints([Hint(calm, NOW - 60.0, "sitemap", NOW - 300.0)])
    assert set(plan_urls(engine, len(stale) + 1)) == stale | {calm}


def test_a_silent_sitemap_is_not_trusted_and_changes_nothing(make_store: MakeStore) -> None:
    store, changes = crawled_store(make_store)
    engine = Engine(store, SETTINGS)
    before = engine.plan(budget=10, now=NOW).tasks
    engine.ingest_hints(sitemap_reads(changes, "silent"))
    trust = engine.hint_trust()
    assert trust and all(t.verdict == "not trusted" and t.moved == 0 for t in trust)
    assert engine.plan(budget=10, now=NOW).tasks == before
    pages, _ = engine.page_arrays(NOW)
    assert pages.checked_at is None and pages.known_stale is None


def test_the_trust_is_judged_at_most_hourly_and_new_hints_act_at_once(
    make_store: MakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, changes = crawled_store(make_store)
    engine = Engine(store, SETTINGS)
    calls: list[int] = []
    judge = engine.hint_trust

    def counted(**kw: Any) -> list[SourceTrust]:
        calls.append(1)
        return judge(**kw)

    monkeypatch.setattr(engine, "hint_trust", counted)
    engine.plan(budget=10, now=NOW)
    assert calls == []  # no hints: not even judged
    engine.ingest_hints(sitemap_reads(changes, "honest"))
    for k in range(3):
        engine.plan(budget=10, now=NOW + k)
    assert len(calls) == 1
    engine.plan(budget=10, now=NOW + 3600)
    assert len(calls) == 2
    # new hints within the hour: not judged again (it replays the log: seconds
    # on a large store, and a sitemap may come every few minutes), but used
    engine.ingest_hints([Hint("https://a.example/p/0", NOW, "feed", NOW - 10)])
    pages, _ = engine.page_arrays(NOW + 3601)
    assert len(calls) == 2
    assert pages.checked_at is not None
    engine.plan(budget=10, now=NOW + 7200)
    assert len(calls) == 3


def test_prune_keeps_the_hint_log_revisits_can_still_use(make_store: MakeStore) -> None:
    store, changes = crawled_store(make_store)
    engine = Engine(store, SETTINGS)
    engine.ingest_hints(sitemap_reads(changes, "honest"))
    before = {(t.site, t.source): t for t in engine.hint_trust(days=30)}
    rows = log_rows(store)
    state = latest(store)
    report = prune_log(store, T0 + 60 * DAY)
    assert 0 < report.hint_log_removed < rows
    assert log_rows(store) == rows - report.hint_log_removed
    assert latest(store) == state  # the latest hint of every page stays
    after = {(t.site, t.source): t for t in engine.hint_trust(days=30)}
    assert after == before  # the revisits left in the log are judged as before


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from([A, B, "https://c.example/unknown"]),
            st.integers(0, 6),  # seen_at, days
            st.sampled_from(["sitemap", "feed"]),
            st.integers(0, 3),  # lastmod, days
        ),
        max_size=30,
    ),
    st.integers(1, 8),
)
def test_hints_in_any_order_and_batches_keep_the_latest_and_each_first_sighting(
    raw: list[tuple[str, int, str, int]], batch: int
) -> None:
    """Whatever the order and the batches: per page and source, the lastmod of
    the latest read (the last given among reads at the same time), the first
    and last reads; per lastmod, its first read."""
    hints = [Hint(u, T0 + t * DAY, s, T0 + m * DAY) for u, t, s, m in raw]
    with SQLiteStore(":memory:") as store:
        store.add_urls([(A, "a.example", "page", 1.0), (B, "a.example", "page", 1.0)], T0)
        got = store.ingest_hints(hints, batch_size=batch)
        known = [h for h in hints if h.url != "https://c.example/unknown"]
        assert got.unknown == len(hints) - len(known)
        assert got.stored + got.unchanged == len(known)
        want: dict[tuple[str, str], tuple[float, float, float]] = {}
        firsts: dict[tuple[str, str, float], float] = {}
        for h in known:
            key = (h.url, h.source)
            lm, f, last = want.get(key, (h.lastmod, h.seen_at, h.seen_at))
            if h.seen_at >= last:
                lm, last = h.lastmod, h.seen_at
            want[key] = (lm, min(f, h.seen_at), last)
            k = (h.url, h.source, h.lastmod)
            firsts[k] = min(firsts.get(k, h.seen_at), h.seen_at)
        assert latest(store) == want
        rows = store.execute(
            "SELECT p.url, l.source, l.lastmod, l.first_seen "
            "FROM hint_log l JOIN pages p ON p.id = l.page"
        )
        assert {(u, s, lm): f for u, s, lm, f in rows} == firsts
        # when the current lastmod was first seen: its first sighting in the log
        seen = store.execute(
            "SELECT p.url, h.source, h.lastmod_seen FROM hints h JOIN pages p ON p.id = h.page"
        )
        assert {(u, s): f for u, s, f in seen} == {
            (u, s): firsts[(u, s, lm)] for (u, s), (lm, _, _) in want.items()
        }


def _fetch(store: SQLStore, url: str, at: float, version: str) -> None:
    row = {"url": url, "fetched_at": at, "status": 200, "record_hash": version}
    ingest_lines(store, [json.dumps(row) + "\n"])


def _known_stale(engine: Engine, url: str, now: float) -> bool:
    pages, cols = engine.page_arrays(now)
    assert pages.known_stale is not None
    return bool(pages.known_stale[list(cols["url"]).index(url)])


def test_a_lastmod_listed_before_the_fetch_is_stale_only_until_the_fetch(
    make_store: MakeStore,
) -> None:
    """A date-only lastmod (its last second) or one in the future, listed before
    the page's fetch, is what the fetch got: not stale again every plan."""
    store, changes = crawled_store(make_store)
    engine = Engine(store, SETTINGS)
    engine.ingest_hints(sitemap_reads(changes, "honest"))
    assert all(t.changes for t in engine.hint_trust())
    day = (NOW // DAY + 1) * DAY  # the next midnight UTC
    dated, future = "https://a.example/p/0", "https://b.example/p/1"
    h = 3600.0
    engine.ingest_hints(
        [
            Hint(dated, day + 9.5 * h, "sitemap", day + DAY - 1.0),  # "YYYY-MM-DD", read 09:30
            Hint(future, day + 9.5 * h, "sitemap", 4_070_908_800.0),  # 2099-01-01
        ]
    )
    assert _known_stale(engine, dated, day + 9.75 * h)
    assert _known_stale(engine, future, day + 9.75 * h)
    _fetch(store, dated, day + 10 * h, "fetched-at-ten")
    _fetch(store, future, day + 10 * h, "fetched-at-ten")
    for hour in range(11, 24):
        if hour == 13:  # the sitemap read again, unchanged: still what the fetch got
            engine.ingest_hints(
                [
                    Hint(dated, day + 12.5 * h, "sitemap", day + DAY - 1.0),
                    Hint(future, day + 12.5 * h, "sitemap", 4_070_908_800.0),
                ]
            )
        assert not _known_stale(engine, dated, day + hour * h), hour
        assert not _known_stale(engine, future, day + hour * h), hour
    # a lastmod first listed after the fetch is stale again
    engine.ingest_hints([Hint(dated, day + 23.5 * h, "sitemap", day + 2 * DAY - 1.0)])
    assert _known_stale(engine, dated, day + 23.75 * h)


def test_hints_seen_after_the_engine_clock_are_refused(store: SQLStore) -> None:
    store.add_urls([(A, "a.example", "page", 1.0), (B, "a.example", "page", 1.0)], T0)
    engine = Engine(store, clock=lambda: T0 + DAY)
    later = parse_timestamp("2150-01-01T00:00:00Z")
    batches: list[HintResult] = []
    got = engine.ingest_hints(
        [
            Hint(A, later, "sitemap", T0),
            Hint(B, T0 + DAY + 299.0, "sitemap", T0),  # a clock a little ahead: kept
            Hint(A, T0 + DAY + 301.0, "feed", T0),
        ],
        on_batch=batches.append,
    )
    assert (got.stored, got.future) == (1, 2)
    assert batches and batches[-1].future == 2
    assert set(latest(store)) == {(B, "sitemap")}
    assert log_rows(store) == 1


def regenerated_reads(changes: list[np.ndarray], every_days: int) -> list[Hint]:
    """A sitemap read daily but regenerated only every ``every_days`` days: each
    read gives each page's last change before the latest regeneration."""
    out = []
    for d in range(1, DAYS + 1):
        made = T0 + (d // every_days) * every_days * DAY
        for i, ch in enumerate(changes):
            k = int(np.searchsorted(ch, made, side="right"))
            lastmod = ch[k - 1] if k else T0 - DAY
            url = f"https://{'ab'[i % 2]}.example/p/{i}"
            out.append(Hint(url, T0 + d * DAY, "sitemap", float(lastmod)))
    return out


def test_a_sitemap_regenerated_every_three_days_vouches_until_three_days_before_its_read(
    make_store: MakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, changes = crawled_store(make_store)
    engine = Engine(store, SETTINGS)
    engine.ingest_hints(regenerated_reads(changes, 3))
    lags = engine.hint_lags()
    assert set(lags) == {("a.example", "sitemap"), ("b.example", "sitemap")}
    assert all(2.2 * DAY < v < 3.0 * DAY for v in lags.values()), lags
    # trusted (as if it proved right), it vouches only until a lag before its read
    trusted = [
        SourceTrust(s, "sitemap", 50, 20, 20, 20, quiet=True, changes=True)
        for s in ("a.example", "b.example")
    ]
    monkeypatch.setattr(engine, "hint_trust", lambda **kw: trusted)
    pages, cols = engine.page_arrays(NOW)
    assert pages.checked_at is not None
    vouched = ~np.isnan(pages.checked_at)
    assert vouched.sum() > 10
    last_read = T0 + DAYS * DAY
    assert np.all(pages.checked_at[vouched] <= last_read - 2.2 * DAY)
    assert np.all(pages.checked_at[vouched] > cols["last_ok"][vouched])


def test_a_daily_honest_sitemap_lags_less_than_a_day(make_store: MakeStore) -> None:
    store, changes = crawled_store(make_store)
    engine = Engine(store, SETTINGS)
    engine.ingest_hints(sitemap_reads(changes, "honest"))
    lags = engine.hint_lags()
    assert lags and all(0.5 * DAY < v < DAY for v in lags.values()), lags
    # a source with too few moves to measure: one day
    engine.ingest_hints([Hint("https://a.example/p/0", NOW, "feed", NOW - 10)])
    assert engine.hint_lags()[("a.example", "feed")] == HINT_LAG_DEFAULT_S


def test_a_second_engine_within_the_hour_reuses_the_verdict(
    connect: Callable[[], SQLStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`recrawl plan` run again (a new Engine, another connection) within the hour
    does not replay the log to judge the sources again."""
    first = connect()
    rows, changes = crawl()
    ingest_lines(first, (json.dumps(r) + "\n" for r in rows))
    one = Engine(first, SETTINGS)
    one.ingest_hints(sitemap_reads(changes, "honest"))
    plan = plan_urls(one, 10)
    calls: list[str] = []

    def engine_on(store: SQLStore) -> Engine:
        e = Engine(store, SETTINGS)
        judge, lags = e.hint_trust, e.hint_lags

        def trust(**kw: Any) -> list[SourceTrust]:
            calls.append("trust")
            return judge(**kw)

        def lag(**kw: Any) -> dict[tuple[str, str], float]:
            calls.append("lags")
            return lags(**kw)

        monkeypatch.setattr(e, "hint_trust", trust)
        monkeypatch.setattr(e, "hint_lags", lag)
        return e

    two = engine_on(connect())
    assert plan_urls(two, 10) == plan
    assert calls == []
    three = engine_on(connect())
    three.plan(budget=10, now=NOW + 3600)
    assert calls == ["trust", "lags"]
    engine_on(connect()).plan(budget=10, now=NOW + 3660)
    assert calls == ["trust", "lags"]


# -- a fetch made on a trusted move: unchanged until the move, changed after ---------------------


def _fetched(store: SQLStore, url: str, at: float, version: str) -> IngestReport:
    row = {"url": url, "fetched_at": at, "status": 200, "record_hash": version}
    return ingest_lines(store, [json.dumps(row) + "\n"])


def _ev(page: PageState | None) -> tuple[float, float, float, float]:
    assert page is not None
    return (page.ev_nc, page.ev_tc, page.ev_nu, page.ev_tu)


def _unmoved_page(store: SQLStore) -> tuple[str, float]:
    """A page of a.example no sitemap row was first seen for after its last fetch
    (the next move will be the source's first after it), and that fetch."""
    rows = store.execute(
        "SELECT p.url, p.last_ok, max(l.first_seen) FROM pages p "
        "JOIN hint_log l ON l.page = p.id WHERE p.site = 'a.example' "
        "GROUP BY p.url, p.last_ok ORDER BY p.url"
    )
    for url, last_ok, seen in rows:
        if seen < last_ok < NOW - 2 * DAY:
            return str(url), float(last_ok)
    raise AssertionError("no page without a sitemap move since its last fetch")


def _judged(store: SQLStore) -> float:
    """Judge the honest sitemap on ``store`` as the plan does (the verdict kept in
    meta); its lag on a.example, trusted both ways."""
    engine = Engine(store, SETTINGS)
    trust = {(t.site, t.source): t for t in engine.hint_trust()}
    a = trust["a.example", "sitemap"]
    assert a.quiet and a.changes, a.to_dict()
    engine.plan(budget=10, now=NOW)  # judges the sources and keeps the verdict
    raw = store.hint_verdict()
    assert raw is not None
    lags = trusted_lags(raw)
    assert ("a.example", "sitemap") in lags
    # the record the next ingest and the next process read back
    kept = HintVerdict.from_json(raw)
    assert kept.hour == int(NOW // 3600) and kept.days == HINT_TRUST_DAYS
    assert kept.hints_version == store.hints_version()
    assert {(t.site, t.source): t for t in kept.trust}["a.example", "sitemap"] == a
    assert kept.trusted_lags() == lags
    return lags["a.example", "sitemap"]


def test_a_fetch_made_on_a_trusted_move_counts_unchanged_until_the_move(
    make_store: MakeStore,
) -> None:
    """Fetched because the trusted sitemap moved, a page found changed: its
    evidence gains an unchanged stretch up to the move's first sighting less
    the lag, and a changed interval of that lag and six hours, not the whole
    revisit. With no verdict kept, the same report is one changed interval, as
    before. (120 days of revisits, so that the engine trusts the sitemap both
    ways.)"""
    judged, changes = crawled_store(make_store)
    bare, _ = crawled_store(make_store)  # the same crawl and sitemap, never judged
    for s in (judged, bare):
        Engine(s, SETTINGS).ingest_hints(sitemap_reads(changes, "honest"))
    lag = _judged(judged)
    assert 0 < lag < DAY
    assert bare.hint_verdict() is None
    url, prev = _unmoved_page(judged)
    assert _unmoved_page(bare) == (url, prev)
    before = _ev(judged.page(url))
    assert _ev(bare.page(url)) == before

    seen = NOW + 3 * DAY  # the sitemap first gives a new lastmod three days on
    at = seen + 0.25 * DAY  # and the page is fetched six hours later: changed
    for s in (judged, bare):
        s.ingest_hints([Hint(url, seen, "sitemap", seen - 0.4 * DAY)])
        assert _fetched(s, url, at, "after-the-move").outcomes == {"changed": 1}
    q = seen - lag
    assert prev < q < at
    hl = DEFAULT_HALF_LIFE_DAYS
    after, plain = _ev(judged.page(url)), _ev(bare.page(url))
    split = update_evidence(*before, (q - prev) / DAY, False)
    assert after == pytest.approx(update_evidence(*split, (at - q) / DAY, True))
    assert plain == pytest.approx(update_evidence(*before, (at - prev) / DAY, True))
    # as a user reads it: beyond the decay of what was there, one more unchanged
    # interval of (q - prev) (decayed over the hours after q) and a changed one
    # of (at - q): six hours plus the lag
    d = 2.0 ** (-(at - prev) / DAY / hl)
    d_after_q = 2.0 ** (-(at - q) / DAY / hl)
    assert after[0] == pytest.approx(before[0] * d + 1.0)
    assert after[2] == pytest.approx(before[2] * d + d_after_q)
    assert after[1] - before[1] * d == pytest.approx((at - q) / DAY)
    assert at - q < 1.5 * DAY and at - q < (q - prev) / 3
    assert after[3] - before[3] * d == pytest.approx((q - prev) / DAY * d_after_q)
    assert plain[1] - before[1] * d == pytest.approx((at - prev) / DAY)
    assert plain[2] == pytest.approx(before[2] * d) and plain[3] == pytest.approx(before[3] * d)
    # the page's estimated change rate comes out lower
    assert float(raw_rates(*after)) < float(raw_rates(*plain))


def test_a_report_arriving_late_refolds_the_page_with_the_verdict_as_in_order(
    make_store: MakeStore,
) -> None:
    """Two fetches on two trusted moves, reported late-first: the page is
    re-folded from its log, with the quiet stretches, and ends as when the
    reports came in order."""
    judge, changes = crawled_store(make_store)
    Engine(judge, SETTINGS).ingest_hints(sitemap_reads(changes, "honest"))
    lag = _judged(judge)
    raw = judge.hint_verdict()
    assert raw is not None
    rows, _ = crawl()
    reads = sitemap_reads(changes, "honest")

    def seeded() -> SQLStore:
        """The same crawl, with the sitemap and the verdict kept from the start."""
        s = make_store()
        s.add_urls(
            [(f"https://{'ab'[i % 2]}.example/p/{i}", f"{'ab'[i % 2]}.example", "page", 1.0)
             for i in range(PAGES)], T0 - DAY,
        )  # fmt: skip
        assert s.ingest_hints(reads).unknown == 0
        s.set_hint_verdict(raw)
        ingest_lines(s, (json.dumps(r) + "\n" for r in rows))
        return s

    in_order, late = seeded(), seeded()
    url, prev = _unmoved_page(in_order)
    seen1 = NOW + 2 * DAY
    at1 = seen1 + 0.2 * DAY
    seen2 = at1 + 3 * DAY
    at2 = seen2 + 0.3 * DAY
    for s in (in_order, late):
        s.ingest_hints(
            [Hint(url, seen1, "sitemap", seen1 - 0.5 * DAY), Hint(url, seen2, "sitemap", at1 + DAY)]
        )
    before = _ev(in_order.page(url))
    assert _ev(late.page(url)) == before

    assert _fetched(in_order, url, at1, "v1").reordered_pages == 0
    q1 = seen1 - lag
    split = update_evidence(*before, (q1 - prev) / DAY, False)
    assert _ev(in_order.page(url)) == pytest.approx(update_evidence(*split, (at1 - q1) / DAY, True))
    assert _fetched(in_order, url, at2, "v2").reordered_pages == 0

    assert _fetched(late, url, at2, "v2").reordered_pages == 0
    got = _fetched(late, url, at1, "v1")
    assert got.reordered_pages == 1 and got.stored == 1

    want, have = in_order.page(url), late.page(url)
    assert want is not None and have is not None
    for f in PageState.__dataclass_fields__:
        a, b = getattr(have, f), getattr(want, f)
        if isinstance(a, float) and isinstance(b, float):
            assert a == pytest.approx(b, rel=1e-9, abs=1e-9), f
        else:
            assert a == b, f
    assert late.outcomes(url) == in_order.outcomes(url)
    assert [o for _, o in in_order.outcomes(url)][-2:] == ["changed", "changed"]
    # the second revisit was split too: the evidence is not what the unsplit fold gives
    q2 = seen2 - lag
    assert at1 < q2 < at2
    whole = update_evidence(
        *update_evidence(*before, (at1 - prev) / DAY, True), (at2 - at1) / DAY, True
    )
    assert _ev(want)[3] > whole[3] + 3.0


def test_a_late_report_after_a_prune_refolds_as_the_whole_log_would(make_store: MakeStore) -> None:
    """A daily sitemap first lists a change made an hour before a fetch two hours
    after it: that row is no move after the fetch, and the source's next move
    ends the quiet stretch. Pruned up to that fetch (which drops the row), a
    late report re-folds the page from the checkpoint as the whole log would."""
    url = "https://a.example/p/1"
    verdict = json.dumps(
        {"hour": 0, "lags": [["a.example", "sitemap", 3600.0]], "trust": [
            {"site": "a.example", "source": "sitemap", "quiet": True, "changes": True}]}
    )  # fmt: skip
    fetches = {"first": (T0 + 0.5 * DAY, "v0"), "prev": (T0 + DAY, "v1")}
    fetches |= {"late": (T0 + 6 * DAY, "v2"), "last": (T0 + 8 * DAY, "v2")}

    def seeded(order: list[str], prune_after: int | None = None) -> SQLStore:
        s = make_store()
        s.add_urls([(url, "a.example", "page", 1.0)], T0 - DAY)
        s.ingest_hints(
            [
                Hint(url, T0, "sitemap", T0 - 10 * DAY),
                Hint(url, T0 + DAY + 7200, "sitemap", T0 + DAY - 3600),  # listed late
                Hint(url, T0 + 5 * DAY, "sitemap", T0 + 4.9 * DAY),  # the move
            ]
        )
        s.set_hint_verdict(verdict)
        for k, name in enumerate(order):
            _fetched(s, url, *fetches[name])
            if k == prune_after:
                assert prune_log(s, T0 + DAY + 1).hint_log_removed > 0
        return s

    whole = seeded(["first", "prev", "late", "last"])
    pruned = seeded(["first", "prev", "last", "late"], prune_after=2)
    assert pruned.outcomes(url) == whole.outcomes(url)[2:]
    assert _ev(pruned.page(url)) == pytest.approx(_ev(whole.page(url)))


def test_a_source_that_first_listed_the_page_after_its_fetch_gives_no_quiet_stretch(
    make_store: MakeStore,
) -> None:
    """A sitemap trusted both ways that first lists a page on day 20 (its lastmod: day
    2) never showed it unchanged since the fetch on day 0; listed since day 0 but
    unread until day 20, it vouches only until its lastmod, day 2."""
    url = "https://a.example/p/1"
    verdict = json.dumps(
        {"hour": 0, "lags": [["a.example", "sitemap", 3600.0]], "trust": [
            {"site": "a.example", "source": "sitemap", "quiet": True, "changes": True}]}
    )  # fmt: skip
    got = {}
    for name, reads in (
        ("late", [Hint(url, T0 + 20 * DAY, "sitemap", T0 + 2 * DAY)]),
        ("unread", [Hint(url, T0 - DAY, "sitemap", T0 - 30 * DAY),
                    Hint(url, T0 + 20 * DAY, "sitemap", T0 + 2 * DAY)]),
    ):  # fmt: skip
        s = make_store()
        s.add_urls([(url, "a.example", "page", 1.0)], T0 - 2 * DAY)
        s.ingest_hints(reads)
        s.set_hint_verdict(verdict)
        _fetched(s, url, T0, "v0")
        _fetched(s, url, T0 + 21 * DAY, "v1")
        got[name] = _ev(s.page(url))
    assert got["late"] == pytest.approx((1.0, 21.0, 0.0, 0.0), rel=0.01)  # one changed revisit
    d = 2.0 ** (-19.0 / DEFAULT_HALF_LIFE_DAYS)  # the quiet 2 days, decayed over the next 19
    assert got["unread"] == pytest.approx((1.0, 19.0, d, 2.0 * d), rel=0.01)

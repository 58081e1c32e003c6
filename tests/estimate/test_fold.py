"""The batch fold gives exactly what applying observations one by one gives."""

from __future__ import annotations

import hashlib
import json
import math
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from recrawl.engine.ingest import ContentClassifier
from recrawl.engine.pipeline import store_batch
from recrawl.estimate.fold import PageArrays, fold_batch, new_page_row, page_from_row
from recrawl.estimate.hints import Hint, quiet_until
from recrawl.estimate.pagestate import CONTENT_OUTCOMES, PageState, apply_observation, fixed_outcome
from recrawl.estimate.rates import DEFAULT_HALF_LIFE_DAYS, fold_revisits, update_evidence
from recrawl.health.buckets import OUTCOMES
from recrawl.observe.observation import Observation
from recrawl.store import SQLiteStore


def _small_body(obs: Observation, page: PageState | None) -> str | None:
    """A stateless content check that depends on the page's state, like the real one."""
    if page is not None and page.avg_bytes and 0 < obs.bytes_received < 0.3 * page.avg_bytes:
        return "soft_block"
    return None


def _obs(i: int, page: int, t: float, kind: int, version: int, size: int) -> Observation:
    url = f"https://s{page % 2}.example/p/{page}"
    status: int | None
    error = None
    if kind == 0:
        status = None
        error = "timeout"
    else:
        status = (200, 200, 200, 304, 429, 404, 500, 200)[kind % 8]
    return Observation(
        url=url,
        fetched_at=t,
        site=f"s{page % 2}.example",
        page_type="page",
        status=status,
        error=error,
        bytes_sent=500,
        bytes_received=size if status == 200 else 300,
        latency_ms=100.0 + kind,
        route="r1" if kind % 3 else "r2",
        record_hash=f"h{version}" if status == 200 and kind != 7 else None,
        etag=f"e{version}" if kind == 7 else None,
        key=hashlib.blake2b(f"{i}".encode(), digest_size=16).digest(),
        # titles on a 2xx and a 5xx, a block-page marker or not (the content check goes first)
        title=("Just a moment..." if version == 3 else "Internal error" if version == 2 else None)
        if kind in (2, 6)
        else None,
    )


def _reference(
    observations: list[Observation], classifier: Any
) -> tuple[dict[str, PageState], dict[str, list[str]]]:
    pages: dict[str, PageState] = {}
    outcomes: dict[str, list[str]] = {}
    for o in sorted(observations, key=lambda o: o.fetched_at):
        p = pages.get(o.url)
        if p is None:
            p = pages[o.url] = PageState(
                url=o.url, site=o.site, page_type=o.page_type, first_seen=o.fetched_at
            )
        out = apply_observation(p, o, fixed_outcome(o, p, classifier))
        outcomes.setdefault(o.url, []).append(out)
    return pages, outcomes


_FIELDS = (
    "last_fetch", "last_ok", "last_change", "fingerprint", "etag", "last_modified", "fetches",
    "changes", "bytes_total", "credits_total", "avg_bytes", "ev_nc", "ev_tc", "ev_nu", "ev_tu", "ev_bins",
    "nutch_interval", "fails", "gone", "site", "page_type", "first_seen",
)  # fmt: skip


def _ingest_in_random_batches(
    store: SQLiteStore, arrival: list[Observation], rng: random.Random, classifier: Any
) -> None:
    """Ingest ``arrival`` in batches of 1 to 12 reports."""
    i = 0
    while i < len(arrival):
        k = rng.randint(1, 12)
        store_batch(store, arrival[i : i + k], classifier=classifier)
        i += k


def _assert_pages_match(
    store: SQLiteStore, want: dict[str, PageState], outcomes: dict[str, list[str]]
) -> None:
    """Every page of ``want`` as the store holds it, field by field, and its outcomes."""
    for url, ref in want.items():
        got = store.page(url)
        assert got is not None
        for f in _FIELDS:
            assert _same(getattr(got, f), getattr(ref, f)), (
                url,
                f,
                getattr(got, f),
                getattr(ref, f),
            )
        assert [o for _, o in store.outcomes(url)] == outcomes[url]


def _specs(*, pages: int, max_size: int) -> st.SearchStrategy[list[tuple[int, int, int, int]]]:
    """Fetch reports to generate: (page, kind, version, body size) each."""
    return st.lists(
        st.tuples(
            st.integers(0, pages - 1),  # page
            st.integers(0, 7),  # kind
            st.integers(0, 3),  # version
            st.sampled_from([40_000, 41_000, 5_000]),  # body size
        ),
        min_size=1,
        max_size=max_size,
    )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return bool(a == b)


@settings(max_examples=40, deadline=None)
@given(
    spec=_specs(pages=6, max_size=60),
    seed=st.integers(0, 10_000),
    use_classifier=st.sampled_from(["none", "small", "content"]),
)
def test_batched_out_of_order_ingest_equals_sequential_fold(
    tmp_path_factory: pytest.TempPathFactory,
    spec: list[tuple[int, int, int, int]],
    seed: int,
    use_classifier: str,
) -> None:
    rng = random.Random(seed)
    times = rng.sample(range(1, 10_000_000), len(spec))  # distinct times
    observations = [
        _obs(i, page, 1_700_000_000.0 + times[i], kind, version, size)
        for i, (page, kind, version, size) in enumerate(spec)
    ]
    classifier: Any = {"none": None, "small": _small_body}.get(use_classifier)
    ref_pages, ref_outcomes = _reference(
        observations, ContentClassifier(warmup=3) if use_classifier == "content" else classifier
    )
    if use_classifier == "content":  # a fresh one (it learns), used by ingest field by field
        classifier = ContentClassifier(warmup=3)

    arrival = observations[:]
    if classifier is not None:
        # Content checks judge a response against the page as known when it
        # arrives, and a rebuild reuses that verdict: compare in time order.
        arrival.sort(key=lambda o: o.fetched_at)
    else:
        rng.shuffle(arrival)  # several fetchers: reports arrive out of order, in batches
    store = SQLiteStore(tmp_path_factory.mktemp("fold") / "f.db")
    _ingest_in_random_batches(store, arrival, rng, classifier)
    _assert_pages_match(store, ref_pages, ref_outcomes)
    total = store.execute("SELECT sum(n) FROM buckets")[0][0]
    assert total == len(observations)
    # first fetches other than "new", per site (not revisits): the fetches that
    # failed before their page's first success, and that success unless "new"
    want: dict[str, int] = {}
    for url, outs in ref_outcomes.items():
        reached = [o in CONTENT_OUTCOMES for o in outs]
        before = reached.index(True) if True in reached else len(outs)
        first_not_new = before < len(outs) and outs[before] != "new"
        site = ref_pages[url].site
        want[site] = want.get(site, 0) + before + first_not_new
    failed_first = {g.site: g.outcomes["failed_first"] for g in store.group_totals()}
    assert failed_first == want
    store.close()


def test_page_cache_sees_writes_of_another_connection(tmp_path: Any) -> None:
    """Two stores on one file: each notices the other's writes to a page it has cached."""
    db = tmp_path / "two.db"
    a, b = SQLiteStore(db), SQLiteStore(db)
    seq = [_obs(i, 0, 1_700_000_000.0 + 3600 * i, 1, i, 40_000) for i in range(6)]
    store_batch(a, seq[:2])
    store_batch(b, seq[2:4])  # b learns the page from the store
    store_batch(a, seq[4:])  # a's cached state is stale: it must re-read
    ref, _ = _reference(seq, None)
    for s in (a, b):
        got = s.page(seq[0].url)
        assert got is not None
        assert got.fetches == 6
        assert got.changes == ref[seq[0].url].changes == 5
    a.close()
    b.close()


# -- a revisit vouched for by a trusted source: unchanged until its quiet point ------------------

DAY = 86_400.0
T0 = 1_700_000_000.0


def _vouch(rows: NDArray[np.intp], prev: NDArray[np.float64], at: NDArray[np.float64]) -> Any:
    """A pure ``quiet_until(rows, prev, at)``: inside the revisit for most pages
    (a fraction depending on the row and the times), outside it or NaN for the rest."""
    frac = (rows * 0.37 + prev * 1e-5 + at * 3e-6) % 1.0
    q = prev + (1.4 * frac - 0.2) * (at - prev)  # some before prev, some after at
    return np.where(rows % 5 == 4, np.nan, q)


def _evidence(p: PageState) -> tuple[float, float, float, float]:
    return (p.ev_nc, p.ev_tc, p.ev_nu, p.ev_tu)


@settings(max_examples=60, deadline=None)
@given(
    spec=_specs(pages=10, max_size=80),
    seed=st.integers(0, 10_000),
    half_life=st.sampled_from([None, 30.0, math.inf]),
)
def test_fold_with_quiet_until_equals_applying_observations_one_by_one(
    spec: list[tuple[int, int, int, int]], seed: int, half_life: float | None
) -> None:
    """fold_batch given a quiet_until callable gives what apply_observation gives,
    observation by observation, with the callable's value for each revisit."""
    rng = random.Random(seed)
    times = rng.sample(range(1, 10_000_000), len(spec))
    observations = [
        _obs(i, page, T0 + times[i], kind, version, size)
        for i, (page, kind, version, size) in enumerate(spec)
    ]
    urls = sorted({o.url for o in observations})
    row_of = {u: j for j, u in enumerate(urls)}
    first_seen = T0 - DAY
    new_rows = [new_page_row(u, u.split("/")[2], "page", first_seen) for u in urls]
    pages = PageArrays.from_rows(new_rows)
    order = sorted(range(len(observations)), key=lambda i: (row_of[observations[i].url], times[i]))
    obs = [observations[i] for i in order]
    page_index = np.array([row_of[o.url] for o in obs], dtype=np.intp)
    asked: list[tuple[int, float, float]] = []

    def vouch(rows: NDArray[np.intp], prev: NDArray[np.float64], at: NDArray[np.float64]) -> Any:
        asked.extend(zip(rows.tolist(), prev.tolist(), at.tolist(), strict=True))
        return _vouch(rows, prev, at)

    codes, _ = fold_batch(pages, page_index, obs, half_life_days=half_life, quiet_until=vouch)

    ref = {u: page_from_row(r) for u, r in zip(urls, new_rows, strict=True)}
    ref_codes: list[str] = []
    want_asked: list[tuple[int, float, float]] = []
    for o in obs:
        p = ref[o.url]
        j = row_of[o.url]
        q = None
        if p.last_ok is not None:
            q = float(_vouch(np.array([j]), np.array([p.last_ok]), np.array([o.fetched_at]))[0])
            q = None if math.isnan(q) else q
        before = p.last_ok
        out = apply_observation(
            p, o, fixed_outcome(o, p, None), half_life_days=half_life, quiet_until=q
        )
        ref_codes.append(out)
        if out == "changed" and before is not None:
            want_asked.append((j, before, o.fetched_at))
    assert [OUTCOMES[c] for c in codes.tolist()] == ref_codes
    # asked only for the revisits that found a change, with their (prev, at]
    assert sorted(asked) == sorted(want_asked)
    for u, state in zip(urls, pages.states(np.arange(len(urls))), strict=True):
        for f in _FIELDS:
            assert _same(getattr(state, f), getattr(ref[u], f)), (u, f)


def test_fold_revisits_splits_a_vouched_change_and_nothing_else() -> None:
    """Per page: a change vouched for until day 6 of (0, 8]; a change without a
    point; an unchanged revisit with a point (ignored); a point outside the
    revisit (ignored); a revisit at the instant of the last fetch (no evidence)."""
    hl = 30.0
    start = [(1.0, 4.0, 2.0, 20.0)] * 5
    nc, tc, nu, tu = ev = [np.array(c) for c in zip(*start, strict=True)]
    index = np.arange(5)
    prev = np.full(5, 10 * DAY)
    at = prev + np.array([8, 8, 8, 8, 0]) * DAY
    changed = np.array([True, True, False, True, True])
    q = prev + np.array([6, np.nan, 6, 9, 0]) * DAY
    q[4] = np.nan
    fold_revisits(nc, tc, nu, tu, index, prev, at, changed, quiet_until=q, half_life_days=hl)
    got = [tuple(float(a[i]) for a in ev) for i in range(5)]
    split = update_evidence(*start[0], 6.0, False, half_life_days=hl)
    assert got[0] == pytest.approx(update_evidence(*split, 2.0, True, half_life_days=hl))
    whole = update_evidence(*start[0], 8.0, True, half_life_days=hl)
    assert got[1] == pytest.approx(whole)
    assert got[2] == pytest.approx(update_evidence(*start[0], 8.0, False, half_life_days=hl))
    assert got[3] == pytest.approx(whole)
    assert got[4] == start[4]
    # split: one more unchanged interval of 6 days, a changed one of 2, not of 8
    assert got[0][2] > got[1][2] and got[0][3] > got[1][3]
    assert got[0][1] == pytest.approx(got[1][1] - 6.0, abs=0.5)
    # the same without any point: the unsplit fold
    nc, tc, nu, tu = ev = [np.array(c) for c in zip(*start, strict=True)]
    fold_revisits(nc, tc, nu, tu, index, prev, at, changed, half_life_days=hl)
    assert tuple(float(a[0]) for a in ev) == pytest.approx(whole)


def test_fold_revisits_at_the_same_instant_carries_no_evidence_even_when_vouched() -> None:
    nc, tc, nu, tu = ev = [np.zeros(2) for _ in range(4)]
    t = np.array([T0, T0])
    fold_revisits(
        nc, tc, nu, tu, np.array([0, 1]), t, t, np.array([True, False]), quiet_until=t.copy(),
        half_life_days=DEFAULT_HALF_LIFE_DAYS,
    )  # fmt: skip
    assert all(not a.any() for a in ev)


def _hint_log(store: SQLiteStore) -> dict[str, list[tuple[str, float, float, float]]]:
    """Each page's hint log rows ``(source, lastmod, first_seen, listed)`` (listed:
    when the source first listed the page)."""
    out: dict[str, list[tuple[str, float, float, float]]] = {}
    for url, src, lm, fs, listed in store.execute(
        "SELECT p.url, l.source, l.lastmod, l.first_seen, h.first_seen FROM hint_log l "
        "JOIN pages p ON p.id = l.page JOIN hints h ON h.page = l.page AND h.source = l.source"
    ):
        out.setdefault(url, []).append((src, lm, fs, listed))
    return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 80), hint_share=st.sampled_from([0.3, 1.0]))
def test_batched_out_of_order_ingest_with_a_kept_verdict_equals_sequential_fold(
    tmp_path_factory: pytest.TempPathFactory, seed: int, n: int, hint_share: float
) -> None:
    """With a verdict trusting sources both ways kept in the store, reports
    arriving in any order and batches (the re-fold included) give what
    apply_observation gives in time order with quiet_until read from the hint
    log of the trusted (site, source) pairs. Sitemap reads come a few days
    before fetches (``hint_share`` of them per fetch), from sources trusted both
    ways, one way only, or not at all."""
    lags = {("s0.example", "sitemap"): 0.5 * DAY, ("s0.example", "feed"): 3600.0}
    lags[("s1.example", "sitemap")] = 2 * DAY
    verdict = {
        "hour": 0,
        "trust": [
            {"site": "s0.example", "source": "sitemap", "quiet": True, "changes": True},
            {"site": "s0.example", "source": "feed", "quiet": True, "changes": True},
            {"site": "s1.example", "source": "sitemap", "quiet": True, "changes": True},
            {"site": "s1.example", "source": "feed", "quiet": True, "changes": False},
            {"site": "s0.example", "source": "listing", "quiet": False, "changes": True},
        ],
        "lags": [[a, b, v] for (a, b), v in lags.items()] + [["s1.example", "feed", 1.0]],
    }
    rng = random.Random(seed)
    times = rng.sample(range(1, 10_000_000), n)  # distinct times, 115 days
    kinds = [0, 1, 1, 1, 2, 3, 4, 5, 6, 7, 7]  # 2xx more often than not
    observations = [
        _obs(i, rng.randrange(6), T0 + times[i], rng.choice(kinds), rng.randrange(4), 40_000)
        for i in range(n)
    ]
    store = SQLiteStore(tmp_path_factory.mktemp("fold") / "f.db")
    added = T0 - DAY
    store.add_urls(
        [(f"https://s{p % 2}.example/p/{p}", f"s{p % 2}.example", "page", 1.0) for p in range(6)],
        added,
    )
    reads = [
        (rng.choice(observations), rng.choice(["sitemap", "feed", "listing"]),
         rng.uniform(0, 4) * DAY, rng.uniform(0, 3) * DAY)
        for _ in range(int(hint_share * n) + 1)
    ]  # fmt: skip
    store.ingest_hints(
        [Hint(o.url, o.fetched_at - b, src, o.fetched_at - b - m) for o, src, b, m in reads]
    )
    store.set_hint_verdict(json.dumps(verdict))
    log = _hint_log(store)

    def vouch(url: str, site: str, prev: float, at: float) -> float | None:
        rows = [r for r in log.get(url, []) if (site, r[0]) in lags]
        if not rows:
            return None
        q = quiet_until(
            np.array([0]), np.array([prev]), np.array([at]), np.zeros(len(rows), np.int64),
            np.array([r[1] for r in rows]), np.array([r[2] for r in rows]),
            np.array([lags[site, r[0]] for r in rows]), np.array([r[3] for r in rows]),
        )[0]  # fmt: skip
        return None if math.isnan(q) else float(q)

    ref: dict[str, PageState] = {}
    ref_out: dict[str, list[str]] = {}
    split = 0
    for o in sorted(observations, key=lambda o: o.fetched_at):
        p = ref.get(o.url)
        if p is None:
            p = ref[o.url] = PageState(url=o.url, site=o.site, page_type="page", first_seen=added)
        q = None if p.last_ok is None else vouch(o.url, o.site, p.last_ok, o.fetched_at)
        out = apply_observation(p, o, fixed_outcome(o, p, None), quiet_until=q)
        split += out == "changed" and q is not None
        ref_out.setdefault(o.url, []).append(out)

    arrival = observations[:]
    rng.shuffle(arrival)
    _ingest_in_random_batches(store, arrival, rng, None)
    _assert_pages_match(store, ref, ref_out)
    store.close()

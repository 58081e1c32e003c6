"""The batch fold gives exactly what applying observations one by one gives."""

from __future__ import annotations

import hashlib
import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recrawl.ingest import ContentClassifier
from recrawl.observation import Observation
from recrawl.pagestate import CONTENT_OUTCOMES, PageState, apply_observation, fixed_outcome
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
    "changes", "bytes_total", "credits_total", "avg_bytes", "ev_nc", "ev_tc", "ev_nu", "ev_tu",
    "nutch_interval", "gone", "site", "page_type", "first_seen",
)  # fmt: skip


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return bool(a == b)


@settings(max_examples=40, deadline=None)
@given(
    spec=st.lists(
        st.tuples(
            st.integers(0, 5),  # page
            st.integers(0, 7),  # kind
            st.integers(0, 3),  # version
            st.sampled_from([40_000, 41_000, 5_000]),  # body size
        ),
        min_size=1,
        max_size=60,
    ),
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
    i = 0
    while i < len(arrival):
        k = rng.randint(1, 12)
        store.ingest(arrival[i : i + k], classifier=classifier)
        i += k
    for url, ref in ref_pages.items():
        got = store.page(url)
        assert got is not None
        for f in _FIELDS:
            assert _same(getattr(got, f), getattr(ref, f)), (
                url,
                f,
                getattr(got, f),
                getattr(ref, f),
            )
        assert [o for _, o in store.outcomes(url)] == ref_outcomes[url]
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
    got = {g.site: g.outcomes["failed_first"] for g in store.group_totals()}
    assert got == want
    store.close()


def test_page_cache_sees_writes_of_another_connection(tmp_path: Any) -> None:
    """Two stores on one file: each notices the other's writes to a page it has cached."""
    db = tmp_path / "two.db"
    a, b = SQLiteStore(db), SQLiteStore(db)
    seq = [_obs(i, 0, 1_700_000_000.0 + 3600 * i, 1, i, 40_000) for i in range(6)]
    a.ingest(seq[:2])
    b.ingest(seq[2:4])  # b learns the page from the store
    a.ingest(seq[4:])  # a's cached state is stale: it must re-read
    ref, _ = _reference(seq, None)
    for s in (a, b):
        got = s.page(seq[0].url)
        assert got is not None
        assert got.fetches == 6
        assert got.changes == ref[seq[0].url].changes == 5
    a.close()
    b.close()

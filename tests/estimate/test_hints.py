"""Cheap signals: parsing hints and sitemaps, and judging a source against the revisits."""

from __future__ import annotations

import io
import json
import math
from typing import Any

import numpy as np
import pytest

from recrawl.estimate.hints import (
    HINT_LAG_DEFAULT_S,
    Hint,
    HintVerdict,
    InvalidHint,
    SourceTrust,
    parse_hint,
    parse_lastmod,
    quiet_until,
    read_hints,
    read_sitemap,
    revisit_moves,
    signal_state,
    source_trust,
    trusted_lags,
)
from recrawl.observe.observation import parse_timestamp

DAY = 86_400.0
T0 = 1_700_000_000.0


def test_a_lastmod_date_is_its_last_second_and_times_keep_their_offset() -> None:
    assert parse_lastmod("2024-05-01") == parse_timestamp("2024-05-01T23:59:59Z")
    assert parse_lastmod("2024-05-01T10:00:00Z") == parse_timestamp("2024-05-01T10:00:00+00:00")
    assert parse_lastmod("2024-05-01T10:00+02:00") == parse_timestamp("2024-05-01T08:00:00Z")
    assert parse_lastmod(1_700_000_000) == 1_700_000_000.0
    for bad in ("2024-13-01", "2024-05-01T10:00", "yesterday", None, True):
        with pytest.raises(ValueError):
            parse_lastmod(bad)


def test_a_hint_names_the_field_that_is_wrong() -> None:
    good = {"url": "HTTPS://Shop.Example/p/1", "seen_at": T0, "lastmod": T0 - 10, "source": "feed"}
    h = parse_hint(good)
    assert h == Hint("https://shop.example/p/1", T0, "feed", T0 - 10)
    cases: list[tuple[dict[str, Any], str]] = [
        ({**good, "url": "ftp://x/y"}, "url"),
        ({**good, "url": 3}, "url"),
        ({k: v for k, v in good.items() if k != "source"}, "source"),
        ({k: v for k, v in good.items() if k != "lastmod"}, "lastmod"),
        ({**good, "lastmod": "2024-05-01T10:00"}, "lastmod"),
        ({**good, "seen_at": "soon"}, "seen_at"),
    ]
    for raw, name in cases:
        with pytest.raises(InvalidHint) as err:
            parse_hint(raw, line=7)
        assert err.value.field == name and err.value.line == 7
        assert str(err.value).startswith(f"line 7: field {name!r}: ")
    # one exception tree: a bad hint is a recrawl.Error and a ValueError
    import recrawl
    from recrawl import _exceptions

    with pytest.raises(recrawl.Error):
        parse_hint(cases[0][0])
    assert issubclass(recrawl.InvalidHint, ValueError) and "InvalidHint" in _exceptions.__all__
    # defaults for a whole file: the source and when it was read
    h = parse_hint({"url": "https://a.example/", "lastmod": "2024-05-01"}, source="s", seen_at=T0)
    assert (h.source, h.seen_at) == ("s", T0)


def test_hint_lines_keep_the_good_ones_and_name_the_bad() -> None:
    lines = [
        '{"url": "https://a.example/1", "lastmod": "2024-05-01"}',
        "",
        "not json",
        '{"url": "https://a.example/2"}',
        '{"url": "https://a.example/3", "lastmod": 1700000000, "source": "listing"}',
    ]
    got = list(read_hints(lines, source="sitemap", seen_at=T0))
    assert [n for n, _ in got] == [1, 3, 4, 5]
    good = [h for _, h in got if isinstance(h, Hint)]
    assert [h.source for h in good] == ["sitemap", "listing"]
    bad = [e for _, e in got if isinstance(e, InvalidHint)]
    assert [(e.line, e.field) for e in bad] == [(3, None), (4, "lastmod")]


SITEMAP = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>https://shop.example/p/1</loc><lastmod>2024-05-01</lastmod></url>
  <url><loc>https://shop.example/p/2</loc><changefreq>daily</changefreq></url>
  <url><loc>https://shop.example/p/3</loc><lastmod>2024-05-02T08:30:00+00:00</lastmod></url>
  <url><loc>https://shop.example/p/4</loc><lastmod>last week</lastmod></url>
</urlset>
"""


def test_a_sitemap_gives_a_hint_per_dated_url() -> None:
    got = list(read_sitemap(io.BytesIO(SITEMAP), seen_at=T0))
    hints = [h for h in got if isinstance(h, Hint)]
    assert [h.url for h in hints] == ["https://shop.example/p/1", "https://shop.example/p/3"]
    assert hints[1].lastmod == parse_timestamp("2024-05-02T08:30:00Z")
    assert all(h.seen_at == T0 and h.source == "sitemap" for h in hints)
    (bad,) = [h for h in got if isinstance(h, InvalidHint)]
    assert bad.field == "lastmod" and bad.line == 4 and "https://shop.example/p/4" in str(bad)


def test_a_sitemap_index_or_another_document_is_refused_clearly() -> None:
    index = b'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"/>'
    with pytest.raises(ValueError, match="sitemap index"):
        list(read_sitemap(io.BytesIO(index), seen_at=T0))
    with pytest.raises(ValueError, match="<html>"):
        list(read_sitemap(io.BytesIO(b"<html><body/></html>"), seen_at=T0))


def test_revisit_moves_agrees_with_a_direct_count() -> None:
    rng = np.random.default_rng(3)
    pages, n_log, n_rev = 40, 600, 2000
    log_page = rng.integers(0, pages, n_log)
    log_lastmod = rng.uniform(0, 1000, n_log).round(1)
    first = np.where(rng.random(pages) < 0.8, rng.uniform(0, 300, pages), np.nan)
    last = first + rng.uniform(0, 900, pages)
    rev_page = rng.integers(0, pages, n_rev)
    prev = rng.uniform(0, 900, n_rev).round(1)
    at = prev + rng.uniform(0, 200, n_rev).round(1)
    at[:20] = prev[:20]  # an empty interval
    covered, moved = revisit_moves(rev_page, prev, at, log_page, log_lastmod, first, last)
    for i in range(n_rev):
        p = rev_page[i]
        cov = first[p] <= prev[i] and last[p] >= at[i]
        mv = bool(np.any((log_page == p) & (log_lastmod > prev[i]) & (log_lastmod <= at[i])))
        assert covered[i] == cov and moved[i] == (cov and mv), i
    empty = revisit_moves(rev_page, prev, at, log_page[:0], log_lastmod[:0], first, last)
    assert not empty[1].any()


def crawl_with_a_sitemap(
    kind: str, *, pages: int = 200, days: float = 200.0, seed: int = 0
) -> tuple[np.ndarray, ...]:
    """Pages changing as Poisson processes, revisited every 3–30 days, and a
    sitemap read daily. ``honest``: lastmod is the last change; ``silent``: it
    never moves; ``stamped``: every URL carries the read's time; ``noisy``:
    it also moves for edits the crawl does not hash (twice as many as real changes);
    ``lazy``: it misses a third of the changes."""
    rng = np.random.default_rng(seed)
    rate = np.exp(rng.uniform(math.log(1 / 120), math.log(1 / 5), pages))
    reads = T0 + DAY * np.arange(1, int(days) + 1)
    log_page: list[int] = []
    log_lastmod: list[float] = []
    rev_page: list[int] = []
    rev_prev: list[float] = []
    rev_at: list[float] = []
    rev_changed: list[bool] = []
    for p in range(pages):
        n = rng.poisson(rate[p] * days)
        changes = np.sort(T0 + rng.uniform(0, days * DAY, n))
        moves: np.ndarray = changes
        if kind == "noisy":
            moves = np.sort(np.concatenate([changes, T0 + rng.uniform(0, days * DAY, 2 * n)]))
        elif kind == "lazy":
            moves = changes[rng.random(n) < 2 / 3]
        seen: np.ndarray
        if kind == "silent" or moves.size == 0:
            seen = np.zeros(0)
        elif kind == "stamped":
            seen = reads
        else:
            idx = np.searchsorted(moves, reads, side="right") - 1
            seen = np.unique(np.where(idx >= 0, moves[np.maximum(idx, 0)], T0 - DAY))
        log_page += [p] * seen.size
        log_lastmod += seen.tolist()
        t = T0 + DAY * rng.uniform(0, 3)
        while True:
            nxt = t + DAY * rng.uniform(3, 30)
            if nxt > reads[-1]:
                break
            rev_page.append(p)
            rev_prev.append(t)
            rev_at.append(nxt)
            rev_changed.append(bool(np.any((changes > t) & (changes <= nxt))))
            t = nxt
    first = np.full(pages, T0)
    last = np.full(pages, reads[-1])
    return (
        np.array(rev_page),
        np.array(rev_prev),
        np.array(rev_at),
        np.array(rev_changed),
        np.array(log_page, dtype=np.int64),
        np.array(log_lastmod),
        first,
        last,
    )


@pytest.mark.parametrize(
    ("kind", "quiet", "changes"),
    [
        ("honest", True, True),
        ("silent", False, False),
        ("stamped", True, False),  # trusted silence, but it is never silent
        ("noisy", True, False),
        ("lazy", False, True),
    ],
)
def test_a_source_is_trusted_only_for_what_the_revisits_show_it_right_about(
    kind: str, quiet: bool, changes: bool
) -> None:
    page, prev, at, changed, lp, lm, first, last = crawl_with_a_sitemap(kind)
    covered, moved = revisit_moves(page, prev, at, lp, lm, first, last)
    site = page % 2
    (a, b) = source_trust(
        site, np.zeros_like(page), covered, moved, changed, ["a.example", "b.example"], ["sitemap"]
    )
    for t in (a, b):
        assert (t.quiet, t.changes) == (quiet, changes), t.to_dict()
        assert t.revisits == int(covered[site == ("a.example", "b.example").index(t.site)].sum())
    if kind == "honest":
        # a change overwritten by a second one before the next read is missed
        assert a.recall > 0.99 and a.precision == 1.0 and a.verdict == "trusted"
    if kind == "silent":
        assert a.moved == 0 and a.verdict == "not trusted"


def test_a_source_with_few_revisits_is_not_judged() -> None:
    page, prev, at, changed, lp, lm, first, last = crawl_with_a_sitemap("honest", pages=3, days=30)
    covered, moved = revisit_moves(page, prev, at, lp, lm, first, last)
    (t,) = source_trust(
        np.zeros_like(page), np.zeros_like(page), covered, moved, changed, ["a"], ["sitemap"]
    )
    assert t.changed < 10 and not t.quiet and t.verdict == "too few revisits to judge"


def test_the_signal_state_of_pages() -> None:
    last = np.array([100.0, 100.0, 100.0, 100.0, 100.0])
    lastmod = np.array([50.0, 150.0, 50.0, np.nan, 50.0])
    seen = np.array([200.0, 200.0, 90.0, np.nan, 200.0])
    trusted = np.array([True, True, True, True, False])
    checked, stale = signal_state(last, lastmod, seen, trusted, trusted)
    # vouched until read; stale for certain; read before the fetch: nothing new;
    # not listed; not trusted
    assert stale.tolist() == [False, True, False, False, False]
    assert np.isnan(checked[1:]).all() and checked[0] == 200.0


def test_a_lastmod_given_before_the_fetch_neither_proves_nor_vouches() -> None:
    """A date alone reads as 23:59:59: a page changed at 09:00, the sitemap read
    at 09:30 and the page fetched at 10:00 is not stale at every plan until
    midnight; nor is a page whose site's clock runs years ahead, once fetched."""
    day = parse_lastmod("2024-05-01T00:00:00Z")
    fetched = np.array([day + 10 * 3600, day + 10 * 3600])
    lastmod = np.array([parse_lastmod("2024-05-01"), parse_lastmod("2099-01-01")])
    first_given = np.array([day + 9.5 * 3600, day + 9.5 * 3600])
    for read in (day + 12 * 3600, day + 23 * 3600):
        seen = np.full(2, read)
        yes = np.ones(2, dtype=bool)
        checked, stale = signal_state(fetched, lastmod, seen, yes, yes, lastmod_seen=first_given)
        assert not stale.any() and np.isnan(checked).all()
    # the same lastmod first given after the fetch is a change the fetch missed
    _, stale = signal_state(
        fetched, lastmod, seen, yes, yes, lastmod_seen=np.full(2, day + 11 * 3600)
    )
    assert stale.all()


def test_a_vouch_runs_until_the_read_less_the_sources_delay_and_never_past_now() -> None:
    last = np.array([0.0, 0.0, 0.0])
    lastmod = np.array([-5.0, -5.0, -5.0])
    seen = np.array([100.0, 100.0, 100.0])
    yes = np.ones(3, dtype=bool)
    checked, _ = signal_state(last, lastmod, seen, yes, yes, lag=np.array([0.0, 30.0, 150.0]))
    assert checked[:2].tolist() == [100.0, 70.0] and np.isnan(checked[2])
    checked, _ = signal_state(last, lastmod, seen, yes, yes, now=40.0)
    assert checked.tolist() == [40.0, 40.0, 40.0]  # a read dated in the future


def test_a_move_proves_a_change_only_if_it_tells_more_than_the_model() -> None:
    """On a site whose pages change between almost every two revisits, a
    sitemap stamping every URL with its read time is precise (94 %), and
    tells nothing: with the model's predictions it is not trusted to prove."""
    rng = np.random.default_rng(5)
    n = 400
    predicted = rng.uniform(0.9, 0.98, n)
    changed = rng.random(n) < predicted
    moved = np.ones(n, dtype=bool)
    zeros = np.zeros(n, dtype=np.int64)
    covered = np.ones(n, dtype=bool)
    (blind,) = source_trust(zeros, zeros, covered, moved, changed, ["fast"], ["stamped"])
    assert blind.precision > 0.9 and blind.changes  # without the model: fooled
    (t,) = source_trust(
        zeros, zeros, covered, moved, changed, ["fast"], ["stamped"], predicted=predicted
    )
    assert not t.changes
    # an honest source on slower pages keeps its trust with the model
    page, prev, at, ch, lp, lm, first, last = crawl_with_a_sitemap("honest")
    cov, mv = revisit_moves(page, prev, at, lp, lm, first, last)
    z = np.zeros_like(page)
    pred = np.full(len(page), float(ch.mean()))  # a model that knows the base rate
    (h,) = source_trust(z, z, cov, mv, ch, ["a"], ["sitemap"], predicted=pred)
    assert h.changes and h.quiet


# -- quiet_until: until when a trusted source vouches a changed page was unchanged ---------------


def _quiet(
    revisits: list[tuple[int, float, float]],
    log: list[tuple[int, int, float, float, float]],
    listed: dict[tuple[int, int], float] | None = None,
) -> list[float]:
    """:func:`quiet_until` of ``revisits`` ``(page, prev, at)`` over the log rows
    ``(page, source, lastmod, first_seen, lag)``, each source listing each page
    since ``listed[page, source]`` (default: always)."""
    rp, rprev, rat = (np.array(c, dtype=float) for c in zip(*revisits, strict=True))
    cols = list(zip(*log, strict=True)) if log else [(), (), (), (), ()]
    lp, ls, lm, fs, lag = (np.array(c, dtype=float) for c in cols)
    since = listed or {}
    ld = np.array([since.get((int(p), int(s)), -math.inf) for p, s in zip(lp, ls, strict=True)])
    got = quiet_until(rp.astype(np.int64), rprev, rat, lp.astype(np.int64), lm, fs, lag, ld)
    assert got.shape == (len(revisits),)
    return [float(v) for v in got]


def _same_or_nan(got: list[float], want: list[float]) -> bool:
    return all((math.isnan(g) and math.isnan(w)) or g == w for g, w in zip(got, want, strict=True))


def test_a_move_seen_after_the_fetch_vouches_until_its_first_sighting_less_the_lag() -> None:
    # fetched at day 0; the sitemap showed lastmod day -10 until day 6, when it first
    # gave day 5.5; the lag is half a day; the page was fetched again on day 8
    log = [
        (0, 0, T0 - 10 * DAY, T0 - 9 * DAY, DAY / 2),
        (0, 0, T0 + 5.5 * DAY, T0 + 6 * DAY, DAY / 2),
    ]
    assert _quiet([(0, T0, T0 + 8 * DAY)], log) == [T0 + 5.5 * DAY]
    # a later row of the same source is not the first move after the fetch
    log.append((0, 0, T0 + 7 * DAY, T0 + 7.5 * DAY, DAY / 2))
    assert _quiet([(0, T0, T0 + 8 * DAY)], log) == [T0 + 5.5 * DAY]
    # the revisit after that one starts at day 8: no move since, by day 9
    assert _same_or_nan(_quiet([(0, T0 + 8 * DAY, T0 + 9 * DAY)], log), [math.nan])


def test_a_move_not_yet_seen_by_the_fetch_tells_nothing() -> None:
    log = [(0, 0, T0 + 5 * DAY, T0 + 6 * DAY, 3600.0)]
    # fetched again on day 5.9: the source had not moved yet (it may have missed the change)
    assert _same_or_nan(_quiet([(0, T0, T0 + 5.9 * DAY)], log), [math.nan])
    # seen exactly at the fetch: it counts, up to its lastmod (day 5), the source's word
    assert _quiet([(0, T0, T0 + 6 * DAY)], log) == [T0 + 5 * DAY]


def test_a_lastmod_before_the_fetch_first_seen_after_it_is_skipped() -> None:
    """The first row after the fetch gives a lastmod the fetch already saw (a
    source reporting late): it is no move after the fetch; the source's next
    move is (so a prune that drops the row changes nothing)."""
    log = [
        (0, 0, T0 - DAY, T0 + 2 * DAY, 3600.0),  # lastmod before the fetch, seen after
        (0, 0, T0 + 4 * DAY, T0 + 5 * DAY, 3600.0),
    ]
    assert _quiet([(0, T0, T0 + 8 * DAY)], log) == [T0 + 4 * DAY]  # its lastmod
    assert _quiet([(0, T0, T0 + 8 * DAY)], log[1:]) == [T0 + 4 * DAY]
    # alone, it tells nothing
    assert _same_or_nan(_quiet([(0, T0, T0 + 8 * DAY)], log[:1]), [math.nan])
    # a lastmod equal to the fetch time is not after it
    assert _same_or_nan(
        _quiet([(0, T0, T0 + 8 * DAY)], [(0, 0, T0, T0 + 2 * DAY, 3600.0)]), [math.nan]
    )


def test_a_lag_reaching_back_past_the_fetch_tells_nothing() -> None:
    log = [(0, 0, T0 + 0.5 * DAY, T0 + DAY, 2 * DAY)]
    assert _same_or_nan(_quiet([(0, T0, T0 + 8 * DAY)], log), [math.nan])
    # exactly at the fetch: not inside either
    log = [(0, 0, T0 + 0.5 * DAY, T0 + DAY, DAY)]
    assert _same_or_nan(_quiet([(0, T0, T0 + 8 * DAY)], log), [math.nan])
    log = [(0, 0, T0 + 0.5 * DAY, T0 + DAY, DAY - 1.0)]
    assert _quiet([(0, T0, T0 + 8 * DAY)], log) == [T0 + 1.0]


def test_of_two_sources_the_earlier_point_wins() -> None:
    log = [
        (0, 0, T0 + 3.5 * DAY, T0 + 4 * DAY, DAY),  # source 0: quiet until day 3
        (0, 1, T0 + 4.9 * DAY, T0 + 5 * DAY, 0.25 * DAY),  # source 1: until day 4.75
    ]
    # source 0 moved by day 4: the page had changed by then, whatever source 1 says
    assert _quiet([(0, T0, T0 + 8 * DAY)], log) == [T0 + 3 * DAY]
    # one source's point reaching back past the fetch: no quiet stretch at all
    log[1] = (0, 1, T0 + 0.1 * DAY, T0 + 5 * DAY, 5 * DAY)
    assert _same_or_nan(_quiet([(0, T0, T0 + 8 * DAY)], log), [math.nan])
    # one source not moved by the fetch leaves the other's
    log[1] = (0, 1, T0 + 8.5 * DAY, T0 + 9 * DAY, 0.0)
    assert _quiet([(0, T0, T0 + 8 * DAY)], log) == [T0 + 3 * DAY]


def test_rows_of_other_pages_are_ignored_and_an_empty_log_says_nothing() -> None:
    log = [
        (1, 0, T0 + 3 * DAY, T0 + 4 * DAY, DAY),
        (3, 0, T0 + 5 * DAY, T0 + 6 * DAY, DAY),
        (0, 1, T0 + 1 * DAY, T0 + 2 * DAY, DAY / 2),
    ]
    revisits = [(2, T0, T0 + 8 * DAY), (1, T0, T0 + 8 * DAY), (3, T0, T0 + 8 * DAY)]
    revisits += [(0, T0, T0 + 8 * DAY), (4, T0, T0 + 8 * DAY)]
    got = _quiet(revisits, log)
    want = [math.nan, T0 + 3 * DAY, T0 + 5 * DAY, T0 + 1 * DAY, math.nan]
    assert _same_or_nan(got, want), got
    assert all(math.isnan(v) for v in _quiet(revisits, []))
    # and no revisits: an empty answer
    empty = np.zeros(0)
    assert quiet_until(
        np.zeros(0, np.int64), empty, empty, np.array([0]), np.array([1.0]),
        np.array([2.0]), np.array([0.5]), np.array([0.0]),
    ).shape == (0,)  # fmt: skip


def test_a_source_that_listed_the_page_after_the_fetch_tells_nothing() -> None:
    # first listed on day 20 with a lastmod of day 2: it never showed the page unchanged
    log = [(0, 0, T0 + 2 * DAY, T0 + 20 * DAY, 3600.0)]
    assert _same_or_nan(_quiet([(0, T0, T0 + 21 * DAY)], log, {(0, 0): T0 + 20 * DAY}), [math.nan])
    # listed at the fetch already: quiet until its lastmod, though unread until day 20
    assert _quiet([(0, T0, T0 + 21 * DAY)], log, {(0, 0): T0}) == [T0 + 2 * DAY]


def test_quiet_until_agrees_with_a_direct_reading() -> None:
    """Random logs of three sources on 30 pages against a loop over the rows."""
    rng = np.random.default_rng(11)
    pages, n_log, n_rev = 30, 400, 3000
    lp = rng.integers(0, pages, n_log)
    ls = rng.integers(0, 3, n_log)
    fs = rng.uniform(0, 100, n_log)
    lm = fs - rng.uniform(-5, 10, n_log)  # mostly before first seen, a few after
    lag = np.array([0.5, 2.0, 6.0])[ls]
    rp = rng.integers(0, pages + 2, n_rev)  # two pages without a row
    prev = rng.uniform(-10, 100, n_rev)
    at = prev + rng.uniform(0, 30, n_rev)
    listed = rng.uniform(-20, 60, (pages, 3))[lp, ls]  # per page and source
    got = quiet_until(rp, prev, at, lp, lm, fs, lag, listed)
    nan = 0
    for i in range(n_rev):
        best = math.inf
        for k in range(n_log):  # rows first seen in the revisit, dated after its start
            # ... of a source that listed the page at its start
            moved = prev[i] < fs[k] <= at[i] and lm[k] > prev[i]
            if lp[k] == rp[i] and moved and listed[k] <= prev[i]:
                best = min(best, fs[k] - lag[k], lm[k])
        if prev[i] < best < at[i]:
            assert got[i] == best, i
        else:
            assert math.isnan(got[i]), i
            nan += 1
    assert 0 < nan < n_rev  # both cases are exercised


# -- trusted_lags: the pairs quiet_until reads ---------------------------------------------------


def _verdict(trust: list[tuple[str, str, bool, bool]], lags: list[list[Any]]) -> str:
    return json.dumps(
        {
            "hour": 1,
            "trust": [{"site": a, "source": b, "quiet": q, "changes": c} for a, b, q, c in trust],
            "lags": lags,
        }
    )


def test_a_hint_verdict_reads_back_as_it_was_kept() -> None:
    trust = (
        SourceTrust("a.example", "sitemap", 40, 12, 13, 12, quiet=True, changes=True),
        SourceTrust("b.example", "feed", 3, 1, 0, 0, quiet=False, changes=False),
    )
    v = HintVerdict(trust, {("a.example", "sitemap"): 1800.0}, hour=491_000, hints_version=7,
                    days=90.0)  # fmt: skip
    assert HintVerdict.from_json(v.to_json()) == v
    assert HintVerdict.from_dict(json.loads(v.to_json())) == v
    assert trusted_lags(v) == trusted_lags(v.to_json()) == {("a.example", "sitemap"): 1800.0}
    with pytest.raises(KeyError):
        HintVerdict.from_dict({"trust": [{"site": "a"}]})


def test_trusted_lags_keeps_only_pairs_trusted_both_ways() -> None:
    raw = _verdict(
        [
            ("a.example", "sitemap", True, True),
            ("a.example", "stamped", True, False),  # vouches only
            ("b.example", "sitemap", False, True),  # proves only
            ("c.example", "sitemap", False, False),
            ("d.example", "feed", True, True),  # no lag measured
        ],
        [["a.example", "sitemap", 1800], ["a.example", "stamped", 60], ["b.example", "sitemap", 7]],
    )
    want = {("a.example", "sitemap"): 1800.0, ("d.example", "feed"): HINT_LAG_DEFAULT_S}
    assert trusted_lags(raw) == want
    assert trusted_lags(json.loads(raw)) == want  # parsed already
    assert trusted_lags(_verdict([], [])) == {}


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "",
        "not json",
        "[1, 2]",
        "null",
        '{"trust": [{"site": "a"}]}',  # no source
        '{"trust": [{"site": "a", "source": "s", "quiet": true, "changes": true}], "lags": [[1]]}',
        '{"trust": [{"site": "a", "source": "s", "quiet": true, "changes": true}],'
        ' "lags": [["a", "s", "soon"]]}',
        '{"trust": 5}',
    ],
)
def test_an_unreadable_verdict_trusts_nothing(raw: str | None) -> None:
    assert trusted_lags(raw) == {}

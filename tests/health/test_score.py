"""Target health: the seed's reference scorer, the production scorer, review."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recrawl.health.buckets import BUCKET_SECONDS, LATENCY_BINS, OUTCOMES, percentile_from_histogram
from recrawl.health.score import (
    NOT_ENOUGH,
    BucketArrays,
    HealthState,
    Incident,
    SiteHealth,
    Window,
    action_for,
    aggregate_buckets,
    band_for,
    compute_baselines,
    evaluate_reference,
    evaluate_sites,
    p95_rows,
    penalty_matrix,
    reference_health_score,
    review,
    score_from_penalties,
)
from recrawl.sim.health import default_scenario

DAY = 86_400
T0 = 1_767_225_600  # 2026-01-01 00:00 UTC
EVAL_DAY = T0 + 16 * DAY  # baseline: days 1..14; day 15 is "the last day", excluded
OUT = {name: i for i, name in enumerate(OUTCOMES)}


# --- the seed's reference scorer ------------------------------------------------------


def test_seed_a_site_that_always_challenges_3_percent_loses_nothing_at_3_percent() -> None:
    base = Window(requests=20_000, hard_blocks=0, challenges=600, soft_blocks=0, p95_latency_ms=800)
    today = Window(requests=1_000, hard_blocks=0, challenges=30, soft_blocks=0, p95_latency_ms=800)
    assert reference_health_score(today, base) == (100, [])


def test_seed_five_requests_with_one_block_is_no_score() -> None:
    base = Window(20_000, 0, 0, 0, 800.0)
    assert reference_health_score(Window(5, 1, 0, 0, 800.0), base) == (None, [NOT_ENOUGH])
    assert reference_health_score(Window(49, 49, 0, 0, 800.0), base) == (None, [NOT_ENOUGH])
    assert reference_health_score(Window(50, 0, 0, 0, 800.0), base) == (100, [])


def test_seed_weights_caps_and_full_penalty_points() -> None:
    base = Window(10_000, 0, 0, 0, 500.0)
    # +20 points of hard blocks is the full 35; more is capped.
    assert reference_health_score(Window(100, 20, 0, 0, 500.0), base) == (65, ["hard_block"])
    assert reference_health_score(Window(100, 90, 0, 0, 500.0), base) == (65, ["hard_block"])
    # Three times the normal p95 is the full 15 for latency.
    assert reference_health_score(Window(100, 0, 0, 0, 1500.0), base) == (85, ["latency"])
    # Everything at once: 100 - 35 - 25 - 25 - 15.
    assert reference_health_score(Window(100, 30, 30, 30, 5000.0), base) == (
        0,
        ["hard_block", "challenge", "soft_block", "latency"],
    )


def test_seed_reasons_largest_penalty_first_and_only_from_one_point() -> None:
    base = Window(10_000, 0, 0, 0, 500.0)
    # challenge 10 pp -> 12.5; soft 4 pp -> 5; hard 0.5 pp -> 0.875 (below one point).
    score, reasons = reference_health_score(Window(1000, 5, 100, 40, 500.0), base)
    assert reasons == ["challenge", "soft_block"]
    assert score == round(100 - 12.5 - 5 - 0.875)


def test_seed_guards_for_empty_baselines() -> None:
    # max(1, requests) keeps an empty baseline at rate 0; max(base, 1.0) keeps latency finite.
    empty = Window(0, 0, 0, 0, 0.0)
    assert reference_health_score(Window(100, 0, 0, 0, 1.0), empty) == (100, [])
    assert reference_health_score(Window(100, 0, 0, 0, 3.0), empty) == (85, ["latency"])


windows = st.builds(
    Window,
    requests=st.integers(0, 10_000),
    hard_blocks=st.integers(0, 10_000),
    challenges=st.integers(0, 10_000),
    soft_blocks=st.integers(0, 10_000),
    p95_latency_ms=st.floats(0, 1e6, allow_nan=False),
)


@given(windows, windows)
def test_reference_score_is_within_0_100(current: Window, baseline: Window) -> None:
    score, reasons = reference_health_score(current, baseline)
    if current.requests < 50:
        assert score is None
    else:
        assert score is not None and 0 <= score <= 100
        assert set(reasons) <= {"hard_block", "challenge", "soft_block", "latency"}


@given(
    windows.filter(lambda w: w.requests >= 50),
    windows,
    st.sampled_from(["hard_blocks", "challenges", "soft_blocks", "p95_latency_ms"]),
    st.integers(1, 5_000),
)
def test_reference_score_never_rises_when_a_signal_worsens(
    current: Window, baseline: Window, field: str, more: int
) -> None:
    worse = Window(**{**vars(current), field: getattr(current, field) + more})
    before, _ = reference_health_score(current, baseline)
    after, _ = reference_health_score(worse, baseline)
    assert before is not None and after is not None
    assert after <= before


@given(st.lists(st.tuples(windows.filter(lambda w: w.requests >= 50), windows), max_size=20))
def test_vectorised_penalties_match_the_reference_exactly(
    pairs: list[tuple[Window, Window]],
) -> None:
    if not pairs:
        return

    def arrays(ws: list[Window]) -> tuple[np.ndarray, np.ndarray]:
        n = np.array([max(1, w.requests) for w in ws], dtype=np.float64)
        counts = np.array([[w.hard_blocks, w.challenges, w.soft_blocks] for w in ws], float)
        return counts / n[:, None], np.array([w.p95_latency_ms for w in ws])

    now, lat = arrays([c for c, _ in pairs])
    base, base_lat = arrays([b for _, b in pairs])
    pen = penalty_matrix(now, base, lat, base_lat)
    scores = score_from_penalties(pen)
    for k, (c, b) in enumerate(pairs):
        assert round(float(scores[k])) == reference_health_score(c, b)[0]


@settings(max_examples=200)
@given(st.lists(st.integers(0, 50), min_size=LATENCY_BINS, max_size=LATENCY_BINS))
def test_vectorised_p95_matches_buckets_percentile(counts: list[int]) -> None:
    got = p95_rows(np.array([counts], dtype=np.float64))[0]
    want = percentile_from_histogram(counts)
    if want is None:
        assert np.isnan(got)
    else:
        assert got == want


# --- bucket helpers -------------------------------------------------------------------


def rows(
    site: str,
    start: float,
    end: float,
    *,
    n: int = 60,
    hard: float = 0.0,
    challenge: float = 0.0,
    soft: float = 0.0,
    extract: float = 0.0,
    error: float = 0.0,
    lat_bin: int = 12,
    routes: tuple[str, ...] = ("pool-a/us",),
    canary_mismatch: int = 0,
) -> dict[str, list[Any]]:
    """Buckets for one site with exact per-bucket counts, every route alike."""
    out: dict[str, list[Any]] = {k: [] for k in ("site", "pt", "route", "start", "n", "o", "lat")}
    out["cm"] = []
    per = n // len(routes)
    for t in range(int(start), int(end), BUCKET_SECONDS):
        for r in routes:
            o = np.zeros(len(OUTCOMES), np.int64)
            o[OUT["hard_block"]] = round(per * hard)
            o[OUT["challenge"]] = round(per * challenge)
            o[OUT["soft_block"]] = round(per * soft)
            o[OUT["extract_failed"]] = round(per * extract)
            o[OUT["error"]] = round(per * error)
            o[OUT["unchanged"]] = per - int(o.sum())
            lat = np.zeros(LATENCY_BINS, np.int64)
            lat[lat_bin] = per
            for k, v in zip(
                ("site", "pt", "route", "start", "n", "o", "lat", "cm"),
                (site, "item", r, t, per, o, lat, canary_mismatch),
                strict=True,
            ):
                out[k].append(v)
    return out


def build(*parts: dict[str, list[Any]]) -> BucketArrays:
    cat: dict[str, list[Any]] = {k: [] for k in parts[0]}
    for p in parts:
        for k, v in p.items():
            cat[k].extend(v)
    return BucketArrays.from_labels(
        site=cat["site"],
        page_type=cat["pt"],
        route=cat["route"],
        bucket_start=cat["start"],
        n=cat["n"],
        outcomes=np.array(cat["o"]),
        latency=np.array(cat["lat"]),
        canary_mismatch=cat["cm"],
    )


def history(site: str, until: float, **kw: Any) -> dict[str, list[Any]]:
    return rows(site, T0, until, **kw)


def run(
    b: BucketArrays, start: float, end: float, state: HealthState | None = None
) -> list[list[SiteHealth]]:
    state = HealthState() if state is None else state
    base = None
    out = []
    for at in range(int(start), int(end) + 1, BUCKET_SECONDS):
        if base is None or base.valid_from != at // DAY * DAY:
            base = compute_baselines(b, at)
        out.append(evaluate_sites(b, at, state, baselines=base))
    return out


def one(results: list[SiteHealth], site: str) -> SiteHealth:
    return next(h for h in results if h.site == site)


# --- the production scorer -------------------------------------------------------------


def test_a_site_that_always_challenges_4_percent_is_healthy_at_4_percent() -> None:
    b = build(history("c.example", EVAL_DAY + DAY, n=100, challenge=0.04))
    last = one(run(b, EVAL_DAY, EVAL_DAY + 6 * 3600)[-1], "c.example")
    assert (last.score, last.band, last.reasons, last.diagnosis) == (100, "healthy", [], "none")
    assert last.baseline["challenge"] == pytest.approx(0.04, abs=0.005)
    assert last.action.name == "none"


def test_a_challenge_wave_degrades_within_the_hour_with_challenge_on_top() -> None:
    onset = EVAL_DAY + 10 * 3600
    b = build(
        history("c.example", onset, n=100, challenge=0.04),
        rows("c.example", onset, onset + 4 * 3600, n=100, challenge=0.40),
    )
    series = [one(r, "c.example") for r in run(b, onset - 3600, onset + 3 * 3600)]
    before = [h for h in series if h.at <= onset]
    assert all(h.band == "healthy" for h in before)
    moved = next(h for h in series if h.band != "healthy")
    assert moved.at - onset <= 3600
    assert (moved.band, moved.reasons[0], moved.diagnosis) == ("degrading", "challenge", "site")
    assert moved.action.name == "slow_down" and moved.action.concurrency_factor == 0.5
    assert moved.to_dict()["band"] == "degrading"


def test_a_hard_block_wave_with_slow_responses_goes_critical_and_pauses() -> None:
    onset = EVAL_DAY + 10 * 3600
    b = build(
        history("h.example", onset),
        rows("h.example", onset, onset + 4 * 3600, hard=0.5, challenge=0.2, lat_bin=16),
    )
    last = one(run(b, onset - 3600, onset + 2 * 3600)[-1], "h.example")
    assert last.band == "critical"
    assert last.reasons[0] == "hard_block"
    assert last.action.name == "pause" and last.action.canaries_only and last.action.alert


def test_a_two_minute_outage_does_not_flap_the_band() -> None:
    # 4 requests a minute; every request of two minutes fails: 8 of the bucket's 60.
    blip = EVAL_DAY + 10 * 3600
    b = build(
        history("k.example", blip),
        rows("k.example", blip, blip + BUCKET_SECONDS, hard=8 / 60),
        rows("k.example", blip + BUCKET_SECONDS, blip + 6 * 3600),
    )
    series = [one(r, "k.example") for r in run(b, blip - 3600, blip + 5 * 3600)]
    assert {h.band for h in series} == {"healthy"}
    assert min(h.raw_score or 100 for h in series) < 80  # the raw window alone would have moved


def test_a_double_429_burst_on_a_noisy_site_does_not_flap_the_band() -> None:
    # One 429 in 64 is this site's normal; two 2-minute bursts land in one
    # bucket: 13 of its 64 requests. Significant, but 64 requests only show the
    # rate is at least 13 %, and the next bucket is back to normal.
    burst = EVAL_DAY + 17 * 3600
    b = build(
        history("e.example", burst, n=64, hard=1 / 64),
        rows("e.example", burst, burst + BUCKET_SECONDS, n=64, hard=13 / 64),
        rows("e.example", burst + BUCKET_SECONDS, burst + 4 * 3600, n=64, hard=1 / 64),
    )
    series = [one(r, "e.example") for r in run(b, burst - 3600, burst + 3 * 3600)]
    assert {h.band for h in series} == {"healthy"}
    assert min(h.raw_score or 100 for h in series) < 80  # the seed's arithmetic would move


def test_a_wave_on_a_quiet_site_goes_critical_within_the_hour() -> None:
    # 24 requests a bucket: every window is widened to three buckets.
    onset = EVAL_DAY + 3 * 3600
    b = build(
        history("n.example", onset, n=24, hard=1 / 24),
        rows(
            "n.example", onset, onset + 4 * 3600, n=24, hard=11 / 24, challenge=4 / 24, lat_bin=16
        ),
    )
    series = [one(r, "n.example") for r in run(b, onset - 3600, onset + 3 * 3600)]
    assert all(h.band == "healthy" for h in series if h.at <= onset)
    assert all(h.window_s > BUCKET_SECONDS for h in series)
    critical = next(h for h in series if h.band == "critical")
    assert critical.at - onset <= 3600
    assert critical.reasons[0] == "hard_block"


def test_hysteresis_keeps_the_band_until_the_score_clears_the_threshold() -> None:
    onset = EVAL_DAY + 10 * 3600
    b = build(
        history("y.example", onset),
        rows("y.example", onset, onset + 3 * 3600, challenge=0.4),
        # Recovers to 8 challenges in 60 requests: still an established excess
        # over a normal of none, read at its rate over the recent stretch,
        # 13.3 % (the wave's 40 % fading out of it): 17 to 18 points, a score
        # above 80 and below 85.
        rows("y.example", onset + 3 * 3600, onset + 8 * 3600, challenge=8 / 60),
    )
    series = [one(r, "y.example") for r in run(b, onset, onset + 8 * 3600)]
    late = [h for h in series if h.at >= onset + 6 * 3600]
    assert all(h.score is not None and 80 <= h.score < 85 for h in late)
    assert all(h.band == "degrading" for h in late)


def test_too_few_requests_give_no_score_and_hold_the_band() -> None:
    onset = EVAL_DAY + 10 * 3600
    b = build(
        history("q.example", onset),
        rows("q.example", onset, onset + 2 * 3600, hard=0.6, lat_bin=16),
        rows("q.example", onset + 2 * 3600, onset + 6 * 3600, n=8),
    )
    series = [one(r, "q.example") for r in run(b, onset, onset + 6 * 3600)]
    last = series[-1]
    assert last.score is None and last.raw_score is None
    assert last.reasons == [NOT_ENOUGH]
    assert last.band == "degrading"  # held: a paused site does not resume by going quiet
    new = one(
        evaluate_sites(build(rows("new.example", T0, T0 + 3600, n=4)), T0 + 3600), "new.example"
    )
    assert (new.score, new.band, new.reasons) == (None, "unknown", [NOT_ENOUGH])


def test_a_site_refusing_most_requests_is_critical_not_merely_degrading() -> None:
    onset = EVAL_DAY + 10 * 3600
    b = build(history("r.example", onset), rows("r.example", onset, onset + 3600, hard=1.0))
    series = [one(r, "r.example") for r in run(b, onset, onset + 3600)]
    last = series[-1]
    assert last.band == "critical" and last.score is not None and last.score < 50
    assert last.reasons[0] == "hard_block" and last.action.name == "pause"
    # the seed's arithmetic alone stops at 65: 35 points for hard blocks
    assert last.raw_score == 65


def test_a_dead_route_is_named_and_does_not_lower_the_site_score() -> None:
    routes = ("pool-a/us", "pool-a/de", "pool-b/us", "pool-c/us")
    onset = EVAL_DAY + 10 * 3600
    b = build(
        history("r.example", onset, n=80, routes=routes),
        rows("r.example", onset, onset + 4 * 3600, n=60, routes=routes[:3]),
        rows("r.example", onset, onset + 4 * 3600, n=20, hard=0.6, error=0.4, routes=routes[3:]),
    )
    last = one(run(b, onset - 3600, onset + 2 * 3600)[-1], "r.example")
    assert last.diagnosis == "route"
    assert last.failing_routes == ["pool-c"]
    assert (last.band, last.score) == ("healthy", 100)
    assert last.action.avoid_routes == ("pool-c",)
    ref = dict((s, sc) for s, sc, _ in evaluate_reference(b, onset + 2 * 3600))
    assert ref["r.example"] is not None and ref["r.example"] < 80  # the seed blames the site


def test_failures_spread_over_every_route_are_the_site() -> None:
    routes = ("pool-a/us", "pool-a/de", "pool-b/us", "pool-c/us")
    onset = EVAL_DAY + 10 * 3600
    b = build(
        history("s.example", onset, n=80, routes=routes),
        rows("s.example", onset, onset + 4 * 3600, n=80, hard=0.5, routes=routes),
    )
    last = one(run(b, onset - 3600, onset + 2 * 3600)[-1], "s.example")
    assert last.failing_routes == []
    assert last.diagnosis == "site" and last.band != "healthy"


def test_a_parser_break_has_its_own_band_and_never_lowers_target_health() -> None:
    onset = EVAL_DAY + 10 * 3600
    b = build(
        history("p.example", onset, extract=0.01),
        rows("p.example", onset, onset + 4 * 3600, extract=0.7),
    )
    series = [one(r, "p.example") for r in run(b, onset - 3600, onset + 2 * 3600)]
    last = series[-1]
    assert (last.parser.band, last.parser.reasons) == ("critical", ["extract_failed"])
    assert all(h.score == 100 and h.band == "healthy" for h in series)


def test_a_canary_mismatch_forces_degrading_with_canary_first() -> None:
    at = EVAL_DAY + 10 * 3600
    b = build(
        history("j.example", at - 1800),
        rows("j.example", at - 1800, at, canary_mismatch=1),
    )
    h = one(run(b, at - 3600, at)[-1], "j.example")
    assert (h.band, h.reasons[0], h.diagnosis) == ("degrading", "canary_mismatch", "site")
    assert h.score is not None and h.score <= 79
    later = build(history("j.example", at - 1800), rows("j.example", at - 1800, at + 3 * 3600))
    assert one(run(later, at + 2 * 3600, at + 2 * 3600)[-1], "j.example").band == "healthy"


def test_a_bad_day_neither_becomes_the_normal_nor_pollutes_the_baseline() -> None:
    bad_day = EVAL_DAY - 5 * DAY
    b = build(
        rows("m.example", T0, bad_day, n=100, challenge=0.01),
        rows("m.example", bad_day, bad_day + DAY, n=100, challenge=0.5),
        rows("m.example", bad_day + DAY, EVAL_DAY + DAY, n=100, challenge=0.01),
    )
    base = compute_baselines(b, EVAL_DAY)
    assert base.rates[0, 1] == pytest.approx(0.01)  # median of days, not the pooled 4.5 %
    assert base.pooled[0, 2] / base.pooled[0, 0] > 0.04
    assert base.end == EVAL_DAY - DAY  # yesterday is excluded


def test_json_shape_is_the_cli_contract() -> None:
    b = build(history("c.example", EVAL_DAY + 3600))
    h = one(evaluate_sites(b, EVAL_DAY + 3600), "c.example")
    d = h.to_dict()
    assert list(d) == [
        "site",
        "score",
        "raw_score",
        "band",
        "reasons",
        "diagnosis",
        "failing_routes",
        "parser",
        "action",
        "throttle",
        "cost",
    ]
    assert set(d["throttle"]) == {"share", "concurrency_factor", "cost_multiplier"}
    assert set(d["cost"]) == {"bytes_per_record", "bytes_per_record_normal",
                              "credits_per_record", "credits_per_record_normal"}  # fmt: skip
    assert set(d["parser"]) == {"score", "band", "reasons"}
    assert isinstance(d["score"], int)


def test_state_round_trips_through_json() -> None:
    b = build(history("c.example", EVAL_DAY + 3600))
    state = HealthState()
    evaluate_sites(b, EVAL_DAY + 3600, state)
    again = HealthState.from_dict(state.to_dict())
    assert again.to_dict() == state.to_dict()
    assert again.get("c.example") is not None


def test_bands_and_actions_never_escalate() -> None:
    assert [band_for(s) for s in (100, 80, 79, 50, 49, 0)] == [
        "healthy",
        "healthy",
        "degrading",
        "degrading",
        "critical",
        "critical",
    ]
    for band in ("healthy", "degrading", "critical", "unknown"):
        a = action_for(band)
        assert a.concurrency_factor <= 1.0
        assert a.cost_multiplier is None or a.cost_multiplier >= 1.0


# --- aggregation --------------------------------------------------------------------


def test_aggregate_buckets_classifies_unlabelled_soft_blocks_and_dedups_ids() -> None:
    def obs(i: int, **kw: Any) -> dict[str, Any]:
        base = {
            "url": f"https://s.example/item/{i % 10}",
            "fetched_at": T0 + i,
            "status": 200,
            "bytes_received": 80_000,
            "latency_ms": 300,
            "record": {"title": "t", "price": i % 10},
            "id": f"o{i}",
        }
        return {**base, **kw}

    log = [obs(i) for i in range(60)]
    log += [obs(60, bytes_received=1_500, record={})]  # no outcome: inferred
    log += [obs(61, status=403, title="Just a moment...")]
    log += [obs(62, outcome="hard_block")]  # the reporter is trusted
    log += [obs(63, canary="mismatch")]
    log += [obs(0)]  # duplicate id
    b = aggregate_buckets(log)
    assert int(b.n.sum()) == 64
    assert int(b.outcome("soft_block").sum()) == 1
    assert int(b.outcome("challenge").sum()) == 1
    assert int(b.outcome("hard_block").sum()) == 1
    assert int(b.outcome("new").sum()) == 10
    assert int(b.canary_mismatch.sum()) == 1
    assert int(b.latency.sum()) == 64
    assert set(b.bucket_start.tolist()) == {T0}


def test_simulated_log_is_ordered_and_in_spec_shape() -> None:
    sc = default_scenario(3)
    log = list(itertools.islice(sc.observations(), 3000))
    times = [o["fetched_at"] for o in log]
    assert times == sorted(times)
    assert all(("status" in o) != ("error" in o) for o in log)
    assert {"url", "fetched_at", "site", "page_type", "route", "latency_ms", "id"} <= set(log[0])
    assert {i.cause for i in sc.incidents} >= {
        "challenge",
        "hard_block",
        "soft_block",
        "route",
        "latency",
        "extract_failed",
        "canary_mismatch",
    }


# --- review --------------------------------------------------------------------------


def _h(at: float, band: str, reasons: list[str]) -> SiteHealth:
    return SiteHealth(
        site="x",
        at=at,
        score=None,
        raw_score=None,
        band=band,  # type: ignore[arg-type]
        reasons=reasons,
        diagnosis="site" if band != "healthy" else "none",
        failing_routes=[],
        parser=__import__("recrawl.health.score", fromlist=["ParserHealth"]).ParserHealth(
            None, None, "healthy", []
        ),
        action=action_for(band),
    )


def test_review_reports_delay_cause_and_false_alarms() -> None:
    step = BUCKET_SECONDS
    evals = [_h(i * step, "healthy", []) for i in range(40)]
    evals[5] = _h(5 * step, "degrading", ["hard_block"])  # outside: false alarm
    for i in range(22, 30):
        evals[i] = _h(i * step, "degrading", ["latency"] if i < 24 else ["challenge"])
    inc = Incident("x", 20 * step, 30 * step, cause="challenge", band="degrading")
    rep = review(evals, [inc], grace_s=step)
    (r,) = rep.incidents
    assert r.moved_after_s == 2 * step
    assert r.detected_after_s == 4 * step
    assert (r.band_reached, r.top_reason, r.cause_named) == ("degrading", "challenge", True)
    assert [(a["start"], a["band"]) for a in rep.false_alarms] == [(5 * step, "degrading")]
    assert rep.false_alarm_seconds == step


def test_health_just_after_a_bucket_boundary_counts_the_buckets_before_it() -> None:
    """Evaluated within a second of a new 15-minute bucket that already holds a
    fetch, the score is that of the hour before (it raised ValueError: the new
    bucket sat at slot -1)."""
    top = EVAL_DAY + 4 * BUCKET_SECONDS
    log = [
        {"url": f"https://a.example/{i}", "site": "a.example", "page_type": "p",
         "fetched_at": top - 60.0 * (i + 1), "status": 200}
        for i in range(60)
    ]  # fmt: skip
    log.append({"url": "https://a.example/new", "site": "a.example", "page_type": "p",
                "fetched_at": top + 0.2, "status": 200})  # fmt: skip
    buckets = aggregate_buckets(log)
    (before,) = evaluate_sites(buckets, top)
    (after,) = evaluate_sites(buckets, top + 0.5)
    assert after.score == before.score is not None
    assert after.window_s == before.window_s

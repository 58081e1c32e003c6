"""Politeness rules, as an operator states them. Times are unix seconds."""

from __future__ import annotations

import itertools
import math

import pytest

from recrawl._exceptions import ConfigError
from recrawl.crawl.politeness import BACKOFF_CAP_S, SiteGate, parse_retry_after

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


def ok(gate: SiteGate, now: float, latency_ms: float = 200.0) -> None:
    gate.started(now)
    gate.finished(now, status=200, error=None, latency_ms=latency_ms, headers={})


def fail(gate: SiteGate, now: float, status: int | None = 503, error: str | None = None) -> None:
    gate.started(now)
    gate.finished(now, status=status, error=error, latency_ms=None, headers={})


# -- Retry-After parsing ------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [("120", 120.0), (" 0 ", 0.0), ("3600", 3600.0)],
)
def test_retry_after_in_seconds(value: str, expected: float) -> None:
    assert parse_retry_after(value, T0) == expected


def test_retry_after_as_http_date() -> None:
    # T0 + 90 s = Tue, 14 Nov 2023 22:14:50 GMT
    assert parse_retry_after("Tue, 14 Nov 2023 22:14:50 GMT", T0) == pytest.approx(90.0)


def test_retry_after_date_in_the_past_means_no_wait() -> None:
    assert parse_retry_after("Tue, 14 Nov 2023 22:00:00 GMT", T0) == 0.0


@pytest.mark.parametrize("value", [None, "", "-5", "+5", "1.5", "soon", "Tue, 99 Foo 2023"])
def test_retry_after_garbage_or_negative_is_ignored(value: str | None) -> None:
    assert parse_retry_after(value, T0) is None


# -- spacing and slots --------------------------------------------------------


def test_no_two_starts_closer_than_min_delay() -> None:
    gate = SiteGate(concurrency=4, min_delay_s=2.0)
    starts: list[float] = []
    now = T0
    while now < T0 + 20:
        if gate.can_start(now):
            gate.started(now)
            starts.append(now)
        if gate.in_flight and now - starts[-1] >= 0.5:  # each request takes 0.5 s
            gate.finished(now, status=200, error=None, latency_ms=500.0, headers={})
        now += 0.25
    assert len(starts) == 10
    assert all(b - a >= 2.0 for a, b in itertools.pairwise(starts))


def test_next_allowed_is_last_start_plus_min_delay() -> None:
    gate = SiteGate(concurrency=2, min_delay_s=1.5)
    assert gate.next_allowed(T0) == T0  # nothing yet: now
    gate.started(T0)
    assert gate.next_allowed(T0 + 0.5) == T0 + 1.5
    assert not gate.can_start(T0 + 1.0)
    assert gate.can_start(T0 + 1.5)


def test_no_more_in_flight_than_concurrency() -> None:
    gate = SiteGate(concurrency=2, min_delay_s=0.0)
    gate.started(T0)
    gate.started(T0)
    assert not gate.can_start(T0)
    gate.finished(T0 + 1, status=200, error=None, latency_ms=100.0, headers={})
    assert gate.can_start(T0 + 1)


def test_crawl_delay_raises_min_delay_but_never_lowers_it() -> None:
    gate = SiteGate(concurrency=1, min_delay_s=2.0)
    gate.set_crawl_delay(10.0)
    gate.started(T0)
    gate.finished(T0, status=200, error=None, latency_ms=100.0, headers={})
    assert gate.next_allowed(T0) == T0 + 10.0
    gate.set_crawl_delay(0.5)
    assert gate.next_allowed(T0) == T0 + 2.0


# -- Retry-After holds ----------------------------------------------------------


def test_retry_after_120_keeps_the_site_closed_120_s() -> None:
    gate = SiteGate(concurrency=8, min_delay_s=0.5)
    gate.started(T0)
    gate.finished(T0, status=429, error=None, latency_ms=50.0, headers={"Retry-After": "120"})
    assert gate.next_allowed(T0) == T0 + 120
    assert not gate.can_start(T0 + 119.9)
    assert gate.can_start(T0 + 120)


def test_http_date_retry_after_on_503_holds_until_that_date() -> None:
    gate = SiteGate(concurrency=2, min_delay_s=0.0)
    gate.started(T0)
    gate.finished(
        T0,
        status=503,
        error=None,
        latency_ms=None,
        headers={"retry-after": "Tue, 14 Nov 2023 22:18:20 GMT"},
    )
    assert gate.next_allowed(T0) == pytest.approx(T0 + 300)
    assert not gate.can_start(T0 + 299)
    assert gate.can_start(T0 + 300)


def test_a_shorter_retry_after_does_not_shorten_a_hold() -> None:
    gate = SiteGate(concurrency=2, min_delay_s=0.0)
    gate.finished(T0, status=429, error=None, latency_ms=None, headers={"Retry-After": "600"})
    gate.finished(T0 + 1, status=429, error=None, latency_ms=None, headers={"Retry-After": "5"})
    assert gate.next_allowed(T0 + 1) == T0 + 600


def test_retry_after_on_a_200_is_ignored() -> None:
    gate = SiteGate(concurrency=1, min_delay_s=0.0)
    gate.finished(T0, status=200, error=None, latency_ms=None, headers={"Retry-After": "600"})
    assert gate.can_start(T0)


# -- back-off -------------------------------------------------------------------


def test_three_503s_in_a_row_back_off() -> None:
    gate = SiteGate(concurrency=1, min_delay_s=2.0)
    fail(gate, T0)
    fail(gate, T0 + 2)
    assert gate.backoff_s == 0.0  # two are not a burst
    fail(gate, T0 + 4)
    assert gate.backoff_s == 4.0  # starts at 2 × min_delay
    assert gate.next_allowed(T0 + 4) == T0 + 8
    fail(gate, T0 + 8)
    assert gate.backoff_s == 8.0  # and doubles with each further hard failure
    assert gate.next_allowed(T0 + 8) == T0 + 16


def test_back_off_starts_at_one_second_without_min_delay_and_is_capped_at_an_hour() -> None:
    gate = SiteGate(concurrency=1, min_delay_s=0.0)
    for i in range(3):
        fail(gate, T0 + i, status=None, error="read_timeout")
    assert gate.backoff_s == 1.0
    for i in range(20):
        fail(gate, T0 + 10 + i, status=403)
    assert gate.backoff_s == BACKOFF_CAP_S == 3600.0


def test_a_success_resets_the_back_off() -> None:
    gate = SiteGate(concurrency=1, min_delay_s=1.0)
    for i in range(4):
        fail(gate, T0 + i, status=429)
    assert gate.backoff_s > 0
    ok(gate, T0 + 10)
    assert gate.backoff_s == 0.0
    assert gate.next_allowed(T0 + 10) == T0 + 11  # only the min delay remains
    fail(gate, T0 + 11)
    fail(gate, T0 + 12)
    assert gate.backoff_s == 0.0  # the streak starts over


def test_not_found_is_not_a_hard_failure() -> None:
    gate = SiteGate(concurrency=1, min_delay_s=0.0)
    for i in range(5):
        fail(gate, T0 + i, status=404)
    assert gate.backoff_s == 0.0
    assert gate.can_start(T0 + 5)


# -- latency throttle -----------------------------------------------------------


def test_slow_responses_double_the_delay_and_it_decays_back() -> None:
    gate = SiteGate(concurrency=1, min_delay_s=1.0)
    for i in range(10):
        ok(gate, T0 + i, latency_ms=200.0)
    assert gate.effective_delay_s == 1.0
    ok(gate, T0 + 10, latency_ms=900.0)  # one slow answer is no rise
    assert gate.effective_delay_s == 1.0
    ok(gate, T0 + 11, latency_ms=950.0)  # the last three's median above 2 × the 200 ms median
    assert gate.effective_delay_s == 2.0
    ok(gate, T0 + 13, latency_ms=1000.0)
    assert gate.effective_delay_s == 4.0
    assert gate.next_allowed(T0 + 13) == T0 + 17
    ok(gate, T0 + 17, latency_ms=210.0)
    assert gate.effective_delay_s == 2.0
    ok(gate, T0 + 19, latency_ms=190.0)
    assert gate.effective_delay_s == 1.0
    ok(gate, T0 + 20, latency_ms=200.0)
    assert gate.effective_delay_s == 1.0  # never below the configured delay


def test_a_lone_spike_does_not_throttle() -> None:
    gate = SiteGate(concurrency=1, min_delay_s=1.0)
    for i in range(20):
        ok(gate, T0 + i, latency_ms=200.0 if i % 4 else 2000.0)  # one slow answer in four
    assert gate.effective_delay_s == 1.0


def test_no_throttle_before_a_median_is_known() -> None:
    gate = SiteGate(concurrency=1, min_delay_s=1.0)
    ok(gate, T0, latency_ms=100.0)
    ok(gate, T0 + 1, latency_ms=5000.0)
    assert gate.effective_delay_s == 1.0


# -- health bands ---------------------------------------------------------------


def test_critical_band_pauses_the_site() -> None:
    gate = SiteGate(concurrency=4, min_delay_s=0.0)
    gate.set_band("critical")
    assert not gate.can_start(T0 + 3600)
    assert gate.next_allowed(T0) == math.inf
    gate.set_band("healthy")
    assert gate.can_start(T0)


def test_degrading_band_halves_concurrency_and_doubles_the_delay() -> None:
    gate = SiteGate(concurrency=4, min_delay_s=1.0)
    gate.set_band("degrading")
    assert gate.effective_concurrency == 2
    assert gate.effective_delay_s == 2.0
    gate.started(T0)
    assert not gate.can_start(T0 + 1.5)
    gate.started(T0 + 2)
    assert not gate.can_start(T0 + 10)  # both remaining slots taken


def test_degrading_keeps_at_least_one_slot() -> None:
    gate = SiteGate(concurrency=1, min_delay_s=0.0)
    gate.set_band("degrading")
    assert gate.effective_concurrency == 1
    assert gate.can_start(T0)


def test_unknown_and_healthy_bands_change_nothing() -> None:
    gate = SiteGate(concurrency=3, min_delay_s=1.0)
    for band in ("unknown", "healthy"):
        gate.set_band(band)  # type: ignore[arg-type]
        assert (gate.effective_concurrency, gate.effective_delay_s) == (3, 1.0)


def test_bad_band_and_bad_config_are_refused() -> None:
    gate = SiteGate(concurrency=1, min_delay_s=0.0)
    with pytest.raises(ValueError, match="band"):
        gate.set_band("on fire")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="concurrency"):
        SiteGate(concurrency=0, min_delay_s=1.0)
    with pytest.raises(ConfigError, match="min_delay_s"):
        SiteGate(concurrency=1, min_delay_s=-1.0)


def test_a_crawl_delay_counts_from_the_end_of_the_previous_request() -> None:
    gate = SiteGate(concurrency=1, min_delay_s=1.0)
    gate.set_crawl_delay(10.0)
    gate.started(T0)
    gate.finished(T0 + 4, status=200, error=None, latency_ms=4000.0, headers={})
    assert gate.next_allowed(T0 + 4) == T0 + 14  # not T0 + 10: the site saw the request late
    plain = SiteGate(concurrency=1, min_delay_s=10.0)  # the configured delay spaces starts
    plain.started(T0)
    plain.finished(T0 + 4, status=200, error=None, latency_ms=4000.0, headers={})
    assert plain.next_allowed(T0 + 4) == T0 + 10

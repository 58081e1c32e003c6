from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from recrawl.plan.backoff import (
    GONE_WAITS_S,
    LONG_FAILING_WAIT_S,
    SLOW_LANE_S,
    due,
    retry_wait_s,
)

HOUR = 3600.0
DAY = 86400.0


def test_failures_double_from_a_cycle_to_a_day_then_a_week() -> None:
    fails = np.arange(0, 16)
    hours = retry_wait_s(fails, np.zeros(16, bool), cycle_s=HOUR) / HOUR
    assert hours[:7].tolist() == [0, 1, 2, 4, 8, 16, 24]
    # a day at a time until the failures span about a week, then a week
    assert set(hours[7:12].tolist()) == {24.0}
    assert set(hours[12:].tolist()) == {168.0}


def test_gone_pages_wait_1_7_then_30_days() -> None:
    days = retry_wait_s(np.array([1, 2, 3, 9]), np.ones(4, bool), cycle_s=HOUR) / DAY
    assert days.tolist() == [1, 7, 30, 30]
    # gone before the count was kept (a migrated store): the longest wait
    assert retry_wait_s(np.array([0]), np.array([True]), cycle_s=HOUR)[0] == GONE_WAITS_S[-1]


@given(
    fails=st.integers(1, 10_000),
    cycle_h=st.floats(0.05, 24 * 7),
)
def test_a_failed_page_never_waits_less_than_a_cycle(fails: int, cycle_h: float) -> None:
    wait = retry_wait_s(np.array([fails]), np.array([False]), cycle_s=cycle_h * HOUR)[0]
    assert wait >= cycle_h * HOUR
    assert wait <= max(LONG_FAILING_WAIT_S, SLOW_LANE_S, cycle_h * HOUR)


@given(st.lists(st.integers(0, 200), min_size=2, max_size=30))
def test_waits_never_shrink_as_failures_go_on(counts: list[int]) -> None:
    f = np.sort(np.array(counts))
    w = retry_wait_s(f, np.zeros(len(f), bool), cycle_s=HOUR)
    assert np.all(np.diff(w) >= 0)


def test_due_counts_from_the_last_fetch_of_any_outcome() -> None:
    now = 1_000_000.0
    last = np.array([np.nan, now - 10, now - 2 * HOUR, now - 2 * HOUR, now - 2 * DAY])
    fails = np.array([0, 0, 1, 3, 1])
    gone = np.array([False, False, False, False, True])
    got = due(last, fails, gone, now, cycle_s=HOUR)
    # never fetched; succeeded; 1 h wait over; 4 h wait not over; gone a day: re-check
    assert got.tolist() == [True, True, True, False, True]

"""The dashboard's time range: chosen by days or ends, stale logs shown as of their end."""

from __future__ import annotations

import pytest

from recrawl.report.window import DEFAULT_DAYS, STALE_AFTER_S, TimeWindow, parse_time

DAY = 86400.0
NOW = 1_770_000_000.0


def test_a_live_log_is_shown_up_to_now_and_an_old_one_up_to_its_end() -> None:
    live = TimeWindow.choose(NOW, NOW - 600)
    assert (live.start, live.end, live.stale) == (NOW - DEFAULT_DAYS * DAY, NOW, False)
    assert live.stale_message() == ""
    old = TimeWindow.choose(NOW, NOW - 400 * DAY)
    assert old.stale and old.end == NOW - 400 * DAY and old.days == DEFAULT_DAYS
    assert "400 days before now" in old.stale_message()
    just = TimeWindow.choose(NOW, NOW - STALE_AFTER_S - 1)
    assert just.stale and "hours before now" in just.stale_message()
    empty = TimeWindow.choose(NOW, None)
    assert not empty.stale and empty.end == NOW


def test_the_query_picks_days_or_ends_and_a_bad_one_says_why() -> None:
    assert TimeWindow.from_query({"days": "30"}, NOW, NOW).days == 30
    w = TimeWindow.from_query({"from": "2026-01-01", "to": "2026-01-15T12:00:00Z"}, NOW, NOW)
    assert (w.start, w.end, w.note) == (1_767_225_600.0, 1_768_478_400.0, "")
    whole = TimeWindow.from_query({"from": "2026-01-01", "to": "2026-01-14"}, NOW, NOW)
    assert whole.end == 1_768_435_200.0  # the 14th included: midnight of the 15th
    assert TimeWindow.from_query({"days": "2", "to": "2030-01-01"}, NOW, NOW).end == NOW
    assert w.step_s == DAY and TimeWindow.from_query({"days": "2"}, NOW, NOW).step_s == 3600
    for query, why in (
        ({"days": "soon"}, "days must be a number"),
        ({"days": "nan"}, "days must be a number"),
        ({"days": "-1"}, "days must be more than 0"),
        ({"from": "2026-02-01", "to": "2026-01-01"}, "must start before it ends"),
        ({"from": "yesterday"}, "'yesterday' is not RFC 3339 nor unix seconds"),
        ({"days": "3", "from": "2026-01-01"}, "not both"),
    ):
        got = TimeWindow.from_query(query, NOW, NOW)
        assert got.days == DEFAULT_DAYS and got.end == NOW
        assert got.note.startswith("The time range asked for was not used") and why in got.note


def test_times_are_dates_rfc_3339_or_unix_seconds() -> None:
    assert parse_time("2026-02-01") == parse_time("2026-02-01T00:00:00+00:00") == 1_769_904_000.0
    assert parse_time(" 1769904000 ") == 1_769_904_000.0
    with pytest.raises(ValueError, match="not a date"):
        parse_time("2026-13-01")
    with pytest.raises(ValueError, match="UTC offset"):
        parse_time("2026-02-01T00:00:00")

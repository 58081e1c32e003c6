"""A closed loop too short to revisit any page still reports what it saw."""

from __future__ import annotations

from pathlib import Path

from recrawl.sim.crawl import closed_loop


def test_a_crawl_too_short_to_revisit_has_no_yardstick_but_no_error(tmp_path: Path) -> None:
    # an hour of simulated crawl: first fetches only (before, the replay was asked
    # for a budget of 0.0 revisits a page-day and raised)
    got = closed_loop(tmp_path, days=0.05)
    w = got["warm"]
    assert w["oracle"] is None and w["ratio"] is None and w["uniform_replay"] is None
    assert w["warm"] is None or 0.0 <= w["warm"] <= 1.0
    assert set(got["policies"]) >= {"recrawl", "uniform"}

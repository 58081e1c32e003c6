"""The generated fetch log (12 sites × 3 weeks, labelled incidents) over several seeds.

Issue 4's target, reviewed like ``recrawl health review``: no false alarm at any
healthy time, and each incident in the right band with the right top reason
within 1.5 hours of onset. The whole log generates and classifies about 800,000
observations a seed (about half a minute), hence ``slow``; deselect with
``-m "not slow"``. The quick test runs the hardest site alone over more seeds.
"""

from __future__ import annotations

import pytest

from recrawl.health.buckets import BUCKET_SECONDS
from recrawl.health.score import (
    HealthState,
    SiteHealth,
    aggregate_buckets,
    compute_baselines,
    evaluate_sites,
    review,
)
from recrawl.sim.health import DAY, HealthScenario, default_scenario

ONSET_TARGET_S = 1.5 * 3600

# Seeds 1 and 5 each raised a 15-minute false alarm on the site with 429 bursts
# while every rate was read at face value, whatever the window's size.
SEEDS = (0, 1, 5)


def _history(
    seed: int, sites: tuple[str, ...] | None = None
) -> tuple[list[SiteHealth], HealthScenario]:
    sc = default_scenario(seed, sites=sites)
    buckets = aggregate_buckets(sc.observations())
    state = HealthState()
    baselines = None
    out: list[SiteHealth] = []
    # From the end of day 2, every 15 minutes, as the health_eval benchmark does.
    for at in range(sc.start + 2 * DAY, sc.end + 1, BUCKET_SECONDS):
        if baselines is None or baselines.valid_from != at // DAY * DAY:
            baselines = compute_baselines(buckets, at)
        out.extend(evaluate_sites(buckets, at, state, baselines=baselines))
    return out, sc


def _check(history: list[SiteHealth], sc: HealthScenario) -> None:
    rep = review(history, sc.incidents)
    assert rep.false_alarms == []
    late = [
        (r.incident.site, r.incident.cause, r.detected_after_s, r.band_reached, r.top_reason)
        for r in rep.incidents
        if r.detected_after_s is None or r.detected_after_s > ONSET_TARGET_S
    ]
    assert late == []
    assert all(r.cause_named for r in rep.incidents)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_generated_log_no_false_alarm_and_every_incident_in_time(seed: int) -> None:
    _check(*_history(seed))


@pytest.mark.parametrize(
    "seed", [0, 1, *(pytest.param(k, marks=pytest.mark.slow) for k in (2, 3, 4))]
)
def test_a_site_with_429_bursts_never_false_alarms_and_its_wave_goes_critical(
    seed: int,
) -> None:
    # 2 % hard blocks, four 2-minute bursts of 50 % 429s a day, and a hard-block
    # wave with slow responses starting at 02:00 UTC, when traffic is lowest.
    history, sc = _history(seed, ("noisy-e.example",))
    (inc,) = sc.incidents
    assert (inc.cause, inc.band) == ("hard_block", "critical")
    _check(history, sc)

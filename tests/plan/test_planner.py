"""The planner: budget, reserves, policies, politeness and health inputs."""

from __future__ import annotations

import copy
import dataclasses
import heapq
import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recrawl.estimate.rates import update_evidence, update_evidence_arrays
from recrawl.plan.freshness import freshness_gain
from recrawl.plan.planner import (
    NUTCH_MAX_INTERVAL_S,
    NUTCH_MIN_INTERVAL_S,
    PROBE_GAP,
    REASONS,
    PlannerConfig,
    PlanPages,
    nutch_next_interval,
    plan_cycle,
    reallocate,
)
from recrawl.records.evidence import BIN_COLUMNS

DAY = 86_400.0
NOW = 1_800_000_000.0
NO_RESERVES = PlannerConfig(discovery_share=0.0, reestimate_share=0.0, verify_share=0.0)


def known_pages(n: int = 200, *, seed: int = 0, sites: int = 5) -> PlanPages:
    """Pages with history: rates from 1/year to 2/day, visited weekly for a year."""
    rng = np.random.default_rng(seed)
    s = PlanPages.new(n, now=NOW - 400 * DAY, site=np.arange(n) % sites, n_sites=sites)
    s.never_fetched[:] = False
    rate = np.exp(rng.uniform(math.log(1 / 365), math.log(2.0), n))
    visits = 50
    t = np.full(n, 7.0)
    changes = rng.binomial(visits, -np.expm1(-rate * t))
    s.ev_nc[:] = changes
    s.ev_tc[:] = changes * 7.0
    s.ev_nu[:] = visits - changes
    s.ev_tu[:] = (visits - changes) * 7.0
    s.last_fetch[:] = NOW - rng.uniform(0, 30, n) * DAY
    s.value[:] = rng.choice([1.0, 2.0, 4.0], n)
    return s


@settings(max_examples=25, deadline=None)
@given(
    budget=st.floats(0.5, 300.0),
    policy=st.sampled_from(["recrawl", "greedy", "uniform", "proportional", "nutch"]),
    cap=st.sampled_from([None, 3]),
)
def test_never_exceeds_the_budget(budget: float, policy: str, cap: int | None) -> None:
    s = known_pages(120)
    s.cost[:] = np.random.default_rng(1).uniform(0.5, 3.0, len(s))
    cfg = PlannerConfig(max_per_host=cap)
    plan = plan_cycle(s, budget, NOW, policy=policy, config=cfg, rng=np.random.default_rng(0))
    assert plan.spent <= budget + 3.0  # a reserve may round up by one fetch
    assert np.unique(plan.index).size == len(plan)
    if cap is not None:
        assert np.bincount(s.host[plan.index]).max(initial=0) <= cap
    if policy != "nutch" and cap is None:
        # spend the budget: what is left cannot buy the cheapest page not taken
        left_out = np.setdiff1d(np.arange(len(s)), plan.index)
        if left_out.size:
            assert budget - plan.spent < s.cost.max() + 1e-9


def test_plans_are_pure_and_reproducible() -> None:
    s = known_pages()
    before = copy.deepcopy(s)
    a = plan_cycle(s, 20.0, NOW, rng=np.random.default_rng(5))
    b = plan_cycle(s, 20.0, NOW, rng=np.random.default_rng(5))
    assert a.index.tolist() == b.index.tolist()
    for name in ("last_fetch", "ev_nc", "ev_tu", "nutch_interval", "never_fetched"):
        assert np.array_equal(getattr(s, name), getattr(before, name))


def test_discovery_takes_new_urls_oldest_first() -> None:
    s = known_pages(100)
    s.never_fetched[:10] = True
    s.first_seen[:10] = NOW - np.arange(10) * 3600.0  # page 9 is the oldest
    cfg = PlannerConfig(discovery_share=0.03, reestimate_share=0.0, verify_share=0.0)
    plan = plan_cycle(s, 100.0, NOW, config=cfg, rng=np.random.default_rng(0))
    tasks = plan.to_tasks()
    disc = [t["page"] for t in tasks if t["reason"] == "discovery"]
    assert disc[:3] == [9, 8, 7]
    assert len(disc) >= 3


def test_reserves_label_verification_and_reestimation() -> None:
    s = known_pages(400)
    s.last_fetch[:20] = NOW - 400 * DAY  # believed static, unvisited for a long time
    s.ev_nc[:20] = 0.0
    cfg = PlannerConfig(reestimate_share=0.05, verify_share=0.05, reestimate_after_days=180)
    plan = plan_cycle(s, 100.0, NOW, config=cfg, rng=np.random.default_rng(0))
    reasons = [REASONS[r] for r in plan.reason]
    assert 4 <= reasons.count("verify") <= 6
    assert 4 <= reasons.count("reestimate") <= 6
    re_pages = plan.index[plan.reason == REASONS.index("reestimate")]
    assert np.all(re_pages < 20)
    # baselines do not get the model's reserves
    base = plan_cycle(s, 100.0, NOW, policy="uniform", config=cfg, rng=np.random.default_rng(0))
    assert set(base.reason.tolist()) == {0}


def test_paused_sites_are_skipped_and_expensive_sites_get_less() -> None:
    s = known_pages(500, sites=5)
    s.site_paused[1] = True
    s.site_cost_multiplier[2] = 4.0
    plan = plan_cycle(s, 60.0, NOW, config=NO_RESERVES, rng=np.random.default_rng(0))
    sites = s.site[plan.index]
    assert not np.any(sites == 1)
    counts = np.bincount(sites, minlength=5)
    assert counts[2] < counts[0] and counts[2] < counts[3]
    assert np.allclose(plan.cost[sites == 2], 4.0)


def test_per_host_cap() -> None:
    s = known_pages(300, sites=3)
    cfg = PlannerConfig(max_per_host=4, reestimate_share=0.0, verify_share=0.0)
    plan = plan_cycle(s, 100.0, NOW, config=cfg, rng=np.random.default_rng(0))
    assert np.bincount(s.host[plan.index]).max() <= 4
    assert len(plan) == 12


def test_greedy_follows_the_seed_priority_queue() -> None:
    s = known_pages(150)
    s.cost[:] = np.random.default_rng(2).uniform(0.5, 2.0, len(s))
    budget = 30.0
    model = reallocate(s, budget * 24, NOW, policy="greedy", config=NO_RESERVES)
    interval = float(s.cost.sum()) / (budget * 24)
    # the seed's loop: priority() per page, a heap, spend until the budget is gone
    heap = []
    for i in range(len(s)):
        page = SimpleNamespace(
            change_rate=model.rate_per_day[i],
            last_fetched=s.last_fetch[i] / DAY,
            value=s.value[i],
            cost=s.cost[i],
        )
        gain = freshness_gain(page.change_rate, NOW / DAY - page.last_fetched, interval)
        heapq.heappush(heap, (-page.value * gain / page.cost, i))
    chosen, spent = [], 0.0
    while heap:
        _, i = heapq.heappop(heap)
        if spent + s.cost[i] > budget:
            break
        chosen.append(i)
        spent += s.cost[i]
    plan = plan_cycle(s, budget, NOW, policy="greedy", config=NO_RESERVES, model=model)
    assert plan.index.tolist() == chosen


def test_recrawl_skips_pages_too_fast_to_keep_fresh_but_events_chases_them() -> None:
    s = PlanPages.new(3, now=NOW - 100 * DAY)
    s.never_fetched[:] = False
    # 100 daily visits: one page changed every time, one about half, one never
    s.ev_nc[:] = [100.0, 50.0, 0.0]
    s.ev_tc[:] = [100.0, 50.0, 0.0]
    s.ev_nu[:] = [0.0, 50.0, 100.0]
    s.ev_tu[:] = [0.0, 50.0, 100.0]
    s.last_fetch[:] = NOW - 2 * DAY
    fresh = reallocate(s, 0.3, NOW, config=NO_RESERVES)
    events = reallocate(s, 0.3, NOW, objective="events", config=NO_RESERVES)
    assert fresh.visits_per_day[0] < fresh.visits_per_day[1]
    assert events.visits_per_day[0] > events.visits_per_day[1]
    assert fresh.rate_per_day[0] > 2.0 and fresh.rate_per_day[2] < 0.05


def test_recrawl_takes_the_most_overdue_pages() -> None:
    s = known_pages(100)
    model = reallocate(s, 10.0, NOW, config=NO_RESERVES)
    plan = plan_cycle(s, 5.0, NOW, config=NO_RESERVES, model=model)
    overdue = (NOW - s.last_fetch) / DAY * model.visits_per_day
    assert set(plan.index.tolist()) == set(np.argsort(-overdue)[:5].tolist())
    assert np.all(plan.expected_gain > 0)


def test_uniform_takes_the_longest_unvisited() -> None:
    s = known_pages(50)
    plan = plan_cycle(s, 5.0, NOW, policy="uniform", config=NO_RESERVES)
    assert set(plan.index.tolist()) == set(np.argsort(s.last_fetch)[:5].tolist())


def test_nutch_fetches_only_due_pages() -> None:
    s = known_pages(50)
    s.nutch_interval[:] = 40 * DAY  # last fetches are at most 30 days old: nothing due
    assert len(plan_cycle(s, 50.0, NOW, policy="nutch")) == 0
    s.nutch_interval[:5] = DAY
    plan = plan_cycle(s, 50.0, NOW, policy="nutch")
    assert set(plan.index.tolist()) <= set(range(5))


def test_nutch_interval_rule() -> None:
    assert nutch_next_interval(30 * DAY, False) == pytest.approx(42 * DAY)
    assert nutch_next_interval(30 * DAY, True) == pytest.approx(24 * DAY)
    assert nutch_next_interval(NUTCH_MAX_INTERVAL_S, False) == NUTCH_MAX_INTERVAL_S
    assert nutch_next_interval(NUTCH_MIN_INTERVAL_S, True) == NUTCH_MIN_INTERVAL_S


def test_tasks_carry_reason_gain_and_cost() -> None:
    s = known_pages(30)
    plan = plan_cycle(s, 4.0, NOW, config=NO_RESERVES)
    tasks = plan.to_tasks([f"https://example.com/{i}" for i in range(30)])
    assert len(tasks) == 4
    assert set(tasks[0]) == {"page", "reason", "expected_gain", "cost", "priority"}
    assert tasks[0]["page"].startswith("https://")
    assert all(t["reason"] == "score" and t["cost"] == 1.0 for t in tasks)


def test_bad_arguments() -> None:
    s = known_pages(5)
    with pytest.raises(ValueError):
        plan_cycle(s, 1.0, NOW, policy="random")
    with pytest.raises(ValueError):
        PlannerConfig(discovery_share=0.7, reestimate_share=0.4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_top_ranks_like_a_stable_sort_with_and_without_the_sampled_threshold(
    dtype: type[np.floating],
) -> None:
    from recrawl.plan.planner import top_pages

    rng = np.random.default_rng(3)
    for n, k in ((1000, 40), (1_200_000, 5000)):
        # few distinct values, so ties are common; a third not candidates
        pr = rng.integers(0, 3000, n).astype(dtype)
        pr[rng.random(n) < 0.3] = 0.0
        cand = np.flatnonzero(pr > 0)
        expect = cand[np.argsort(-pr[cand], kind="stable")]
        got = top_pages(pr, k)
        assert got.size >= k
        # the k-th best priority and everything above it, in stable order
        np.testing.assert_array_equal(pr[got], pr[expect[: got.size]])
        if got.size > k:  # the sampled threshold: ties in page order
            np.testing.assert_array_equal(got, expect[: got.size])


def test_a_page_joining_a_running_crawl_is_revisited_until_it_is_known() -> None:
    s = known_pages(100)
    new, old = 7, 8
    # fetched once when discovered five days ago: no revisit yet
    s.ev_nc[new] = s.ev_tc[new] = s.ev_nu[new] = s.ev_tu[new] = 0.0
    s.first_seen[new] = NOW - 5 * DAY
    # known for a year, but its evidence has faded to less than a revisit
    s.ev_nc[old], s.ev_tc[old], s.ev_nu[old], s.ev_tu[old] = 0.0, 0.0, 0.5, 100.0
    s.value[:] = 1.0
    budget = 5.0  # fetches a day for 100 pages: one visit every 20 days on average
    on = dataclasses.replace(NO_RESERVES, probe_days=0.0)  # the learning floor alone
    learning = reallocate(s, budget, NOW, config=on)
    off = dataclasses.replace(on, learning_boost=0.0)
    plain = reallocate(s, budget, NOW, config=off)
    # its group's guess (a fast rate) alone would never revisit it ...
    assert plain.visits_per_day[new] == 0.0
    # ... the learning floor revisits it at twice the average page's rate: every 10 days
    assert learning.visits_per_day[new] == pytest.approx(2 * budget / 100)
    # every other page keeps its allocation, the long-known one included
    others = np.arange(100) != new
    assert np.array_equal(learning.visits_per_day[others], plain.visits_per_day[others])
    # three revisits of evidence end the learning phase
    s.ev_nc[new], s.ev_tc[new], s.ev_nu[new], s.ev_tu[new] = 1.0, 10.0, 2.0, 20.0
    after = reallocate(s, budget, NOW, config=on)
    assert after.visits_per_day[new] == reallocate(s, budget, NOW, config=off).visits_per_day[new]
    # a crawl that has just started: every page is new, the allocation's guesses stand
    fresh = known_pages(100)
    fresh.ev_nc[:] = fresh.ev_tc[:] = fresh.ev_nu[:] = fresh.ev_tu[:] = 0.0
    fresh.first_seen[:] = NOW - DAY
    assert np.array_equal(
        reallocate(fresh, budget, NOW, config=on).visits_per_day,
        reallocate(fresh, budget, NOW, config=off).visits_per_day,
    )
    with pytest.raises(ValueError, match="learning"):
        PlannerConfig(learning_boost=-1.0)


def test_a_url_that_waited_in_the_discovery_queue_is_learned_from_its_first_fetch() -> None:
    s = known_pages(100)
    s.value[:] = 1.0
    late = 7
    # registered 200 days ago, fetched for the first time 5 days ago
    s.first_seen[late] = NOW - 200 * DAY
    s.last_fetch[late] = NOW - 5 * DAY
    s.ev_nc[late] = s.ev_tc[late] = s.ev_nu[late] = s.ev_tu[late] = 0.0
    budget = 5.0
    on = dataclasses.replace(NO_RESERVES, probe_days=0.0)
    off = dataclasses.replace(on, learning_boost=0.0)
    # it joined the crawl at its first fetch: the learning floor applies
    assert reallocate(s, budget, NOW, config=on).visits_per_day[late] == pytest.approx(
        2 * budget / 100
    )
    assert reallocate(s, budget, NOW, config=off).visits_per_day[late] < 2 * budget / 100
    # one revisit, 150 days after a first fetch 155 days ago: it has been known long
    # enough to be learned at the floor, whatever its registration says
    s.ev_nu[late], s.ev_tu[late] = 0.9, 150.0 * 0.9  # as decayed by a 180-day half-life
    assert np.array_equal(
        reallocate(s, budget, NOW, config=on).visits_per_day,
        reallocate(s, budget, NOW, config=off).visits_per_day,
    )


@settings(max_examples=200, deadline=None)
@given(
    intervals=st.lists(st.floats(0.01, 400.0), min_size=1, max_size=15),
    changed=st.lists(st.booleans(), min_size=15, max_size=15),
    half_life=st.sampled_from([7.0, 30.0, 180.0, math.inf]),
)
def test_the_first_fetch_read_from_the_evidence_is_never_later_than_the_true_one(
    intervals: list[float], changed: list[bool], half_life: float
) -> None:
    from recrawl.estimate.rates import update_evidence
    from recrawl.plan.planner import joined_at

    ev = (0.0, 0.0, 0.0, 0.0)
    for d, c in zip(intervals, changed, strict=False):
        ev = update_evidence(*ev, d, c, half_life_days=half_life)
    s = PlanPages.new(1, now=0.0)
    s.ev_nc[0], s.ev_tc[0], s.ev_nu[0], s.ev_tu[0] = ev
    s.last_fetch[0] = NOW
    first_fetch = NOW - sum(intervals) * DAY
    joined = float(joined_at(s, slice(None), half_life)[0])
    assert joined <= first_fetch + 1e-6 * DAY  # never newer than it is
    if half_life == math.inf:
        assert joined == pytest.approx(first_fetch, abs=1e-3)


def test_a_new_page_that_changed_at_every_revisit_is_revisited_soon_after() -> None:
    s = known_pages(100)
    page = 7
    s.value[:] = 1.0
    budget = 2.0  # fetches a day for 100 pages: one visit every 50 days on average
    off = dataclasses.replace(NO_RESERVES, probe_days=0.0)

    def visits(config: PlannerConfig = NO_RESERVES, b: float = budget) -> float:
        return float(reallocate(s, b, NOW, config=config).visits_per_day[page])

    def revisits(*changed: bool) -> None:  # fetched, then revisited 5 days apart
        ev = (0.0, 0.0, 0.0, 0.0)
        for c in changed:
            ev = update_evidence(*ev, 5.0, c)
        s.ev_nc[page], s.ev_tc[page], s.ev_nu[page], s.ev_tu[page] = ev

    # discovered a week ago and fetched once: the allocation (with the
    # learning floor) leaves it for weeks ...
    s.first_seen[page] = NOW - 7 * DAY
    revisits()
    assert visits(off) < 1 / (PROBE_GAP * 5.0)
    # ... the probe revisits it five days after its fetch
    assert visits() == pytest.approx(1 / 5.0)
    # that revisit found a change: once more, five days later
    revisits(True)
    assert visits() == pytest.approx(1 / 5.0)
    # two changed revisits (decayed evidence: 1.98 of them), or one without
    # a change, end it
    revisits(True, True)
    assert 1.9 < s.ev_nc[page] < 2.0
    assert visits() == visits(off)
    revisits(True, False)
    assert visits() == visits(off)
    revisits()
    # where the interval is short already (10 days at this budget, under
    # PROBE_GAP × 5 days), no extra revisit
    assert 1 / 20 <= visits(off, b=5.0) < 1 / 5
    assert visits(b=5.0) == visits(off, b=5.0)
    # a page known for longer than the window is the allocation's alone
    s.first_seen[page] = NOW - 60 * DAY
    assert visits() == visits(off)
    s.first_seen[page] = NOW - 7 * DAY
    # every other page keeps its allocation
    others = np.arange(100) != page
    np.testing.assert_array_equal(
        reallocate(s, budget, NOW, config=NO_RESERVES).visits_per_day[others],
        reallocate(s, budget, NOW, config=off).visits_per_day[others],
    )
    # a crawl that has just started: every page is new, none is probed, even
    # where only a minority (30 low-value pages) would be left for weeks
    fresh = known_pages(100)
    fresh.ev_nc[:] = fresh.ev_tc[:] = fresh.ev_nu[:] = fresh.ev_tu[:] = 0.0
    fresh.first_seen[:] = NOW - DAY
    fresh.value[:] = 1.0
    fresh.value[:70] = 8.0
    alone = dataclasses.replace(NO_RESERVES, learning_boost=0.0)
    plain = reallocate(fresh, 5.0, NOW, config=dataclasses.replace(alone, probe_days=0.0))
    assert np.count_nonzero(plain.visits_per_day < 1 / 20) == 30
    np.testing.assert_array_equal(
        reallocate(fresh, 5.0, NOW, config=alone).visits_per_day, plain.visits_per_day
    )
    # a page without value gets none
    s.value[page] = 0.0
    assert visits() == 0.0
    for bad in ({"probe_days": -1.0}, {"probe_revisits": 1.5}, {"probe_window_days": -1.0}):
        with pytest.raises(ValueError, match="probe"):
            PlannerConfig(**bad)  # type: ignore[arg-type]


def test_known_rates_replace_the_estimates_and_their_learning() -> None:
    s = known_pages(100)
    s.value[:] = 1.0
    budget = 5.0
    rates = np.full(100, 0.02)
    rates[:10] = 5.0  # ten pages known to change five times a day: too fast to keep fresh
    # a page new to the crawl, which the estimates would have revisited to learn
    s.ev_nc[20] = s.ev_tc[20] = s.ev_nu[20] = s.ev_tu[20] = 0.0
    s.first_seen[20] = NOW - 2 * DAY
    m = reallocate(s, budget, NOW, config=NO_RESERVES, rates=rates)
    assert np.array_equal(m.rate_per_day, rates) and not np.any(m.rate_sd_per_day)
    assert not np.any(m.visits_per_day[:10])
    # the other 90 pages, equal in rate, value and cost, share the budget equally
    assert m.visits_per_day[10:] == pytest.approx(budget / 90)
    # estimated, the new page is held at the learning floor, twice the average page's rate
    estimated = reallocate(s, budget, NOW, config=NO_RESERVES)
    assert estimated.visits_per_day[20] == pytest.approx(2 * budget / 100)
    for bad in (rates[:50], np.zeros(100), np.full(100, np.nan)):
        with pytest.raises(ValueError, match="one positive rate per page"):
            reallocate(s, budget, NOW, rates=bad)


def _uniform_pages(n: int = 50) -> PlanPages:
    s = PlanPages.new(n)
    s.never_fetched[:] = False
    s.ev_nc[:] = 2.0
    s.ev_tc[:] = 5.0
    s.ev_nu[:] = 2.0
    s.ev_tu[:] = 5.0
    return s


@pytest.mark.parametrize("field", ["ev_nc", "ev_tc", "ev_nu", "ev_tu"])
@pytest.mark.parametrize("bad", [math.inf, math.nan, -2.0])
@pytest.mark.parametrize("policy", ["recrawl", "greedy", "proportional"])
def test_one_page_of_bad_evidence_does_not_stop_the_plan(
    field: str, bad: float, policy: str
) -> None:
    s = _uniform_pages()
    getattr(s, field)[7] = bad
    rng = np.random.default_rng(0)
    plan = plan_cycle(s, 10.0, 5 * DAY, policy=policy, rng=rng)
    assert len(plan) == 10 and plan.spent == pytest.approx(10.0)
    m = reallocate(s, 240.0, 5 * DAY, policy=policy)
    assert np.all(np.isfinite(m.rate_per_day)) and np.all(m.rate_per_day > 0)
    # the other pages keep the rates they have without the bad page
    ok = np.arange(50) != 7
    clean = reallocate(_uniform_pages(), 240.0, 5 * DAY, policy=policy)
    assert m.rate_per_day[ok] == pytest.approx(clean.rate_per_day[ok], rel=1e-2)


@pytest.mark.parametrize("policy", ["recrawl", "greedy", "uniform", "proportional", "nutch"])
def test_no_pages_give_an_empty_plan(policy: str) -> None:
    s = PlanPages.new(0)
    m = reallocate(s, 5.0, 0.0, policy=policy)
    assert m.rate_per_day.shape == m.visits_per_day.shape == (0,)
    for objective in ("freshness", "events"):
        plan = plan_cycle(s, 5.0, 0.0, policy=policy, objective=objective)  # type: ignore[arg-type]
        assert len(plan) == 0 and plan.spent == 0.0 and plan.to_tasks() == []


def test_page_state_refuses_a_per_page_array_of_the_wrong_length() -> None:
    s = PlanPages.new(5)
    fields = {f.name: getattr(s, f.name) for f in dataclasses.fields(s)}
    with pytest.raises(ValueError, match=r"active must have shape \(5,\)"):
        PlanPages(**{**fields, "active": np.zeros(3, dtype=bool)})
    with pytest.raises(ValueError, match="ev_tu"):
        PlanPages(**{**fields, "ev_tu": np.zeros(6)})
    # omitted, every page is active
    del fields["active"]
    assert PlanPages(**fields).active.tolist() == [True] * 5
    assert PlanPages(**{**fields, "active": np.zeros(5, dtype=bool)}).active.sum() == 0


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"cycle_hours": math.nan}, "cycle_hours"),
        ({"cycle_hours": math.inf}, "cycle_hours"),
        ({"cycle_hours": 0.0}, "cycle_hours"),
        ({"verify_share": math.nan}, "shares"),
        ({"discovery_share": math.inf}, "shares"),
        ({"discovery_share": -0.1}, "shares"),
        ({"max_per_host": 0}, "max_per_host"),
        ({"max_per_host": -1}, "max_per_host"),
        ({"max_per_host": 2.5}, "max_per_host"),
        ({"max_per_host": True}, "max_per_host"),
        ({"half_life_days": 0.0}, "half_life_days"),
        ({"half_life_days": -1.0}, "half_life_days"),
        ({"half_life_days": math.nan}, "half_life_days"),
        ({"reestimate_after_days": -1.0}, "reestimate_after_days"),
        ({"reestimate_after_days": math.nan}, "reestimate_after_days"),
        ({"greedy_interval_days": 0.0}, "greedy_interval_days"),
        ({"greedy_interval_days": -1.0}, "greedy_interval_days"),
        ({"greedy_interval_days": math.nan}, "greedy_interval_days"),
        ({"learning_boost": math.nan}, "learning"),
        ({"learning_revisits": math.inf}, "learning"),
        ({"probe_days": math.nan}, "probe"),
        ({"change_hazard_per_day": -0.1}, "change_hazard_per_day"),
        ({"change_hazard_per_day": math.inf}, "change_hazard_per_day"),
        ({"change_hazard_per_day": math.nan}, "change_hazard_per_day"),
    ],
)
def test_planner_config_refuses_bad_settings(bad: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PlannerConfig(**bad)  # type: ignore[arg-type]


def test_planner_config_accepts_the_documented_limits() -> None:
    cfg = PlannerConfig(
        half_life_days=math.inf,  # no decay
        reestimate_after_days=math.inf,  # never
        max_per_host=np.int64(2),  # type: ignore[arg-type]
        greedy_interval_days=0.5,
        discovery_share=1.0,
        reestimate_share=0.0,
        verify_share=0.0,
    )
    s = known_pages(50)
    assert len(plan_cycle(s, 10.0, NOW, config=cfg, policy="greedy")) > 0


def test_reallocate_refuses_an_unknown_policy() -> None:
    s = known_pages(20)
    with pytest.raises(ValueError, match="unknown policy 'x'"):
        reallocate(s, 5.0, NOW, policy="x")
    with pytest.raises(ValueError, match="unknown policy"):
        plan_cycle(s, 5.0, NOW, policy="x")


@pytest.mark.parametrize("rate", [1e-8, 1e-10, 1e-13])
def test_greedy_plans_pages_that_change_very_slowly(rate: float) -> None:
    s = known_pages(50)
    s.value[:] = 1.0
    s.last_fetch[:] = NOW - 20 * DAY
    rates = np.full(50, rate)
    rates[:5] *= 10.0  # five change ten times faster: they come first
    for policy in ("greedy", "recrawl"):
        m = reallocate(s, 240.0, NOW, policy=policy, config=NO_RESERVES, rates=rates)
        plan = plan_cycle(s, 10.0, NOW, policy=policy, config=NO_RESERVES, model=m)
        assert len(plan) == 10 and plan.spent == pytest.approx(10.0), policy
        assert np.all(plan.priority > 0)
        if policy == "greedy":
            assert set(range(5)) <= set(plan.index[:5].tolist())


@pytest.mark.parametrize("policy", ["recrawl", "greedy", "uniform", "proportional", "nutch"])
@pytest.mark.parametrize("objective", ["freshness", "events"])
def test_plan_cycle_raises_no_runtime_warning(policy: str, objective: str) -> None:
    import warnings

    s = PlanPages.new(20)
    s.never_fetched[10:] = False
    s.last_fetch[:] = -40 * DAY
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan = plan_cycle(s, 15.0, 0.0, policy=policy, objective=objective)  # type: ignore[arg-type]
    assert len(plan) == 15 and np.all(np.isfinite(plan.expected_gain))


@pytest.mark.parametrize("policy", ["recrawl", "greedy", "uniform", "proportional", "nutch"])
def test_a_fetch_reported_after_now_does_not_stop_the_plan(policy: str) -> None:
    # a fetcher's clock ahead of the planner's, or a plan asked for a past time
    s = known_pages(60)
    s.last_fetch[:] = NOW - 60 * DAY  # every page due, nutch's 30 days included
    s.last_fetch[:10] = NOW + 3600.0
    plan = plan_cycle(s, 20.0, NOW, policy=policy, config=NO_RESERVES)
    assert len(plan) > 0 and np.all(np.isfinite(plan.expected_gain))
    assert np.all(plan.expected_gain >= 0)


# -- cheap signals: a trusted sitemap's lastmod -------------------------------------------


def test_a_page_known_stale_goes_first_and_one_vouched_for_waits() -> None:
    s = known_pages(100)
    model = reallocate(s, 10.0, NOW, config=NO_RESERVES)
    overdue = (NOW - s.last_fetch) / DAY * model.visits_per_day
    order = np.argsort(-overdue)
    top5 = order[:5]
    plan = plan_cycle(s, 5.0, NOW, config=NO_RESERVES, model=model)
    assert set(plan.index.tolist()) == set(top5.tolist())
    # the most overdue page is vouched for until now; a page far down the list
    # (but followed) is known stale
    followed = order[model.visits_per_day[order] > 0]
    late = int(followed[-1])
    s.checked_at = np.full(len(s), np.nan)
    s.checked_at[top5[0]] = NOW
    s.known_stale = np.zeros(len(s), dtype=bool)
    s.known_stale[late] = True
    plan = plan_cycle(s, 5.0, NOW, config=NO_RESERVES, model=model)
    chosen = plan.index.tolist()
    assert chosen[0] == late and int(top5[0]) not in chosen
    assert set(chosen) == {late, *top5[1:].tolist()}
    # its expected gain is that of a page stale for certain: the whole fresh time ahead
    gain = freshness_gain(model.rate_per_day[late], np.inf, 1.0 / model.visits_per_day[late])
    assert plan.expected_gain[0] == pytest.approx(gain * s.value[late])


def test_a_known_stale_page_too_fast_to_follow_is_still_left_alone() -> None:
    s = known_pages(100)
    model = reallocate(s, 10.0, NOW, config=NO_RESERVES)
    dropped = np.flatnonzero(model.visits_per_day == 0)
    assert dropped.size  # rates up to two a day: the fastest are not followed
    s.known_stale = np.zeros(len(s), dtype=bool)
    s.known_stale[dropped] = True
    plan = plan_cycle(s, 5.0, NOW, config=NO_RESERVES, model=model)
    assert not set(plan.index.tolist()) & set(dropped.tolist())


@pytest.mark.parametrize("policy", ["greedy", "uniform", "nutch", "proportional"])
def test_every_policy_takes_a_known_stale_page(policy: str) -> None:
    s = known_pages(50)
    s.nutch_interval[:] = 40 * DAY  # nothing due for nutch
    newest = int(np.argmax(s.last_fetch))  # the last any blind policy would take
    s.ev_nc[newest], s.ev_nu[newest] = 1.0, 49.0  # slow enough to be worth following
    s.known_stale = np.zeros(len(s), dtype=bool)
    s.known_stale[newest] = True
    plan = plan_cycle(s, 3.0, NOW, policy=policy, config=NO_RESERVES)
    assert newest in plan.index.tolist()


def test_the_signal_arrays_must_match_the_pages() -> None:
    s = PlanPages.new(5)
    fields = {f.name: getattr(s, f.name) for f in dataclasses.fields(s)}
    with pytest.raises(ValueError, match=r"checked_at must have shape \(5,\)"):
        PlanPages(**{**fields, "checked_at": np.zeros(4)})
    with pytest.raises(ValueError, match="known_stale"):
        PlanPages(**{**fields, "known_stale": np.zeros(6, dtype=bool)})


def _starved_page_and_its_group(hazard: float) -> tuple[PlanPages, PlannerConfig]:
    """60 pages changing every 5 to 200 days, revisited every 20 days, and a
    last page that changed at each of its ten 2-day revisits: too fast to keep
    fresh at this budget, so the optimum leaves it (reserves off)."""
    rng = np.random.default_rng(0)
    n = 61
    s = PlanPages.new(n, now=NOW - 400 * DAY, site=np.zeros(n, dtype=np.int64), n_sites=1)
    s.never_fetched[:] = False
    s.ev_bins = np.zeros((n, BIN_COLUMNS), dtype=np.float32)
    rate = np.exp(rng.uniform(math.log(1 / 200), math.log(1 / 5), n - 1))
    group = np.arange(n - 1)
    for _ in range(15):
        changed = rng.random(n - 1) < -np.expm1(-rate * 20.0)
        update_evidence_arrays(
            s.ev_nc, s.ev_tc, s.ev_nu, s.ev_tu, group, np.full(n - 1, 20.0), changed,
            bins=s.ev_bins,
        )  # fmt: skip
    for _ in range(10):
        update_evidence_arrays(
            s.ev_nc, s.ev_tc, s.ev_nu, s.ev_tu, [n - 1], [2.0], [True], bins=s.ev_bins
        )
    s.last_fetch[:] = NOW - rng.uniform(0, 20, n) * DAY
    s.last_fetch[-1] = NOW
    return s, dataclasses.replace(NO_RESERVES, change_hazard_per_day=hazard)


def test_a_page_left_as_too_fast_is_visited_again_and_left_again_if_still_fast() -> None:
    budget = 61 * 0.05  # one fetch per page every 20 days on average
    s, cfg = _starved_page_and_its_group(PlannerConfig().change_hazard_per_day)
    _, without = _starved_page_and_its_group(0.0)
    assert reallocate(s, budget, NOW, config=cfg).visits_per_day[-1] == 0.0
    # unvisited for 230 days, the chance its rate jumped since (1 − e^(−230/730)
    # ≈ 27 %) earns it visits again; without the hazard (and without the
    # re-estimation reserve) it would still be left alone
    later = NOW + 230 * DAY
    assert reallocate(s, budget, later, config=without).visits_per_day[-1] == 0.0
    again = reallocate(s, budget, later, config=cfg)
    assert again.visits_per_day[-1] > 0.0
    assert again.rate_per_day[-1] < 0.5 * reallocate(s, budget, NOW, config=cfg).rate_per_day[-1]
    # a visit that finds a change (its rate stayed fast) takes visits away from
    # it again; one that finds none (its rate fell) gives it more
    after = {}
    for changed in (True, False):
        t = copy.deepcopy(s)
        update_evidence_arrays(
            t.ev_nc, t.ev_tc, t.ev_nu, t.ev_tu, [60], [230.0], [changed], bins=t.ev_bins
        )
        t.last_fetch[-1] = later
        after[changed] = reallocate(t, budget, later, config=cfg).visits_per_day[-1]
    assert after[True] < again.visits_per_day[-1] < after[False]

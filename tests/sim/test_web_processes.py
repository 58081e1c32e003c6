"""SimWeb's change processes (poisson, bursts, business hours, rate jump) and
pages that appear later (issue 26, item 1)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import numpy as np
import pytest

from recrawl import ConfigError
from recrawl.clock import ManualClock
from recrawl.observe.traces import load_traces
from recrawl.sim.web import (
    PageGroup,
    RequestRecord,
    SimWeb,
    SiteSpec,
    read_scenario,
    write_ground_truth,
)

T0 = 1_700_000_000.0  # a Tuesday, 22:13:20 UTC
DAY = 86400.0


def _all_changes(web: SimWeb, site: str, n: int) -> list[np.ndarray]:
    return [web.change_times(site, f"/p/{i}") for i in range(n)]


def _digest(web: SimWeb, names: list[str], sizes: list[int]) -> str:
    h = hashlib.sha256()
    for name, n in zip(names, sizes, strict=True):
        for times in _all_changes(web, name, n):
            h.update(np.round(times - T0, 3).tobytes())
            h.update(b"|")
        h.update(np.round(web.rates(name), 9).tobytes())
    return h.hexdigest()


def _default_specs() -> list[SiteSpec]:
    return [
        SiteSpec("a"),
        SiteSpec("b", groups=[PageGroup("x", 30, 2.0), PageGroup("y", 10, 0.1, 0.0)]),
    ]


def test_default_poisson_change_times_unchanged() -> None:
    # Computed with the SimWeb of commit 4be3777, before the processes existed.
    web = SimWeb(_default_specs(), seed=11, origin=T0)
    assert _digest(web, ["a", "b"], [100, 40]) == (
        "66236334dff6cf461e19a543960f2bc17994c700877667474ed5b850f058570a"
    )
    example = read_scenario(Path(__file__).parents[2] / "src/recrawl/data/simweb.toml").sites
    web = SimWeb(example[:6], seed=0, origin=T0)  # the six sites of before
    assert _digest(web, [s.name for s in example[:6]], [s.n_pages for s in example[:6]]) == (
        "36c5db598b7ea265f847da1b5ff6f58da9ae4fe8726ae27a39e950ce6a7e14aa"
    )
    # Saying poisson is the default; another group's process leaves a poisson group alone.
    said = SimWeb([SiteSpec("a", process="poisson"), _default_specs()[1]], seed=11, origin=T0)
    assert _digest(said, ["a", "b"], [100, 40]) == _digest(
        SimWeb(_default_specs(), seed=11, origin=T0), ["a", "b"], [100, 40]
    )
    mixed = SimWeb(
        [
            SiteSpec("a"),
            SiteSpec(
                "b",
                groups=[
                    PageGroup("x", 30, 2.0),
                    PageGroup("y", 10, 0.1, 0.0, process="bursts"),
                ],
            ),
        ],
        seed=11,
        origin=T0,
    )
    plain = SimWeb(_default_specs(), seed=11, origin=T0)
    for i in range(30):
        assert np.array_equal(
            mixed.change_times("b", f"/p/{i}"), plain.change_times("b", f"/p/{i}")
        )
    assert np.array_equal(mixed.rates("b"), plain.rates("b"))


def _rate_check(total: int, expected: float, dispersion: float = 1.0) -> None:
    """``total`` within 4 standard deviations of ``expected`` (Poisson × dispersion)."""
    assert abs(total - expected) < 4 * np.sqrt(expected * dispersion), (total, expected)


def test_poisson_long_run_rate() -> None:
    web = SimWeb([SiteSpec("p", n_pages=400, rate_per_day=1.5, rate_sigma=0.5)], seed=1, origin=T0)
    total = sum(len(c) for c in _all_changes(web, "p", 400))
    _rate_check(total, float(web.rates("p").sum()) * 30)


def test_bursts_keep_the_rate_and_cluster() -> None:
    n, days, m = 400, 60, 5.0
    spec = SiteSpec(
        "b", n_pages=n, rate_per_day=2.0, rate_sigma=0.0, process="bursts", burst_size=m
    )
    web = SimWeb([spec], seed=2, origin=T0, horizon_s=days * DAY)
    changes = _all_changes(web, "b", n)
    total = sum(len(c) for c in changes)
    # compound Poisson: variance = bursts × E[size²] = (rate/m) × (2m² - m)
    _rate_check(total, 2.0 * n * days, dispersion=2 * m - 1)
    assert abs(total / (n * days) - 2.0) < 0.1
    daily = np.array([np.bincount(((c - T0) // DAY).astype(int), minlength=days) for c in changes])
    assert daily.var() > 4 * daily.mean()  # Poisson: equal
    gaps = np.concatenate([np.diff(c) for c in changes])
    short = np.mean(gaps < 3600)  # within a burst (mean 600 s apart) or between bursts (days)
    assert 0.7 < short < 0.9  # (m - 1) / m = 0.8; a Poisson process at 2/day: 0.08
    assert np.median(gaps[gaps < 3600]) < 900 and np.median(gaps[gaps >= 3600]) > DAY / 2
    again = SimWeb([spec], seed=2, origin=T0, horizon_s=days * DAY)
    assert all(
        np.array_equal(a, b) for a, b in zip(changes, _all_changes(again, "b", n), strict=True)
    )


def test_business_hours_only_inside_at_the_daily_average() -> None:
    n, days = 300, 28  # four whole weeks: every open hour of the week four times
    spec = SiteSpec(
        "o",
        n_pages=n,
        rate_per_day=3.0,
        rate_sigma=0.0,
        process="business_hours",
        business_hours=(9, 18),
        utc_offset_h=2,
    )
    web = SimWeb([spec], seed=3, origin=T0, horizon_s=days * DAY)
    times = np.concatenate(_all_changes(web, "o", n))
    _rate_check(times.size, 3.0 * n * days)
    local = [datetime.fromtimestamp(t, UTC) + timedelta(hours=2) for t in times.tolist()]
    assert all(d.weekday() < 5 and 9 <= d.hour < 18 for d in local)
    hours = np.bincount([d.hour for d in local], minlength=24)
    assert hours[9:18].min() > 0.8 * hours[9:18].mean()  # spread over the whole day's hours


def test_rate_jump_before_and_after() -> None:
    n = 300
    spec = SiteSpec(
        "j",
        n_pages=n,
        rate_per_day=1.0,
        rate_sigma=0.0,
        process="rate_jump",
        jump_at_days=10,
        jump_factor=4.0,
    )
    web = SimWeb([spec], seed=4, origin=T0)
    times = np.concatenate(_all_changes(web, "j", n))
    before = int(np.sum(times < T0 + 10 * DAY))
    _rate_check(before, 1.0 * n * 10)
    _rate_check(times.size - before, 4.0 * n * 20)
    assert np.all(web.rates("j") == 1.0)


def test_groups_take_the_sites_process_unless_their_own(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(
        '[[sites]]\nname = "s"\nprocess = "bursts"\nburst_size = 3\n'
        "groups = [\n"
        '  { page_type = "a", n_pages = 5, rate_per_day = 1.0 },\n'
        '  { page_type = "b", n_pages = 5, rate_per_day = 1.0, process = "business_hours",'
        " business_hours = [8, 12] },\n"
        "]\n"
    )
    a, b = read_scenario(path).sites[0].page_groups()
    assert (a.process, a.burst_size) == ("bursts", 3)
    assert (b.process, b.business_hours, b.burst_size) == ("business_hours", (8.0, 12.0), 3)


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ('process = "weekly"', "process"),
        ("burst_size = 0.5", "burst_size"),
        ("burst_gap_s = 0", "burst_gap_s"),
        ("business_hours = [18, 9]", "business_hours"),
        ("business_hours = [9]", "business_hours"),
        ("utc_offset_h = 20", "utc_offset_h"),
        ("jump_at_days = -1", "jump_at_days"),
        ("jump_factor = -2", "jump_factor"),
        ("late_share = 1.5", "late_share"),
        ("late_pages = 500", "late_pages"),
        ("late_pages = 2.5", "late_pages"),
        ("late_pages = 3\nlate_share = 0.1", "late_pages"),
        ("appear_days = [5, 2]", "appear_days"),
        (
            'late_share = 0.1\ngroups = [{ page_type = "a", n_pages = 5, rate_per_day = 1.0,'
            " late_pages = 1 }]",
            "late_share / late_pages",
        ),
        (
            'groups = [{ page_type = "a", n_pages = 5, rate_per_day = 1.0, process = "x" }]',
            "process",
        ),
    ],
)
def test_bad_process_fields_are_named(tmp_path: Path, row: str, field: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(f'[[sites]]\nname = "shop"\n{row}\n')
    with pytest.raises(ConfigError, match=field.replace("/", ".")) as info:
        read_scenario(path)
    assert "shop" in str(info.value)


def test_late_pages_appear_then_count_from_their_appearance(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    spec = SiteSpec(
        "shop",
        n_pages=50,
        rate_per_day=2.0,
        late_pages=10,
        appear_days=(2, 5),
        sitemap="honest",
        feed="rss",
        feed_items=1000,
        listing="fresh",
    )
    with SimWeb([spec], clock=clock, seed=5, origin=T0) as web, httpx.Client() as client:
        everything = web.urls(late=True)
        late = [u for u in everything if web.appears_at(u) is not None]
        assert len(everything) == 50 and len(late) == 10
        assert sorted(web.urls()) == sorted(set(everything) - set(late))
        url = min(late, key=lambda u: web.appears_at(u) or 0.0)
        born = web.appears_at(url)
        assert born is not None and T0 + 2 * DAY <= born <= T0 + 5 * DAY
        path = url.split("/", 3)[3]
        changes = web.change_times(web.sites[0], "/" + path)
        assert changes.size > 0 and np.all(changes > born)

        def seen() -> tuple[int, bool, bool, bool]:
            status = client.get(url).status_code
            sitemap = client.get(web.base_url(web.sites[0]) + "/sitemap.xml").text
            listing = client.get(web.base_url(web.sites[0]) + "/list/0").text
            listing += client.get(web.base_url(web.sites[0]) + "/list/1").text
            feed = client.get(web.base_url(web.sites[0]) + "/feed.xml").text
            return status, f"<loc>{url}</loc>" in sitemap, f'href="{url}"' in listing, url in feed

        clock.advance(born - T0 - 1.0)
        assert seen() == (404, False, False, False)
        assert url not in web.urls()
        clock.advance(2.0)
        assert seen() == (200, True, True, True)
        assert url in web.urls()
        got = client.get(url)
        assert got.headers["ETag"].endswith('-0"')  # new: version 0
        fetched = clock()
        end = float(changes[0]) + 3600.0
        clock.advance(end - fetched)
        # fresh from its fetch (1 s after it appeared) to its first change,
        # out of the time it existed; before it appeared it does not count
        expected = (float(changes[0]) - fetched) / (end - born)
        assert web.freshness_from_log([url], T0, end) == pytest.approx(expected)
        log = [r for r in web.request_log if r.url == url]
        assert [r.status for r in log][:1] == [404] and log[0].served == "not_found"
        with pytest.raises(ValueError, match="exists"):
            web.freshness_from_log([url], T0, born - 10.0)
        # an always-there page next to it weighs its whole window
        other = web.urls()[0]
        one = RequestRecord(T0, 0.0, web.sites[0], "/" + other.split("/", 3)[3], 200, "page", 0)
        both = web.freshness_from_log([url, other], T0, end, log=[*web.request_log, one])
        alone = web.freshness_from_log([other], T0, end, log=[one])
        assert both == pytest.approx(
            (expected * (end - born) + alone * (end - T0)) / ((end - born) + (end - T0))
        )
        written = write_ground_truth(web, tmp_path)
    traces = {t.page: t for t in load_traces(written["changes.jsonl"])}
    assert traces[url].start == pytest.approx(born)
    assert np.allclose(traces[url].changes, changes[changes <= end])
    not_yet = [u for u in late if (web.appears_at(u) or 0.0) > end]
    assert not_yet and not any(u in traces for u in not_yet)
    assert all(traces[u].start == T0 for u in everything if u not in late)


def test_late_share_of_a_group_and_of_a_site() -> None:
    web = SimWeb(
        [
            SiteSpec("s", n_pages=40, late_share=0.25),
            SiteSpec(
                "g",
                groups=[
                    PageGroup("a", 20, 1.0, late_share=0.5, appear_days=(3, 3)),
                    PageGroup("b", 20, 1.0),
                ],
            ),
        ],
        seed=6,
        origin=T0,
        clock=ManualClock(T0),
    ).start()
    try:
        s_late = [u for u in web.urls("s", late=True) if web.appears_at(u) is not None]
        assert len(s_late) == 10
        assert all(T0 <= (web.appears_at(u) or 0.0) <= T0 + 30 * DAY for u in s_late)
        g_late = [u for u in web.urls("g", late=True) if web.appears_at(u) is not None]
        assert len(g_late) == 10 and all(web.page_type(u) == "a" for u in g_late)
        assert {web.appears_at(u) for u in g_late} == {T0 + 3 * DAY}
    finally:
        web.stop()


def test_the_shipped_example_has_a_site_using_the_processes() -> None:
    example = read_scenario(Path(__file__).parents[2] / "src/recrawl/data/simweb.toml").sites
    catalog = next(s for s in example if s.name == "catalog")
    assert [g.process for g in catalog.page_groups()] == [
        "business_hours",
        "bursts",
        "rate_jump",
    ]
    with SimWeb(example, seed=0, origin=T0, clock=ManualClock(T0)) as web:
        late = [u for u in web.urls("catalog", late=True) if web.appears_at(u) is not None]
        assert len(late) == 20 and not set(late) & set(web.urls("catalog"))
        with httpx.Client() as client:
            assert client.get(late[0]).status_code == 404

"""The dashboard, served over real HTTP and rendered in a real headless Chromium."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from typer.testing import CliRunner

from recrawl.cli.main import app as cli_app
from recrawl.config import Settings
from recrawl.engine.engine import Engine, PlanResult
from recrawl.engine.pipeline import prune_log, store_batch
from recrawl.estimate.rates import RateResolution
from recrawl.report.assets import PLOTLY_PATH
from recrawl.report.dashboard import (
    FIGURES,
    REASON_COLOURS,
    SITE_FIGURES,
    dashboard_figures,
    freshness_series,
    read_dashboard,
    render_dashboard,
)
from recrawl.report.window import TimeWindow
from recrawl.service import create_app
from recrawl.service import static as static_assets
from recrawl.store import SQLiteStore
from recrawl.testing.server import ManualClock, serve_in_thread

TOKEN = "write-secret"
EVIL_SITE = "<script>alert('site')</script>"
EVIL_URL = "https://evil.example/<img src=x onerror=alert(1)>"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is missing (`make test` installs it)"
)


def _observations(t0: float) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for day in range(6):
        for i in range(40):
            t = t0 - (6 - day) * 86400 + i * 600
            site, ptype = ("shop.example", "product") if i % 2 else ("news.example", "article")
            out.append(
                {"url": f"https://{site}/{i}", "fetched_at": t, "status": 200, "site": site,
                 "page_type": ptype, "record": {"v": day if i % 4 == 1 else 0},
                 "latency_ms": 120, "bytes_received": 2000}
            )  # fmt: skip
        out.append(
            {"url": EVIL_URL, "fetched_at": t0 - (6 - day) * 86400, "status": 200,
             "site": EVIL_SITE, "record": {"v": day}}
        )  # fmt: skip
    for i in range(1440):  # the last 8 hours: news.example starts pushing back
        t = t0 - 8 * 3600 + i * 20
        site = ("shop.example", "news.example")[i % 2]
        blocked = site == "news.example" and i > 700 and i % 3 == 0
        out.append(
            {"url": f"https://{site}/{i % 40}", "fetched_at": t, "site": site,
             "status": 403 if blocked else 200, "latency_ms": 130, "route": f"pool-{i % 4}"}
        )  # fmt: skip
    return out


@pytest.fixture
def populated(db_path: str) -> Iterator[Engine]:
    clock = ManualClock()
    settings = Settings(token=TOKEN, budget_per_day=500.0)
    store = SQLiteStore(db_path)
    engine = Engine(store, settings, clock=clock)
    store_batch(store, [])  # the store exists before the first write
    yield engine
    store.close()


def _app(engine: Engine) -> Any:
    """The service with the static assets' router mounted."""
    app = create_app(engine, engine.settings)
    if not any(getattr(r, "path", "") == PLOTLY_PATH for r in app.routes):
        app.include_router(static_assets.router())
    return app


def _load(engine: Engine, base: str) -> None:
    t0 = engine.clock()
    body = b"\n".join(orjson.dumps(o) for o in _observations(t0))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.post(f"{base}/v1/observations", content=body, headers=auth)
    assert r.status_code == 200 and not r.json()["rejected"]
    r = httpx.post(f"{base}/v1/urls", json=[{"url": "https://shop.example/new"}], headers=auth)
    assert r.json()["added"] == 1
    if hasattr(engine, "health"):  # a health history of a few hours
        for k in range(16, 0, -1):
            engine.health(at=t0 - k * 1800, record=True)


def _chromium(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    profile = tmp_path / "chromium-profile"
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={profile}", "--window-size=1280,2000",
        "--virtual-time-budget=5000", *args,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90)


def _assert_plots_drawn(dom: str) -> None:
    # plotly draws each figure into <svg class="main-svg"> elements once its JS ran.
    for fig in ("fig-money", "fig-health", "fig-freshness", "fig-plan"):
        assert f'id="{fig}"' in dom, fig
    assert len(re.findall(r'<svg[^>]*class="main-svg"', dom)) >= 8
    assert dom.count('class="point"') >= 4  # bars of the money figure
    assert dom.count('class="js-line"') >= 3  # health of two sites, freshness
    assert 'class="slice' in dom  # the plan split pie
    assert "<script>alert(" not in dom and "<img src=x" not in dom


def test_the_dashboard_escapes_what_users_supplied(populated: Engine) -> None:
    with serve_in_thread(_app(populated)) as base:
        _load(populated, base)
        r = httpx.get(f"{base}/")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        page = r.text
    assert EVIL_SITE not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(&#x27;site&#x27;)&lt;/script&gt;" in page
    # plotly.js by URL, not inline: one <script src>, and the page a small fraction of it
    assert re.findall(r"<script src='([^']+)'>", page) == [PLOTLY_PATH]
    assert len(page.encode()) < 1_000_000
    assert "Where the money goes" in page and "Freshness estimate over time" in page


@pytest.mark.parametrize(("bounded", "warns"), [(30, True), (2, False)])
def test_the_plan_section_says_what_revisits_say_of_the_rates(
    populated: Engine, bounded: int, warns: bool
) -> None:
    t = populated.clock()
    plan = PlanResult(
        at=t, budget=10.0, spent=0.0, tasks=[], rates={},
        resolution=RateResolution(revisited=40, changed_every_revisit=bounded, median_interval_days=47.0),
    )  # fmt: skip
    page = render_dashboard(populated, now=t, plan=plan)
    share = f"{bounded / 40:.0%}"
    assert (
        f"<p>Rates: 40 pages revisited; {bounded} ({share}) changed at every revisit "
        "(median 47 days apart): their rates are only known to exceed about one change in 47 days.</p>"
    ) in page
    assert ("<p class='warn'>At this budget recrawl cannot tell" in page) is warns


def test_freshness_estimate_is_a_fraction_that_drops_between_fetches(populated: Engine) -> None:
    app = create_app(populated, populated.settings)
    with serve_in_thread(app) as base:
        _load(populated, base)
    times, fresh = freshness_series(populated, populated.clock(), points=48, days=6)
    assert len(times) == len(fresh) > 10
    assert all(0.0 <= f <= 1.0 for f in fresh)
    assert max(fresh) > min(fresh)


@needs_chromium
def test_the_served_dashboard_draws_its_plots_in_a_headless_browser(
    populated: Engine, tmp_path: Path
) -> None:
    with serve_in_thread(_app(populated)) as base:
        _load(populated, base)
        dom = _chromium(["--dump-dom", f"{base}/"], tmp_path)
        assert dom.returncode == 0, dom.stderr[-2000:]
        png = tmp_path / "dashboard.png"
        shot = _chromium([f"--screenshot={png}", f"{base}/"], tmp_path)
        assert shot.returncode == 0, shot.stderr[-2000:]
    _assert_plots_drawn(dom.stdout)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 2000)
    assert len(data) > 100_000  # a page of plots, not a blank one


@needs_chromium
@pytest.mark.parametrize("inline", [False, True])
def test_the_report_renders_offline_with_plotly_beside_it_or_inline(
    populated: Engine, db_path: str, tmp_path: Path, inline: bool
) -> None:
    with serve_in_thread(_app(populated)) as base:
        _load(populated, base)
    cfg = tmp_path / "recrawl.toml"
    cfg.write_text("budget_per_day = 500\n")
    out = tmp_path / "report.html"
    args = ["report", "--db", db_path, "--config", str(cfg), "--out", str(out), "--days", "3"]
    res = CliRunner().invoke(cli_app, args + (["--inline"] if inline else []))
    assert res.exit_code == 0, res.output
    page = out.read_text(encoding="utf-8")
    assert EVIL_SITE not in page and "(3 days)" in page
    scripts = re.findall(r"<script src='([^']+)'>", page)
    assert scripts == ([] if inline else ["plotly.min.js"])
    assert (tmp_path / "plotly.min.js").exists() is not inline
    assert (len(page) > 4_000_000) is inline
    # what the revisits say of the rates, next to the plan
    assert re.search(r"<p>Rates: \d+ pages revisited; \d+ \(\d+%\) changed at every revisit", page)
    dom = _chromium(["--dump-dom", out.as_uri()], tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    _assert_plots_drawn(dom.stdout)


def test_the_report_refuses_a_range_it_cannot_show(
    populated: Engine, db_path: str, tmp_path: Path
) -> None:
    _loaded(populated)
    out = tmp_path / "report.html"
    for bad in (["--since", "yesterday"], ["--days", "2", "--since", "2026-01-01"]):
        res = CliRunner().invoke(cli_app, ["report", "--db", db_path, "--out", str(out), *bad])
        assert res.exit_code == 2, res.output
        assert not out.exists()


def test_the_freshness_chart_reads_the_same_after_a_prune(tmp_path: Path) -> None:
    """A pruned log's last successful fetch still dates each page's copy."""
    import random

    from recrawl.observe.observation import parse_observation

    day, now = 86400.0, 100 * 86400.0
    rng = random.Random(0)
    observations = []
    for p in range(200):  # revisited every 20 days; a prune keeps the last 10
        t = rng.uniform(0, 20 * day)
        while t < now:
            raw = {"url": f"https://x.example/{p}", "fetched_at": t, "status": 200,
                   "record": {"v": int(t // (30 * day))}, "id": f"{p}-{t}"}  # fmt: skip
            observations.append(parse_observation(raw))
            t += 20 * day
    with SQLiteStore(tmp_path / "d.db") as store:
        store_batch(store, sorted(observations, key=lambda o: o.fetched_at))
        engine = Engine(store, clock=lambda: now)
        _, before = freshness_series(engine, now, points=8)
        prune_log(store, now - 10 * day)
        _, after = freshness_series(engine, now, points=8)
    assert after == pytest.approx(before, abs=1e-9)


# -- the fixes: each shows what a user saw before --------------------------------------------


def _figures(engine: Engine, now: float, **kw: Any) -> dict[str, Any]:
    window = TimeWindow.choose(now, _data_end(engine), **kw)
    return {
        k: f.to_plotly_json()
        for k, f in dashboard_figures(
            read_dashboard(engine, window, plan=kw_plan(engine, now))
        ).items()
    }


def kw_plan(engine: Engine, now: float) -> PlanResult | None:
    try:
        return engine.plan(now=now)
    except ValueError:
        return None


def _data_end(engine: Engine) -> float | None:
    import numpy as np

    last = np.asarray(engine.store.page_columns()["last_fetch"], dtype=float)
    return float(np.nanmax(last)) if (~np.isnan(last)).any() else None


def _loaded(engine: Engine) -> Engine:
    with serve_in_thread(_app(engine)) as base:
        _load(engine, base)
    return engine


def test_the_plan_panel_has_one_colour_per_reason_and_no_stray_legend(populated: Engine) -> None:
    figs = _figures(_loaded(populated), populated.clock())
    pie, bar = figs["fig-plan"]["data"]
    reasons = list(pie["labels"])
    assert len(reasons) >= 2
    assert list(bar["x"]) == reasons
    assert list(pie["marker"]["colors"]) == list(bar["marker"]["color"])  # same reason, same colour
    assert len(set(pie["marker"]["colors"])) == len(reasons)
    assert [r for r in reasons if r in REASON_COLOURS] == [
        r for r in REASON_COLOURS if r in reasons
    ]
    # the legend lists the reasons (the pie's labels), and nothing else
    assert bar.get("showlegend") is False and "name" not in bar


def test_the_pie_labels_stay_inside_the_pie_below_its_title(populated: Engine) -> None:
    fig = _figures(_loaded(populated), populated.clock())["fig-plan"]
    pie = fig["data"][0]
    title = next(a for a in fig["layout"]["annotations"] if a["text"] == "Tasks by reason")
    assert pie["textposition"] == "inside"
    assert pie["domain"]["y"][1] < title["y"]


def test_an_empty_health_chart_shows_the_ranges_dates_and_says_why(db_path: str) -> None:
    now = 1_770_000_000.0
    with SQLiteStore(db_path) as store:
        store_batch(store, [])
        fig = _figures(Engine(store, clock=lambda: now), now)["fig-health"]
    assert not fig["data"]
    axis = fig["layout"]["xaxis"]
    assert axis["type"] == "date"  # not a numeric −1…6 axis
    assert [a.timestamp() for a in axis["range"]] == [now - 7 * 86400, now]
    texts = " ".join(a["text"] for a in fig["layout"]["annotations"])
    assert "no health score in this range" in texts


def test_old_data_is_called_stale_and_freshness_shown_at_its_end(populated: Engine) -> None:
    _loaded(populated)
    end = _data_end(populated)
    assert end is not None
    now = end + 400 * 86400  # a year later, nothing fetched since
    live = render_dashboard(populated, now=end)
    old = render_dashboard(populated, now=now)
    assert "The data is stale" not in live and "freshness now (est.)" in live
    assert "The data is stale: the newest fetch is from" in old and "400 days before now" in old
    assert "freshness now" not in old and "freshness at the data&#x27;s end (est.)" in old

    def kpi(page: str) -> float:
        m = re.search(r"<b>([\d.]+)%</b>freshness", page)
        assert m, "freshness KPI"
        return float(m.group(1))

    assert kpi(old) == kpi(live) > 20  # as of the data's end, not 1.3 % decayed to now
    # and the charts cover the days before the data's end
    assert f"to {datetime.fromtimestamp(end, UTC):%Y-%m-%d %H:%M} UTC" in old


def test_an_empty_store_says_so_on_every_chart(db_path: str) -> None:
    with SQLiteStore(db_path) as store:
        store_batch(store, [])
        engine = Engine(store, clock=lambda: 1_770_000_000.0)
        page = render_dashboard(engine)
        figs = _figures(engine, 1_770_000_000.0)
    assert "The store holds no fetch yet" in page
    for name, fig in figs.items():
        texts = " ".join(a.get("text", "") for a in fig["layout"].get("annotations", []))
        assert re.search(r"\bno\b", texts), name


# -- the time view ---------------------------------------------------------------------------


def test_the_range_follows_the_query(populated: Engine) -> None:
    _loaded(populated)
    now = populated.clock()
    day = datetime.fromtimestamp(now - 2 * 86400, UTC).strftime("%Y-%m-%d")
    week = render_dashboard(populated, now=now)
    two = render_dashboard(populated, now=now, query={"days": "2"})
    span = render_dashboard(populated, now=now, query={"from": day})
    bad = render_dashboard(populated, now=now, query={"days": "soon"})
    assert "(7 days)" in week and "(2 days)" in two
    assert f"{day} 00:00 UTC to" in span
    assert "The time range asked for was not used: days must be a number." in bad
    assert "(7 days)" in bad
    assert "name='from'" in week  # the picker, on the served page


def test_the_time_view_has_a_series_per_site_and_page_type(populated: Engine) -> None:
    figs = _figures(_loaded(populated), populated.clock())
    spend = figs["fig-spend"]["data"]
    bars = [t for t in spend if t["type"] == "bar"]
    assert {t["name"] for t in bars} >= {"shop.example", "news.example"}
    budget = next(t for t in spend if t["type"] == "scatter")
    assert budget["name"].startswith("budget") and set(budget["y"]) == {500.0}  # per day
    waste = {t["name"] for t in figs["fig-waste"]["data"]}
    assert {"shop.example · product", "news.example · article"} <= waste
    signals = figs["fig-signals"]["data"]
    news_hard = next(t for t in signals if t["name"] == "news.example" and t["yaxis"] == "y")
    # news.example answers 403 to a third of its requests in the last hours
    assert max(v for v in news_hard["y"] if v is not None) > 0.1


# -- in a headless browser, on a demo store --------------------------------------------------

DEMO_START = 1_767_225_600


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, PlanResult]]:
    """The demo's data, smaller: the shipped sample log, then six days of two
    sites of which one pushes back for four hours, scored every two hours on the last day."""
    import numpy as np

    from recrawl.config import load_settings
    from recrawl.observe.observation import parse_observation
    from recrawl.sim.health import DAY, HOUR, Effect, HealthScenario, SiteProfile
    from recrawl.testing import data_file

    settings = load_settings(data_file("demo.toml")).model_copy(update={"token": TOKEN})
    store = SQLiteStore(tmp_path_factory.mktemp("demo") / "demo.db")
    engine = Engine(store, settings)
    with data_file("sample-fetches.jsonl").open(encoding="utf-8") as f:
        engine.ingest_lines(f)
    item = {"item": (1.0, 80_000, ("title", "price"))}
    start = DEMO_START + 21 * DAY
    wave = (start + 5 * DAY + 13 * HOUR, start + 5 * DAY + 17 * HOUR)
    sc = HealthScenario(
        sites=[
            SiteProfile("calm.example", 40, item, challenge_rate=0.04),
            SiteProfile("hostile.example", 60, item, hard_rate=0.01),
        ],
        effects=[Effect("hostile.example", *wave, hard=0.7, challenge=0.2, latency_factor=3.0)],
        incidents=[],
        start=start,
        days=6,
        pages_per_type=60,
    )
    engine.ingest(parse_observation(o) for o in sc.observations())
    for t in np.arange(sc.end - DAY, sc.end, 2 * HOUR):
        engine.health(float(t), record=True)
    end = float(sc.end)
    engine = Engine(store, settings, clock=lambda: end)
    yield engine, engine.plan(now=end)
    store.close()


def _figure_doms(dom: str, figures: tuple[str, ...]) -> dict[str, str]:
    """Each figure's part of the drawn DOM, by element id, in page order."""
    cuts = sorted((dom.index(f'id="{k}"'), k) for k in figures)
    return {
        k: dom[i : (cuts[j + 1][0] if j + 1 < len(cuts) else len(dom))]
        for j, (i, k) in enumerate(cuts)
    }


def _draw(
    engine: Engine, query: dict[str, str], plan: PlanResult, tmp_path: Path
) -> tuple[str, bytes]:
    """The page the service renders for ``query``, drawn in Chromium: its DOM and a
    1280×6000 screenshot; fails on any console message."""
    with serve_in_thread(_app(engine)) as base:
        page = httpx.get(f"{base}/").text
        assert f"<script src='{PLOTLY_PATH}'>" in page
        html_path = tmp_path / "page.html"
        html_path.write_text(
            render_dashboard(engine, plan=plan, query=query).replace(
                f"src='{PLOTLY_PATH}'", f"src='{base}{PLOTLY_PATH}'"
            ),
            encoding="utf-8",
        )
        png = tmp_path / "page.png"
        run = _chromium(
            ["--enable-logging=stderr", "--v=0", "--window-size=1280,6000",
             f"--screenshot={png}", "--dump-dom", html_path.as_uri()],
            tmp_path,
        )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    console = [ln for ln in run.stderr.splitlines() if ":CONSOLE" in ln]
    assert not console, console
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1280, 6000)
    assert len(data) > 300_000  # plots, not a blank page
    return run.stdout, data


def _assert_every_chart_has_data(dom: str, figures: tuple[str, ...]) -> dict[str, str]:
    parts = _figure_doms(dom, figures)  # each up to the next of these
    assert sorted(parts) == sorted(figures)
    for name, part in parts.items():
        assert '<svg class="main-svg"' in part, name
        assert re.search(r'class="trace (scatter|bars)|class="slice', part), name
        assert not re.search(r">no [a-z ]+(yet|in this range|between)", part), name
    return parts


@needs_chromium
def test_every_chart_has_data_on_the_demo_store_in_a_headless_browser(
    demo: tuple[Engine, PlanResult], tmp_path: Path
) -> None:
    engine, plan = demo
    dom, _ = _draw(engine, {"days": "30"}, plan, tmp_path)
    parts = _assert_every_chart_has_data(dom, FIGURES)
    assert parts["fig-plan"].count('class="slice') >= 2
    assert (
        parts["fig-signals"].count('class="js-line"') >= 12
    )  # sites × 3 signals × (value, normal)


@needs_chromium
def test_one_sites_page_draws_every_chart_in_a_headless_browser(
    demo: tuple[Engine, PlanResult], tmp_path: Path
) -> None:
    engine, plan = demo
    dom, _ = _draw(engine, {"days": "3", "site": "hostile.example"}, plan, tmp_path)
    # the site is paused since its wave: the next cycle has none of its tasks, and says why
    parts = _assert_every_chart_has_data(dom, tuple(f for f in SITE_FIGURES if f != "fig-plan"))
    assert "it is paused (recrawl site resume)" in dom[dom.index('id="fig-plan"') :]
    assert parts["fig-routes"].count('class="js-line"') >= 2


def test_one_sites_page_shows_its_routes_events_and_pages(demo: tuple[Engine, PlanResult]) -> None:
    engine, plan = demo
    page = render_dashboard(engine, plan=plan, query={"site": "hostile.example", "days": "3"})
    assert "<h1>recrawl: hostile.example</h1>" in page
    assert "<a href='.' style='color:#fff'>all sites</a>" in page
    assert "<input type='hidden' name='site' value='hostile.example'>" in page
    assert "Refusals by route" in page and "Incidents and actions" in page
    events = page[page.index("Incidents and actions") : page.index("Pages: the most")]
    assert "<td>pause</td>" in events and "hard_block" in events  # the pause, with its reasons
    pages = page[page.index("Pages: the most") :]
    assert "https://hostile.example/" in pages and "calm.example" not in pages
    window = TimeWindow.choose(engine.clock(), _data_end(engine), days=3)
    data = read_dashboard(engine, window, plan=plan, site="hostile.example")
    figs = {k: f.to_plotly_json() for k, f in dashboard_figures(data).items()}
    assert list(figs) == list(SITE_FIGURES)
    assert {t["name"] for t in figs["fig-signals"]["data"] if t.get("showlegend")} == {
        "hostile.example"
    }
    routes = [t for t in figs["fig-routes"]["data"]]
    assert len(routes) >= 2
    # the wave refused requests on every route: the site, not a route
    assert all(max(v for v in t["y"] if v is not None) > 0.3 for t in routes)
    assert all(t["site"] == "hostile.example" for t in (data.plan.tasks if data.plan else []))


def test_site_links_are_escaped_and_quoted(populated: Engine) -> None:
    _loaded(populated)
    health = [{"site": EVIL_SITE, "band": "healthy", "score": 90}]
    page = render_dashboard(populated, health=health)
    assert "href='?site=%3Cscript%3Ealert%28%27site%27%29%3C%2Fscript%3E'" in page
    assert EVIL_SITE not in page
    evil = render_dashboard(populated, site=EVIL_SITE)
    assert EVIL_SITE not in evil and "&lt;script&gt;" in evil


QUOTED = 'a"b<c>&d'


def _load_quoted(engine: Engine, base: str) -> None:
    """A day of fetches of a site and a page type named :data:`QUOTED`."""
    t0 = engine.clock()
    lines = [
        {"url": f"https://quoted.example/{i}", "fetched_at": t0 - 86400 + i * 600, "status": 200,
         "site": QUOTED, "page_type": QUOTED, "record": {"v": i % 3}}
        for i in range(40)
    ]  # fmt: skip
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = b"\n".join(orjson.dumps(o) for o in lines)
    r = httpx.post(f"{base}/v1/observations", content=body, headers=auth)
    assert r.status_code == 200 and not r.json()["rejected"], r.text


def _unplotly(text: str) -> str:
    """``text`` as plotly.js draws it: the entities it decodes (amp, lt, gt, numeric)."""
    text = re.sub(r"&#x([0-9a-fA-F]+);", lambda m: chr(int(m[1], 16)), text)
    text = re.sub(r"&#(\d+);", lambda m: chr(int(m[1])), text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def test_quotes_and_markup_in_names_read_as_they_are_in_the_figures(populated: Engine) -> None:
    with serve_in_thread(_app(populated)) as base:
        _load_quoted(populated, base)
        page = httpx.get(f"{base}/").text
    figs = _figures(populated, populated.clock())
    spend = [t["name"] for t in figs["fig-spend"]["data"] if t.get("type") == "bar"]
    money = list(figs["fig-money"]["data"][0]["x"])
    assert [_unplotly(n) for n in spend] == [QUOTED]
    assert [_unplotly(x) for x in money] == [f"{QUOTED} · {QUOTED}"]
    # what plotly shows is the name: no &quot; it would draw as such, no <c> taken for a tag
    assert "&quot;" not in orjson.dumps(figs).decode()
    assert all("<c>" not in n for n in [*spend, *money])
    # the page: escaped in its HTML, the figures' JSON inert in their <script>
    assert "<c>" not in page and "&lt;c&gt;" in page
    assert page.count("</script>") == page.count("<script")


@needs_chromium
def test_a_quoted_name_is_drawn_as_it_is_in_a_headless_browser(
    populated: Engine, tmp_path: Path
) -> None:
    with serve_in_thread(_app(populated)) as base:
        _load_quoted(populated, base)
        dom = _chromium(["--dump-dom", f"{base}/"], tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    legends = re.findall(r'<text[^>]*class="legendtext"[^>]*>(.*?)</text>', dom.stdout)
    # the DOM's serialisation of the text a"b<c>&d: < > & as entities, the quote as it is
    assert 'a"b&lt;c&gt;&amp;d' in legends, legends
    assert "&amp;quot;" not in dom.stdout and "<c>" not in dom.stdout


def _signal_lines(t0: float) -> list[dict[str, Any]]:
    """A listing read twice; the item fetch it caused finds a change, the schedule's do not."""
    return [
        {"url": "https://shop.example/list/0", "fetched_at": t0 - 3600, "status": 200,
         "record": {"n": 1}, "signal": "listing", "signal_read": True},
        {"url": "https://shop.example/list/0", "fetched_at": t0 - 1800, "status": 200,
         "record": {"n": 2}, "signal": "listing", "signal_read": True},
        {"url": "https://shop.example/p/1", "fetched_at": t0 - 7200, "status": 200, "record": {"p": 1}},
        {"url": "https://shop.example/p/1", "fetched_at": t0 - 1700, "status": 200,
         "record": {"p": 2}, "signal": "listing"},
        {"url": "https://shop.example/p/2", "fetched_at": t0 - 7200, "status": 200, "record": {"p": 1}},
        {"url": "https://shop.example/p/2", "fetched_at": t0 - 1700, "status": 200, "record": {"p": 1}},
    ]  # fmt: skip


def test_the_dashboard_shows_each_signals_cost_per_change_per_site(populated: Engine) -> None:
    t0 = populated.clock()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    lines = _signal_lines(t0)
    with serve_in_thread(_app(populated)) as base:
        r = httpx.post(
            f"{base}/v1/observations",
            content=b"\n".join(orjson.dumps(o) for o in lines),
            headers=auth,
        )
        assert r.status_code == 200 and not r.json()["rejected"]
        r = httpx.post(
            f"{base}/v1/signals",
            json={"reads": [{"site": "shop.example", "signal": "sitemap", "bytes": 900}],
                  "delisted": [{"url": "https://shop.example/p/2", "site": "shop.example",
                                "at": t0}]},
            headers=auth,
        )  # fmt: skip
        assert r.json() == {"reads": 1, "delisted": 1}
        doc = httpx.get(f"{base}/v1/signals", params={"site": "shop.example"}).json()
        page = httpx.get(f"{base}/").text
    per = {r["signal"]: r["per_change"] for r in doc["signals"]}
    assert per == {"listing": 3.0, "schedule": None, "sitemap": None}
    assert doc["delisted"] == {"shop.example": 1}
    section = page[page.index("Cost per change detected, per signal") : page.index("Spend against")]
    assert "<td>shop.example</td><td>listing</td>" in section
    assert "<li>shop.example: 1 item left every listing</li>" in section
    window = TimeWindow.choose(t0, _data_end(populated), days=1)
    figs = dashboard_figures(read_dashboard(populated, window))
    bars = {t["name"]: t["y"] for t in figs["fig-cheap"].to_plotly_json()["data"]}
    assert bars["listing"] == [3.0]


@needs_chromium
def test_the_signal_figure_draws_in_a_headless_browser(populated: Engine, tmp_path: Path) -> None:
    t0 = populated.clock()
    with serve_in_thread(_app(populated)) as base:
        _load(populated, base)
        body = b"\n".join(orjson.dumps(o) for o in _signal_lines(t0))
        r = httpx.post(
            f"{base}/v1/observations", content=body, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert r.status_code == 200 and not r.json()["rejected"]
    dom, _ = _draw(populated, {"days": "7"}, populated.plan(now=t0), tmp_path)
    part = _figure_doms(dom, FIGURES)["fig-cheap"]
    # bars for the listing and the schedule of shop.example, the schedule of news.example
    assert 'class="trace bars"' in part and part.count('class="point"') >= 3
    assert "shop.example" in part and "news.example" in part

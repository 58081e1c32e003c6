"""The dashboard, served over real HTTP and rendered in a real headless Chromium."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from typer.testing import CliRunner

from recrawl.cli.main import app as cli_app
from recrawl.config import Settings
from recrawl.engine.engine import Engine, PlanResult
from recrawl.estimate.rates import RateResolution
from recrawl.report.dashboard import freshness_series, render_dashboard
from recrawl.service import create_app
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
    store.ingest([])  # the store exists before the first write
    yield engine
    store.close()


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
    app = create_app(populated, populated.settings)
    with serve_in_thread(app) as base:
        _load(populated, base)
        r = httpx.get(f"{base}/")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        page = r.text
    assert EVIL_SITE not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(&#x27;site&#x27;)&lt;/script&gt;" in page
    assert not re.search(r"<(script|link)[^>]+(src|href)=", page)  # plotly.js is inline
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
    app = create_app(populated, populated.settings)
    with serve_in_thread(app) as base:
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
def test_the_report_is_one_self_contained_file_that_renders_offline(
    populated: Engine, db_path: str, tmp_path: Path
) -> None:
    app = create_app(populated, populated.settings)
    with serve_in_thread(app) as base:
        _load(populated, base)
    cfg = tmp_path / "recrawl.toml"
    cfg.write_text("budget_per_day = 500\n")
    out = tmp_path / "report.html"
    res = CliRunner().invoke(
        cli_app, ["report", "--db", db_path, "--config", str(cfg), "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    page = out.read_text(encoding="utf-8")
    assert EVIL_SITE not in page and not re.search(r"<(script|link)[^>]+(src|href)=", page)
    # what the revisits say of the rates, next to the plan
    assert re.search(r"<p>Rates: \d+ pages revisited; \d+ \(\d+%\) changed at every revisit", page)
    dom = _chromium(["--dump-dom", out.as_uri()], tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    _assert_plots_drawn(dom.stdout)


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
        store.ingest(sorted(observations, key=lambda o: o.fetched_at))
        engine = Engine(store, clock=lambda: now)
        _, before = freshness_series(engine, now, points=8)
        store.prune(now - 10 * day)
        _, after = freshness_series(engine, now, points=8)
    assert after == pytest.approx(before, abs=1e-9)

"""The shipped Grafana dashboard and Prometheus alert rules (``deploy/``) against the
metrics a running service really exposes, checked with ``promtool``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from recrawl.config import Settings
from recrawl.engine.engine import Engine
from recrawl.service import create_app
from recrawl.store import open_store
from recrawl.testing.server import ManualClock, serve_in_thread

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "recrawl-alerts.yml"
# the rules' unit tests: evaluated every minute, and every 5 minutes for the rules that
# compare a site with its own last day (a day of 1-minute steps takes promtool seconds)
RULES_TESTS = (
    DEPLOY / "prometheus" / "recrawl-alerts.test.yml",
    DEPLOY / "prometheus" / "recrawl-alerts-normal.test.yml",
)
DASHBOARD = DEPLOY / "grafana" / "recrawl-dashboard.json"
TOKEN = "observability-token"
NAME = re.compile(r"\brecrawl_[a-z0-9_]+")


def promtool() -> str:
    """promtool's path; the tests fail without it (``make test`` installs it)."""
    path = shutil.which("promtool") or (
        "/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None
    )
    if path is None:
        pytest.fail(
            "promtool is not installed: `apt-get install -y prometheus` (Debian's package "
            "provides /usr/bin/promtool; `make test` installs it)",
            pytrace=False,
        )
    return path


def _obs(url: str, t: float, **kw: Any) -> dict[str, Any]:
    return {"url": url, "fetched_at": t, "status": 200, "latency_ms": 100, **kw}


@pytest.fixture(scope="module")
def metrics_text(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``/metrics`` of a service with every series present: three sites with five days
    of history (one then blocked with 403s, so it has a score, a band, a pause and a cap;
    one whose records then fail to extract, so it has a parser score), a rejected item, a
    new URL and leases out."""
    clock = ManualClock()
    settings = Settings(token=TOKEN, budget_per_day=10_000.0)
    store = open_store(str(tmp_path_factory.mktemp("obs") / "recrawl.db"))
    engine = Engine(store, settings, clock=clock)
    app = create_app(engine, settings, replan_min_s=0.0, health_every_s=0.0)
    try:
        with (
            serve_in_thread(app) as base,
            httpx.Client(
                base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
            ) as client,
        ):
            t0 = clock()
            items = [
                _obs(f"https://{site}/{i % 20}", t0 - (5 - d) * 86400 + i * 720,
                     record={"n": d}, route=f"pool-{i % 3}", page_type="product",
                     bytes_received=1000)
                for site in ("hostile.example", "calm.example", "parser.example")
                for d in range(5)
                for i in range(120)
            ] + [
                _obs(f"https://hostile.example/{i % 20}", t0 - 1800 + i * 9, status=403,
                     route=f"pool-{i % 3}")
                for i in range(200)
            ] + [  # parser.example answers, but its records stop extracting
                _obs(f"https://parser.example/{i % 20}", t0 - 1800 + i * 9,
                     outcome="extract_failed")
                for i in range(200)
            ]  # fmt: skip
            body = b"\n".join(orjson.dumps(i) for i in items) + b"\n"
            assert client.post("/v1/observations", content=body).json()["accepted"] == len(items)
            bad = client.post("/v1/observations", content=b'{"url": "nope"}\n').json()
            assert len(bad["rejected"]) == 1
            r = client.post("/v1/urls", json=[{"url": "https://calm.example/new"}])
            assert r.status_code == 200, r.text
            clock.advance(1)
            r = client.post("/v1/leases", json={"worker": "w1", "max": 5})
            assert r.status_code == 200 and r.json()["tasks"], r.text
            r = client.get("/metrics")
            assert r.status_code == 200, r.text
            yield r.text
    finally:
        store.close()


def exposed_names(text: str) -> set[str]:
    """The sample names of an exposition (``recrawl_fetches_total``, ``x_bucket``...)."""
    return {
        re.split(r"[{ ]", line, maxsplit=1)[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in dash["panels"]:
        if p["type"] == "row":
            out += p.get("panels", [])
        else:
            out.append(p)
    return out


def alerts() -> dict[str, str]:
    """Each alert rule's text by name (promtool checks the YAML itself; PyYAML is not a
    dependency)."""
    text = RULES.read_text(encoding="utf-8")
    chunks = re.split(r"^\s*- alert:\s*", text, flags=re.M)[1:]
    return {c.split(None, 1)[0]: c for c in chunks}


def test_promtool_accepts_the_alert_rules_and_their_unit_tests() -> None:
    tool = promtool()
    res = subprocess.run([tool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run(
        [tool, "test", "rules", *map(str, RULES_TESTS)], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_alert_has_a_unit_test_that_sees_it_fire() -> None:
    tested = set()
    for path in RULES_TESTS:
        text = path.read_text(encoding="utf-8")
        # an alertname followed by expected alerts that are not empty
        for m in re.finditer(r"alertname: (\w+)\n\s+exp_alerts:\n\s+- exp_labels", text):
            tested.add(m.group(1))
    assert set(alerts()) <= tested, sorted(set(alerts()) - tested)


def test_every_alert_has_a_for_a_severity_and_a_summary() -> None:
    rules = alerts()
    assert {
        "RecrawlSiteDegrading",
        "RecrawlSiteCritical",
        "RecrawlSpendOverBudget",
        "RecrawlSiteSlowerThanNormal",
        "RecrawlSiteBlocksRising",
        "RecrawlParserFailing",
    } <= set(rules)
    for name, text in rules.items():
        assert re.search(r"^\s+expr:", text, re.M), name
        assert re.search(r"^\s+for: \d+[smh]$", text, re.M), name
        assert re.search(r"^\s+severity: (warning|critical)$", text, re.M), name
        assert re.search(r"^\s+summary: \S", text, re.M), name


def test_promtool_finds_nothing_to_lint_in_the_live_metrics(metrics_text: str) -> None:
    res = subprocess.run(
        [promtool(), "check", "metrics"], input=metrics_text, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert (res.stdout + res.stderr).strip() == "", res.stdout + res.stderr


def test_the_scenario_exposes_every_metric_family(metrics_text: str) -> None:
    # the families only present under some state must be here, or the next test proves little
    names = exposed_names(metrics_text)
    for name in (
        "recrawl_site_health_score",
        "recrawl_site_concurrency_cap",
        "recrawl_cost_per_change",
        "recrawl_rates_bounded_below_share",
        "recrawl_leases_outstanding",
        "recrawl_outcomes_total",
        "recrawl_sent_bytes_total",
        "recrawl_received_bytes_total",
        "recrawl_credits_total",
        "recrawl_fetch_latency_seconds_bucket",
        "recrawl_fetch_latency_seconds_sum",
        "recrawl_fetch_latency_seconds_count",
        "recrawl_cycle_budget",
        "recrawl_cycle_spent",
        "recrawl_cycle_fetches_reported",
        "recrawl_cycle_fetch_cost_expected",
        "recrawl_cycle_fetch_cost_reported",
        "recrawl_cycle_seconds",
        "recrawl_freshness_ratio",
        "recrawl_live_page_value",
        "recrawl_site_parser_health_score",
        "recrawl_site_parser_health_band",
        "recrawl_site_throttle_share",
        "recrawl_site_bytes_per_valid_record",
    ):
        assert name in names, name


def test_every_dashboard_and_alert_expression_names_exposed_metrics(metrics_text: str) -> None:
    names = exposed_names(metrics_text)
    used: dict[str, set[str]] = {}
    for p in panels(dashboard()):
        for t in p["targets"]:
            for n in NAME.findall(t["expr"]):
                used.setdefault(n, set()).add(f"panel {p['title']!r}")
    for v in dashboard()["templating"]["list"]:
        q = v.get("query")
        text = q.get("query", "") if isinstance(q, dict) else str(q or "")
        for n in NAME.findall(text):
            used.setdefault(n, set()).add(f"variable {v['name']}")
    for alert, text in alerts().items():  # the whole rule: a superset of its expression
        for n in NAME.findall(text):
            used.setdefault(n, set()).add(f"rule {alert}")
    assert used
    # a sample name as /metrics writes it: counters with _total, histograms with _bucket,
    # _sum, _count; a bare histogram or summary family name matches nothing in PromQL
    missing = {n: sorted(where) for n, where in used.items() if n not in names}
    assert not missing, f"not in /metrics: {missing}"


def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    # each query as a recording rule, with Grafana's variables as a user's choice fills them
    rules = ["groups:", "  - name: dashboard", "    rules:"]
    for p in panels(dashboard()):
        for t in p["targets"]:
            expr = t["expr"].replace("$__rate_interval", "5m").replace("$site", ".*")
            assert "$" not in expr, (p["title"], expr)
            rules += [f"      - record: dashboard:panel_{p['id']}_{t['refId']}",
                      f"        expr: {json.dumps(expr)}"]  # fmt: skip
    path = tmp_path / "dashboard-queries.yml"
    path.write_text("\n".join(rules) + "\n", encoding="utf-8")
    res = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_dashboard_loads_and_every_panel_has_a_datasource_and_a_target() -> None:
    dash = dashboard()
    assert dash["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ps = panels(dash)
    assert ps and len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
    for p in ps:
        ds = p.get("datasource")
        assert ds == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["expr"].strip() and t.get("datasource", ds) == ds, p["title"]

"""Health end to end: a generated fetch log ingested into a real SQLite store,
scored through the engine and the CLI, with band actions applied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recrawl.cli.main import app
from recrawl.engine.engine import Engine
from recrawl.engine.ingest import ContentClassifier, ingest_observations
from recrawl.health.score import Incident
from recrawl.observe.observation import parse_observation
from recrawl.sim.health import DAY, DEFAULT_START, HOUR, Effect, HealthScenario, SiteProfile
from recrawl.store import SQLiteStore

S = DEFAULT_START
ITEM = {"item": (1.0, 80_000, ("title", "price"))}
WAVE = (S + 17 * DAY + 14 * HOUR, S + 17 * DAY + 18 * HOUR)
HOSTILE = (S + 18 * DAY + 13 * HOUR, S + 18 * DAY + 17 * HOUR)


@pytest.fixture(scope="module")
def scenario_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[Incident]]:
    incidents = [
        Incident("wave.example", *WAVE, cause="challenge", band="degrading"),
        Incident("hostile.example", *HOSTILE, cause="hard_block", band="critical"),
    ]
    sc = HealthScenario(
        sites=[
            SiteProfile("calm.example", 60, ITEM, challenge_rate=0.04),
            SiteProfile("wave.example", 60, ITEM),
            SiteProfile("hostile.example", 120, ITEM, hard_rate=0.01),
        ],
        effects=[
            Effect("wave.example", *WAVE, challenge=0.35, ramp_s=600),
            Effect(
                "hostile.example", *HOSTILE, hard=0.5, challenge=0.2, latency_factor=3.0, ramp_s=600
            ),
        ],
        incidents=incidents,
        pages_per_type=200,
    )
    db = str(tmp_path_factory.mktemp("health") / "health.db")
    store = SQLiteStore(db)
    ingest_observations(
        store, (parse_observation(o) for o in sc.observations()), classifier=ContentClassifier()
    )
    store.close()
    return db, incidents


def test_site_with_a_normal_challenge_rate_stays_healthy(scenario_db):
    db, _ = scenario_db
    with SQLiteStore(db) as store:
        reports = Engine(store).health(S + 17 * DAY + 16 * HOUR, record=False)
    by = {r["site"]: r for r in reports}
    assert by["calm.example"]["band"] == "healthy"
    assert by["wave.example"]["band"] == "degrading"
    assert by["wave.example"]["reasons"][0] == "challenge"
    assert reports[0]["site"] == "wave.example"  # worst first


def test_critical_band_pauses_the_site_and_alerts(scenario_db, caplog):
    db, _ = scenario_db
    with SQLiteStore(db) as store:
        eng = Engine(store)
        reports = eng.health(HOSTILE[0] + 2 * HOUR, record=True)
        hostile = next(r for r in reports if r["site"] == "hostile.example")
        assert hostile["band"] == "critical" and hostile["action"]["name"] == "pause"
        assert store.site_controls()["hostile.example"]["paused"]
        assert eng.site_caps()["hostile.example"] == 0
        assert any("hostile.example paused" in m for m in caplog.messages)
        # paused stays paused even once healthy again: only a human resumes
        eng.health(HOSTILE[1] + 6 * HOUR, record=True)
        assert store.site_controls()["hostile.example"]["paused"]
        eng.resume("hostile.example", by="alice", now=HOSTILE[1] + 7 * HOUR)
        assert not store.site_controls()["hostile.example"]["paused"]
        kinds = [e["kind"] for e in store.site_events("hostile.example")]
        assert "pause" in kinds and kinds[-1] == "resume"
        assert store.health_history("hostile.example")


def test_cli_health_at_and_review(scenario_db, tmp_path: Path):
    db, incidents = scenario_db
    runner = CliRunner()
    res = runner.invoke(
        app, ["health", "--db", db, "--at", str(WAVE[0] + 2 * HOUR), "--no-record", "--json"]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    wave = next(s for s in data["sites"] if s["site"] == "wave.example")
    assert set(wave) >= {
        "site",
        "score",
        "raw_score",
        "band",
        "reasons",
        "diagnosis",
        "failing_routes",
        "parser",
        "action",
    }
    assert wave["band"] == "degrading" and wave["diagnosis"] == "site"
    inc = tmp_path / "incidents.jsonl"
    inc.write_text(
        "".join(
            json.dumps(
                {"site": i.site, "start": i.start, "end": i.end, "cause": i.cause, "band": i.band}
            )
            + "\n"
            for i in incidents
        )
    )
    res = runner.invoke(
        app, ["health", "review", "--incidents", str(inc), "--db", db, "--margin", "12", "--json"]
    )
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    for r in rep["incidents"]:
        assert r["detected_after_s"] is not None and r["detected_after_s"] <= 1.5 * 3600, r
        assert r["cause_named"], r
    assert rep["false_alarms"] == []


def test_health_at_a_past_time_never_reads_later_observations(scenario_db):
    db, _ = scenario_db
    runner = CliRunner()
    # seven minutes into the wave: its first bucket holds later observations, so it is not read
    res = runner.invoke(app, ["health", "--db", db, "--at", str(WAVE[0] + 420), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["at"] == WAVE[0]
    wave = next(s for s in data["sites"] if s["site"] == "wave.example")
    assert wave["band"] == "healthy"

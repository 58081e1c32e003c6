"""The HTTP service over real HTTP on 127.0.0.1 with a real SQLite file."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from conftest import pg_schema
from typer.testing import CliRunner

from recrawl.cli.main import app as cli_app
from recrawl.config import Settings, load_settings
from recrawl.engine.engine import Engine
from recrawl.service import create_app
from recrawl.store import SQLiteStore, SQLStore, open_store
from recrawl.testing.server import ManualClock, free_port, serve_in_thread

TOKEN = "write-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

Serve = Callable[..., AbstractContextManager[tuple[httpx.Client, Engine]]]


@pytest.fixture
def serve(db_path: str) -> Iterator[Serve]:
    """Start the service on a free port: ``with serve(**settings) as (client, engine)``."""
    stores: list[SQLStore] = []

    @contextmanager
    def start(
        *,
        clock: ManualClock | None = None,
        app_kw: dict[str, Any] | None = None,
        db: str | None = None,
        **kw: Any,
    ) -> Iterator[tuple[httpx.Client, Engine]]:
        """``db``: a store path or URL other than ``db_path``."""
        settings = Settings(**{"token": TOKEN, "budget_per_day": 10_000.0, **kw})
        store = open_store(db or db_path)
        stores.append(store)
        engine = Engine(store, settings, clock=clock or ManualClock())
        app = create_app(engine, settings, **{"replan_min_s": 0.0, **(app_kw or {})})
        with (
            serve_in_thread(app) as base,
            httpx.Client(base_url=base, headers=AUTH, timeout=30) as client,
        ):
            yield client, engine

    yield start
    for s in stores:
        s.close()


def obs(url: str, t: float, **kw: Any) -> dict[str, Any]:
    """One observation of ``url`` at ``t`` (unix seconds), 200 OK unless told."""
    return {"url": url, "fetched_at": t, "status": 200, **kw}


def ndjson(items: list[dict[str, Any]]) -> bytes:
    return b"\n".join(orjson.dumps(i) for i in items) + b"\n"


def register(client: httpx.Client, urls: list[str], **kw: Any) -> None:
    r = client.post("/v1/urls", json=[{"url": u, **kw} for u in urls])
    assert r.status_code == 200, r.text
    assert r.json()["added"] == len(urls)


def lease(client: httpx.Client, worker: str, n: int = 50) -> list[dict[str, Any]]:
    r = client.post("/v1/leases", json={"worker": worker, "max": n})
    assert r.status_code == 200, r.text
    tasks: list[dict[str, Any]] = r.json()["tasks"]
    return tasks


# -- the API surface --------------------------------------------------------------------------


def test_openapi_describes_the_versioned_api_and_healthz_answers(serve: Serve) -> None:
    with serve() as (client, _):
        spec = client.get("/openapi.json").json()
        for path in (
            "/v1/urls", "/v1/leases", "/v1/observations", "/v1/sites", "/v1/sites/{site}",
            "/v1/sites/{site}/resume", "/v1/sites/{site}/pause", "/v1/pages/{url}", "/v1/plan", "/v1/budget", "/v1/stats", "/metrics",
            "/healthz",
        ):  # fmt: skip
            assert path in spec["paths"], path
        assert "application/x-ndjson" in str(spec["paths"]["/v1/observations"])
        assert client.get("/healthz", headers={}).json()["status"] == "ok"


def test_writes_without_the_right_token_get_401_and_change_nothing(serve: Serve) -> None:
    with serve() as (client, engine):
        body = ndjson([obs("https://a.example/1", time.time())])
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic x"}):
            for path, kw in (
                ("/v1/observations", {"content": body}),
                ("/v1/urls", {"json": [{"url": "https://a.example/2"}]}),
                ("/v1/leases", {"json": {"worker": "w", "max": 5}}),
            ):
                r = httpx.post(client.base_url.join(path), headers=headers, **kw)  # type: ignore[arg-type]
                assert r.status_code == 401, (path, headers)
                assert r.headers["www-authenticate"] == "Bearer"
        assert engine.store.observation_count() == 0
        assert engine.store.sites() == []
        # Reads are open when no read token is configured.
        assert httpx.get(client.base_url.join("/v1/stats")).status_code == 200


def test_a_read_token_guards_reads_and_cannot_write(serve: Serve) -> None:
    with serve(read_token="read-secret") as (client, _):
        base = client.base_url
        assert httpx.get(base.join("/v1/stats")).status_code == 401
        assert httpx.get(base.join("/metrics")).status_code == 401
        assert httpx.get(base.join("/v1/sites"), headers=AUTH).status_code == 200
        read = {"Authorization": "Bearer read-secret"}
        assert httpx.get(base.join("/v1/stats"), headers=read).status_code == 200
        r = httpx.post(base.join("/v1/leases"), headers=read, json={"worker": "w"})
        assert r.status_code == 401
        assert httpx.get(base.join("/healthz")).status_code == 200


def test_oversized_bodies_get_413_and_store_nothing(serve: Serve) -> None:
    with serve(max_body_bytes=2000) as (client, engine):
        now = time.time()
        small = ndjson([obs(f"https://a.example/{i}", now) for i in range(5)])
        big = ndjson([obs(f"https://a.example/{i}", now) for i in range(100)])
        assert len(small) < 2000 < len(big)
        assert client.post("/v1/observations", content=big).status_code == 413

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            for i in range(0, len(big), 500):
                yield big[i : i + 500]

        assert client.post("/v1/observations", content=chunks()).status_code == 413
        assert engine.store.observation_count() == 0
        r = client.post("/v1/observations", content=small)
        assert r.status_code == 200 and r.json()["accepted"] == 5


def test_observations_take_the_good_items_and_name_the_bad_ones(serve: Serve) -> None:
    with serve() as (client, engine):
        t = time.time()
        lines = [
            orjson.dumps(obs("https://a.example/1", t, id="a")),
            b'{"url": "https://a.example/2"',
            orjson.dumps({"url": "ftp://a.example/3", "fetched_at": t, "status": 200}),
            b"",
            orjson.dumps(obs("https://a.example/4", t, outcome="bogus")),
            orjson.dumps(obs("https://a.example/5", t)),
        ]
        r = client.post(
            "/v1/observations",
            content=b"\n".join(lines),
            headers={"Content-Type": "application/x-ndjson"},
        )
        assert r.status_code == 200
        data = r.json()
        assert data["accepted"] == 2 and data["stored"] == 2
        assert [(x["index"], x["field"]) for x in data["rejected"]] == [
            (1, None),
            (2, "url"),
            (4, "outcome"),
        ]
        assert "not JSON" in data["rejected"][0]["error"]
        assert engine.store.observation_count() == 2
        # A JSON array works too; the same observations again are stored once.
        items = [
            obs("https://a.example/1", t, id="a"),
            {"fetched_at": t},
            obs("https://b.example/", t),
        ]
        r = client.post("/v1/observations", json=items)
        data = r.json()
        assert (data["accepted"], data["stored"], data["duplicates"]) == (2, 1, 1)
        assert data["rejected"] == [{"index": 1, "field": "url", "error": "is missing"}]
        assert client.post("/v1/observations", content=b"[1, 2").status_code == 400
        assert engine.store.observation_count() == 3


def test_urls_are_validated(serve: Serve) -> None:
    with serve() as (client, _):
        r = client.post("/v1/urls", json={"urls": [{"url": "https://a.example/x", "value": 3}]})
        assert r.json() == {"received": 1, "added": 1, "updated": 0, "rejected": []}
        # a bad item is named by its index; the others are registered (issue 31)
        r = client.post("/v1/urls", json=[{"url": "mailto:x@y"}])
        assert r.status_code == 200 and r.json()["added"] == 0
        assert r.json()["rejected"][0]["field"] == "url"
        r = client.post("/v1/urls", json=[{"url": "https://a.example/y", "value": -1}])
        assert r.status_code == 200 and r.json()["added"] == 0
        assert r.json()["rejected"][0]["field"] == "value"


# -- leases ------------------------------------------------------------------------------------


def test_two_workers_leasing_concurrently_never_get_the_same_url(serve: Serve) -> None:
    # every task of the plan out at once: no per-site cap in the way
    with serve(site_concurrency=400) as (client, _):
        urls = [f"https://s{i % 5}.example/p{i}" for i in range(400)]
        register(client, urls)
        got: dict[str, list[str]] = {"w1": [], "w2": []}
        errors: list[BaseException] = []
        start = threading.Barrier(2)

        def work(worker: str) -> None:
            try:
                with httpx.Client(base_url=client.base_url, headers=AUTH, timeout=30) as c:
                    start.wait()
                    while tasks := lease(c, worker, 7):
                        got[worker].extend(t["url"] for t in tasks)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(w,)) for w in got]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors
        both = got["w1"] + got["w2"]
        assert got["w1"] and got["w2"]
        assert len(both) == len(set(both))
        plan = client.get("/v1/plan", params={"limit": 0}).json()
        assert len(both) == plan["tasks_total"] > 0
        # nothing fetched yet: no rates to price freshness with
        budget = client.get("/v1/budget").json()
        assert budget["pages"] == 0 and budget["never_fetched"] > 0 and budget["targets"] == []


def test_an_expired_lease_returns_its_url_and_a_reported_one_does_not(serve: Serve) -> None:
    clock = ManualClock()
    with serve(clock=clock, lease_seconds=30.0) as (client, _):
        register(client, ["https://a.example/1", "https://a.example/2"])
        first = lease(client, "w1")
        assert sorted(t["url"] for t in first) == ["https://a.example/1", "https://a.example/2"]
        assert all(t["expires_at"] == pytest.approx(clock() + 30) for t in first)
        assert lease(client, "w2") == []
        done = next(t for t in first if t["url"].endswith("/1"))
        r = client.post(
            "/v1/observations",
            json=[obs(done["url"], clock(), lease_id=done["lease_id"], record={"p": 1})],
        )
        assert r.json()["stored"] == 1
        clock.advance(31)
        again = lease(client, "w2")
        assert [t["url"] for t in again] == ["https://a.example/2"]
        metrics = client.get("/metrics").text
        assert 'recrawl_leases_outstanding{site="a.example"} 1.0' in metrics


def test_leases_carry_validators_for_a_conditional_request(serve: Serve) -> None:
    clock = ManualClock()
    # no verification share: its leases carry no validators, and with one page
    # the page could be drawn for it
    with serve(clock=clock, reserves={"verify": 0.0}) as (client, _):
        url = "https://a.example/item"
        client.post(
            "/v1/observations",
            json=[
                obs(url, clock() - 3 * 86400, etag='"v1"', last_modified="Mon, 01 Jan 2024 00:00:00 GMT",
                    record={"price": 1})
            ],
        )  # fmt: skip
        tasks = {t["url"]: t for t in lease(client, "w1")}
        assert tasks[url]["headers"] == {
            "If-None-Match": '"v1"',
            "If-Modified-Since": "Mon, 01 Jan 2024 00:00:00 GMT",
        }
        assert tasks[url]["page_type"] == "page" and tasks[url]["site"] == "a.example"


def plan_tasks(client: httpx.Client) -> dict[str, dict[str, Any]]:
    """Every task of ``GET /v1/plan``, by URL."""
    r = client.get("/v1/plan", params={"limit": 100_000})
    assert r.status_code == 200, r.text
    assert len(r.json()["tasks"]) == r.json()["tasks_total"]
    return {t["url"]: t for t in r.json()["tasks"]}


def test_the_plan_shows_the_headers_its_leases_carry(serve: Serve, tmp_path: Path) -> None:
    """GET /v1/plan gives each task the request headers a lease of it carries (as
    ``recrawl plan --json`` does): the validators of a page on record, none for
    a verification task (its tasks had no ``headers`` at all)."""
    from estimate.test_calibration import T0, validator_crawl

    clock = ManualClock()
    with serve(clock=clock, reserves={"verify": 0.0}) as (client, _):
        url = "https://a.example/item"
        r = client.post(
            "/v1/observations",
            json=[
                obs(url, clock() - 3 * 86400, etag='"v1"', last_modified="Mon, 01 Jan 2024 00:00:00 GMT",
                    record={"price": 1}),
                obs("https://a.example/bare", clock() - 3 * 86400, record={"price": 2}),
            ],
        )  # fmt: skip
        assert r.status_code == 200 and r.json()["stored"] == 2, r.text
        planned = plan_tasks(client)
        assert planned[url]["headers"] == {
            "If-None-Match": '"v1"',
            "If-Modified-Since": "Mon, 01 Jan 2024 00:00:00 GMT",
        }
        assert planned["https://a.example/bare"]["headers"] == {}
        leased = {t["url"]: t for t in lease(client, "w1")}
        assert set(leased) == set(planned)
        assert {u: t["headers"] for u, t in leased.items()} == {
            u: t["headers"] for u, t in planned.items()
        }

    clock = ManualClock(T0 + 201 * 86400)
    with serve(clock=clock, reserves={"verify": 0.3}, db=str(tmp_path / "crawl.db")) as (client, _):
        r = client.post("/v1/observations", content=ndjson(validator_crawl(13)))
        assert r.status_code == 200 and r.json()["rejected"] == [], r.text
        planned = plan_tasks(client)
        verify = [t for t in planned.values() if t["reason"] == "verify"]
        assert verify and all(t["headers"] == {} for t in verify)
        others = [t for t in planned.values() if t["reason"] != "verify"]
        assert any("If-None-Match" in t["headers"] for t in others)
        leased = lease(client, "w1", 1000)
        assert leased
        for t in leased:  # a lease carries what the plan showed for its task
            assert (t["reason"], t["headers"]) == (
                planned[t["url"]]["reason"],
                planned[t["url"]]["headers"],
            ), t["url"]


def test_a_paused_site_hands_out_only_its_canaries_and_a_cap_holds(serve: Serve) -> None:
    clock = ManualClock()
    with serve(clock=clock) as (client, engine):
        register(client, [f"https://calm.example/{i}" for i in range(10)])
        register(client, [f"https://hostile.example/{i}" for i in range(10)])
        engine.store.add_canary(
            "https://hostile.example/canary", "hostile.example", {"price": "9.99"}, 3600, clock()
        )
        # What the critical band's action does to the site controls.
        engine.store.set_site_controls(
            "hostile.example", now=clock(), paused=True, band="critical", event="pause"
        )
        engine.store.set_site_controls("calm.example", now=clock(), concurrency_cap=4)
        client.post("/v1/sites/hostile.example/resume")  # the plan is recomputed...
        engine.store.set_site_controls(
            "hostile.example", now=clock(), paused=True, band="critical", event="pause"
        )
        client.post("/v1/urls", json=[{"url": "https://calm.example/new"}])  # ...and again
        tasks = lease(client, "w1", 100)
        hostile = [t for t in tasks if t["site"] == "hostile.example"]
        assert [(t["url"], t["reason"]) for t in hostile] == [
            ("https://hostile.example/canary", "canary")
        ]
        assert sum(t["site"] == "calm.example" for t in tasks) == 4
        # A human resumes the site: its pages come back.
        r = client.post("/v1/sites/hostile.example/resume")
        assert r.status_code == 200 and r.json()["controls"]["paused"] is False
        tasks = lease(client, "w2", 100)
        assert any(t["site"] == "hostile.example" for t in tasks)
        assert client.post("/v1/sites/nowhere.example/resume").status_code == 404


def test_an_operator_pauses_a_site_over_the_api(serve: Serve) -> None:
    clock = ManualClock()
    with serve(clock=clock) as (client, engine):
        register(client, [f"https://calm.example/{i}" for i in range(5)])
        register(client, [f"https://owner.example/{i}" for i in range(5)])
        r = client.post(
            "/v1/sites/owner.example/pause", json={"reason": "owner asked", "by": "ana"}
        )
        assert r.status_code == 200, r.text
        assert r.json()["recorded"] is True and r.json()["controls"]["paused"] is True
        tasks = lease(client, "w1", 100)
        assert {t["site"] for t in tasks} == {"calm.example"}
        again = client.post("/v1/sites/owner.example/pause")  # no body: fine
        assert again.status_code == 200 and again.json()["recorded"] is False
        events = engine.store.site_events("owner.example")
        assert [(e["kind"], e["detail"]) for e in events] == [("pause", "by ana: owner asked")]
        assert client.post("/v1/sites/nowhere.example/pause").status_code == 404
        assert client.post("/v1/sites/owner.example/resume").status_code == 200
        clock.advance(3600)
        tasks = lease(client, "w2", 100)
        assert any(t["site"] == "owner.example" for t in tasks)


def _history(site: str, t0: float, days: int, per_day: int, status: int) -> list[dict[str, Any]]:
    out = []
    for d in range(days):
        for i in range(per_day):
            t = t0 - (days - d) * 86400 + i * (86400 / per_day)
            out.append(obs(f"https://{site}/{i % 20}", t, status=status, latency_ms=100,
                           record={"n": d}, route=f"pool-{i % 3}"))  # fmt: skip
    return out


@pytest.mark.skipif(not hasattr(Engine, "health"), reason="Engine.health is not there yet")
def test_a_hostile_sites_band_change_reaches_what_leases_hand_out(serve: Serve) -> None:
    clock = ManualClock()
    with serve(clock=clock, app_kw={"health_every_s": 0.0}) as (client, _):
        t0 = clock()
        history = _history("hostile.example", t0, 5, 120, 200)
        history += _history("calm.example", t0, 5, 120, 200)
        r = client.post("/v1/observations", content=ndjson(history))
        assert r.json()["accepted"] == len(history)
        before = lease(client, "w0", 100)
        assert any(t["site"] == "hostile.example" for t in before)
        # The site turns hostile: every route gets 403s for the last half hour.
        burst = [
            obs(f"https://hostile.example/{i % 20}", t0 - 1800 + i * 9, status=403,
                latency_ms=100, route=f"pool-{i % 3}")
            for i in range(200)
        ] + [
            obs(f"https://calm.example/{i % 20}", t0 - 1800 + i * 9, latency_ms=100,
                route=f"pool-{i % 3}", record={"n": 99})
            for i in range(200)
        ]  # fmt: skip
        client.post("/v1/observations", content=ndjson(burst))
        clock.advance(1)
        sites = {s["site"]: s for s in client.get("/v1/sites").json()["sites"]}
        assert sites["hostile.example"]["band"] in ("degrading", "critical")
        assert sites["calm.example"]["band"] == "healthy", sites
        clock.advance(700)  # the leases of before expire
        after = lease(client, "w1", 100)
        hostile = [t for t in after if t["site"] == "hostile.example"]
        if sites["hostile.example"]["band"] == "critical":
            assert hostile == []
        else:
            cap = sites["hostile.example"]["controls"]["concurrency_cap"]
            assert cap is not None and len(hostile) <= cap
        assert any(t["site"] == "calm.example" for t in after)
        detail = client.get("/v1/sites/hostile.example").json()
        assert detail["history"] and detail["history"][-1]["band"] == detail["band"]


# -- reads ------------------------------------------------------------------------------------


def test_without_a_budget_the_service_plans_one_fetch_per_page_per_day(serve: Serve) -> None:
    with serve(budget_per_day=None, cycle_hours=2.0) as (client, engine):
        register(client, [f"https://shop.example/p{i}" for i in range(36)], page_type="product")
        plan = client.get("/v1/plan").json()
        assert plan["budget"] == pytest.approx(36 * 2 / 24) and plan["unit"] == "fetches"
        assert engine.settings.daily_budget(36) == 36.0
        assert Settings(budget_per_day=5.0).daily_budget(36) == 5.0


def test_pages_plan_stats_and_metrics(serve: Serve, db_path: str) -> None:
    clock = ManualClock()
    with serve(clock=clock) as (client, engine):
        t = clock()
        items = []
        for k in range(6):
            for i in range(4):
                items.append(
                    obs(f"https://shop.example/p{i}", t - (6 - k) * 86400, page_type="product",
                        record={"price": k if i == 0 else 1}, bytes_received=1000)
                )  # fmt: skip
        client.post("/v1/observations", content=ndjson(items))
        register(client, ["https://shop.example/new"], page_type="product")

        page = client.get("/v1/pages/https://shop.example/p0").json()
        assert page["fetches"] == 6 and page["changes"] == 5
        assert page["rate_per_day"] > 0 and page["rate_sd_per_day"] > 0
        assert page["next_due"] is not None and page["leased"] is False
        encoded = client.get("/v1/pages/https%3A%2F%2Fshop.example%2Fp0").json()
        assert encoded["url"] == "https://shop.example/p0"
        assert client.get("/v1/pages/https://shop.example/nope").status_code == 404

        plan = client.get("/v1/plan", params={"limit": 3}).json()
        assert plan["split"].get("discovery") == 1 and plan["unit"] == "fetches"
        assert len(plan["tasks"]) <= 3 and plan["budget"] == pytest.approx(10_000 / 24)
        # p0 changed at each of its daily revisits: its rate is only bounded below
        assert plan["rate_resolution"] == {
            "revisited": 4,
            "changed_every_revisit": 1,
            "share": 0.25,
            "median_interval_days": pytest.approx(1.0),
        }

        stats = client.get("/v1/stats").json()
        cli = CliRunner().invoke(cli_app, ["stats", "--db", db_path, "--json"])
        assert cli.exit_code == 0, cli.output
        assert stats == json.loads(cli.output)
        assert stats["groups"][0]["changes_detected"] == 5

        # what freshness costs: the same figures as the command line's
        params: dict[str, Any] = {"freshness": [0.95, 0.9], "per_day": 3}
        budget = client.get("/v1/budget", params=params).json()
        assert budget["unit"] == "fetches"
        cli = CliRunner().invoke(
            cli_app,
            ["budget", "--db", db_path, "--at", str(t), "--per-day", "3", "--json",
             "--freshness", "0.9", "--freshness", "0.95"],
        )  # fmt: skip
        assert cli.exit_code == 0, cli.output
        assert budget == json.loads(cli.output)
        assert budget["pages"] == 4 and budget["never_fetched"] == 1
        assert [x["freshness"] for x in budget["targets"]] == [0.9, 0.95]
        assert client.get("/v1/budget", params={"freshness": 1.5}).status_code == 422
        for per_day in ("inf", "nan", "-1"):
            assert client.get("/v1/budget", params={"per_day": per_day}).status_code == 422

        # the plan: the same document as the command line's, at the same time and budget
        served = client.get("/v1/plan", params={"limit": 100_000}).json()
        cli = CliRunner().invoke(
            cli_app,
            ["plan", "--db", db_path, "--at", str(t), "--budget", repr(10_000 / 24), "--json"],
        )
        assert cli.exit_code == 0, cli.output
        assert served == json.loads(cli.output)
        assert served["tasks_total"] == len(served["tasks"]) == 5
        assert {k for task in served["tasks"] for k in task} >= {
            "url", "reason", "headers", "rate_per_day", "rate_sd_per_day",
        }  # fmt: skip

        lease(client, "w1", 2)
        text = client.get("/metrics").text
        for needle in (
            'recrawl_fetches_total{page_type="product",site="shop.example"} 24.0',
            'recrawl_changes_detected_total{page_type="product",site="shop.example"} 5.0',
            'recrawl_fetches_without_change_total{page_type="product",site="shop.example"} 15.0',
            'recrawl_cost_per_change{page_type="product",site="shop.example",unit="fetches"} 4.8',
            'recrawl_leases_outstanding{site="shop.example"} 2.0',
            "recrawl_observations_accepted_total 24.0",
            "recrawl_ingest_rate ",
            "recrawl_rates_bounded_below_share 0.25",  # p0, as in /v1/plan
        ):
            assert needle in text, needle
        sites = client.get("/v1/sites").json()["sites"]
        assert [s["site"] for s in sites] == ["shop.example"]
        assert sites[0]["leases_outstanding"] == 2
        assert client.get("/v1/sites/nowhere.example").status_code == 404
        assert engine.store.observation_count() == 24


def _cli_json(*args: str) -> Any:
    res = CliRunner().invoke(cli_app, list(args))
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_the_cli_and_the_service_give_the_same_documents(serve: Serve, tmp_path: Path) -> None:
    """``recrawl X --json`` and ``GET /v1/X`` print one document for plan,
    budget, health (every site, one site), stats, calibration, hints and pages, on
    the same store at the same clock; each is what its OpenAPI schema says."""
    from estimate.test_calibration import T0, validator_crawl

    from recrawl.service import schemas

    at = (T0 + 201 * 86400) // 900 * 900  # a 15-minute boundary: health --at reads it as is
    db = str(tmp_path / "crawl.db")
    clock = ManualClock(at)
    with serve(clock=clock, db=db) as (client, engine):
        crawl = validator_crawl(13)
        # the last 80 minutes: enough requests for a health score, liar.example blocking
        for k in range(160):
            for j, site in enumerate(("honest.example", "liar.example", "ignorer.example")):
                blocked = site == "liar.example" and k % 3 == 0
                crawl.append(obs(f"https://{site}/p{3 * (k % 7) + j}", at - 4800 + k * 30,
                                 status=403 if blocked else 200, record={"k": k // 40}))  # fmt: skip
        r = client.post("/v1/observations", content=ndjson(crawl))
        assert r.status_code == 200 and r.json()["rejected"] == [], r.text
        sitemap = (
            b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            + b"".join(
                f"<url><loc>https://honest.example/p{i}</loc><lastmod>2023-11-20</lastmod></url>".encode()
                for i in range(0, 30, 3)
            )
            + b"</urlset>"
        )
        r = client.post("/v1/hints", content=sitemap, params={"seen_at": str(at - 86400)})
        assert r.status_code == 200 and r.json()["stored"] == 10, r.text
        r = client.post("/v1/sites/liar.example/pause", json={"reason": "owner asked", "by": "ana"})
        assert r.status_code == 200 and r.json()["recorded"] is True
        budget = engine.settings.daily_budget(0) * engine.settings.cycle_hours / 24
        same_budget = tmp_path / "recrawl.toml"  # the page model spends the daily budget
        same_budget.write_text(f"budget_per_day = {engine.settings.budget_per_day!r}\n")

        pairs: list[tuple[str, Any, Any, type[schemas.BaseModel]]] = [
            ("plan", client.get("/v1/plan", params={"limit": 100_000}),
             ("plan", "--at", str(at), "--budget", repr(budget)), schemas.PlanDoc),
            ("budget", client.get("/v1/budget", params={"per_day": 500}),
             ("budget", "--at", str(at), "--per-day", "500"), schemas.BudgetDoc),
            ("health", client.get("/v1/sites"),
             ("health", "--at", str(at), "--no-record"), schemas.SitesDoc),
            ("one site", client.get("/v1/sites/liar.example"),
             ("site", "show", "liar.example", "--at", str(at), "--no-record"), schemas.SiteDetailDoc),
            ("stats", client.get("/v1/stats"), ("stats",), schemas.StatsDoc),
            ("calibration", client.get("/v1/calibration", params={"days": 60}),
             ("calibration", "--days", "60"), schemas.CalibrationDoc),
            ("hints", client.get("/v1/hints"), ("hints",), schemas.HintReportDoc),
            ("pages", client.get("/v1/pages", params={"limit": 100_000}),
             ("pages", "--at", str(at), "--config", str(same_budget)), schemas.PagesDoc),
        ]  # fmt: skip
        for what, served, args, model in pairs:
            assert served.status_code == 200, (what, served.text)
            cli = _cli_json(*args, "--db", db, "--json")
            assert served.json() == cli, what
            model.model_validate(served.json())  # every key named, every type right
        docs = {what: served.json() for what, served, _, _ in pairs}
        # the documents say something: a crawl of three sites, one paused by hand
        # the paused site's 80 pages are not counted
        assert docs["plan"]["tasks_total"] > 0 and docs["budget"]["pages"] == 160
        assert {s["site"] for s in docs["health"]["sites"]} == {
            "honest.example", "liar.example", "ignorer.example",
        }  # fmt: skip
        assert docs["health"]["paused"] == ["liar.example"] and docs["health"]["at"] == at
        assert [e["kind"] for e in docs["one site"]["events"]] == ["pause", "band"]
        assert docs["one site"]["controls"]["paused"] is True
        assert docs["calibration"]["turned_off"] == []
        assert "liar.example" in [v["name"] for v in docs["calibration"]["validators"]]
        assert [s["source"] for s in docs["hints"]["sources"]] == ["sitemap"]
        assert docs["stats"]["total"]["observations"] == len(crawl)
        rows = {s["site"]: s for s in docs["health"]["sites"]}
        assert rows["liar.example"]["score"] < rows["honest.example"]["score"]
        assert "hard_block" in rows["liar.example"]["reasons"]
        assert docs["one site"]["history"][-1]["at"] == at
        assert docs["pages"]["total"] == len(docs["pages"]["pages"]) > 0
        assert {p["state"] for p in docs["pages"]["pages"] if p["site"] == "liar.example"} == {
            "paused"
        }
        assert client.get("/v1/pages", params={"site": "nowhere.example"}).status_code == 404
        few = client.get("/v1/pages", params={"site": "honest.example", "limit": 2}).json()
        assert len(few["pages"]) == 2 and {p["site"] for p in few["pages"]} == {"honest.example"}

        # the other answers are what their schemas say too
        page = client.get("/v1/pages/https://honest.example/p0")
        schemas.PageInfo.model_validate(page.json())
        schemas.ResumeAnswer.model_validate(client.post("/v1/sites/liar.example/resume").json())
        schemas.ValidatorsAnswer.model_validate(
            client.post("/v1/sites/liar.example/validators", json={"on": False}).json()
        )
        schemas.UrlsAdded.model_validate(
            client.post("/v1/urls", json=[{"url": "https://new.example/"}]).json()
        )
        schemas.UrlsRemoved.model_validate(
            client.post("/v1/urls/remove", json={"urls": ["https://new.example/"]}).json()
        )
        leased = client.post("/v1/leases", json={"worker": "w", "max": 5}).json()
        schemas.Leases.model_validate(leased)
        report = [obs(t["url"], clock(), lease_id=t["lease_id"]) for t in leased["tasks"]]
        schemas.IngestAnswer.model_validate(client.post("/v1/observations", json=report).json())
        schemas.Healthz.model_validate(client.get("/healthz").json())
        for path in ("/v1/sites/nowhere.example", "/v1/pages/https://nowhere.example/"):
            r = client.get(path)
            assert r.status_code == 404
            schemas.ErrorBody.model_validate(r.json())
        r = client.get("/v1/calibration", params={"by": "page"})
        assert r.status_code == 422
        schemas.ValidationErrorBody.model_validate(r.json())


def test_openapi_types_every_answer_and_lists_the_refusals(serve: Serve) -> None:
    """``/openapi.json`` gives a schema for every 2xx answer of every route (a
    ``$ref`` or a typed schema, never ``{}``), and lists the refusals a client
    may get: 401 where a token is checked, 413 and 415 where a body is read,
    404 for a site or page, 422 with the validation body, each typed."""
    with serve(read_token="read-secret") as (client, _):
        spec = client.get("/openapi.json").json()
        components = spec["components"]["schemas"]

        def typed(schema: dict[str, Any]) -> bool:
            if "$ref" in schema:
                return schema["$ref"].removeprefix("#/components/schemas/") in components
            return "type" in schema or any(
                all(typed(s) for s in schema[k]) for k in ("anyOf", "oneOf") if k in schema
            )

        routes = 0
        for path, ops in spec["paths"].items():
            for method, op in ops.items():
                routes += 1
                where = f"{method.upper()} {path}"
                answers = op["responses"]
                ok = [code for code in answers if code.startswith("2")]
                assert ok, where
                for code in ok:
                    content = answers[code].get("content")
                    assert content, (where, code)
                    for media, body in content.items():
                        assert typed(body.get("schema", {})), (where, code, media)
                for code, answer in answers.items():
                    if not code.startswith("2"):
                        (media,) = answer["content"]
                        assert typed(answer["content"][media]["schema"]), (where, code)
                want = set()
                if path != "/healthz":
                    want.add("401")
                if method == "post":
                    want |= {"413", "415", "422"}
                if "{site}" in path or "{url}" in path:
                    want.add("404")
                if path in ("/v1/observations", "/v1/hints") and method == "post":
                    want.add("400")
                assert want <= set(answers), (where, sorted(answers))
        assert routes >= 19
        refusal = "#/components/schemas/ErrorBody"
        for code in ("401", "413", "415"):
            got = spec["paths"]["/v1/observations"]["post"]["responses"][code]
            assert got["content"]["application/json"]["schema"]["$ref"] == refusal, code
        invalid = spec["paths"]["/v1/leases"]["post"]["responses"]["422"]
        assert invalid["content"]["application/json"]["schema"]["$ref"].endswith(
            "ValidationErrorBody"
        )


# -- compressed bodies, the docs offline -------------------------------------------------------

GZ = {"Content-Encoding": "gzip"}


def test_gzip_and_deflate_bodies_are_read_like_plain_ones(serve: Serve) -> None:
    """A fetcher that compresses its reports gets the answers of plain ones (the
    service read the compressed bytes as they were: 200 with every line rejected
    as "not JSON (str is not valid UTF-8: surrogates not allowed)", or 400
    "There was an error parsing the body")."""
    with serve() as (client, engine):
        now = time.time()
        r = client.post("/v1/urls", content=gzip.compress(b'[{"url": "https://a.example/x"}]'), headers=GZ)  # fmt: skip
        assert r.status_code == 200 and r.json() == {
            "received": 1,
            "added": 1,
            "updated": 0,
            "rejected": [],
        }, r.text
        r = client.post(
            "/v1/leases",
            content=zlib.compress(b'{"worker": "w1", "max": 5}'),
            headers={"Content-Encoding": "deflate"},
        )
        assert r.status_code == 200, r.text
        assert [t["url"] for t in r.json()["tasks"]] == ["https://a.example/x"]
        lines = ndjson([obs(f"https://a.example/{i}", now) for i in range(2000)])
        r = client.post("/v1/observations", content=gzip.compress(lines), headers=GZ)
        assert r.json() == {"accepted": 2000, "stored": 2000, "duplicates": 0, "rejected": []}
        # a JSON array as two gzip members (``cat a.gz b.gz``), chunked: no Content-Length
        array = orjson.dumps([obs(f"https://b.example/{i}", now) for i in range(1000)])
        packed = gzip.compress(array[:5000]) + gzip.compress(array[5000:])

        def chunks() -> Iterator[bytes]:
            for i in range(0, len(packed), 1000):
                yield packed[i : i + 1000]

        r = client.post("/v1/observations", content=chunks(), headers=GZ)
        assert r.status_code == 200 and r.json()["stored"] == 1000, r.text
        assert engine.store.observation_count() == 3000


def test_a_gzip_bomb_gets_413_without_filling_memory(serve: Serve) -> None:
    limit = 4 << 20
    member = gzip.compress(bytes(16 << 20), compresslevel=9)  # 16 MiB of zeros in ~16 KiB
    bomb = member * 64  # about 1 MiB sent, 1 GiB once decompressed
    assert len(bomb) < limit
    with serve(max_body_bytes=limit) as (client, engine):
        tracemalloc.start()
        try:
            r = client.post("/v1/observations", content=bomb, headers=GZ)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert r.status_code == 413
        assert r.json() == {"detail": f"request body larger than {limit} bytes once decompressed"}
        assert peak < 8 * limit  # the body so far, one piece and the bomb itself
        assert engine.store.observation_count() == 0


def test_an_unknown_or_broken_encoding_is_one_clear_sentence(serve: Serve) -> None:
    with serve() as (client, engine):
        now = time.time()
        r = client.post(
            "/v1/urls",
            content=b'[{"url": "https://a.example/y"}]',
            headers={"Content-Encoding": "br"},
        )
        assert r.status_code == 415
        assert r.json() == {
            "detail": "Content-Encoding br is not supported: send gzip, deflate or identity"
        }
        assert r.headers["accept-encoding"] == "gzip, deflate"
        r = client.post("/v1/observations", content=b'{"url": "x"}\n', headers=GZ)
        assert r.status_code == 400
        assert r.json()["detail"].startswith("the body is not valid gzip data (")
        cut = gzip.compress(ndjson([obs(f"https://a.example/{i}", now) for i in range(100)]))
        r = client.post("/v1/observations", content=cut[: len(cut) // 2], headers=GZ)
        assert r.status_code == 400
        assert r.json() == {"detail": "the gzip body ends before its end of stream"}
        assert engine.store.observation_count() == 0
        assert engine.store.page_columns()["url"] == []
        # identity is no encoding at all
        r = client.post(
            "/v1/urls",
            content=b'[{"url": "https://a.example/z"}]',
            headers={"Content-Encoding": "identity"},
        )
        assert r.status_code == 200 and r.json()["added"] == 1


def raw_deflate(data: bytes) -> bytes:
    """``data`` as raw DEFLATE (no zlib header): what many clients send as ``deflate``."""
    c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


def test_raw_deflate_and_zero_padded_gzip_bodies_are_read_like_plain_ones(serve: Serve) -> None:
    """A client that sends ``deflate`` without the zlib header, or pads its gzip
    body with zeros, gets the answers of plain requests (it got 400 "the body is
    not valid deflate data (Error -3 ... incorrect header check)", and "... gzip
    data" for the padding)."""
    with serve() as (client, engine):
        now = time.time()
        deflate = {"Content-Encoding": "deflate"}
        r = client.post(
            "/v1/urls", content=raw_deflate(b'[{"url": "https://a.example/x"}]'), headers=deflate
        )
        assert r.status_code == 200 and r.json()["added"] == 1, r.text
        r = client.post(
            "/v1/leases", content=raw_deflate(b'{"worker": "w1", "max": 5}'), headers=deflate
        )
        assert r.status_code == 200, r.text
        assert [t["url"] for t in r.json()["tasks"]] == ["https://a.example/x"]
        lines = ndjson([obs(f"https://a.example/{i}", now) for i in range(500)])
        r = client.post("/v1/observations", content=raw_deflate(lines), headers=deflate)
        assert r.json() == {"accepted": 500, "stored": 500, "duplicates": 0, "rejected": []}

        lines = ndjson([obs(f"https://b.example/{i}", now) for i in range(500)])
        r = client.post("/v1/observations", content=gzip.compress(lines) + bytes(512), headers=GZ)
        assert r.status_code == 200 and r.json()["stored"] == 500, r.text
        # two members, then padding, chunked (no Content-Length) across the boundaries
        lines = ndjson([obs(f"https://c.example/{i}", now) for i in range(500)])
        packed = gzip.compress(lines[:7000]) + gzip.compress(lines[7000:]) + bytes(3000)

        def chunks() -> Iterator[bytes]:
            for i in range(0, len(packed), 777):
                yield packed[i : i + 777]

        r = client.post("/v1/observations", content=chunks(), headers=GZ)
        assert r.status_code == 200 and r.json()["stored"] == 500, r.text
        assert engine.store.observation_count() == 1500


def test_bytes_after_a_compressed_body_are_zero_padding_or_a_clear_400(serve: Serve) -> None:
    """What follows a gzip body's last member, or the deflate stream, may be zero
    bytes; anything else is refused in one sentence and nothing is stored."""
    with serve() as (client, engine):
        lines = ndjson([obs(f"https://a.example/{i}", time.time()) for i in range(50)])
        gz_garbage = (
            "the gzip body goes on after its end of stream with bytes that are neither "
            "zero padding nor another gzip member"
        )
        deflate_garbage = (
            "the deflate body goes on after its end of stream with bytes that are not zero padding"
        )
        for body, coding, detail in (
            (gzip.compress(lines) + b"garbage", "gzip", gz_garbage),
            (gzip.compress(lines) + bytes(100) + b"\x01" + bytes(10), "gzip", gz_garbage),
            (gzip.compress(lines) + b"\n", "gzip", gz_garbage),
            (zlib.compress(lines) + b"garbage", "deflate", deflate_garbage),
            (raw_deflate(lines) + bytes(8) + b"x", "deflate", deflate_garbage),
            # one stream only: a second zlib stream is not deflate
            (zlib.compress(lines) + zlib.compress(lines), "deflate", deflate_garbage),
        ):
            r = client.post("/v1/observations", content=body, headers={"Content-Encoding": coding})
            assert r.status_code == 400 and r.json() == {"detail": detail}, (body[-12:], r.text)
        assert engine.store.observation_count() == 0
        r = client.post(
            "/v1/observations",
            content=zlib.compress(lines) + bytes(4),
            headers={"Content-Encoding": "deflate"},
        )
        assert r.status_code == 200 and r.json()["stored"] == 50, r.text


@pytest.mark.parametrize("wbits", [-zlib.MAX_WBITS, zlib.MAX_WBITS], ids=["raw", "zlib"])
def test_a_deflate_bomb_gets_413_without_filling_memory(serve: Serve, wbits: int) -> None:
    limit = 4 << 20
    c = zlib.compressobj(9, zlib.DEFLATED, wbits)
    zeros = bytes(1 << 20)
    bomb = b"".join(c.compress(zeros) for _ in range(64)) + c.flush()  # 64 MiB in ~64 KiB
    with serve(max_body_bytes=limit) as (client, engine):
        tracemalloc.start()
        try:
            r = client.post(
                "/v1/observations", content=bomb, headers={"Content-Encoding": "deflate"}
            )
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert r.status_code == 413
        assert r.json() == {"detail": f"request body larger than {limit} bytes once decompressed"}
        assert peak < 8 * limit  # the body so far, one piece and the bomb itself
        assert engine.store.observation_count() == 0


def test_an_unknown_encoding_is_refused_only_after_the_token(serve: Serve) -> None:
    """Without the right token a request gets 401 whatever its Content-Encoding
    (it got 415 first, which told a stranger how bodies are read); with it, 415."""
    br = {"Content-Encoding": "br"}
    refused = {"detail": "Content-Encoding br is not supported: send gzip, deflate or identity"}
    with serve(read_token="read-secret") as (client, engine):
        base = client.base_url
        for token in (None, "nope"):
            auth = {} if token is None else {"Authorization": f"Bearer {token}"}
            for method, path, body in (
                ("POST", "/v1/observations", None),  # no body at all
                ("POST", "/v1/observations", b"\x8b\x02\x80{}"),
                ("POST", "/v1/leases", b'{"worker": "w", "max": 5}'),  # a JSON route
                ("POST", "/v1/sites/a.example/resume", None),
                ("GET", "/v1/stats", None),
                ("GET", "/metrics", None),
            ):
                r = httpx.request(method, base.join(path), headers={**br, **auth}, content=body)
                assert r.status_code == 401, (method, path, token, r.text)
                assert r.headers["www-authenticate"] == "Bearer"
                assert "encoding" not in r.text.lower()
        read = {"Authorization": "Bearer read-secret"}
        for headers, method, path in (
            (AUTH, "POST", "/v1/observations"),
            (AUTH, "POST", "/v1/leases"),
            (read, "GET", "/v1/stats"),
        ):
            r = httpx.request(method, base.join(path), headers={**br, **headers}, content=b"{}")
            assert r.status_code == 415 and r.json() == refused, (path, r.text)
            assert r.headers["accept-encoding"] == "gzip, deflate"
        # the refused body was not read: the same client goes on
        r = client.post("/v1/observations", content=b"", headers=br)
        assert r.status_code == 415
        assert client.get("/v1/stats").status_code == 200
        assert engine.store.observation_count() == 0
    with serve() as (client, _):  # no read token: reads need none, so the 415 comes at once
        r = httpx.get(client.base_url.join("/v1/stats"), headers=br)
        assert r.status_code == 415 and r.json() == refused
        r = httpx.post(client.base_url.join("/v1/observations"), headers=br)
        assert r.status_code == 401


def declare_huge_body(
    base: httpx.URL, method: str, path: str, headers: dict[str, str]
) -> tuple[int, dict[str, str], Any]:
    """Send a request head declaring a body of a terabyte and none of it, on a
    connection of its own: ``(status, headers, JSON body)`` of the answer, which
    must come without the body and close the connection."""
    head = f"{method} {path} HTTP/1.1\r\nHost: {base.host}\r\nContent-Length: {10**12}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    assert base.port is not None
    with socket.create_connection((base.host, base.port), timeout=10) as sock:
        sock.sendall(head.encode("latin-1"))
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except TimeoutError:
            pytest.fail(f"{method} {path}: no answer, or the connection was kept open: {answer!r}")
    top, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = top.decode("latin-1").split("\r\n")
    fields = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines)}
    return int(status_line.split()[1]), fields, orjson.loads(body)


def test_a_body_declared_too_large_gets_401_without_the_token_and_413_with_it(
    serve: Serve,
) -> None:
    """A client without the token gets 401 whatever the size of its body (it got
    413, which told a stranger the limit); with it, 413. Either way the body is
    not read: the answer comes at once and the connection is closed."""
    too_large = {"detail": "request body larger than 2000 bytes"}
    read = {"Authorization": "Bearer read-secret"}
    with serve(read_token="read-secret", max_body_bytes=2000) as (client, engine):
        base = client.base_url
        for auth in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic x"}):
            for method, path, extra in (
                ("POST", "/v1/observations", {}),
                ("POST", "/v1/observations", GZ),
                ("POST", "/v1/urls", {"Content-Type": "application/json"}),  # a JSON route
                ("POST", "/v1/sites/a.example/resume", {}),
                ("GET", "/v1/stats", {}),
            ):
                status, fields, body = declare_huge_body(base, method, path, {**extra, **auth})
                assert status == 401, (method, path, auth, body)
                assert fields["www-authenticate"] == "Bearer"
                assert fields["connection"] == "close"
                assert "larger" not in str(body)
        # the read token does not write
        status, _, _ = declare_huge_body(base, "POST", "/v1/observations", read)
        assert status == 401
        for method, path, auth in (
            ("POST", "/v1/observations", AUTH),
            ("POST", "/v1/urls", AUTH),
            ("POST", "/v1/leases", AUTH),
            ("GET", "/v1/stats", read),
            ("GET", "/metrics", AUTH),
        ):
            status, fields, body = declare_huge_body(base, method, path, auth)
            assert (status, body) == (413, too_large), (method, path)
            assert fields["connection"] == "close"
        # a body that is sent: the same, by Content-Length or counted as it arrives
        now = time.time()
        big = ndjson([obs(f"https://a.example/{i}", now) for i in range(100)])
        urls = orjson.dumps([{"url": f"https://a.example/{i}"} for i in range(100)])
        assert len(big) > 2000 and len(urls) > 2000

        def chunks(body: bytes) -> Iterator[bytes]:  # no Content-Length
            for i in range(0, len(body), 500):
                yield body[i : i + 500]

        for path, body in (("/v1/observations", big), ("/v1/urls", urls)):
            for content in (body, chunks(body)):
                r = httpx.post(base.join(path), content=content)
                assert r.status_code == 401, (path, r.text)
            for content in (body, chunks(body)):
                r = client.post(path, content=content)
                assert r.status_code == 413 and r.json() == too_large, (path, r.text)
        assert engine.store.observation_count() == 0
        assert engine.store.page_columns()["url"] == []
        assert client.post("/v1/urls", json=[{"url": "https://a.example/x"}]).status_code == 200
    with serve(max_body_bytes=2000) as (client, _):
        # no read token: every client may read, so a read gets its 413 at once
        status, _, body = declare_huge_body(client.base_url, "GET", "/v1/stats", {})
        assert (status, body) == (413, too_large)
        status, _, _ = declare_huge_body(client.base_url, "POST", "/v1/urls", {})
        assert status == 401


def test_a_broken_or_bomb_body_on_a_json_route_gets_401_without_the_token(
    serve: Serve,
) -> None:
    """A JSON route read its body before checking the token: a corrupt gzip body
    got 400, a gzip bomb 413 and a body that is not JSON 422 without the token.
    Now 401 first; with the token, the same answers as before."""
    limit = 1 << 16
    bomb = gzip.compress(bytes(4 << 20), compresslevel=9)  # 4 MiB of zeros in ~4 KiB
    lease_body = b'{"worker": "w", "max": 5}'
    with serve(max_body_bytes=limit) as (client, engine):
        base = client.base_url
        cases = [
            ("/v1/urls", b'[{"url": "https://a.example/x"}]'[:-5], {}, 422),  # not JSON
            ("/v1/urls", b"not gzip at all", GZ, 400),
            ("/v1/urls", gzip.compress(b'[{"url": "https://a.example/x"}]')[:20], GZ, 400),
            ("/v1/urls", bomb, GZ, 413),
            ("/v1/leases", zlib.compress(lease_body) + b"garbage", {"Content-Encoding": "deflate"}, 400),
            ("/v1/leases", bomb, GZ, 413),
            ("/v1/urls/remove", b"\x1f\x8b\x08broken", GZ, 400),
            ("/v1/sites/a.example/pause", bomb, GZ, 413),
            ("/v1/observations", b"not gzip at all", GZ, 400),
            ("/v1/observations", bomb, GZ, 413),
        ]  # fmt: skip
        for path, body, headers, _status in cases:
            for auth in ({}, {"Authorization": "Bearer nope"}):
                r = httpx.post(base.join(path), content=body, headers={**headers, **auth})
                assert r.status_code == 401, (path, headers, auth, r.text)
                assert r.headers["www-authenticate"] == "Bearer"
        for path, body, headers, status in cases:
            r = client.post(path, content=body, headers=headers)
            assert r.status_code == status, (path, headers, r.text)
        assert engine.store.observation_count() == 0
        assert engine.store.page_columns()["url"] == []
        assert engine.store.site_controls() == {}


def test_healthz_answers_200_whatever_the_request_carries(serve: Serve) -> None:
    """/healthz reads no body, so it has no body to refuse: an unknown or broken
    Content-Encoding, a body declared too large or no token (with a read token
    configured) still get 200, and the connection of a body sent goes on."""
    with serve(read_token="read-secret", max_body_bytes=2000) as (client, _):
        base = client.base_url
        with httpx.Client(base_url=base) as plain:  # no token; one kept-alive connection
            for headers, body in (
                ({}, None),
                ({"Content-Encoding": "br"}, None),
                ({"Content-Encoding": "br"}, b"\x8b\x02\x80{}"),
                (GZ, b"not gzip at all"),
                ({"Content-Encoding": "deflate"}, b"garbage"),
            ):
                r = plain.request("GET", "/healthz", headers=headers, content=body)
                assert r.status_code == 200 and r.json()["status"] == "ok", (headers, r.text)
            assert plain.get("/v1/stats").status_code == 401
        status, fields, body = declare_huge_body(base, "GET", "/healthz", {})
        assert (status, body["status"]) == (200, "ok")
        assert fields["connection"] == "close"
        head = httpx.head(f"{base}/healthz")  # a load balancer's probe
        assert head.status_code == 200 and head.content == b""


def test_the_docs_load_on_a_host_without_the_internet(serve: Serve) -> None:
    """/docs and /redoc use only scripts, styles and icons the service itself serves
    (they came from a CDN: a blank page on an offline crawl host)."""
    with serve() as (client, _):
        for page in ("/docs", "/redoc"):
            r = client.get(page)
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
            assert "http://" not in r.text and "https://" not in r.text
            assets = re.findall(r'(?:src|href)="([^"]+)"', r.text)
            assert any(a.endswith(".js") for a in assets), r.text
            for asset in assets:
                assert asset.startswith("/"), asset
                got = client.get(asset)
                assert got.status_code == 200 and len(got.content) > 1000, asset
        assert client.get("/openapi.json").status_code == 200


# -- the command line and a crash --------------------------------------------------------------


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECRAWL_")}
    env["PYTHONPATH"] = str(Path(__file__).parents[2] / "src")
    env.update(extra)
    return env


def test_serve_refuses_a_bad_config_with_one_clear_sentence(tmp_path: Path) -> None:
    cfg = tmp_path / "recrawl.toml"
    cfg.write_text("budget_per_day = 100\n")
    cmd = [sys.executable, "-m", "recrawl", "serve", "--config", str(cfg), "--db",
           str(tmp_path / "x.db"), "--port", str(free_port())]  # fmt: skip
    res = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, text=True, timeout=30)
    assert res.returncode == 2
    assert "no write token" in res.stderr and "Traceback" not in res.stderr
    cfg.write_text('token = "t"\ncycle_hours = -1\n')
    res = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "cycle_hours" in res.stderr


def test_init_writes_a_config_with_a_fresh_token_that_the_environment_overrides(
    tmp_path: Path,
) -> None:
    cfg, db = tmp_path / "recrawl.toml", tmp_path / "r.db"
    runner = CliRunner()
    res = runner.invoke(cli_app, ["init", "--config", str(cfg), "--db", str(db)])
    assert res.exit_code == 0, res.output
    assert db.exists() and cfg.stat().st_mode & 0o077 == 0
    first = load_settings(cfg, env={}).token
    assert first and len(first) >= 32
    assert runner.invoke(cli_app, ["init", "--config", str(cfg), "--db", str(db)]).exit_code != 0
    res = runner.invoke(cli_app, ["init", "--config", str(cfg), "--db", str(db), "--force"])
    assert res.exit_code == 0 and load_settings(cfg, env={}).token != first
    assert load_settings(cfg, env={"RECRAWL_TOKEN": "from-env"}).token == "from-env"


@contextmanager
def _server_process(
    tmp_path: Path, db: Path | str, port: int, **env: str
) -> Iterator[subprocess.Popen[bytes]]:
    """``recrawl serve`` on ``db`` in a process of its own, once it answers
    ``/healthz``; ``env`` adds to its environment (``RECRAWL_…`` settings)."""
    cfg = tmp_path / "recrawl.toml"
    cfg.write_text('budget_per_day = 1000\ntoken = "file-token"\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "recrawl", "serve", "--config", str(cfg), "--db", str(db),
         "--port", str(port), "--log-level", "warning"],
        env=_env(tmp_path, RECRAWL_TOKEN=TOKEN, **env),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stderr:
            proc.stderr.close()


def test_acknowledged_observations_survive_a_sigkill_of_the_server(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    t = time.time()
    batches = [
        ndjson([obs(f"https://a.example/{i}", t - 100 + b, id=f"{b}-{i}") for i in range(500)])
        for b in range(12)
    ]
    acked: list[bytes] = []
    with _server_process(tmp_path, db, port) as proc, httpx.Client(headers=AUTH) as c:
        # The file's token is overridden by RECRAWL_TOKEN.
        r = c.post(
            f"{base}/v1/leases",
            json={"worker": "w"},
            headers={"Authorization": "Bearer file-token"},
        )
        assert r.status_code == 401
        for body in batches[:8]:
            r = c.post(f"{base}/v1/observations", content=body)
            assert r.status_code == 200 and r.json()["accepted"] == 500
            acked.append(body)
        os.kill(proc.pid, signal.SIGKILL)  # right after the last acknowledgement
        proc.wait()
    with _server_process(tmp_path, db, port), httpx.Client(headers=AUTH) as c:
        for body in acked:
            r = c.post(f"{base}/v1/observations", content=body).json()
            assert (r["accepted"], r["stored"], r["duplicates"]) == (500, 0, 500)
        stats = c.get(f"{base}/v1/stats").json()
        assert stats["total"]["observations"] == 8 * 500


def test_reported_block_pages_are_classified_like_the_cli(tmp_path):
    """A 200 carrying a challenge page, reported over HTTP without an outcome, is a challenge."""
    from recrawl.testing.server import serve_in_thread

    db = tmp_path / "svc.db"
    settings = Settings(token="t0k", budget_per_day=100)
    with serve_in_thread(create_app(str(db), settings)) as base:
        body = "\n".join(
            json.dumps(o)
            for o in (
                {"url": "https://a.example/p", "fetched_at": 1, "status": 200, "record": {"x": 1}},
                {
                    "url": "https://a.example/p",
                    "fetched_at": 2,
                    "status": 200,
                    "title": "Just a moment...",
                },
            )
        )
        r = httpx.post(
            f"{base}/v1/observations", content=body, headers={"Authorization": "Bearer t0k"}
        )
        assert r.status_code == 200 and r.json()["accepted"] == 2
    s = SQLiteStore(db)
    assert [o for _, o in s.outcomes("https://a.example/p")] == ["new", "challenge"]
    s.close()


# -- pages named by a raw or a once-encoded URL; JSON bodies whatever the Content-Type ---------


def test_a_page_is_found_by_its_url_appended_raw_or_percent_encoded_once(serve: Serve) -> None:
    from urllib.parse import quote

    clock = ManualClock()
    with serve(clock=clock) as (client, _):
        urls = [
            "https://odd.example/%E2%9C%93",
            "https://plain.example/p",
            "https://shop.example/list?a=1&b=2",
            "https://odd.example/a%2Fb?q=%C3%A9&r=x+y",
        ]
        r = client.post("/v1/observations", content=ndjson([obs(u, clock() - 60) for u in urls]))
        assert r.json()["accepted"] == len(urls)
        for url in urls:
            # appended raw: its %XX escapes are kept, its query string arrives as the request's
            raw = client.get(f"/v1/pages/{url}")
            assert raw.status_code == 200, (url, raw.text)
            assert raw.json()["url"] == url
            assert raw.request.url.raw_path == f"/v1/pages/{url}".encode()  # sent as written
            # percent-encoded once, as a whole (query string included)
            once = client.get(f"/v1/pages/{quote(url, safe='')}")
            assert once.status_code == 200, (url, once.text)
            assert once.json()["url"] == url
            # percent-encoded once, keeping the slashes (`quote(url)`)
            assert client.get(f"/v1/pages/{quote(url)}").json()["url"] == url
            # twice-encoded names another URL (one with a literal `%3A`): not a page
            assert client.get(f"/v1/pages/{quote(quote(url, safe=''), safe='')}").status_code == 404
        # the scheme in any case, the host normalised as the store does
        assert client.get("/v1/pages/HTTPS://Shop.Example/list?a=1&b=2").status_code == 200
        # a raw %XX is not decoded: `%E2%9C%93` is not the same URL as `%25E2%259C%2593`
        assert client.get("/v1/pages/https://odd.example/%25E2%259C%2593").status_code == 404
        assert client.get("/v1/pages/https://shop.example/list?a=1").status_code == 404
        assert client.get("/v1/pages/not-a-url").status_code == 404


def test_page_target_without_a_raw_path_takes_the_decoded_one() -> None:
    from recrawl.service.routes.sites import page_target

    scope: dict[str, Any] = {"query_string": b"a=1"}
    assert page_target(scope, "https://x.example/p") == "https://x.example/p?a=1"
    scope = {"raw_path": b"/v1/pages/https%3A%2F%2Fx.example%2Fp%3Fb%3D2", "query_string": b""}
    assert page_target(scope, "https://x.example/p?b=2") == "https://x.example/p?b=2"
    # a raw path that does not decode to the route's remainder is not trusted
    scope = {"raw_path": b"/v1%2Fpages/https%3A%2F%2Fx.example%2Fp", "query_string": b""}
    assert page_target(scope, "https%3A%2F%2Fx.example%2Fp") == "https%3A%2F%2Fx.example%2Fp"


@pytest.mark.parametrize(
    "content_type", [None, "application/x-www-form-urlencoded", "text/plain", "application/json"]
)
def test_json_bodies_are_read_whatever_the_content_type(
    serve: Serve, content_type: str | None
) -> None:
    """`curl -d '{...}'` (as in the README) sends application/x-www-form-urlencoded."""
    headers = {"Content-Type": content_type} if content_type else {}
    with serve() as (client, engine):
        r = client.post("/v1/urls", content=b'[{"url": "https://a.example/x"}]', headers=headers)
        assert r.status_code == 200 and r.json() == {
            "received": 1,
            "added": 1,
            "updated": 0,
            "rejected": [],
        }, r.text
        r = client.post("/v1/urls", content=b'{"urls": [{"url": "https://a.example/y"}]}', headers=headers)  # fmt: skip
        assert r.status_code == 200 and r.json()["added"] == 1, r.text
        r = client.post("/v1/leases", content=b'{"worker": "w1", "max": 50}', headers=headers)
        assert r.status_code == 200, r.text
        assert sorted(t["url"] for t in r.json()["tasks"]) == [
            "https://a.example/x",
            "https://a.example/y",
        ]
        # bad JSON, and a good JSON of the wrong shape, are a clear 422
        r = client.post("/v1/leases", content=b'{"worker": "w1", "max": 50', headers=headers)
        assert r.status_code == 422
        assert r.json()["detail"][0]["error"].startswith("body is not valid JSON")
        r = client.post("/v1/leases", content=b"worker=w1&max=50", headers=headers)
        assert r.status_code == 422
        r = client.post("/v1/leases", content=b'{"worker": "", "max": 50}', headers=headers)
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "worker"
        r = client.post("/v1/urls", content=b'[{"url": "https://a.example/z"', headers=headers)
        assert r.status_code == 422
        assert "https://a.example/z" not in engine.store.page_columns()["url"]
        # the token is still required
        r = client.post(
            "/v1/leases",
            content=b'{"worker": "w2"}',
            headers={**headers, "Authorization": "Bearer wrong"},
        )
        assert r.status_code == 401


def test_the_openapi_description_keeps_the_json_bodies(serve: Serve) -> None:
    with serve() as (client, _):
        paths = client.get("/openapi.json").json()["paths"]
        for path, schema in (("/v1/leases", "LeaseRequest"), ("/v1/urls", "UrlBatch")):
            body = orjson.dumps(paths[path]["post"]["requestBody"]["content"]["application/json"])
            assert schema.encode() in body


@pytest.fixture(params=["sqlite", "postgres"])
def any_db(request: pytest.FixtureRequest, db_path: str) -> Iterator[str]:
    """A store path, then a fresh PostgreSQL schema's URL."""
    if request.param == "sqlite":
        yield db_path
    else:
        yield from pg_schema()


def test_urls_registered_by_the_cli_reach_a_running_service(
    serve: Serve, any_db: str, tmp_path: Path
) -> None:
    # another process writes to the store the service runs on: the plan catches up
    clock = ManualClock()
    with serve(clock=clock, db=any_db) as (client, _):
        assert lease(client, "w1") == []  # an empty store: an empty plan, cached
        urls = tmp_path / "urls.txt"
        urls.write_text("https://cli.example/1\nhttps://cli.example/2\n")
        res = CliRunner().invoke(cli_app, ["urls", "add", str(urls), "--db", any_db])
        assert res.exit_code == 0, res.output
        got: list[dict[str, Any]] = []
        for _ in range(100):  # the plan is recomputed in the background
            got += lease(client, "w1")
            if len(got) == 2:
                break
            time.sleep(0.05)
        assert sorted(t["url"] for t in got) == ["https://cli.example/1", "https://cli.example/2"]


def test_a_write_by_another_process_during_a_replan_is_not_forgotten(any_db: str) -> None:
    """URLs another process registers while the service recomputes its plan get a
    plan of their own: the recomputation that was already running did not see
    them, and its end used to clear the news (they waited for the next cycle)."""
    from recrawl.service import Service

    settings = Settings(token=TOKEN, budget_per_day=10_000.0)
    store, cli = open_store(any_db), open_store(any_db)
    try:
        svc = Service(Engine(store, settings, clock=ManualClock()), replan_min_s=0.0)
        assert svc.lease("w1", 10) == []  # an empty plan, cached
        computed, release = threading.Event(), threading.Event()
        compute = svc._compute

        def held(t: float, cycle: int) -> Any:
            plan = compute(t, cycle)  # read before the second URL is written
            computed.set()
            release.wait(10.0)
            return plan

        svc._compute = held  # type: ignore[method-assign]
        cli.add_urls([("https://cli.example/1", "cli.example", "page", 1.0)], now=1.0)
        deadline = time.monotonic() + 10.0
        while not computed.is_set() and time.monotonic() < deadline:
            svc.plan()  # notices the write: a recomputation starts in the background
            time.sleep(0.01)
        assert computed.is_set()
        seen = store.outside_writes()
        cli.add_urls([("https://cli.example/2", "cli.example", "page", 1.0)], now=1.0)
        while store.outside_writes() == seen and time.monotonic() < deadline:
            time.sleep(0.01)
        svc.plan()  # notices the second write while the first recomputation runs
        release.set()
        got: list[str] = []
        for _ in range(100):
            got += [t["url"] for t in svc.lease("w1", 10)]
            if len(got) == 2:
                break
            time.sleep(0.05)
        assert sorted(got) == ["https://cli.example/1", "https://cli.example/2"]
    finally:
        store.close()
        cli.close()


def test_an_operator_re_tiers_and_removes_urls_over_the_api(serve: Serve) -> None:
    clock = ManualClock()
    with serve(clock=clock) as (client, engine):
        urls = [f"https://shop.example/{i}" for i in range(4)]
        register(client, urls, value=2)
        leased = {t["url"] for t in lease(client, "w1", 1)}
        gone = next(iter(leased))
        r = client.post("/v1/urls/remove", json={"urls": [gone, "https://shop.example/none"]})
        assert r.status_code == 200 and r.json() == {"received": 2, "removed": 1}
        assert engine.store.page(gone) is None
        assert gone not in {t["url"] for t in lease(client, "w2", 100)}
        keep = [u for u in urls if u != gone]
        r = client.post(
            "/v1/urls",
            json={"urls": [{"url": keep[0], "value": 8}, {"url": keep[1]}], "update": True},
        )
        assert r.status_code == 200 and r.json() == {
            "received": 2,
            "added": 0,
            "updated": 1,
            "rejected": [],
        }
        assert engine.store.page(keep[0]).value == 8.0  # type: ignore[union-attr]
        assert engine.store.page(keep[1]).value == 2.0  # type: ignore[union-attr]
        assert client.post("/v1/urls/remove", json={"urls": ["not a url"]}).status_code == 422


def test_calibration_finds_a_host_whose_304s_hide_changes_and_leases_follow(
    serve: Serve,
) -> None:
    """GET /v1/calibration names the host that answers 304 to every conditional
    request; POST /v1/sites/{site}/validators turns its validators off, and
    its leases then carry none. Verification leases never carry validators
    (the unconditional sample the check needs)."""
    from estimate.test_calibration import T0, validator_crawl

    clock = ManualClock(T0 + 201 * 86400)
    # site_concurrency: the sites' tasks out at once, verifications and the others
    with serve(clock=clock, reserves={"verify": 0.3}, site_concurrency=500) as (client, engine):
        r = client.post("/v1/observations", content=ndjson(validator_crawl(13)))
        assert r.status_code == 200 and r.json()["rejected"] == [], r.text
        computed = []
        compute = engine.calibration

        def counting(**kw: Any) -> Any:
            computed.append(kw)
            return compute(**kw)

        engine.calibration = counting  # type: ignore[method-assign]
        r = client.get("/v1/calibration", params={"days": 100})
        assert r.status_code == 200, r.text
        # the report reads a window of the log under the store lock: once an hour
        assert client.get("/v1/calibration", params={"days": 100}).json() == r.json()
        assert len(computed) == 1
        by = {v["name"]: v for v in r.json()["validators"]}
        assert by["liar.example"]["hides_changes"] and not by["honest.example"]["hides_changes"]
        assert "liar.example" in r.json()["verdict"]
        assert client.get("/v1/calibration", params={"days": 0}).status_code == 422
        assert client.get("/v1/calibration", params={"by": "host"}).status_code == 422
        r = client.post(
            "/v1/sites/liar.example/validators", json={"on": False, "reason": "304s lie"}
        )
        assert r.status_code == 200 and r.json()["recorded"] is True, r.text
        again = client.post("/v1/sites/liar.example/validators", json={"on": False})
        assert again.json()["recorded"] is False
        assert client.post("/v1/sites/x.example/validators", json={"on": False}).status_code == 404
        events = engine.store.site_events("liar.example")
        assert [(e["kind"], e["detail"]) for e in events] == [
            ("validators_off", "by api: 304s lie")
        ]
        # a validators change shows at once; a new hour recomputes
        r = client.get("/v1/calibration", params={"days": 100})
        assert r.json()["validators_off"] == ["liar.example"] and len(computed) == 2
        clock.advance(3600)
        client.get("/v1/calibration", params={"days": 100})
        assert len(computed) == 3
        tasks = lease(client, "w1", 500)
        assert tasks
        assert all(t["headers"] == {} for t in tasks if t["site"] == "liar.example")
        assert all(t["headers"] == {} for t in tasks if t["reason"] == "verify")
        assert any(t["reason"] == "verify" for t in tasks)
        assert any(t["headers"] for t in tasks if t["site"] == "honest.example")


# -- cheap signals ----------------------------------------------------------------------------


def test_hints_are_reported_as_a_sitemap_or_lines_and_their_sources_shown(serve: Serve) -> None:
    with serve() as (client, engine):
        register(client, ["https://a.example/1", "https://a.example/2"])
        sitemap = (
            b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            b"<url><loc>https://a.example/1</loc><lastmod>2024-05-01</lastmod></url>"
            b"<url><loc>https://a.example/9</loc><lastmod>2024-05-01</lastmod></url>"
            b"<url><loc>https://a.example/2</loc><lastmod>soon</lastmod></url>"
            b"</urlset>"
        )
        r = client.post("/v1/hints", content=gzip.compress(sitemap), headers=GZ)
        assert r.status_code == 200, r.text
        got = r.json()
        assert (got["received"], got["stored"], got["unknown"], got["rejected"]) == (3, 1, 1, 1)
        assert got["errors"][0]["field"] == "lastmod" and got["errors"][0]["line"] == 3
        lines = ndjson(
            [
                {"url": "https://a.example/2", "lastmod": "2024-05-02T10:00:00Z"},
                {"url": "https://a.example/1"},
            ]
        )
        r = client.post("/v1/hints?source=feed&seen_at=2024-05-03T00:00:00Z", content=lines)
        got = r.json()
        assert (got["stored"], got["rejected"]) == (1, 1), got
        assert got["errors"][0] == {
            "line": 2,
            "field": "lastmod",
            "error": "line 2: field 'lastmod': is missing",
        }
        # an unknown URL registered on request
        r = client.post("/v1/hints?add_urls=true", content=sitemap)
        assert r.json()["added_urls"] == 1
        assert engine.store.page("https://a.example/9") is not None
        report = client.get("/v1/hints").json()
        assert {s["source"]: s["pages"] for s in report["sources"]} == {"feed": 1, "sitemap": 2}
        assert report["trust"] == [] and "trusted" in report["trusted_means"]
        assert "lag" in report["lag_means"].lower()
        # the token first, whatever the body; a document that is no sitemap is named
        assert httpx.post(f"{client.base_url}/v1/hints", content=sitemap).status_code == 401
        r = client.post("/v1/hints", content=b"<html><body/></html>")
        assert r.status_code == 400 and "<html>" in r.json()["detail"]
        r = client.post("/v1/hints?seen_at=later", content=lines)
        assert r.status_code == 422


SITEMAP_9 = (
    b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
    b"<url><loc>https://a.example/1</loc><lastmod>2024-05-01</lastmod></url>"
    b"<url><loc>https://a.example/9</loc><lastmod>2024-05-01</lastmod></url>"
    b"</urlset>"
)


def test_a_gzipped_hint_body_without_content_encoding_is_read(serve: Serve) -> None:
    with serve(max_body_bytes=4096) as (client, _):
        register(client, ["https://a.example/1"])
        r = client.post("/v1/hints", content=gzip.compress(SITEMAP_9))
        assert r.status_code == 200, r.text
        got = r.json()
        assert (got["stored"], got["unknown"], got["rejected"]) == (1, 1, 0), got
        # bounded once decompressed, as a body that says it is gzipped
        r = client.post("/v1/hints", content=gzip.compress(b"\n" * 10_000))
        assert r.status_code == 413, r.text
        r = client.post("/v1/hints", content=gzip.compress(SITEMAP_9)[:20])
        assert r.status_code == 400, r.text


def test_hints_seen_in_the_future_are_rejected_and_the_good_ones_kept(serve: Serve) -> None:
    clock = ManualClock(1_714_600_000.0)  # 2024-05-01
    with serve(clock=clock) as (client, engine):
        register(client, ["https://a.example/1", "https://a.example/2"])
        lines = ndjson(
            [
                {"url": "https://a.example/1", "lastmod": "2024-04-30", "seen_at": 1_714_600_000},
                {"url": "https://a.example/2", "lastmod": "2024-04-30", "seen_at": "2150-01-01"},
            ]
        )
        got = client.post("/v1/hints?source=feed", content=lines).json()
        assert (got["received"], got["stored"], got["rejected"]) == (2, 1, 1), got
        (e,) = got["errors"]
        assert e["field"] == "seen_at" and "after the service's clock" in e["error"]
        assert engine.store.execute("SELECT count(*) FROM hints") == [(1,)]


def test_hints_registering_urls_replan_in_the_background(serve: Serve) -> None:
    with serve() as (client, engine):
        register(client, ["https://a.example/1"])
        lease(client, "w1", 1)  # the first plan
        threads: list[str] = []
        plan = engine.plan

        def recorded(**kw: Any) -> Any:
            threads.append(threading.current_thread().name)
            return plan(**kw)

        engine.plan = recorded  # type: ignore[method-assign]
        r = client.post("/v1/hints?add_urls=true", content=SITEMAP_9)
        assert r.json()["added_urls"] == 1
        lease(client, "w1", 1)
        deadline = time.monotonic() + 10
        while not threads and time.monotonic() < deadline:
            time.sleep(0.01)
        assert threads == ["recrawl-replan"]  # not under the service lock, at once


def test_a_cycle_is_charged_what_its_leased_fetches_really_cost(serve: Serve) -> None:
    """Billing by credits, 10 a cycle, no costs learned (1 credit a fetch
    assumed): 10 leases spend the cycle; when half of them come back failed
    (a failure costs no credit), the cycle has 5 credits left, 10 fetches at
    the 0.5 credit a fetch now learned (charged the estimate, none)."""
    clock = ManualClock()
    app_kw = {"replan_after": 1}
    with serve(
        clock=clock,
        billing_unit="credits",
        budget_per_day=240.0,
        site_concurrency=100,  # the cycle's 10 leases of one site out at once
        app_kw=app_kw,
    ) as (client, _):
        register(client, [f"https://a.example/{i}" for i in range(60)])
        first = lease(client, "w1", 100)
        assert len(first) == 10
        assert lease(client, "w1", 100) == []  # the cycle's budget is spent
        items = [
            obs(t["url"], clock(), lease_id=t["lease_id"], record={"p": 1})
            if k % 2
            else obs(t["url"], clock(), lease_id=t["lease_id"], status=500)
            for k, t in enumerate(first)
        ]
        r = client.post("/v1/observations", content=ndjson(items))
        assert r.json()["stored"] == 10
        more: list[dict[str, Any]] = []
        deadline = time.monotonic() + 10
        while not more and time.monotonic() < deadline:  # the plan is recomputed behind
            more = lease(client, "w1", 100)
            time.sleep(0.05)
        assert len(more) == 10
        failed = {t["url"] for k, t in enumerate(first) if not k % 2}
        assert not {t["url"] for t in more} & failed  # (they back off a cycle at least)

"""``recrawl plan --cluster``: the store's pages planned on a Dask scheduler give
the plan ``recrawl plan`` makes on this machine."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recrawl.cli.main import app
from recrawl.config import Settings
from recrawl.engine.engine import Engine
from recrawl.observe.observation import parse_observation
from recrawl.store import open_store
from recrawl.testing.fetchlog import generate_fetch_log
from recrawl.testing.server import free_port

distributed = pytest.importorskip("distributed")
pytest.importorskip("pyarrow")

START = 1_767_225_600.0
AT = START + 31 * 86400.0
runner = CliRunner()


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """3,000 pages with a month of revisits on four sites, and 200 new URLs."""
    path = str(tmp_path_factory.mktemp("cluster") / "crawl.db")
    with open_store(path) as store:
        engine = Engine(store, Settings())
        engine.ingest(
            parse_observation(o)
            for o in generate_fetch_log(30_000, n_pages=3_000, start=START, days=30.0, seed=5)
        )
        engine.add_urls(
            [{"url": f"https://new.example/p/{i}", "site": "new.example"} for i in range(200)],
            now=AT - 86400.0,
        )
    return path


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        # (None still serves HTTP on 8787, which another cluster may hold)
        dashboard_address="127.0.0.1:0",
    ) as cluster:
        yield cluster.scheduler_address


def _plan(*args: str) -> dict:  # type: ignore[type-arg]
    res = runner.invoke(app, ["plan", "--budget", "60", "--at", str(AT), "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)  # type: ignore[no-any-return]


def test_the_cluster_plan_is_the_one_machine_plan(db: str, scheduler: str, tmp_path: Path) -> None:
    here = _plan("--db", db)
    there = _plan("--db", db, "--cluster", scheduler, "--parquet", str(tmp_path / "pages"))
    # 3,000 pages: every page with revisits is in the priors' sample, so the
    # rates are the same, and so are the draws (the verification sample)
    assert there["split"] == here["split"]
    assert there["tasks_total"] == here["tasks_total"] > 40
    assert {"discovery", "score", "verify"} <= set(here["split"])
    got = {t["url"]: t for t in there["tasks"]}
    want = {t["url"]: t for t in here["tasks"]}
    assert set(got) == set(want)  # (ties at a cut-off could differ: none here)
    for url, t in want.items():
        assert got[url]["reason"] == t["reason"]
        assert got[url]["cost"] == t["cost"]
        assert got[url]["expected_gain"] == pytest.approx(t["expected_gain"], rel=1e-9)
        assert got[url]["rate_per_day"] == pytest.approx(t["rate_per_day"], rel=1e-9)
        assert got[url]["headers"] == t["headers"]
    assert there["spent"] == pytest.approx(here["spent"], rel=1e-12)
    assert there["rate_resolution"] == here["rate_resolution"]
    # the plan's own export under the root is gone once the plan is made
    assert (tmp_path / "pages").is_dir() and not list((tmp_path / "pages").iterdir())


def test_the_config_key_plans_on_the_cluster_beside_the_store(
    db: str, scheduler: str, tmp_path: Path
) -> None:
    cfg = tmp_path / "recrawl.toml"
    cfg.write_text(f'cluster = "{scheduler}"\n', encoding="utf-8")
    res = runner.invoke(
        app, ["plan", "--db", db, "--config", str(cfg), "--budget", "60", "--at", str(AT)]
    )
    assert res.exit_code == 0, res.output
    assert res.output.startswith("Plan: ") and "by reason: " in res.output
    assert Path(db).with_suffix(".parquet").is_dir()  # the default root, beside the store
    # the cluster plans the recrawl policy only
    res = runner.invoke(
        app, ["plan", "--db", db, "--config", str(cfg), "--budget", "60", "--policy", "greedy"]
    )
    assert res.exit_code != 0
    assert "policy 'greedy' is not planned on a cluster" in str(res.exception)


def test_an_unreachable_scheduler_is_one_sentence_and_exit_2(db: str) -> None:
    import dask.config

    address = f"tcp://127.0.0.1:{free_port()}"
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        res = runner.invoke(app, ["plan", "--db", db, "--budget", "60", "--cluster", address])
    assert res.exit_code == 2
    assert res.stderr == (
        f"error: no Dask scheduler answered at {address} within 1 s: "
        "start one (`dask scheduler`) or check the address\n"
    )
    assert res.stdout == ""


def test_the_service_leases_from_the_cluster_plan(db: str, scheduler: str, tmp_path: Path) -> None:
    from recrawl.clock import ManualClock
    from recrawl.service.state import Service

    leased = {}
    for where in ("here", "there"):
        settings = Settings(
            budget_per_day=60 * 24,
            site_concurrency=100,
            cluster=scheduler if where == "there" else None,
            cluster_parquet=str(tmp_path / "pages"),
        )
        copy = shutil.copy(db, tmp_path / f"{where}.db")  # (a lease is written to the store)
        with open_store(str(copy)) as store:
            svc = Service(Engine(store, settings, clock=ManualClock(AT)))
            try:
                leased[where] = {t["url"] for t in svc.lease("fetcher-1", 30)}
            finally:
                svc.writer.close()
    assert len(leased["there"]) == 30 and leased["there"] == leased["here"]
    assert (tmp_path / "pages").is_dir()

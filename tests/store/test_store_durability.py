"""Durability (issue 30): what an acknowledged write survives, and a full disk.

``durability = "full"`` (the default) fsyncs every commit (SQLite's
``synchronous=FULL``), ``"normal"`` does not; a full disk, simulated by
SQLite's ``PRAGMA max_page_count``, is one :class:`~recrawl.StoreFull` with
nothing acknowledged lost, and the store works again once there is room.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from recrawl import ConfigError, Engine, Settings, SQLiteStore, StoreError, StoreFull
from recrawl.config import load_settings
from recrawl.engine.ingest import ingest_lines
from recrawl.service import create_app
from recrawl.testing.server import serve_in_thread

TOKEN = "write-secret"


def synchronous(store: SQLiteStore) -> int:
    """SQLite's ``PRAGMA synchronous`` of the store's connection: 1 NORMAL, 2 FULL."""
    return int(store._db.execute("PRAGMA synchronous").fetchone()[0])


def lines(batch: int, n: int = 200) -> list[str]:
    """``n`` fetches of distinct pages (batch ``batch``), each with a record hash."""
    return [
        json.dumps(
            {
                "url": f"https://a.example/b{batch}/p{i}",
                "fetched_at": 1_700_000_000 + i,
                "status": 200,
                "record_hash": f"h{batch}-{i}-" + "x" * 40,
            }
        )
        for i in range(n)
    ]


def count(store: SQLiteStore) -> int:
    return int(store._db.execute("SELECT count(*) FROM observations").fetchone()[0])


def limit_pages(store: SQLiteStore, more: int) -> None:
    """A "disk" ``more`` pages larger than what the store holds now."""
    pages = int(store._db.execute("PRAGMA page_count").fetchone()[0])
    store._db.execute(f"PRAGMA max_page_count={pages + more}")


# -- the setting ---------------------------------------------------------------------------


def test_durability_is_full_by_default_and_settable(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    assert (store.durability, synchronous(store)) == ("full", 2)
    Engine(store)  # no settings: the store keeps its own
    assert synchronous(store) == 2
    Engine(store, Settings(durability="normal"))
    assert (store.durability, synchronous(store)) == ("normal", 1)
    Engine(store, Settings())
    assert (store.durability, synchronous(store)) == ("full", 2)
    store.close()
    quick = SQLiteStore(tmp_path / "b.db", durability="normal")
    assert synchronous(quick) == 1
    quick.close()
    with pytest.raises(StoreError, match="durability"):
        SQLiteStore(tmp_path / "c.db", durability="fast")  # type: ignore[arg-type]


def test_durability_from_file_and_environment(tmp_path: Path) -> None:
    assert load_settings(env={}).durability == "full"
    assert load_settings(env={"RECRAWL_DURABILITY": "normal"}).durability == "normal"
    cfg = tmp_path / "recrawl.toml"
    cfg.write_text('durability = "normal"\n', encoding="utf-8")
    assert load_settings(cfg, env={}).durability == "normal"
    cfg.write_text('durability = "off"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="durability"):
        load_settings(cfg, env={})


# -- a full disk -------------------------------------------------------------------------------


def test_a_full_store_refuses_the_write_and_keeps_what_was_acknowledged(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "full.db")
    assert ingest_lines(store, lines(0), parallel=False).stored == 200
    limit_pages(store, 40)
    acknowledged = 200
    batch = 1
    with pytest.raises(StoreFull) as caught:
        for batch in range(1, 1000):  # until the "disk" is full
            acknowledged += ingest_lines(store, lines(batch), parallel=False).stored
    assert batch > 1  # some batches fitted before it was full
    err = caught.value
    assert isinstance(err, StoreError)
    assert "is full" in str(err) and "nothing of it is stored" in str(err)
    # the failed batch left nothing, every acknowledged one is whole
    assert count(store) == acknowledged
    assert not store._db.in_transaction
    # it fails again, as clearly, while full; other writes too
    with pytest.raises(StoreFull):
        ingest_lines(store, lines(batch), parallel=False)
    with pytest.raises(StoreFull):
        store.add_urls(
            [(f"https://b.example/u{i}", "b.example", "page", 1.0) for i in range(5000)],
            1_700_000_000.0,
        )
    assert count(store) == acknowledged
    # room again: the same batch goes in, and the store still works
    store._db.execute("PRAGMA max_page_count=1073741823")
    assert ingest_lines(store, lines(batch), parallel=False).stored == 200
    assert count(store) == acknowledged + 200
    store.close()
    reopened = SQLiteStore(tmp_path / "full.db")
    assert count(reopened) == acknowledged + 200
    assert reopened._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    reopened.close()


def test_the_service_answers_507_on_a_full_store(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "svc.db")
    settings = Settings(token=TOKEN, budget_per_day=10_000.0)
    app = create_app(Engine(store, settings), settings)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with (
        serve_in_thread(app) as base,
        httpx.Client(base_url=base, headers=auth, timeout=60) as client,
    ):
        first = client.post("/v1/observations", content="\n".join(lines(0)))
        assert first.status_code == 200, first.text
        assert first.json()["stored"] == 200
        limit_pages(store, 2)
        body = "\n".join(lines(1, 2000))
        full = client.post("/v1/observations", content=body)
        assert full.status_code == 507, full.text
        assert "is full" in full.json()["detail"]
        assert count(store) == 200
        store._db.execute("PRAGMA max_page_count=1073741823")
        again = client.post("/v1/observations", content=body)
        assert again.status_code == 200, again.text
        assert again.json()["stored"] == 2000
    assert count(store) == 2200
    store.close()

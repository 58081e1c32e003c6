"""plotly.js served once: by URL with a long cache lifetime and an ETag, or beside a report."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import numpy as np
from fastapi import FastAPI

from recrawl.config import load_settings
from recrawl.engine.engine import Engine
from recrawl.engine.pipeline import store_batch
from recrawl.report.assets import PLOTLY_FILE, PLOTLY_PATH, PLOTLY_VERSION, plotly_js
from recrawl.report.dashboard import write_report
from recrawl.service import create_app
from recrawl.service import static as static_assets
from recrawl.store import SQLiteStore
from recrawl.testing import data_file
from recrawl.testing.server import serve_in_thread


def test_the_script_is_served_once_then_cached_or_revalidated_without_its_body(
    tmp_path: Path,
) -> None:
    app = FastAPI()
    app.include_router(static_assets.router())
    with serve_in_thread(app) as base:
        first = httpx.get(base + PLOTLY_PATH)
        again = httpx.get(base + PLOTLY_PATH, headers={"If-None-Match": first.headers["etag"]})
        other = httpx.get(base + PLOTLY_PATH, headers={"If-None-Match": '"something-else"'})
    assert first.status_code == 200 and first.content == plotly_js()
    assert len(first.content) > 4_000_000  # what every page carried when inlined
    assert first.headers["content-type"].startswith("text/javascript")
    assert "max-age=31536000" in first.headers["cache-control"]
    assert "immutable" in first.headers["cache-control"]
    assert PLOTLY_VERSION in PLOTLY_PATH  # a new plotly is a new URL, never a stale cache
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == first.headers["etag"]
    assert other.status_code == 200


def test_the_page_weighs_under_a_megabyte_after_the_first_load(db_path: str) -> None:
    """A browser's second visit to the dashboard of the sample log: the HTML
    again, the script revalidated (304)."""
    settings = load_settings(data_file("demo.toml")).model_copy(update={"token": "t"})
    with SQLiteStore(db_path) as store:
        engine = Engine(store, settings)
        with data_file("sample-fetches.jsonl").open(encoding="utf-8") as f:
            assert engine.ingest_lines(f).stored == 3000
        end = float(np.nanmax(store.page_columns()["last_fetch"]))
        engine = Engine(store, settings, clock=lambda: end)
        app = create_app(engine, settings)
        app.include_router(static_assets.router())
        with serve_in_thread(app) as base, httpx.Client(base_url=base) as client:

            def load(etags: dict[str, str]) -> tuple[int, dict[str, str]]:
                page = client.get("/")
                assert page.status_code == 200
                weight, seen = len(page.content), {}
                for src in re.findall(r"<script src='([^']+)'>", page.text):
                    url = httpx.URL(base + "/").join(src)
                    r = client.get(
                        url, headers={"If-None-Match": etags[src]} if src in etags else {}
                    )
                    assert r.status_code in (200, 304), (src, r.status_code)
                    weight += len(r.content)
                    seen[src] = r.headers["etag"]
                return weight, seen

            first, etags = load({})
            second, _ = load(etags)
    assert first > 4_000_000
    assert second < 1_000_000, second


def test_a_report_loads_the_script_from_beside_it_or_inlines_it(
    db_path: str, tmp_path: Path
) -> None:
    with SQLiteStore(db_path) as store:
        store_batch(store, [])
        engine = Engine(store, clock=lambda: 1.77e9)
        split = tmp_path / "split" / "report.html"
        split.parent.mkdir()
        said = write_report(engine, split)
        whole = tmp_path / "whole.html"
        write_report(engine, whole, inline=True)
    page = split.read_text(encoding="utf-8")
    assert re.findall(r"<script src='([^']+)'>", page) == [PLOTLY_FILE]
    assert (split.parent / PLOTLY_FILE).read_bytes() == plotly_js()
    assert len(page.encode()) < 1_000_000 and PLOTLY_FILE in said
    inline = whole.read_text(encoding="utf-8")
    assert "<script src=" not in inline and len(inline) > 4_000_000
    assert not (tmp_path / PLOTLY_FILE).exists()

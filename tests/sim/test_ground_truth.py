"""The simweb's ground truth is right: a uniform crawl of it, measured from the
server's request log, gets the freshness the replay's uniform policy gets on the
web's own change trace at the same budget."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from recrawl.observe.traces import Trace, load_traces
from recrawl.sim.crawl import crawl_settings, run_crawls
from recrawl.sim.replay import replay
from recrawl.sim.web import SiteSpec, write_ground_truth

DAY = 86400.0


@pytest.mark.slow  # 12 s closed loop; make test-slow
def test_a_uniform_crawl_agrees_with_the_replays_uniform(tmp_path: Path) -> None:
    specs = [
        SiteSpec("slow", n_pages=50, rate_per_day=0.5),
        SiteSpec("mid", n_pages=50, rate_per_day=2.0),
        SiteSpec("fast", n_pages=50, rate_per_day=6.0),
    ]
    runs = run_crawls(
        specs, crawl_settings(300.0), tmp_path, policies=("uniform",), days=2.0,
        scale=DAY / 6.0, seed=2,
    )  # fmt: skip
    run = runs["uniform"]
    try:
        truth = write_ground_truth(run.web, tmp_path / "truth")
    finally:
        run.engine.store.close()
    requests = [json.loads(line) for line in Path(truth["requests.jsonl"]).read_text().splitlines()]
    fetches = [r for r in requests if r["status"] in (200, 304) and r["version"] is not None]
    first: dict[str, float] = {}
    for r in sorted(fetches, key=lambda r: r["t"]):
        first.setdefault(r["url"], r["t"])
    traces = {t.page: t for t in load_traces(truth["changes.jsonl"])}
    assert set(first) == set(traces)  # every page crawled, every page in the trace

    # The replay fetches each page once at its start, free: start each trace at
    # the crawl's first fetch of the page, and give it the crawl's revisits.
    def between(t: Trace, lo: float) -> np.ndarray:
        return t.changes[(t.changes > lo) & (t.changes <= run.end)]

    warm = [
        Trace(url, t.site, t.page_type, first[url], run.end, between(t, first[url]))
        for url, t in traces.items()
    ]
    revisits = len([r for r in fetches if r["url"] in first]) - len(first)
    page_days = sum(run.end - t for t in first.values()) / DAY
    replayed = replay(warm, budget=revisits / page_days, policies=["uniform"])
    expected = float(replayed["policies"]["uniform"]["freshness"])
    crawled = float(
        np.mean(
            [run.web.freshness_from_log([u], t, run.end, log=run.log) for u, t in first.items()]
        )
    )
    assert revisits / page_days > 1.0  # the budget was spent on revisits
    assert crawled == pytest.approx(expected, abs=0.03)

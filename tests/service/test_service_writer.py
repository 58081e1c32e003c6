"""The service's single writer: group commit, exact answers, leases before queued batches."""

from __future__ import annotations

import random
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from recrawl.config import Settings
from recrawl.engine.engine import Engine
from recrawl.observe.observation import Observation
from recrawl.service import create_app
from recrawl.service.leases import pick_candidates
from recrawl.service.writer import Writer, split_result
from recrawl.store import BatchResult, SQLiteStore, SQLWrite
from recrawl.testing.server import serve_in_thread

TOKEN = "write-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def o(key: str, url: str = "https://a.example/p") -> Observation:
    return Observation(
        url=url, fetched_at=1.0, site="a.example", page_type="page", key=key.encode()
    )


class FakeStore:
    """``ingest`` that stores keys in memory, slowly, and logs what it was given."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.keys: set[bytes] = set()
        self.calls: list[list[bytes]] = []
        self.log: list[str] = []

    def ingest(self, observations: Sequence[Observation]) -> BatchResult:
        self.log.append(f"ingest {len(observations)}")
        self.calls.append([x.key for x in observations])
        time.sleep(self.delay_s)
        if any(x.url.endswith("/bad") for x in observations):
            raise RuntimeError("the store refused the batch")
        res = BatchResult()
        before = set(self.keys)
        for x in observations:
            if x.key in self.keys:
                res.duplicates += 1
                if x.key in before:
                    res.known.add(x.key[:8])
            else:
                self.keys.add(x.key)
                res.stored += 1
        return res


# -- split_result --------------------------------------------------------------------------------


def test_a_groups_result_is_shared_out_as_if_the_batches_came_one_by_one() -> None:
    a = [o("k1"), o("k2"), o("k2")]
    b = [o("k2"), o("k3")]
    # nothing was in the store before: within-group repeats are the later batch's duplicates
    res = BatchResult(stored=3, duplicates=2)
    assert [(c.stored, c.duplicates) for c in split_result([a, b], res)] == [(2, 1), (1, 1)]
    # everything was in the store before
    res = BatchResult(stored=0, duplicates=5, known={b"k1", b"k2", b"k3"})
    assert [(c.stored, c.duplicates) for c in split_result([a, b], res)] == [(0, 3), (0, 2)]
    # a retried batch next to a new one: only the retried one's are duplicates
    res = BatchResult(stored=2, duplicates=1, known={b"k1"})
    c = [o("k1")]
    assert [(x.stored, x.duplicates) for x in split_result([b, c], res)] == [(2, 0), (0, 1)]
    # one batch alone: the store's own answer
    res = BatchResult(stored=1, duplicates=2)
    assert [(c.stored, c.duplicates) for c in split_result([a], res)] == [(1, 2)]


def test_the_split_always_adds_up_to_the_groups_totals() -> None:
    a = [o("k1"), o("k2")]
    b = [o("k3"), o("k4"), o("k5")]
    keys = [b"k1", b"k2", b"k3", b"k4", b"k5"]
    for stored in range(6):
        res = BatchResult(stored=stored, duplicates=5 - stored, known=set(keys[: 5 - stored]))
        shares = split_result([a, b], res)
        assert sum(c.stored for c in shares) == stored
        assert [c.stored + c.duplicates for c in shares] == [2, 3]


def test_every_copy_of_a_refused_report_is_refused_not_a_duplicate() -> None:
    """A report older than its page's pruned log is given back by the store; a
    retry of it in the same group (or in the same request) is refused as well,
    not told it was already stored."""
    a = [o("k1"), o("k2")]
    b = [o("k2"), o("k3")]
    res = BatchResult(stored=2, duplicates=0, refused=[(1, "pruned")])
    shares = split_result([a, b], res)
    assert [(c.stored, c.duplicates, c.refused) for c in shares] == [
        (1, 0, ((1, "pruned"),)),
        (1, 0, ((0, "pruned"),)),
    ]
    res = BatchResult(stored=1, duplicates=0, refused=[(1, "pruned")])
    (one,) = split_result([[o("k1"), o("k2"), o("k2")]], res)
    assert (one.stored, one.duplicates, [i for i, _ in one.refused]) == (1, 0, [1, 2])


# -- the writer ----------------------------------------------------------------------------------


@pytest.fixture
def slow() -> FakeStore:
    return FakeStore(delay_s=0.2)


def test_batches_waiting_together_are_committed_in_one_transaction(slow: FakeStore) -> None:
    w = Writer(slow.ingest, group_s=60.0)
    first = w.submit_batch([o("a0")])
    time.sleep(0.05)  # the writer is now inside the first transaction
    rest = [w.submit_batch([o(f"b{i}"), o(f"c{i}")]) for i in range(4)]
    assert not rest[0].done()
    assert first.result(5).stored == 1
    assert [f.result(5).stored for f in rest] == [2, 2, 2, 2]
    assert [len(c) for c in slow.calls] == [1, 8]
    assert (w.groups, w.grouped_observations) == (2, 9)
    w.close()


def test_an_answer_comes_only_after_its_transaction_returned(slow: FakeStore) -> None:
    w = Writer(slow.ingest)
    t = time.perf_counter()
    assert w.submit_batch([o("a")]).result(5).stored == 1
    assert time.perf_counter() - t >= slow.delay_s
    assert slow.keys == {b"a"}
    w.close()


def test_a_lease_runs_before_the_batches_queued_ahead_of_it(slow: FakeStore) -> None:
    w = Writer(slow.ingest, group_s=0.0)  # one request per transaction
    first = w.submit_batch([o("a")])
    time.sleep(0.05)
    queued = [w.submit_batch([o(f"q{i}")]) for i in range(3)]

    def lease() -> str:
        slow.log.append("lease")
        return "leased"

    job = w.submit(lease)
    assert job.result(5) == "leased"
    for f in [first, *queued]:
        f.result(5)
    assert slow.log == ["ingest 1", "lease", "ingest 1", "ingest 1", "ingest 1"]
    w.close()


def test_groups_hold_what_the_store_commits_in_group_s() -> None:
    store = FakeStore(delay_s=0.1)
    w = Writer(store.ingest, group_s=0.1)
    assert w.group_size() == 1  # nothing measured yet: one request
    w.submit_batch([o(f"a{i}") for i in range(100)]).result(5)
    assert 50 <= w.group_size() <= 100  # about 1 ms per observation measured
    w.close()


def test_one_failing_request_fails_alone(slow: FakeStore) -> None:
    w = Writer(slow.ingest, group_s=60.0)
    first = w.submit_batch([o("a0")])
    time.sleep(0.05)
    good1 = w.submit_batch([o("g1")])
    bad = w.submit_batch([o("x", url="https://a.example/bad")])
    good2 = w.submit_batch([o("g2")])
    first.result(5)
    assert good1.result(5).stored == 1 and good2.result(5).stored == 1
    with pytest.raises(RuntimeError, match="refused"):
        bad.result(5)
    assert slow.keys == {b"a0", b"g1", b"g2"}
    w.close()


def test_a_failing_job_hands_its_exception_to_the_caller() -> None:
    w = Writer(FakeStore().ingest)

    def fail() -> None:
        raise ValueError("no plan")

    with pytest.raises(ValueError, match="no plan"):
        w.submit(fail).result(5)
    assert w.submit(lambda: 42).result(5) == 42
    w.close()


def test_the_thread_leaves_when_idle_and_comes_back_with_work() -> None:
    store = FakeStore()
    w = Writer(store.ingest, idle_exit_s=0.05)
    assert w.submit_batch([o("a")]).result(5).stored == 1
    deadline = time.monotonic() + 5
    while w.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not w.running
    assert w.submit_batch([o("b")]).result(5).stored == 1
    w.close()
    with pytest.raises(RuntimeError):
        w.submit(lambda: None)


# -- over HTTP -----------------------------------------------------------------------------------


class SlowSQLiteStore(SQLiteStore):
    """A real store whose transactions take at least ``delay_s`` seconds, so that
    concurrent requests queue up behind the writer."""

    delay_s = 0.0

    @contextmanager
    def writing(self) -> Iterator[SQLWrite]:
        time.sleep(self.delay_s)
        with super().writing() as tx:
            yield tx


@contextmanager
def slow_server(tmp_path: Path, group_s: float) -> Iterator[tuple[httpx.Client, SlowSQLiteStore]]:
    store = SlowSQLiteStore(tmp_path / "w.db")
    settings = Settings(token=TOKEN, budget_per_day=10_000.0)
    app = create_app(Engine(store, settings), settings, group_s=group_s)
    with (
        serve_in_thread(app) as base,
        httpx.Client(base_url=base, headers=AUTH, timeout=60) as client,
    ):
        yield client, store
    store.close()


def _body(items: list[dict[str, Any]]) -> bytes:
    return b"\n".join(orjson.dumps(i) for i in items)


def test_concurrent_reports_get_exact_answers_and_fewer_transactions(tmp_path: Path) -> None:
    with slow_server(tmp_path, group_s=60.0) as (client, store):
        _concurrent_reports(client, store)


def _concurrent_reports(client: httpx.Client, store: SlowSQLiteStore) -> None:
    store.delay_s = 0.1
    t = time.time() - 3600
    bodies = []
    for r in range(8):
        items: list[dict[str, Any]] = [
            {
                "id": f"{r}-{i}",
                "url": f"https://s{r}.example/{i}",
                "fetched_at": t + i,
                "status": 200,
            }
            for i in range(50)
        ]
        items.append({"id": "shared", "url": "https://s.example/x", "fetched_at": t, "status": 200})
        items.insert(3, {"url": "not a url", "fetched_at": t})
        bodies.append(_body(items))
    with ThreadPoolExecutor(8) as pool:
        answers = [
            r.json() for r in pool.map(lambda b: client.post("/v1/observations", content=b), bodies)
        ]
    for a in answers:
        assert a["accepted"] == 51
        assert [(x["index"], x["field"]) for x in a["rejected"]] == [(3, "url")]
        assert a["stored"] + a["duplicates"] == 51
    # "shared" is stored once, whichever request carried it first
    assert sum(a["stored"] for a in answers) == 8 * 50 + 1
    assert sorted(a["duplicates"] for a in answers) == [0] + [1] * 7
    assert store.observation_count() == 8 * 50 + 1
    metrics = client.get("/metrics").text
    line = next(
        x for x in metrics.splitlines() if x.startswith("recrawl_ingest_transactions_total")
    )
    assert float(line.split()[-1]) < 8  # some requests shared a transaction
    # the same reports again: all known, per request
    again = client.post("/v1/observations", content=bodies[0]).json()
    assert (again["accepted"], again["stored"], again["duplicates"]) == (51, 0, 51)


def test_a_lease_does_not_wait_for_the_reports_queued_before_it(tmp_path: Path) -> None:
    with slow_server(tmp_path, group_s=0.0) as (client, store):
        _lease_during_reports(client, store)


def _lease_during_reports(client: httpx.Client, store: SlowSQLiteStore) -> None:
    r = client.post("/v1/urls", json=[{"url": f"https://a.example/{i}"} for i in range(20)])
    assert r.status_code == 200
    store.delay_s = 0.4
    t = time.time() - 3600
    done: dict[str, float] = {}
    lock = threading.Lock()

    def report(i: int) -> None:
        body = _body([{"url": f"https://b.example/{i}", "fetched_at": t, "status": 200}])
        assert client.post("/v1/observations", content=body).status_code == 200
        with lock:
            done[f"report{i}"] = time.monotonic()

    threads = [threading.Thread(target=report, args=(i,)) for i in range(6)]
    for th in threads:
        th.start()
        time.sleep(0.02)
    time.sleep(0.1)  # the reports are queued behind the first transaction
    r = client.post("/v1/leases", json={"worker": "w", "max": 5})
    done["lease"] = time.monotonic()
    for th in threads:
        th.join()
    assert r.status_code == 200 and len(r.json()["tasks"]) == 5
    last_report = max(v for k, v in done.items() if k.startswith("report"))
    # six transactions of 0.4 s were queued; the lease waited for about one
    assert last_report - done["lease"] > 0.8


# -- the lease pick --------------------------------------------------------------------------------


def test_the_lease_pick_holds_what_a_claim_over_the_whole_plan_takes(tmp_path: Path) -> None:
    """Against the real store: claiming from the picked run of candidates leases the
    same URLs as claiming from all of them, whatever is leased already and the caps."""
    now = 1_000_000.0
    sites = [f"s{i}.example" for i in range(4)]
    for seed in range(40):
        rng = random.Random(seed)
        candidates = [
            (f"https://x.example/{j}", rng.choice(sites), "score")
            for j in range(rng.randint(0, 60))
        ]
        caps = {s: rng.randint(0, 6) for s in sites if rng.random() < 0.6}
        limit = rng.randint(1, 25)
        a, b = tmp_path / f"a{seed}.db", tmp_path / f"b{seed}.db"
        store = SQLiteStore(a)
        out = rng.sample(candidates, rng.randint(0, len(candidates) // 2))
        out += [(f"https://elsewhere.example/{j}", rng.choice(sites), "score") for j in range(3)]
        store.claim(out, worker="other", limit=len(out), now=now - 10, ttl_s=600)
        store.close()
        shutil.copy(a, b)
        whole_store, picked_store = SQLiteStore(a), SQLiteStore(b)
        whole = whole_store.claim(
            candidates, worker="w", limit=limit, now=now, ttl_s=600, site_caps=caps
        )
        run, _ = pick_candidates(
            candidates,
            frozenset(c[1] for c in candidates),
            picked_store.outstanding_leases(now),
            caps,
            limit,
        )
        picked = picked_store.claim(
            run, worker="w", limit=limit, now=now, ttl_s=600, site_caps=caps
        )
        assert [g["url"] for g in picked] == [g["url"] for g in whole], seed
        whole_store.close()
        picked_store.close()

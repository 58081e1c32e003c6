"""Long reads (``content_history``) on the store's reader connection: one
snapshot, while ingests, leases and prunes go on (on both backends)."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recrawl.engine.ingest import ingest_lines
from recrawl.engine.pipeline import prune_log
from recrawl.store import ContentHistory, SQLiteStore, SQLStore

T0 = 1_700_000_000.0
DAY = 86400.0
WAIT = 30.0  # seconds: far more than any step here takes; reached only by a failure


def log(pages: int, days: int, *, start: float = T0, site: str = "a.example") -> list[str]:
    """Daily fetches of ``pages`` pages over ``days`` days (each page changes every
    third day; every seventh fetch fails, every fifth content fetch is a
    conditional 304)."""
    out = []
    for d in range(days):
        for p in range(pages):
            t = start + d * DAY + p
            row: dict[str, Any] = {"url": f"https://{site}/p{p}", "fetched_at": t}
            if (d + p) % 7 == 3:
                row["status"] = 503
            elif d % 5 == 4:
                row |= {"status": 304, "conditional": True}
            else:
                row |= {"status": 200, "record_hash": f"v{(d + p) // 3}", "conditional": d % 2 == 0}
            out.append(json.dumps(row))
    return out


def ingest(store: SQLStore, lines: Sequence[str], batch: int = 500) -> None:
    for i in range(0, len(lines), batch):
        ingest_lines(store, lines[i : i + batch], parallel=False)


def assert_same(got: ContentHistory, want: ContentHistory) -> None:
    for name in ("page", "fetched_at", "kind", "not_modified", "conditional"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert got.urls == want.urls
    assert got.checkpoints.keys() == want.checkpoints.keys()
    for k, v in want.checkpoints.items():  # NaN (never reached) compares equal to NaN
        np.testing.assert_array_equal(got.checkpoints[k], v)


def locked_history(store: SQLStore, since: float, until: float = math.inf) -> ContentHistory:
    """``content_history`` as it ran before the reader: on the store's own
    connection, under its lock."""

    @contextmanager
    def on_the_store() -> Iterator[Any]:
        with store._lock:
            yield store._db

    real = store._snapshot
    store._snapshot = on_the_store  # type: ignore[method-assign]
    try:
        return store.content_history(since, until)
    finally:
        store._snapshot = real  # type: ignore[method-assign]


class _Paused:
    """A connection that stops after its first statement until ``go`` is set."""

    def __init__(self, db: Any, reached: threading.Event, go: threading.Event) -> None:
        self.db, self.reached, self.go, self.done = db, reached, go, False

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        cur = self.db.execute(sql, args)
        if not self.done:
            self.done = True
            self.reached.set()
            assert self.go.wait(2 * WAIT), "the read was never let go on"
        return cur


def pause_reads(
    store: SQLStore, monkeypatch: pytest.MonkeyPatch
) -> tuple[threading.Event, threading.Event]:
    """Make each ``content_history`` of ``store`` stop in its snapshot, after
    its first statement ran, until the returned ``go`` is set; ``reached`` is
    set when it stops."""
    reached, go = threading.Event(), threading.Event()
    real: Callable[[], AbstractContextManager[Any]] = store._snapshot

    @contextmanager
    def paused() -> Iterator[Any]:
        with real() as db:
            yield _Paused(db, reached, go)

    monkeypatch.setattr(store, "_snapshot", paused)
    return reached, go


class Run(threading.Thread):
    """``fn()`` in a thread; ``result`` or ``error`` once it is done."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as exc:  # re-raised by the test
            self.error = exc

    def outcome(self) -> Any:
        self.join(WAIT)
        assert not self.is_alive()
        if self.error is not None:
            raise self.error
        return self.result


def test_the_reader_reads_what_the_locked_read_did(store: SQLStore) -> None:
    """Windows of a log partly pruned and fed again after: the reader's
    history is the one the store's own connection reads, field for field."""
    ingest(store, log(30, 40))
    prune_log(store, T0 + 15 * DAY)
    ingest(store, log(30, 5, start=T0 + 40 * DAY) + log(5, 10, site="b.example"))
    windows = [
        (-math.inf, math.inf),
        (T0 + 20 * DAY, math.inf),
        (T0 + 10 * DAY, T0 + 30 * DAY),
        (T0 + 44 * DAY, T0 + 44 * DAY + 10),
        (T0 + 100 * DAY, math.inf),  # empty
    ]
    want = [locked_history(store, a, b) for a, b in windows]
    assert store._reader is None  # not opened yet
    got = [store.content_history(a, b) for a, b in windows]
    assert store._reader is not None  # opened once, kept
    assert want[1].checkpoints and len(want[1].page) > 500 and not len(want[-1].page)
    assert want[0].conditional.any() and want[0].not_modified.any()
    for g, w in zip(got, want, strict=True):
        assert_same(g, w)


def test_ingests_and_leases_go_on_during_a_read(
    store: SQLStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read held open in its snapshot (from another thread) does not hold
    the store: an ingest of new and known pages and a lease finish meanwhile,
    and the read returns the store as it was when it began."""
    ingest(store, log(20, 30))
    since = T0 + 10 * DAY
    before = store.content_history(since)
    reached, go = pause_reads(store, monkeypatch)
    read = Run(lambda: store.content_history(since))
    read.start()
    assert reached.wait(WAIT)

    def write() -> list[dict[str, Any]]:
        ingest(store, log(25, 2, start=T0 + 30 * DAY))
        return store.claim(
            [("https://a.example/p3", "a.example", "due")],
            worker="w",
            limit=1,
            now=T0 + 40 * DAY,
            ttl_s=60,
        )

    writer = Run(write)
    writer.start()
    writer.join(WAIT)
    finished_first = not writer.is_alive()  # before the read was let go on
    go.set()
    assert finished_first, "the ingest waited for the read"
    got = read.outcome()
    assert len(writer.outcome()) == 1
    assert not read.is_alive()
    assert_same(got, before)  # nothing of the ingest: the snapshot of the read's start
    monkeypatch.undo()
    after = store.content_history(since)
    assert len(after.page) == len(before.page) + 25 * 2 - sum(
        (30 + d + p) % 7 == 3 for d in range(2) for p in range(25)
    )
    assert len(after.urls) == 25


def test_a_prune_during_a_read_counts_no_fetch_twice(
    store: SQLStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prune that runs while a read is held open: the read shows the pruned
    fetches in the log and none in a checkpoint (the snapshot before the
    prune); the next read, the checkpoints and the log that is left."""
    ingest(store, log(20, 30))
    before = store.content_history(-math.inf)
    reached, go = pause_reads(store, monkeypatch)
    read = Run(lambda: store.content_history(-math.inf))
    read.start()
    assert reached.wait(WAIT)
    pruner = Run(lambda: prune_log(store, T0 + 20 * DAY))
    pruner.start()
    pruner.join(WAIT)
    finished_first = not pruner.is_alive()
    go.set()
    assert finished_first, "the prune waited for the read"
    got = read.outcome()
    assert pruner.outcome().observations_removed > 300
    assert not got.checkpoints
    assert_same(got, before)
    monkeypatch.undo()
    after = store.content_history(-math.inf)
    assert len(after.checkpoints) == 20
    assert len(after.page) < len(before.page)
    # no fetch both pruned (in a checkpoint) and in the log
    for pid, (last_ok, *_) in after.checkpoints.items():
        assert (after.fetched_at[after.page == pid] > last_ok).all()


def test_a_failed_read_drops_the_reader_and_the_next_opens_another(store: SQLStore) -> None:
    ingest(store, log(5, 5))
    want = store.content_history(-math.inf)
    first = store._reader
    first.close()  # broken under the store
    with pytest.raises(Exception):  # noqa: B017 - each driver's own error
        store.content_history(-math.inf)
    assert store._reader is None
    assert_same(store.content_history(-math.inf), want)
    assert store._reader is not None and store._reader is not first


def test_a_reader_from_before_a_fork_is_left_to_its_process(store: SQLStore) -> None:
    """The reader belongs to the process that opened it: in another (a fork),
    the store opens its own, and does not close the parent's."""
    ingest(store, log(5, 5))
    want = store.content_history(-math.inf)
    parents = store._reader
    store._reader_pid = -1  # as a forked child sees it
    try:
        assert_same(store.content_history(-math.inf), want)
        assert store._reader is not parents
        assert parents.execute("SELECT 1").fetchone()[0] == 1  # still open
    finally:
        parents.close()


def test_close_closes_the_reader(make_store: Callable[[], SQLStore]) -> None:
    store = make_store()
    ingest(store, log(3, 3))
    store.content_history(-math.inf)
    reader = store._reader
    store.close()
    assert store._reader is None
    with pytest.raises(Exception):  # noqa: B017 - each driver's own error
        reader.execute("SELECT 1")
    with pytest.raises(Exception):  # noqa: B017 - closed, as before: no reader reopened
        store.content_history(-math.inf)
    assert store._reader is None


def test_an_in_memory_store_reads_under_its_lock() -> None:
    """An in-memory SQLite store has no reader (a second connection would see
    another, empty database): its reads run on its own connection."""
    store = SQLiteStore(":memory:")
    try:
        ingest(store, log(10, 10))
        h = store.content_history(T0 + 5 * DAY)
        assert store._reader is None
        assert len(h.urls) == 10 and len(h.page) > 40
        assert_same(h, locked_history(store, T0 + 5 * DAY))
    finally:
        store.close()


def test_a_file_not_in_wal_mode_reads_under_the_lock(tmp_path: Path) -> None:
    """Where the file could not be put in WAL mode, a reader would hold
    writers back: the reads stay on the store's connection."""
    store = SQLiteStore(tmp_path / "s.db")
    try:
        ingest(store, log(5, 5))
        store._wal = False
        want = locked_history(store, -math.inf)
        assert_same(store.content_history(-math.inf), want)
        assert store._reader is None
    finally:
        store.close()

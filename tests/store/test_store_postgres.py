"""PostgreSQL: another connection's writes are noticed, this store's own are not."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import pytest
from conftest import PG_URL, pg_schema

from recrawl.engine.pipeline import store_batch
from recrawl.observe.observation import Observation
from recrawl.store import PostgresStore

psycopg = pytest.importorskip("psycopg")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """The URL of a fresh, empty schema (dropped afterwards)."""
    yield from pg_schema()


@pytest.fixture
def open_pg() -> Iterator[Callable[[str], PostgresStore]]:
    opened: list[PostgresStore] = []

    def make(url: str) -> PostgresStore:
        opened.append(PostgresStore(url))
        return opened[-1]

    yield make
    for s in opened:
        s.close()


def seen(url: str, t: float) -> Observation:
    """A fetch of ``url`` at ``t`` (unix seconds)."""
    return Observation(
        url=url, fetched_at=t, site="a.example", page_type="page", key=uuid.uuid4().bytes
    )


def moved(store: PostgresStore, before: int, timeout_s: float = 5.0) -> bool:
    """Whether ``store.outside_writes()`` leaves ``before`` within ``timeout_s``
    (a notification reaches the listener a moment after the commit)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if store.outside_writes() != before:
            return True
        time.sleep(0.01)
    return False


def quiet(store: PostgresStore, before: int, other: PostgresStore, other_before: int) -> bool:
    """Whether ``store`` stays at ``before`` while ``other`` (the control, which
    sees the same write from outside) moves: then the write has been announced."""
    assert moved(other, other_before), "the control store never saw the write"
    time.sleep(0.1)
    return store.outside_writes() == before


def test_another_stores_writes_count_and_its_own_do_not(
    pg_url: str, open_pg: Callable[[str], PostgresStore]
) -> None:
    a, b = open_pg(pg_url), open_pg(pg_url)
    a0, b0 = a.outside_writes(), b.outside_writes()
    c = open_pg(pg_url)  # opening the existing store writes nothing
    time.sleep(0.1)
    assert (a.outside_writes(), b.outside_writes()) == (a0, b0)

    # what `recrawl urls add` does in another process
    a.add_urls([("https://a.example/1", "a.example", "page", 1.0)], now=1.0)
    assert quiet(a, a0, b, b0)
    b1 = b.outside_writes()

    writes: list[Callable[[PostgresStore], object]] = [
        lambda s: s.add_urls([("https://b.example/1", "b.example", "page", 1.0)], now=2.0),
        lambda s: store_batch(s, [seen("https://a.example/1", 3.0)]),
        lambda s: s.set_site_controls("a.example", now=4.0, paused=True, event="pause"),
        lambda s: s.add_canary("https://a.example/c", "a.example", {"title": "A"}, 3600.0, 5.0),
    ]
    for write in writes:
        before_a, before_c = a.outside_writes(), c.outside_writes()
        write(b)
        assert moved(a, before_a)
        assert quiet(b, b1, c, before_c)  # b's own writes never move b


def test_writes_to_another_schema_do_not_count(
    pg_url: str, open_pg: Callable[[str], PostgresStore]
) -> None:
    a = open_pg(pg_url)
    a0 = a.outside_writes()
    for other_url in pg_schema():
        x, y = open_pg(other_url), open_pg(other_url)
        y0 = y.outside_writes()
        x.add_urls([("https://x.example/1", "x.example", "page", 1.0)], now=1.0)
        assert quiet(a, a0, y, y0)


def test_the_triggers_follow_the_search_path_and_are_made_once(
    pg_url: str, open_pg: Callable[[str], PostgresStore]
) -> None:
    schema = pg_url.rsplit("%3D", 1)[1]
    open_pg(pg_url)
    open_pg(pg_url)
    with psycopg.connect(PG_URL) as admin:
        rows = admin.execute(
            "SELECT c.relname, t.tgtype FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE t.tgname = 'recrawl_notify' AND n.nspname = %s ORDER BY 1",
            (schema,),
        ).fetchall()
        public = admin.execute(
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE p.proname = 'recrawl_notify_write' AND n.nspname = 'public'"
        ).fetchone()[0]
    assert [r[0] for r in rows] == ["canaries", "meta", "sites"]
    assert all(tgtype & 1 == 0 for _, tgtype in rows)  # per statement, not per row
    assert public == 0  # nothing outside the store's schema


def test_a_lost_listening_connection_counts_as_a_write_and_comes_back(
    pg_url: str, open_pg: Callable[[str], PostgresStore], caplog: pytest.LogCaptureFixture
) -> None:
    app = f"recrawl-test-{uuid.uuid4().hex[:8]}"
    url = f"{pg_url}&application_name={app}"
    a, b = open_pg(url), open_pg(url)
    a0 = a.outside_writes()
    caplog.set_level(logging.INFO, logger=LOGGER)
    with psycopg.connect(PG_URL, autocommit=True) as admin:

        def listeners() -> list[int]:
            return [
                pid
                for (pid,) in admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                    "AND query LIKE 'LISTEN %%'",
                    (app,),
                )
            ]

        assert len(listeners()) == 1
        admin.execute("SELECT pg_terminate_backend(%s)", (listeners()[0],))
        # writes may have been missed while it was gone: the count moves
        assert moved(a, a0)
        # an operator is told, with the error, and told it is back
        (warning, back) = [(r.levelname, r.getMessage()) for r in logged(caplog)]
        assert warning[0] == "WARNING"
        assert warning[1].startswith(
            f"lost the connection listening for other connections' writes to {a.path}, "
            "opening it again: "
        )
        assert "server closed the connection unexpectedly" in warning[1]
        assert back == ("INFO", f"listening for other connections' writes to {a.path} again")
        a1 = a.outside_writes()
        b.add_urls([("https://b.example/1", "b.example", "page", 1.0)], now=1.0)
        assert moved(a, a1)
        a.close()  # and close() closes it (its backend leaves a moment later)
        deadline = time.monotonic() + 5.0
        while listeners() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert listeners() == []


LOGGER = "recrawl.store.postgres"


def logged(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """What the PostgreSQL store logged."""
    return [r for r in caplog.records if r.name == LOGGER]


class Outage:
    """A TCP proxy to the test server that can be cut, like a network outage:
    :meth:`cut` closes the connections through it and every new one at once,
    :meth:`mend` lets them through again. ``port`` is where it listens."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open: list[socket.socket] = []
        self._down = False
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._down:
                    client.close()
                    continue
                server = socket.create_connection(("127.0.0.1", 5432))
                self._open += (client, server)
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            dst.close()

    def cut(self) -> None:
        with self._lock:
            self._down = True
            for s in self._open:
                with suppress(OSError):  # closed already when its peer hung up
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._open.clear()

    def mend(self) -> None:
        with self._lock:
            self._down = False

    def close(self) -> None:
        self.cut()
        self._listener.close()


def test_an_outage_of_the_listening_connection_is_logged_once_and_its_end_too(
    pg_url: str, open_pg: Callable[[str], PostgresStore], caplog: pytest.LogCaptureFixture
) -> None:
    """While the database cannot be reached, a service polls outside_writes at
    every plan request: one WARNING for the outage, with the error, not one per
    poll; one INFO once it listens again."""
    outage = Outage()
    try:
        via = pg_url.replace("127.0.0.1:5432", f"127.0.0.1:{outage.port}")
        a = open_pg(f"{via}&sslmode=disable&gssencmode=disable")
        a0 = a.outside_writes()
        caplog.set_level(logging.INFO, logger=LOGGER)
        outage.cut()
        assert moved(a, a0)  # the loss is noticed (and opening it again fails)
        a1 = a.outside_writes()
        for _ in range(20):  # a service keeps polling while the outage lasts
            assert a.outside_writes() == a1  # the loss counts once
            time.sleep(0.01)
        assert [r.levelname for r in logged(caplog)] == ["WARNING"]
        warning = logged(caplog)[0].getMessage()
        assert warning.startswith(
            f"lost the connection listening for other connections' writes to {a.path}, "
            "opening it again: "
        )
        assert "server closed the connection unexpectedly" in warning

        outage.mend()
        a2 = a.outside_writes()
        assert [(r.levelname, r.getMessage()) for r in logged(caplog)][1:] == [
            ("INFO", f"listening for other connections' writes to {a.path} again")
        ]
        b = open_pg(pg_url)  # it listens indeed: another's write is seen
        b.add_urls([("https://b.example/1", "b.example", "page", 1.0)], now=1.0)
        assert moved(a, a2)
        assert len(logged(caplog)) == 2
    finally:
        outage.close()


def test_a_listening_connection_that_cannot_be_opened_is_logged_once(
    pg_url: str, open_pg: Callable[[str], PostgresStore], caplog: pytest.LogCaptureFixture
) -> None:
    """The first LISTEN connection fails to open (the store's own connection is
    up): one WARNING saying so, then one INFO once it opens."""
    outage = Outage()
    try:
        via = pg_url.replace("127.0.0.1:5432", f"127.0.0.1:{outage.port}")
        a = open_pg(f"{via}&sslmode=disable&gssencmode=disable&connect_timeout=2")
        caplog.set_level(logging.INFO, logger=LOGGER)
        outage.cut()
        for _ in range(5):
            assert a.outside_writes() == 0
        records = logged(caplog)
        assert [r.levelname for r in records] == ["WARNING"]
        warning = records[0].getMessage()
        assert warning.startswith(
            f"cannot listen for other connections' writes to {a.path}, trying again at each "
            f"call (their writes go unnoticed meanwhile): cannot connect to {a.path}: "
        )
        outage.mend()
        assert a.outside_writes() == 0
        assert [(r.levelname, r.getMessage()) for r in logged(caplog)][1:] == [
            ("INFO", f"listening for other connections' writes to {a.path} again")
        ]
    finally:
        outage.close()


@contextmanager
def pooler() -> Iterator[int]:
    """A TCP proxy to the test server that, like PgBouncer, tells each client a
    process id of its own at connection (BackendKeyData), not the server's; yields
    its port. Clients must connect with ``sslmode=disable&gssencmode=disable``."""
    listener = socket.create_server(("127.0.0.1", 0))
    sockets = [listener]

    def pump(src: socket.socket, dst: socket.socket, rewrite: bool) -> None:
        buf = b""
        try:
            while data := src.recv(65536):
                if rewrite:  # the server's messages up to BackendKeyData, one by one
                    buf += data
                    data = b""
                    while len(buf) >= 5 and len(buf) >= 1 + struct.unpack("!I", buf[1:5])[0]:
                        size = 1 + struct.unpack("!I", buf[1:5])[0]
                        msg, buf = buf[:size], buf[size:]
                        if msg[:1] == b"K":
                            pid = struct.unpack("!i", msg[5:9])[0]
                            msg = msg[:5] + struct.pack("!i", pid ^ 0x5A5A5A) + msg[9:]
                            rewrite, data, buf = False, buf, b""
                        dst.sendall(msg)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            dst.close()

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", 5432))
            sockets.extend((client, server))
            threading.Thread(target=pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=pump, args=(server, client, True), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        for s in sockets:
            s.close()


def test_own_writes_do_not_count_behind_a_pooler(
    pg_url: str, open_pg: Callable[[str], PostgresStore]
) -> None:
    """Behind a connection pooler in session mode the process id a client is told
    at connection is the pooler's own; the store's writes are still its own (they
    counted as another's: a running service replanned after each of its ingests)."""
    with pooler() as port:
        pooled = pg_url.replace("127.0.0.1:5432", f"127.0.0.1:{port}")
        a = open_pg(f"{pooled}&sslmode=disable&gssencmode=disable")
        b = open_pg(pg_url)  # direct: the control
        a0, b0 = a.outside_writes(), b.outside_writes()
        a.add_urls([("https://a.example/1", "a.example", "page", 1.0)], now=1.0)
        assert quiet(a, a0, b, b0)
        b.add_urls([("https://b.example/1", "b.example", "page", 1.0)], now=2.0)
        assert moved(a, a0)


def test_a_write_right_after_the_listening_connection_is_lost_counts(
    pg_url: str, open_pg: Callable[[str], PostgresStore]
) -> None:
    """The call that finds the listening connection gone listens again at once: a
    write committed after it (after the replan it set off has read the store)
    moves the count. It was seen only from the next call on, so a write in
    between was missed for good (idle_session_timeout, a DBA's pg_terminate_backend)."""
    app = f"recrawl-test-{uuid.uuid4().hex[:8]}"
    a, b, c = open_pg(f"{pg_url}&application_name={app}"), open_pg(pg_url), open_pg(pg_url)
    a0 = a.outside_writes()
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND query LIKE 'LISTEN %%'",
            (app,),
        )
    c1 = c.outside_writes()
    deadline = time.monotonic() + 5.0
    while (a1 := a.outside_writes()) == a0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert a1 != a0  # the loss: writes may have gone unseen
    b.add_urls([("https://b.example/1", "b.example", "page", 1.0)], now=1.0)
    assert moved(c, c1)  # announced
    assert moved(a, a1)


def _write(store: PostgresStore) -> threading.Event:
    """Register a URL in ``store`` (a write transaction) on a thread; set when done."""
    done = threading.Event()

    def write() -> None:
        store.add_urls([(f"https://b.example/{uuid.uuid4().hex}", "b.example", "page", 1.0)], 1.0)
        done.set()

    threading.Thread(target=write, daemon=True).start()
    return done


def test_a_writer_waits_for_writers_of_its_schema_only(
    pg_url: str, open_pg: Callable[[str], PostgresStore]
) -> None:
    a, same = open_pg(pg_url), open_pg(pg_url)
    for other_url in pg_schema():
        other = open_pg(other_url)
        db = a._db
        with a._lock:
            db.execute("BEGIN IMMEDIATE")  # a write transaction held open: the schema's lock
            try:
                # another schema of the same database writes meanwhile
                assert _write(other).wait(10.0)
                # a second store on the same schema waits for it
                waiting = _write(same)
                assert not waiting.wait(0.5)
            finally:
                db.execute("ROLLBACK")
        assert waiting.wait(10.0)  # and goes on once the lock is free

"""PostgreSQL: another connection's writes are noticed, this store's own are not."""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from conftest import PG_URL, _pg_schema

from recrawl.observation import Observation
from recrawl.store import PostgresStore

psycopg = pytest.importorskip("psycopg")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """The URL of a fresh, empty schema (dropped afterwards)."""
    yield from _pg_schema()


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
        lambda s: s.ingest([seen("https://a.example/1", 3.0)]),
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
    for other_url in _pg_schema():
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
    pg_url: str, open_pg: Callable[[str], PostgresStore]
) -> None:
    app = f"recrawl-test-{uuid.uuid4().hex[:8]}"
    url = f"{pg_url}&application_name={app}"
    a, b = open_pg(url), open_pg(url)
    a0 = a.outside_writes()
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
        a1 = a.outside_writes()
        b.add_urls([("https://b.example/1", "b.example", "page", 1.0)], now=1.0)
        assert moved(a, a1)
        a.close()  # and close() closes it (its backend leaves a moment later)
        deadline = time.monotonic() + 5.0
        while listeners() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert listeners() == []


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

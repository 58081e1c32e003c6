"""The fetcher against hostile servers on 127.0.0.1 (issue 30).

Each server is a raw socket that does one bad thing: trickles its headers or
body a byte at a time (slow loris), never ends its body, declares a huge one,
redirects in a loop, sends a malformed status line or header, a gzip (deflate,
brotli) bomb, bytes in no valid encoding, or resets the connection mid-body;
and a host name that resolves to a public address for the check and to
127.0.0.1 for the connection (DNS rebinding). For each the fetch returns in
bounded time, never raises, and says what happened; a short crawl over all of
them keeps going and stores an observation for each. Memory is measured with
tracemalloc for the huge body and the bombs.

Every server loop is bounded (a stop event, a cap on what it sends) and every
fetch runs under ``asyncio.wait_for``: a hang is a failure, not a stuck suite.
"""

from __future__ import annotations

import asyncio
import gzip
import socket
import struct
import threading
import time
import tracemalloc
import zlib
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import brotli
import pytest

from recrawl.clock import ScaledClock
from recrawl.crawl.fetch import Fetcher, FetchRequest, FetchResult
from recrawl.crawl.loop import Crawler, EmbeddedSource
from recrawl.engine.engine import Engine
from recrawl.sim.crawl import crawl_settings
from recrawl.store import open_store

T = TypeVar("T")

TIMEOUT_S = 1.0
"""The fetcher's timeout in these tests, seconds."""
LIMIT = 1 << 20
"""``max_body_bytes`` in the quick tests (the memory tests use the 16 MiB default)."""
MB = 1 << 20
TRICKLE_S = 0.05
"""Between two bytes of a slow-loris server: far below the timeout, so a
timeout per socket read never trips."""
SERVER_CAP_S = 15.0
"""Longest any server connection lives (a bound on every server loop)."""

Behaviour = Callable[[socket.socket, "RawServer"], None]


# -- a raw server: one behaviour per path -------------------------------------------------


def _head(status: str = "200 OK", *headers: str) -> bytes:
    return ("HTTP/1.1 " + status + "\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode(
        "latin-1"
    )


def _reply(body: bytes = b"", status: str = "200 OK", *headers: str) -> Behaviour:
    def behave(conn: socket.socket, server: RawServer) -> None:
        head = _head(status, *headers, f"Content-Length: {len(body)}", "Connection: close")
        conn.sendall(head + body)

    return behave


def _raw(data: bytes) -> Behaviour:
    def behave(conn: socket.socket, server: RawServer) -> None:
        conn.sendall(data)

    return behave


def _trickle(prefix: bytes, byte: bytes) -> Behaviour:
    """Send ``prefix``, then ``byte`` every TRICKLE_S until the client goes."""

    def behave(conn: socket.socket, server: RawServer) -> None:
        conn.sendall(prefix)
        deadline = time.monotonic() + SERVER_CAP_S
        while time.monotonic() < deadline and not server.stopping.is_set():
            conn.sendall(byte)
            time.sleep(TRICKLE_S)

    return behave


def _endless(head: bytes, chunk: bytes, *, cap: int = 4 << 30, chunked: bool = False) -> Behaviour:
    """Send ``head``, then ``chunk`` again and again (at most ``cap`` bytes)."""
    frame = b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk

    def behave(conn: socket.socket, server: RawServer) -> None:
        conn.sendall(head)
        sent = 0
        deadline = time.monotonic() + SERVER_CAP_S
        while sent < cap and time.monotonic() < deadline and not server.stopping.is_set():
            conn.sendall(frame)
            sent += len(chunk)

    return behave


def _cut(head: bytes, part: bytes, *, reset: bool) -> Behaviour:
    """Send ``head`` and ``part`` of the body it announced, then hang up: a
    reset (RST, SO_LINGER 0) or a plain close."""

    def behave(conn: socket.socket, server: RawServer) -> None:
        conn.sendall(head + part)
        time.sleep(0.05)
        if reset:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    return behave


def _redirect(location: Callable[[str], str], status: str = "302 Found") -> Behaviour:
    def behave(conn: socket.socket, server: RawServer) -> None:
        target = location(server.last_path)
        conn.sendall(_head(status, f"Location: {target}", "Content-Length: 0", "Connection: close"))

    return behave


class RawServer:
    """A TCP server on 127.0.0.1 that answers each request by its path's behaviour,
    one thread a connection, one request a connection (it closes after)."""

    def __init__(self, routes: Mapping[str, Behaviour]) -> None:
        self.routes = dict(routes)
        self.routes.setdefault("/robots.txt", _reply(b"", "404 Not Found"))
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port: int = self.sock.getsockname()[1]
        self.stopping = threading.Event()
        self.seen: list[str] = []
        self.last_path = ""
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            worker = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(worker)
            worker.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(SERVER_CAP_S)
            try:
                head = b""
                while b"\r\n\r\n" not in head and len(head) < 65536:
                    data = conn.recv(4096)
                    if not data:
                        return
                    head += data
                path = head.split(b" ", 2)[1].decode("latin-1")
                self.seen.append(path)
                self.last_path = path
                behave = self.routes.get(path.split("?", 1)[0], _reply(b"no", "404 Not Found"))
                behave(conn, self)
            except OSError:  # the client went away: what these clients do
                pass

    def close(self) -> None:
        self.stopping.set()
        self._accepting.join(timeout=5)
        self.sock.close()
        for worker in self._threads:
            worker.join(timeout=5)


def _bomb_blocks(compress: Callable[[bytes], bytes], flush: Callable[[], bytes]) -> bytes:
    """The repeating block of a deflate stream of zeros: after a full flush the
    compressor starts afresh, so each MiB of zeros compresses to the same bytes."""
    compress(b"\0" * MB)
    flush()
    return compress(b"\0" * MB) + flush()


def gzip_bomb(wbits: int) -> tuple[bytes, bytes]:
    """(start, block) of an endless deflate stream (``wbits``: 31 gzip, 15 zlib):
    ``start`` then ``block`` n times decompresses to n + 1 MiB of zeros."""
    z = zlib.compressobj(9, zlib.DEFLATED, wbits)
    start = z.compress(b"\0" * MB) + z.flush(zlib.Z_FULL_FLUSH)
    block = z.compress(b"\0" * MB) + z.flush(zlib.Z_FULL_FLUSH)
    assert block == z.compress(b"\0" * MB) + z.flush(zlib.Z_FULL_FLUSH)
    return start, block


GZ_START, GZ_BLOCK = gzip_bomb(31)
DEFLATE_START, DEFLATE_BLOCK = gzip_bomb(15)
BOMB_GB = 4
"""What a bomb decompresses to, GiB (about 4 MB on the wire)."""
GZ_BOMB = GZ_START + GZ_BLOCK * (BOMB_GB * 1024 - 1)
BR_BOMB = brotli.compress(b"\0" * (64 * MB), quality=0)
"""64 MiB of zeros in a few KB of brotli."""
GZIP_TWICE = gzip.compress(gzip.compress(b"\0" * (64 * MB), 1), 1)
"""64 MiB of zeros gzipped twice (Content-Encoding: gzip, gzip)."""
HTML = b"<html><head><title>T</title></head><body><h1>Name</h1></body></html>"


def _routes() -> dict[str, Behaviour]:
    loris_headers = _head("200 OK", "Content-Length: 5")[:-2]  # the blank line never comes
    return {
        # slow loris
        "/loris-status": _trickle(b"", b"H"),
        "/loris-headers": _trickle(loris_headers + b"X-Slow: ", b"a"),
        "/loris-body": _trickle(_head("200 OK", "Content-Length: 100000"), b"x"),
        "/loris-chunked": _trickle(_head("200 OK", "Transfer-Encoding: chunked"), b"1\r\nx\r\n"),
        # endless and huge bodies
        "/endless": _endless(_head("200 OK", "Connection: close"), b"x" * 65536),
        "/endless-chunked": _endless(
            _head("200 OK", "Transfer-Encoding: chunked"), b"x" * 65536, chunked=True
        ),
        "/huge-declared": _endless(
            _head("200 OK", f"Content-Length: {10 << 30}"), b"x" * 65536, cap=64 * MB
        ),
        "/huge": _endless(_head("200 OK", "Connection: close"), b"x" * 65536, cap=256 * MB),
        "/understated": _endless(_head("200 OK", "Content-Length: 100"), b"x" * 65536, cap=4 * MB),
        # redirects
        "/self": _redirect(lambda path: path),
        "/ping": _redirect(lambda path: "/pong"),
        "/pong": _redirect(lambda path: "/ping", "301 Moved Permanently"),
        "/hop": _redirect(lambda path: f"/hop?n={int(path.partition('=')[2] or 0) + 1}"),
        "/bad-location": _redirect(lambda path: "http://[::1"),
        "/bad-port": _redirect(lambda path: "http://127.0.0.1:99999/"),
        "/latin1-location": _raw(
            b"HTTP/1.1 302 Found\r\nLocation: /caf\xe9\xff\r\nContent-Length: 0\r\n"
            b"Connection: close\r\n\r\n"
        ),
        # malformed status lines
        "/status-garbage": _raw(b"garbage\r\n\r\n"),
        "/status-no-code": _raw(b"HTTP/1.1 OK\r\nContent-Length: 0\r\n\r\n"),
        "/status-999x": _raw(b"HTTP/1.1 99999 Big\r\nContent-Length: 0\r\n\r\n"),
        "/status-icy": _raw(b"ICY 200 OK\r\n\r\nbody"),
        "/status-http09": _raw(b"<html>no status line at all</html>"),
        "/status-nothing": _raw(b""),
        "/status-binary": _raw(b"\x00\xff\x16\x03\x01\x02\x00" * 100),
        # malformed headers
        "/header-space-name": _raw(b"HTTP/1.1 200 OK\r\nX Bad: 1\r\nContent-Length: 2\r\n\r\nok"),
        "/header-no-colon": _raw(b"HTTP/1.1 200 OK\r\nNoColon\r\nContent-Length: 2\r\n\r\nok"),
        "/header-nul": _raw(b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 2\r\n\r\nok"),
        "/header-bad-length": _raw(b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nok"),
        "/header-two-lengths": _raw(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\nok"
        ),
        "/header-huge": _endless(_head("200 OK")[:-2] + b"X-Huge: ", b"a" * 65536, cap=64 * MB),
        "/header-many": _endless(_head("200 OK")[:-2], b"X-A: b\r\n" * 8192, cap=64 * MB),
        "/header-bad-chunk": _raw(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n"
        ),
        # compression bombs and bad compression
        "/gzip-bomb": _endless(
            _head("200 OK", "Content-Encoding: gzip", "Connection: close") + GZ_START,
            GZ_BLOCK,
            cap=BOMB_GB * 1024 * len(GZ_BLOCK),
        ),
        "/gzip-bomb-declared": _reply(
            GZ_BOMB, "200 OK", "Content-Encoding: gzip", "Content-Type: text/html"
        ),
        "/deflate-bomb": _endless(
            _head("200 OK", "Content-Encoding: deflate", "Connection: close") + DEFLATE_START,
            DEFLATE_BLOCK,
            cap=BOMB_GB * 1024 * len(DEFLATE_BLOCK),
        ),
        "/br-bomb": _reply(BR_BOMB, "200 OK", "Content-Encoding: br"),
        "/gzip-twice": _reply(GZIP_TWICE, "200 OK", "Content-Encoding: gzip, gzip"),
        "/gzip-small": _reply(gzip.compress(HTML), "200 OK", "Content-Encoding: gzip"),
        "/deflate-small": _reply(zlib.compress(HTML), "200 OK", "Content-Encoding: deflate"),
        "/br-small": _reply(brotli.compress(HTML), "200 OK", "Content-Encoding: br"),
        "/gzip-corrupt": _reply(b"\x1f\x8b\x08\x00garbage", "200 OK", "Content-Encoding: gzip"),
        "/gzip-unknown": _reply(b"hello", "200 OK", "Content-Encoding: x-unknown"),
        # invalid encodings
        "/bad-charset": _reply(HTML, "200 OK", "Content-Type: text/html; charset=no-such-charset"),
        "/bad-utf8": _reply(
            b"<html><title>caf\xc3 \xff\xfe</title><h1>\xed\xa0\x80</h1></html>",
            "200 OK",
            "Content-Type: text/html; charset=utf-8",
        ),
        "/wrong-type-json": _reply(HTML, "200 OK", "Content-Type: application/json"),
        "/wrong-type-png": _reply(HTML, "200 OK", "Content-Type: image/png"),
        "/binary-as-html": _reply(bytes(range(256)) * 16, "200 OK", "Content-Type: text/html"),
        "/utf16-no-bom": _reply(
            "<html><h1>Name</h1></html>".encode("utf-16-le"),
            "200 OK",
            "Content-Type: text/html; charset=utf-8",
        ),
        # connections that end mid-body
        "/reset-mid-body": _cut(_head("200 OK", "Content-Length: 100000"), b"x" * 1000, reset=True),
        "/close-mid-body": _cut(
            _head("200 OK", "Content-Length: 100000"), b"x" * 1000, reset=False
        ),
        "/close-mid-chunk": _cut(
            _head("200 OK", "Transfer-Encoding: chunked"), b"3e8\r\n" + b"x" * 10, reset=False
        ),
        "/reset-mid-gzip": _cut(
            _head("200 OK", "Content-Encoding: gzip", "Content-Length: 100000") + GZ_START,
            b"",
            reset=True,
        ),
        "/reset-before-status": _cut(b"", b"", reset=True),
        "/ok": _reply(HTML, "200 OK", "Content-Type: text/html; charset=utf-8"),
    }


@pytest.fixture(scope="module")
def server() -> Iterator[RawServer]:
    srv = RawServer(_routes())
    try:
        yield srv
    finally:
        srv.close()


def run(coro: Awaitable[T], limit: float = 10.0) -> T:
    """Run ``coro``; more than ``limit`` seconds is a hang, a failure."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout=limit)

    return asyncio.run(bounded())


def fetch_one(url: str, **options: Any) -> tuple[FetchResult, float]:
    """One fetch on a fresh Fetcher (loopback allowed, TIMEOUT_S, LIMIT unless
    given) and the real seconds it took."""
    options.setdefault("allow_private_networks", True)
    options.setdefault("timeout_s", TIMEOUT_S)
    options.setdefault("max_body_bytes", LIMIT)

    async def go() -> FetchResult:
        async with Fetcher(**options) as fetcher:
            return await fetcher.fetch(FetchRequest(url))

    started = time.perf_counter()
    result = run(go())
    return result, time.perf_counter() - started


def measured(url: str, **options: Any) -> tuple[FetchResult, float, int]:
    """:func:`fetch_one` with the peak of Python allocations during it, bytes."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result, took = fetch_one(url, **options)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return result, took, peak


# -- slow loris -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/loris-status", None),
        ("/loris-headers", None),
        ("/loris-body", 200),
        ("/loris-chunked", 200),
    ],
)
def test_slow_loris_ends_at_the_timeout(server: RawServer, path: str, status: int | None) -> None:
    result, took = fetch_one(server.url(path))
    print(f"{path}: {result.error} after {took:.2f} s")
    assert (result.error, result.status, result.body) == ("timeout", status, b"")
    assert TIMEOUT_S <= took < TIMEOUT_S + 0.5
    assert result.bytes_sent > 0


# -- endless and huge bodies ----------------------------------------------------------------


@pytest.mark.parametrize("path", ["/endless", "/endless-chunked", "/huge-declared", "/huge"])
def test_endless_and_huge_bodies_are_cut_at_the_limit(server: RawServer, path: str) -> None:
    result, took = fetch_one(server.url(path))
    assert (result.error, result.status, result.body) == ("too_large", 200, b"")
    assert result.bytes_received < LIMIT + 256 * 1024
    assert took < 2.0


def test_a_body_longer_than_its_content_length_is_read_to_the_length(server: RawServer) -> None:
    result, _ = fetch_one(server.url("/understated"))
    assert (result.error, result.status, result.body) == (None, 200, b"x" * 100)


@pytest.mark.parametrize("path", ["/huge", "/endless-chunked"])
def test_a_huge_body_keeps_memory_bounded(server: RawServer, path: str) -> None:
    result, took, peak = measured(server.url(path), max_body_bytes=16 * MB)
    print(f"{path}: {result.error} in {took:.2f} s, peak {peak / MB:.1f} MiB")
    assert (result.error, result.status) == ("too_large", 200)
    assert 16 * MB < result.bytes_received < 17 * MB
    assert peak < 50 * MB


# -- redirects ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "error", "hops"),
    [
        ("/self", "redirect_loop", 1),
        ("/ping", "redirect_loop", 2),
        ("/hop", "too_many_redirects", 6),
        ("/bad-location", "bad_url", 0),
        ("/bad-port", "bad_url", 1),
    ],
)
def test_redirect_loops_and_bad_locations_end(
    server: RawServer, path: str, error: str, hops: int
) -> None:
    result, took = fetch_one(server.url(path))
    assert (result.error, result.body, result.moved_to) == (error, b"", None)
    assert result.status in {301, 302}
    assert len(result.redirects) == hops
    assert took < 1.0


def test_a_location_in_latin1_is_followed_percent_encoded(server: RawServer) -> None:
    result, _ = fetch_one(server.url("/latin1-location"))
    assert result.error is None and result.status == 404
    assert result.final_url.endswith("/caf%C3%A9%C3%BF")


# -- malformed status lines and headers -----------------------------------------------------

MALFORMED = [
    "/status-garbage",
    "/status-no-code",
    "/status-999x",
    "/status-icy",
    "/status-http09",
    "/status-nothing",
    "/status-binary",
    "/header-space-name",
    "/header-no-colon",
    "/header-nul",
    "/header-bad-length",
    "/header-two-lengths",
    "/header-huge",
    "/header-many",
    "/header-bad-chunk",
]


@pytest.mark.parametrize("path", MALFORMED)
def test_a_malformed_response_is_a_broken_exchange(server: RawServer, path: str) -> None:
    result, took, peak = measured(server.url(path))
    print(f"{path}: {result.status} {result.error} in {took:.2f} s, peak {peak / MB:.1f} MiB")
    assert result.error == "connection_reset" and result.body == b""
    assert took < 1.0 and peak < 10 * MB
    assert result.bytes_sent > 0


# -- compression bombs ----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/gzip-bomb", "/gzip-bomb-declared", "/deflate-bomb", "/br-bomb"])
def test_a_compression_bomb_is_refused_past_the_limit_without_inflating_it(
    server: RawServer, path: str
) -> None:
    result, took, peak = measured(server.url(path), max_body_bytes=16 * MB)
    print(
        f"{path}: {result.error} in {took:.2f} s, peak {peak / MB:.1f} MiB, "
        f"{result.bytes_received} bytes received"
    )
    assert (result.error, result.status, result.body) == ("too_large", 200, b"")
    assert peak < 50 * MB
    assert result.bytes_received < 1 * MB  # 16 MiB of zeros is ~16 KB of gzip
    assert took < 2.0


def test_nested_gzip_is_bounded_too(server: RawServer) -> None:
    result, took, peak = measured(server.url("/gzip-twice"), max_body_bytes=16 * MB)
    assert (result.error, result.status) == ("too_large", 200)
    assert peak < 50 * MB and took < 3.0


@pytest.mark.parametrize(
    ("path", "error"), [("/gzip-corrupt", "decoding"), ("/gzip-unknown", None)]
)
def test_bad_compression(server: RawServer, path: str, error: str | None) -> None:
    result, _ = fetch_one(server.url(path))
    assert (result.error, result.status) == (error, 200)
    if error is None:  # an unknown coding is passed through as it came
        assert result.body == b"hello"


@pytest.mark.parametrize("path", ["/gzip-small", "/deflate-small", "/br-small"])
def test_small_compressed_bodies_still_decode(server: RawServer, path: str) -> None:
    result, _ = fetch_one(server.url(path))
    assert (result.error, result.status, result.body) == (None, 200, HTML)


# -- invalid encodings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["/bad-charset", "/bad-utf8", "/wrong-type-json", "/wrong-type-png", "/binary-as-html"],
)
def test_invalid_encodings_are_fetched_as_bytes(server: RawServer, path: str) -> None:
    result, _ = fetch_one(server.url(path))
    assert (result.error, result.status) == (None, 200)
    assert result.body and result.content_type


# -- connections that end mid-body ----------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/reset-mid-body", 200),
        ("/close-mid-body", 200),
        ("/close-mid-chunk", 200),
        ("/reset-mid-gzip", 200),
        ("/reset-before-status", None),
    ],
)
def test_a_connection_cut_mid_body_is_a_reset(
    server: RawServer, path: str, status: int | None
) -> None:
    result, took = fetch_one(server.url(path))
    assert (result.error, result.status, result.body) == ("connection_reset", status, b"")
    if status is not None:
        assert result.bytes_received > 0
    assert took < 1.0


def test_a_port_out_of_range_is_a_bad_url() -> None:
    result, _ = fetch_one("http://127.0.0.1:99999/")
    assert (result.error, result.status, result.bytes_sent) == ("bad_url", None, 0)


# -- DNS rebinding --------------------------------------------------------------------------

PUBLIC = "93.184.216.34"


def _fake_dns(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[str]]) -> list[str]:
    """Resolve each name of ``answers`` to its next address (the last one
    repeats) through ``socket.getaddrinfo``, which both the safety check and
    the connection ask; returns the log of names asked."""
    real = socket.getaddrinfo
    asked: list[str] = []

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        queue = answers.get(name)
        if queue is None:
            return real(host, port, *args, **kwargs)
        asked.append(name)
        address = queue.pop(0) if len(queue) > 1 else queue[0]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port or 80)))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


def test_dns_rebinding_to_loopback_is_refused(
    server: RawServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name is public when the guard asks, loopback when the connection
    asks: the address connected to must be the one checked."""
    before = len(server.seen)
    asked = _fake_dns(monkeypatch, {"rebind.test": [PUBLIC, "127.0.0.1"]})
    result, _ = fetch_one(server.url("/ok", host="rebind.test"), allow_private_networks=False)
    assert (result.error, result.status, result.body, result.bytes_sent) == (
        "unsafe_target",
        None,
        b"",
        0,
    )
    assert len(server.seen) == before, "the request reached the loopback server"
    assert asked


def test_a_cached_check_does_not_let_a_rebound_name_through(
    server: RawServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name checked once and cached: its next connection is checked again."""
    before = len(server.seen)
    answers = {"cached.test": [PUBLIC, PUBLIC, "127.0.0.1"]}
    _fake_dns(monkeypatch, answers)

    async def go() -> list[FetchResult]:
        async with Fetcher(allow_private_networks=False, timeout_s=TIMEOUT_S) as fetcher:
            # the first fetch is checked, then fails to connect to the public address
            # (nothing listens there offline), the second one is rebound
            first = await fetcher.fetch(FetchRequest(server.url("/ok", host="cached.test")))
            second = await fetcher.fetch(FetchRequest(server.url("/ok", host="cached.test")))
            return [first, second]

    first, second = run(go())
    assert first.error in {"connection_reset", "timeout"}
    assert (second.error, second.status) == ("unsafe_target", None)
    assert len(server.seen) == before


def test_a_name_resolving_to_loopback_is_refused(
    server: RawServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_dns(monkeypatch, {"inside.test": ["127.0.0.1"]})
    before = len(server.seen)
    result, _ = fetch_one(server.url("/ok", host="inside.test"), allow_private_networks=False)
    assert (result.error, result.bytes_sent) == ("unsafe_target", 0)
    assert len(server.seen) == before
    allowed, _ = fetch_one(server.url("/ok", host="inside.test"), allow_private_networks=True)
    assert (allowed.error, allowed.status, allowed.body) == (None, 200, HTML)


# -- a crawl over all of them ---------------------------------------------------------------

CRAWLED: dict[str, tuple[str | None, int | None]] = {
    "/loris-headers": ("timeout", None),
    "/loris-body": ("timeout", 200),
    "/endless": ("too_large", 200),
    "/huge-declared": ("too_large", 200),
    "/gzip-bomb": ("too_large", 200),
    "/br-bomb": ("too_large", 200),
    "/gzip-corrupt": ("decoding", 200),
    "/self": ("redirect_loop", 302),
    "/hop": ("too_many_redirects", 302),
    "/status-garbage": ("connection_reset", None),
    "/header-no-colon": ("connection_reset", None),
    "/reset-mid-body": ("connection_reset", 200),
    "/close-mid-chunk": ("connection_reset", 200),
    "/bad-charset": (None, 200),
    "/bad-utf8": (None, 200),
    "/wrong-type-json": (None, 200),
    "/binary-as-html": (None, 200),
    "/ok": (None, 200),
}


class RecordingSource(EmbeddedSource):
    """An embedded source that keeps every observation it reports."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.reported: list[Mapping[str, Any]] = []

    async def report(self, observations: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
        self.reported.extend(observations)
        return await super().report(observations)


def test_a_crawl_over_hostile_servers_keeps_going_and_stores_each(tmp_path: Path) -> None:
    """One site (origin) per hostile path, all crawled at once on a scaled
    clock for two simulated hours: each path gets an observation with its
    outcome, in the store."""
    day = 86400.0
    origin = 1_800_000_000.0
    clock = ScaledClock(day / 20, real_origin=time.time(), virtual_origin=origin)
    servers = {path: RawServer(_routes()) for path in CRAWLED}
    try:
        urls = {servers[path].url(path): path for path in CRAWLED}
        with open_store(str(tmp_path / "hostile.db")) as store:
            settings = crawl_settings(24 * 100.0, timeout_s=TIMEOUT_S, min_delay_s=1)
            settings = settings.model_copy(update={"max_body_bytes": 16 * MB})
            engine = Engine(store, settings, clock=clock)
            engine.add_urls(
                [{"url": u, "site": u.split("/")[2], "page_type": "product"} for u in urls],
                now=clock(),
            )
            source = RecordingSource(engine)
            crawler = Crawler(source, settings, clock=clock)
            tracemalloc.start()
            try:
                stats = run(crawler.run(clock() + 2 * 3600), limit=30)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            got: dict[str, tuple[str | None, int | None]] = {}
            for raw in source.reported:
                got.setdefault(urls[raw["url"]], (raw.get("error"), raw.get("status")))
            print(
                f"crawl: {stats.requests} requests, {stats.stored} stored, peak {peak / MB:.1f} MiB"
            )
            assert got == CRAWLED
            assert stats.stored == stats.requests == len(source.reported)
            assert store.observation_count() == len(source.reported)
            assert stats.paused == []
            assert peak < 100 * MB
    finally:
        for srv in servers.values():
            srv.close()

from __future__ import annotations

import asyncio
import gzip
import http.client
import socket
import threading
import time
from collections.abc import Awaitable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import pytest

from recrawl.crawl import fetch as fetch_module
from recrawl.crawl import safety
from recrawl.crawl.fetch import (
    DEFAULT_USER_AGENT,
    Fetcher,
    FetchRequest,
    FetchResult,
    _PerOrigin,
    _Stream,
)
from recrawl.observe.observation import parse_observation

T = TypeVar("T")

PAGE = b"<html><head><title>Hello</title></head><body>" + b"hello world " * 50 + b"</body></html>"
ZIPPABLE = b"<html><body>" + b"the same line again and again\n" * 2000 + b"</body></html>"
ETAG = '"v1"'
LAST_MODIFIED = "Wed, 01 Jan 2025 00:00:00 GMT"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def reply(self, status: int, body: bytes = b"", **headers: str) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.server.seen.append((self.path, dict(self.headers.items())))
        self.server.peers.add(self.client_address[1])
        path = self.path
        try:
            if path == "/ok":
                self.reply(200, PAGE, Content_Type="text/html; charset=utf-8")
            elif path == "/gzip":
                self.reply(
                    200, gzip.compress(ZIPPABLE), Content_Type="text/html", Content_Encoding="gzip"
                )
            elif path == "/etag":
                if self.headers.get("If-None-Match") == ETAG:
                    self.reply(304, ETag=ETAG, Last_Modified=LAST_MODIFIED)
                else:
                    self.reply(200, PAGE, ETag=ETAG, Last_Modified=LAST_MODIFIED)
            elif path.startswith("/status/"):
                self.reply(int(path.rsplit("/", 1)[1]), b"status page")
            elif path == "/301":
                self.reply(301, b"moved", Location="/ok")
            elif path == "/302":
                self.reply(302, b"found", Location=f"http://127.0.0.1:{self.server.server_port}/ok")
            elif path == "/chain":
                self.reply(301, Location="/302")
            elif path == "/loop-a":
                self.reply(302, Location="/loop-b")
            elif path == "/loop-b":
                self.reply(302, Location="/loop-a")
            elif path.startswith("/hops/"):
                n = int(path.rsplit("/", 1)[1])
                self.reply(302, Location=f"/hops/{n + 1}")
            elif path == "/to-localhost":
                port = self.server.server_port
                self.reply(302, Location=f"http://localhost:{port}/ok")
            elif path == "/to-ftp":
                self.reply(302, Location="ftp://127.0.0.1/file")
            elif path == "/big":  # no Content-Length: the fetcher must stop reading itself
                self.send_response(200)
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                for _ in range(100):
                    self.wfile.write(b"x" * 1000)
            elif path == "/big-declared":
                self.reply(200, b"y" * 100_000)
            elif path == "/slow":
                time.sleep(1.0)
                self.reply(200, b"late")
            elif path == "/then-close":  # keep-alive by its headers, then the server hangs up
                self.reply(200, b"bye")
                self.close_connection = True
            elif path == "/ua":
                self.reply(200, self.headers.get("User-Agent", "").encode())
            else:
                self.reply(404, b"not found")
        except OSError:  # the client gave up (timeouts, too large): nothing to do
            self.close_connection = True


class Server(ThreadingHTTPServer):
    daemon_threads = True
    seen: list[tuple[str, dict[str, str]]]
    peers: set[int]  # the client ports seen: one per connection

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class ProxyHandler(BaseHTTPRequestHandler):
    """A forwarding HTTP proxy for absolute-form GETs (enough for a route)."""

    protocol_version = "HTTP/1.1"
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.seen.append((self.path, dict(self.headers.items())))
        target = urlsplit(self.path)
        upstream = http.client.HTTPConnection(target.hostname or "", target.port or 80, timeout=5)
        try:
            hop_by_hop = {"proxy-connection", "connection", "keep-alive", "host"}
            headers = {k: v for k, v in self.headers.items() if k.lower() not in hop_by_hop}
            upstream.request("GET", target.path or "/", headers=headers)
            response = upstream.getresponse()
            body = response.read()
            self.send_response(response.status)
            for name, value in response.getheaders():
                if name.lower() not in {"content-length", "connection", "transfer-encoding"}:
                    self.send_header(name, value)
            self.send_header("Via", "1.1 test-proxy")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        finally:
            upstream.close()


def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[Server]:
    server = Server(("127.0.0.1", 0), handler)
    server.seen = []
    server.peers = set()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def server() -> Iterator[Server]:
    yield from _serve(Handler)


@pytest.fixture
def proxy() -> Iterator[Server]:
    yield from _serve(ProxyHandler)


def url(server: Server, path: str) -> str:
    return f"http://127.0.0.1:{server.server_port}{path}"


def run(coro: Awaitable[T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout=20)

    return asyncio.run(bounded())


def fetch_one(request: FetchRequest, **options: Any) -> FetchResult:
    options.setdefault("allow_private_networks", True)

    async def go() -> FetchResult:
        async with Fetcher(**options) as fetcher:
            return await fetcher.fetch(request)

    return run(go())


def test_200_body_and_wire_bytes_include_the_headers(server: Server) -> None:
    result = fetch_one(FetchRequest(url(server, "/ok"), site="shop", page_type="product"))
    assert (result.status, result.error) == (200, None)
    assert result.body == PAGE
    assert result.content_type == "text/html; charset=utf-8"
    assert result.final_url == url(server, "/ok")
    assert result.headers["content-length"] == str(len(PAGE))
    assert result.bytes_received > len(PAGE) + len("HTTP/1.1 200 OK\r\n\r\n")
    assert result.bytes_sent > len("GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert not result.conditional and result.moved_to is None and result.redirects == []
    assert result.latency_ms > 0


def test_gzip_is_decompressed_and_billed_compressed(server: Server) -> None:
    result = fetch_one(FetchRequest(url(server, "/gzip")))
    assert result.body == ZIPPABLE
    compressed = len(gzip.compress(ZIPPABLE))
    assert compressed < result.bytes_received < compressed + 1000
    assert "gzip" in server.seen[-1][1]["Accept-Encoding"]


def test_304_on_conditional_request_keeps_the_validators(server: Server) -> None:
    headers = {"If-None-Match": ETAG, "If-Modified-Since": LAST_MODIFIED}
    result = fetch_one(FetchRequest(url(server, "/etag"), headers=headers))
    assert (result.status, result.body, result.conditional) == (304, b"", True)
    assert server.seen[-1][1]["If-None-Match"] == ETAG
    raw = result.observation()
    assert (raw["etag"], raw["last_modified"], raw["conditional"]) == (ETAG, LAST_MODIFIED, True)
    fresh = fetch_one(FetchRequest(url(server, "/etag")))
    assert (fresh.status, fresh.conditional, fresh.headers["etag"]) == (200, False, ETAG)


@pytest.mark.parametrize("status", [404, 500, 503])
def test_error_statuses_are_kept(server: Server, status: int) -> None:
    result = fetch_one(FetchRequest(url(server, f"/status/{status}")))
    assert (result.status, result.error, result.body) == (status, None, b"status page")


def test_301_sets_moved_to_and_returns_the_final_body(server: Server) -> None:
    result = fetch_one(FetchRequest(url(server, "/301")))
    assert (result.status, result.body) == (200, PAGE)
    assert result.moved_to == result.final_url == url(server, "/ok")
    assert result.redirects == [(301, url(server, "/ok"))]
    assert result.observation()["moved_to"] == url(server, "/ok")
    direct = fetch_one(FetchRequest(url(server, "/ok")))
    assert result.bytes_sent > direct.bytes_sent and result.bytes_received > direct.bytes_received


def test_302_is_followed_but_the_url_kept(server: Server) -> None:
    result = fetch_one(FetchRequest(url(server, "/302")))
    assert (result.status, result.body, result.moved_to) == (200, PAGE, None)
    assert result.final_url == url(server, "/ok")
    assert "moved_to" not in result.observation()


def test_only_a_permanent_first_hop_moves_the_page(server: Server) -> None:
    result = fetch_one(FetchRequest(url(server, "/chain")))
    assert [s for s, _ in result.redirects] == [301, 302]
    assert result.moved_to == url(server, "/ok")


def test_redirect_loop(server: Server) -> None:
    result = fetch_one(FetchRequest(url(server, "/loop-a")))
    assert (result.error, result.status, result.body) == ("redirect_loop", 302, b"")
    assert len(result.redirects) == 2 and result.moved_to is None


def test_too_many_redirects(server: Server) -> None:
    result = fetch_one(FetchRequest(url(server, "/hops/0")), max_redirects=3)
    assert result.error == "too_many_redirects"
    assert len(result.redirects) == 4 and len(server.seen) == 4


def test_too_large_stops_reading_and_keeps_status_and_bytes(server: Server) -> None:
    result = fetch_one(FetchRequest(url(server, "/big")), max_body_bytes=5_000)
    assert (result.error, result.status, result.body) == ("too_large", 200, b"")
    assert 5_000 < result.bytes_received < 100_000
    declared = fetch_one(FetchRequest(url(server, "/big-declared")), max_body_bytes=5_000)
    assert (declared.error, declared.status) == ("too_large", 200)
    assert 0 < declared.bytes_received < 100_000


def test_timeout_counts_the_request_sent(server: Server) -> None:
    started = time.perf_counter()
    result = fetch_one(FetchRequest(url(server, "/slow")), timeout_s=0.3)
    assert (result.error, result.status) == ("timeout", None)
    assert result.bytes_sent > 0 and result.bytes_received == 0
    assert time.perf_counter() - started < 0.9


def test_connection_refused_is_a_connection_reset() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = fetch_one(FetchRequest(f"http://127.0.0.1:{port}/"))
    assert (result.error, result.status, result.bytes_sent, result.bytes_received) == (
        "connection_reset",
        None,
        0,
        0,
    )


def test_dns_failure() -> None:
    result = fetch_one(FetchRequest("http://no-such-host.invalid/"))
    assert (result.error, result.bytes_sent) == ("dns", 0)


def test_user_agent_is_sent_as_configured(server: Server) -> None:
    result = fetch_one(FetchRequest(url(server, "/ua")), user_agent="testbot/1.0")
    assert result.body == b"testbot/1.0"
    default = fetch_one(FetchRequest(url(server, "/ua")))
    assert default.body.decode() == DEFAULT_USER_AGENT
    assert DEFAULT_USER_AGENT.startswith("recrawl/")


def test_loopback_is_refused_by_default_and_nothing_is_sent(server: Server) -> None:
    result = fetch_one(FetchRequest(url(server, "/ok")), allow_private_networks=False)
    assert (result.error, result.status, result.bytes_sent, result.bytes_received) == (
        "unsafe_target",
        None,
        0,
        0,
    )
    assert server.seen == []


def test_a_redirect_to_a_private_host_is_refused(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pretend 127.0.0.1 is public, so only the redirect to localhost is private."""
    real = safety.resolve_and_check

    async def check(host: str, port: int, *, allow_private: bool) -> list[str]:
        return await real(host, port, allow_private=allow_private or host == "127.0.0.1")

    monkeypatch.setattr(fetch_module, "resolve_and_check", check)
    result = fetch_one(FetchRequest(url(server, "/to-localhost")), allow_private_networks=False)
    assert result.error == "unsafe_target"
    assert result.status == 302 and result.bytes_sent > 0
    assert [path for path, _ in server.seen] == ["/to-localhost"]


def test_a_route_goes_through_its_proxy(server: Server, proxy: Server) -> None:
    routes = {"dc": f"http://127.0.0.1:{proxy.server_port}", "direct": ""}
    result = fetch_one(FetchRequest(url(server, "/ok"), route="dc"), routes=routes)
    assert (result.status, result.body, result.route) == (200, PAGE, "dc")
    assert result.headers["via"] == "1.1 test-proxy"
    assert [path for path, _ in proxy.seen] == [url(server, "/ok")]
    assert result.observation()["route"] == "dc"
    plain = fetch_one(FetchRequest(url(server, "/ok"), route="direct"), routes=routes)
    assert plain.route == "direct" and "via" not in plain.headers and len(proxy.seen) == 1


def test_observation_passes_the_parser(server: Server) -> None:
    result = fetch_one(
        FetchRequest(url(server, "/etag"), site="shop", page_type="product", route=""),
        clock=lambda: 1_700_000_000.0,
    )
    raw = result.observation(record_hash="abc", title="Hello", body_excerpt="hello", credits=1.0)
    obs = parse_observation(raw)
    assert (obs.url, obs.fetched_at, obs.site, obs.page_type) == (
        url(server, "/etag"),
        1_700_000_000.0,
        "shop",
        "product",
    )
    assert (obs.status, obs.etag, obs.bytes_received, obs.record_hash, obs.credits) == (
        200,
        ETAG,
        result.bytes_received,
        "abc",
        1.0,
    )
    failed = fetch_one(FetchRequest(url(server, "/loop-a")))
    raw = failed.observation()
    assert parse_observation(raw).error == "redirect_loop"
    assert "etag" not in raw and "title" not in raw


def test_one_fetcher_serves_many_requests_concurrently(server: Server) -> None:
    async def go() -> list[FetchResult]:
        async with Fetcher(allow_private_networks=True, max_connections=8) as fetcher:
            paths = ["/ok", "/gzip", "/302", "/status/404"] * 10
            return await asyncio.gather(
                *(fetcher.fetch(FetchRequest(url(server, p))) for p in paths)
            )

    results = run(go())
    assert [r.status for r in results] == [200, 200, 200, 404] * 10
    assert all(r.error is None for r in results)


def test_a_redirect_to_another_scheme_is_a_bad_url(server: Server) -> None:
    result = fetch_one(FetchRequest(url(server, "/to-ftp")))
    assert (result.error, result.status) == ("bad_url", 302)
    assert result.redirects == [(302, "ftp://127.0.0.1/file")]


def test_credentials_stay_with_their_origin_but_validators_follow(server: Server) -> None:
    headers = {"Cookie": "session=1", "If-None-Match": ETAG}
    result = fetch_one(FetchRequest(url(server, "/to-localhost"), headers=headers))
    assert (result.status, result.final_url) == (200, f"http://localhost:{server.server_port}/ok")
    first, second = (h for _, h in server.seen)
    assert first["Cookie"] == "session=1" and "Cookie" not in second
    assert second["If-None-Match"] == ETAG


def test_tls_to_a_plain_http_server_is_a_tls_error(server: Server) -> None:
    result = fetch_one(FetchRequest(f"https://127.0.0.1:{server.server_port}/ok"))
    assert (result.error, result.status, result.bytes_sent) == ("tls", None, 0)


@pytest.mark.parametrize("headers", [{"X-Note": "a\nb"}, {"X-Note": "é"}, {"X Note": "1"}])
def test_a_header_that_cannot_be_sent_is_a_bad_request(
    server: Server, headers: dict[str, str]
) -> None:
    result = fetch_one(FetchRequest(url(server, "/ok"), headers=headers))
    assert (result.error, result.status, result.bytes_sent) == ("bad_request", None, 0)
    assert server.seen == []


@pytest.mark.parametrize("target", ["http://", "not a url", "http://[::1/"])
def test_a_url_that_cannot_be_fetched_is_a_bad_url(target: str) -> None:
    result = fetch_one(FetchRequest(target))
    assert (result.error, result.bytes_sent, result.final_url) == ("bad_url", 0, target)


# -- connection pools: one small pool per origin ---------------------------------------------


def _transport(fetcher: Fetcher, proxy: str = "") -> _PerOrigin:
    transport = fetcher._clients[proxy]._transport
    assert isinstance(transport, _PerOrigin)
    return transport


def test_each_origin_gets_its_own_pool_of_at_most_connections_per_origin(server: Server) -> None:
    port = server.server_port

    async def go() -> tuple[list[FetchResult], int]:
        async with Fetcher(
            allow_private_networks=True, max_connections=32, connections_per_origin=2
        ) as fetcher:
            urls = [f"http://127.0.0.1:{port}/ok", f"http://localhost:{port}/ok"] * 12
            results = await asyncio.gather(*(fetcher.fetch(FetchRequest(u)) for u in urls))
            return list(results), _transport(fetcher).origins

    results, origins = run(go())
    assert [r.status for r in results] == [200] * 24
    assert origins == 2
    assert 2 <= len(server.peers) <= 4  # two connections at most per origin, reused


def test_max_connections_caps_the_requests_in_flight_over_all_origins(server: Server) -> None:
    port = server.server_port

    async def go(total: int) -> list[FetchResult]:
        async with Fetcher(allow_private_networks=True, max_connections=total) as fetcher:
            slow = asyncio.create_task(fetcher.fetch(FetchRequest(f"http://127.0.0.1:{port}/slow")))
            await asyncio.sleep(0.2)
            fast = await fetcher.fetch(FetchRequest(f"http://localhost:{port}/ok"))
            return [await slow, fast]

    (slow, fast) = run(go(1))
    assert (slow.status, fast.status) == (200, 200)
    assert fast.latency_ms > 500  # waited for the slow request's slot
    (slow, fast) = run(go(2))
    assert (slow.status, fast.status) == (200, 200)
    assert fast.latency_ms < 500


def test_waiting_for_a_slot_past_the_pool_timeout_is_a_pool_timeout(server: Server) -> None:
    async def go() -> None:
        transport = _PerOrigin(None, per_origin=1, total=1)
        async with httpx.AsyncClient(transport=transport, timeout=0.3) as client:
            held = await client.send(client.build_request("GET", url(server, "/ok")), stream=True)
            with pytest.raises(httpx.PoolTimeout):
                await client.get(url(server, "/ok"))
            await held.aclose()
            assert (await client.get(url(server, "/ok"))).status_code == 200

    run(go())


def test_idle_origins_are_closed_least_recently_used_first(server: Server) -> None:
    others = [_serve(Handler) for _ in range(2)]
    ports = [server.server_port] + [next(other).server_port for other in others]
    origins = [
        f"http://127.0.0.1:{ports[0]}",
        f"http://localhost:{ports[0]}",
        f"http://127.0.0.1:{ports[1]}",
        f"http://127.0.0.1:{ports[2]}",
    ]

    async def go() -> tuple[list[int], list[int], int]:
        transport = _PerOrigin(None, per_origin=2, total=8, max_idle=2)
        counts = []
        async with httpx.AsyncClient(transport=transport) as client:
            for origin in origins:
                response = await client.get(origin + "/ok")
                assert response.status_code == 200
                counts.append(transport.origins)
            kept = [port for _, _, port in transport._origins]
        return counts, kept, transport.origins

    try:
        counts, kept, left = run(go())
    finally:
        for other in others:
            next(other, None)
    # an origin opened beyond max_idle makes the next request close the least recently used
    assert counts == [1, 2, 3, 3]
    assert kept == [ports[0], ports[1], ports[2]]  # 127.0.0.1:ports[0] went first
    assert left == 0  # every pool closed with the client


def test_origins_idle_past_the_keepalive_expiry_are_closed(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fetch_module, "_KEEPALIVE_S", 0.0)
    monkeypatch.setattr(fetch_module, "_SWEEP_S", 0.0)
    port = server.server_port

    async def go() -> list[int]:
        async with Fetcher(allow_private_networks=True) as fetcher:
            counts = []
            for host in ["127.0.0.1", "localhost", "localhost"]:
                result = await fetcher.fetch(FetchRequest(f"http://{host}:{port}/ok"))
                assert result.status == 200
                counts.append(_transport(fetcher).origins)
            return counts

    assert run(go()) == [1, 1, 1]


def test_a_redirect_across_origins_uses_both_pools_and_releases_its_slots(server: Server) -> None:
    async def go() -> tuple[FetchResult, FetchResult, int]:
        async with Fetcher(allow_private_networks=True, max_connections=1) as fetcher:
            first = await fetcher.fetch(FetchRequest(url(server, "/to-localhost")))
            second = await fetcher.fetch(FetchRequest(url(server, "/to-localhost")))
            return first, second, _transport(fetcher).origins

    first, second, origins = run(go())
    assert (first.status, second.status, origins) == (200, 200, 2)


def test_connections_per_origin_must_be_positive() -> None:
    with pytest.raises(ValueError, match="connections_per_origin"):
        Fetcher(connections_per_origin=0)


def test_an_idle_connection_the_server_closed_is_not_reused(server: Server) -> None:
    async def go() -> tuple[list[FetchResult], list[str]]:
        async with Fetcher(allow_private_networks=True) as fetcher:
            first = await fetcher.fetch(FetchRequest(url(server, "/ok")))
            pool = next(iter(_transport(fetcher)._origins.values())).transport._pool
            streams = [
                type(c._connection._network_stream).__name__  # type: ignore[attr-defined]
                for c in pool.connections
            ]
            second = await fetcher.fetch(FetchRequest(url(server, "/then-close")))
            await asyncio.sleep(0.2)  # the hang-up reaches the idle connection
            third = await fetcher.fetch(FetchRequest(url(server, "/ok")))
            return [first, second, third], streams

    results, streams = run(go())
    assert streams == [_Stream.__name__]  # the socket-caching stream is in use
    assert [(r.status, r.error) for r in results] == [(200, None)] * 3
    assert len(server.peers) == 2  # a new connection after the hang-up

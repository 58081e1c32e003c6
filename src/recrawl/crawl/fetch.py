"""The polite async fetcher of the crawl loop: one GET, every byte counted.

:class:`Fetcher` sends a :class:`FetchRequest` (a URL and the plan's conditional
headers) over one :class:`httpx.AsyncClient` per route (a route is a named HTTP
proxy, or direct), which keeps one small connection pool per origin, and
returns a :class:`FetchResult`; it never raises for a network problem, it
reports one in ``FetchResult.error``:

========================  ==================================================
``timeout``               a hop (DNS, connect, request, headers, body) took
                          longer than ``timeout_s`` in all
``connection_reset``      refused, reset or a broken HTTP exchange
``dns``                   the host name did not resolve
``tls``                   the TLS handshake or certificate failed
``unsafe_target``         a hop pointed at a non-public address (see safety)
``redirect_loop``         a redirect came back to a URL already in the chain
``too_many_redirects``    more than ``max_redirects`` hops
``too_large``             the body passed ``max_body_bytes``
``bad_url``               a URL (or a ``Location``) that cannot be fetched
``bad_request``           a request header httpx refuses to send
``proxy``                 the route's proxy refused or broke the request
``decoding``              a body that does not decompress, or stops mid-stream
========================  ==================================================

A hop's ``timeout_s`` is a deadline on the hop as a whole, not on each read: a
server that trickles its status line, headers or body a byte at a time is cut
off at the deadline. A body is decompressed (gzip, deflate, brotli; codings
stacked too) by bounded steps, never producing more than ``max_body_bytes``,
so a compression bomb is refused as ``too_large`` after at most that much
output, at the cost of no more memory. A malformed status line or header, or
a body cut short by a reset or a close, is a ``connection_reset``.

Redirects are followed by hand, hop by hop, so each hop is checked by
:func:`~recrawl.crawl.safety.resolve_and_check` and billed. Bytes are **wire
bytes**: sent = request line + headers (+ body) of every hop that was sent;
received = status line + headers + the body *as transferred* (compressed) of
every hop, and of failed hops as far as they got. Header bytes are counted by
serialising them as HTTP/1.1 would (``Name: value\\r\\n``); chunked framing and
the TLS record overhead are not counted, so the figures are a close lower bound
of what a meter on the link would read. Through a proxy the request line carries
the absolute URL, as a forwarding proxy receives it; an ``https`` target through a
proxy is counted the same way (the ``CONNECT`` exchange is not).

The target of every hop is checked, through a proxy too (the proxy itself, often
on loopback, is trusted as configured). Direct, the target's name is resolved
here and refused when any address is not public; and when private networks are
refused, each new connection resolves and checks the name again and connects to
an address that check passed (pinned), so DNS rebinding cannot slip through. Through a proxy the proxy
resolves the name, on its own network, so the fetcher asks no DNS of a name
(``shop.example`` through a route need not resolve here): it checks only IP
literals, and refuses ``localhost`` and ``*.localhost``, the names every
resolver keeps on the machine itself, unless private networks are allowed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import select
import socket
import ssl
import time
import zlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import partial
from types import TracebackType
from typing import Any, Final

import httpcore
import httpx

from recrawl.clock import Clock, system_clock
from recrawl.config import CrawlSettings
from recrawl.crawl.safety import ResolutionFailed, UnsafeTarget, resolve_and_check

try:  # brotli >= 1.2: its output can be bounded
    import brotli as _brotli  # type: ignore[import-untyped]

    _BROTLI = hasattr(_brotli.Decompressor(), "can_accept_more_data")
except ImportError:  # pragma: no cover - brotli is installed with httpx[brotli]
    _BROTLI = False
_DECODE_ERRORS: Final[tuple[type[Exception], ...]] = (
    (zlib.error, _brotli.error) if _BROTLI else (zlib.error,)
)

__all__ = ["DEFAULT_USER_AGENT", "FetchRequest", "FetchResult", "Fetcher"]

log = logging.getLogger(__name__)


DEFAULT_USER_AGENT: Final = CrawlSettings().agent()
"""The ``User-Agent`` sent unless another is configured:
:data:`recrawl.config.DEFAULT_USER_AGENT` with this version."""

_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_PERMANENT: Final = frozenset({301, 308})
_CONDITIONAL: Final = ("if-none-match", "if-modified-since")
_CREDENTIALS: Final = ("authorization", "cookie")
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_HTTP11: Final = len(" HTTP/1.1\r\n")
_DNS_CACHE_S: Final = 60.0
_DNS_CACHE_SIZE: Final = 4096
_KEEPALIVE_S: Final = 5.0
_SWEEP_S: Final = 1.0
_ACCEPT_ENCODING: Final = "gzip, deflate, br" if _BROTLI else "gzip, deflate"
_INFLATE_STEP: Final = 1 << 20
_SENT_EVENTS: Final = frozenset(
    {"http11.send_request_headers.started", "http2.send_request_headers.started"}
)


@dataclass(frozen=True)
class FetchRequest:
    """One page to fetch.

    ``headers`` are extra request headers, typically the plan's conditional
    ones (``If-None-Match``, ``If-Modified-Since``); ``route`` names the proxy
    route (``""``: direct); ``site`` and ``page_type`` are carried through to
    the observation. ``before_hop``, when given, is awaited with the target
    URL before each redirect hop: a hop is a request to its site like any
    other, and the crawl holds it to the site's spacing (Crawl-delay
    included); the time it waits is not counted in ``latency_ms``.
    """

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    route: str = ""
    site: str = ""
    page_type: str = ""
    before_hop: Callable[[str], Awaitable[None]] | None = None


@dataclass
class FetchResult:
    """What a fetch got, and what it cost.

    ``status`` is the last response's status (None when no response came),
    ``error`` one short word (see the module docstring) or None. ``headers``
    are the final response's, names lower-case; ``body`` is decompressed and
    empty when ``error`` is set. ``bytes_sent`` / ``bytes_received`` are wire
    bytes summed over every hop; ``latency_ms`` is the elapsed real time of the
    whole chain (less any wait before a hop), milliseconds; ``started_at`` is the clock's time at the start,
    unix seconds. ``moved_to`` is the final URL when the first hop was a
    permanent redirect (301/308) and the chain ended in a response;
    ``redirects`` lists every ``(status, target URL)`` hop.
    """

    request: FetchRequest
    final_url: str
    status: int | None
    error: str | None
    headers: dict[str, str]
    body: bytes
    content_type: str
    bytes_sent: int
    bytes_received: int
    latency_ms: float
    started_at: float
    route: str
    conditional: bool
    moved_to: str | None = None
    redirects: list[tuple[int, str]] = field(default_factory=list)

    def observation(
        self,
        *,
        record_hash: str | None = None,
        record: Mapping[str, Any] | None = None,
        title: str | None = None,
        body_excerpt: str | None = None,
        credits: float | None = None,
    ) -> dict[str, Any]:
        """This fetch as a raw observation for
        :func:`~recrawl.observe.observation.parse_observation`.

        None values (and an empty ``site`` / ``page_type``) are left out;
        ``moved_to`` appears only when set.
        """
        req = self.request
        raw: dict[str, Any] = {
            "url": req.url,
            "fetched_at": self.started_at,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "latency_ms": self.latency_ms,
            "route": self.route,
            "conditional": self.conditional,
        }
        if req.site:
            raw["site"] = req.site
        if req.page_type:
            raw["page_type"] = req.page_type
        optional = {
            "status": self.status,
            "error": self.error,
            "etag": self.headers.get("etag"),
            "last_modified": self.headers.get("last-modified"),
            "record_hash": record_hash,
            "record": record,
            "title": title,
            "body_excerpt": body_excerpt,
            "credits": credits,
            "moved_to": self.moved_to,
        }
        for key, value in optional.items():
            if value is not None:
                raw[key] = value
        return raw


class _TooLarge(Exception):
    """The body passed the limit (internal: becomes error ``too_large``)."""


class _Undecodable(Exception):
    """A body that does not decompress (internal: error ``decoding``)."""


class _Inflater:
    """One content coding's decoder whose output is bounded: :meth:`feed` never
    produces more than one byte past ``limit``, so a compression bomb costs at
    most the limit in memory, whatever it inflates to.

    ``gzip`` / ``x-gzip``, ``deflate`` (zlib-wrapped, or raw as some servers
    send it) and ``br``. Raises :class:`_TooLarge` once its output passes
    ``limit`` in all (memory: what it produced, plus one step of at most
    1 MiB), :class:`_Undecodable` for data that is not of its coding
    or (at :meth:`finish`) a stream that stopped before its end.
    """

    def __init__(self, coding: str, limit: int) -> None:
        self.coding = coding
        self.limit = limit
        self.out = 0
        self.fed = False
        self._z: Any = None
        self._br: Any = None
        if coding == "br":
            self._br = _brotli.Decompressor()
        else:
            self._z = zlib.decompressobj(31 if coding != "deflate" else zlib.MAX_WBITS)

    def _room(self) -> int:
        """How much the next step may produce: one byte more than allowed (enough
        to tell), in steps of at most :data:`_INFLATE_STEP`."""
        return min(self.limit - self.out + 1, _INFLATE_STEP)

    def _count(self, data: bytes) -> bytes:
        self.out += len(data)
        if self.out > self.limit:
            raise _TooLarge
        return data

    def feed(self, data: bytes) -> list[bytes]:
        if not data:
            return []
        self.fed = True
        room = self._room()
        try:
            if self._br is not None:
                parts = [self._count(self._br.process(data, output_buffer_limit=room))]
                while not self._br.can_accept_more_data():
                    room = self._room()
                    parts.append(self._count(self._br.process(b"", output_buffer_limit=room)))
                return parts
            if self._z.eof:  # bytes after the end of the stream: dropped, as zlib does
                return []
            try:
                out = self._z.decompress(data, room)
            except zlib.error:
                if self.coding != "deflate" or self.out or self._z.unused_data:
                    raise
                self._z = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate
                out = self._z.decompress(data, room)
            parts = [self._count(out)]
            while self._z.unconsumed_tail and not self._z.eof:
                room = self._room()
                parts.append(self._count(self._z.decompress(self._z.unconsumed_tail, room)))
            return parts
        except _DECODE_ERRORS as exc:
            raise _Undecodable(str(exc)) from exc

    def finish(self) -> None:
        """:class:`_Undecodable` if the stream stopped before its end (its
        output was all given by :meth:`feed`, step by step)."""
        if not self.fed:
            return
        done = self._br.is_finished() if self._br is not None else self._z.eof
        if not done:
            raise _Undecodable(f"{self.coding} stream ended early")


def _inflaters(content_encoding: str, limit: int) -> list[_Inflater]:
    """The decoders for a ``Content-Encoding`` value, in the order to apply them
    (the last coding applied first undone); unknown codings are passed through,
    as httpx does."""
    known = {"gzip", "x-gzip", "deflate"} | ({"br"} if _BROTLI else set())
    codings = [c.strip().lower() for c in content_encoding.split(",")]
    return [_Inflater(c, limit) for c in reversed(codings) if c in known]


class _Client(httpx.AsyncClient):
    """An httpx client that leaves ``Location`` alone: redirects are followed
    by hand, and httpx's own reading of the next request would turn a response
    with a bad ``Location`` into an exception, losing its status."""

    def _build_redirect_request(  # type: ignore[override]
        self, request: httpx.Request, response: httpx.Response
    ) -> None:
        return None


def _error_word(exc: BaseException) -> str:
    """The short ``error`` word for an exception raised while fetching."""
    if isinstance(exc, UnsafeTarget):
        return "unsafe_target"
    if isinstance(exc, ResolutionFailed):
        return "dns"
    if isinstance(exc, httpx.ConnectError):
        cause: BaseException | None = exc
        while cause is not None:  # httpx → httpcore → ssl / socket: look down the chain
            if isinstance(cause, ssl.SSLError):
                return "tls"
            if isinstance(cause, socket.gaierror):
                return "dns"
            cause = cause.__cause__ or cause.__context__
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return "timeout"
    if isinstance(exc, httpx.DecodingError | _Undecodable):
        return "decoding"
    if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return "bad_url"
    if isinstance(exc, httpx.ProxyError):
        return "proxy"
    if isinstance(exc, httpx.LocalProtocolError | UnicodeError):
        return "bad_request"
    return "connection_reset"


def _request_bytes(request: httpx.Request, via_proxy: bool) -> int:
    """Wire size of ``request``'s head (HTTP/1.1 framing) plus its body."""
    url = request.url
    target = len(str(url)) if via_proxy else len(url.raw_path)
    size = len(request.method) + 1 + target + _HTTP11 + 2
    for name, value in request.headers.raw:
        size += len(name) + len(value) + 4
    content = request.headers.get("content-length")
    return size + (int(content) if content and content.isdigit() else 0)


def _response_head_bytes(response: httpx.Response) -> int:
    """Wire size of ``response``'s status line and headers (HTTP/1.1 framing)."""
    size = 15 + len(response.reason_phrase)  # "HTTP/1.1 200 " + reason + CRLF
    for name, value in response.headers.raw:
        size += len(name) + len(value) + 4
    return size + 2


_Key = tuple[bytes, bytes, int]
_MAX_IDLE_ORIGINS: Final = 1000


class _Origin:
    """One origin's connection pool and how many requests it is serving."""

    __slots__ = ("busy", "idle_since", "transport")

    def __init__(self, transport: httpx.AsyncHTTPTransport) -> None:
        self.transport = transport
        self.busy = 0
        self.idle_since = 0.0


class _Released(httpx.AsyncByteStream):
    """A response body stream that calls ``release`` once, when it is closed."""

    __slots__ = ("_release", "_stream")

    def __init__(self, stream: httpx.AsyncByteStream, release: Callable[[], None]) -> None:
        self._stream = stream
        self._release: Callable[[], None] | None = release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()


def _readable(sock: socket.socket | None) -> bool:
    """Whether ``sock`` has data (or an end of stream) waiting: what httpcore
    asks of an idle connection to tell that the server closed it."""
    fd = -1 if sock is None else sock.fileno()
    if fd < 0:
        return True
    if not hasattr(select, "poll"):  # pragma: no cover - not on Linux
        return bool(select.select([fd], [], [], 0)[0])
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    return bool(poll.poll(0))


class _Stream(httpcore.AsyncNetworkStream):
    """A network stream that keeps its socket at hand.

    httpcore asks every idle connection of a pool whether it is readable each
    time it assigns a request; anyio answers by building all of a socket's
    attributes (a ``getpeername`` call among them) to return one. This asks
    the socket directly.
    """

    __slots__ = ("_inner", "_socket")

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: socket.socket | None = inner.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _Stream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return _readable(self._socket)
        if info == "socket":
            return self._socket
        return self._inner.get_extra_info(info)


_Resolve = Callable[[str, int], Awaitable[list[str]]]


class _Backend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, its streams wrapped in :class:`_Stream`.

    With ``resolve`` (direct routes when private networks are refused) a host
    name is resolved and checked here, at connection time, and the connection
    made to a checked address, the first that answers: the address connected
    to is always one the safety check passed, whatever the name resolves to
    a moment later (DNS rebinding).
    """

    def __init__(
        self, inner: httpcore.AsyncNetworkBackend, resolve: _Resolve | None = None
    ) -> None:
        self._inner = inner
        self._resolve = resolve

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        if self._resolve is None:
            stream = await self._inner.connect_tcp(
                host, port, timeout, local_address, socket_options
            )
            return _Stream(stream)
        addresses = await self._resolve(host, port)
        failure: BaseException | None = None
        for address in addresses:
            try:
                stream = await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout, OSError) as exc:
                failure = exc
                continue
            return _Stream(stream)
        assert failure is not None  # resolve returns at least one address
        raise failure

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:  # pragma: no cover - no unix sockets here
        return await self._inner.connect_unix_socket(path, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:  # pragma: no cover - no retries here
        await self._inner.sleep(seconds)


def _origin_transport(
    limits: httpx.Limits, proxy: str | None, resolve: _Resolve | None = None
) -> httpx.AsyncHTTPTransport:
    """One origin's pooled transport (through ``proxy``, if any; connecting to
    addresses ``resolve`` returns, if given: see :class:`_Backend`)."""
    transport = httpx.AsyncHTTPTransport(limits=limits, proxy=proxy, trust_env=False)
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore.AsyncNetworkBackend):  # httpcore 1.x
        pool._network_backend = _Backend(backend, resolve)  # type: ignore[union-attr]
    elif resolve is not None:  # pragma: no cover - never connect unchecked
        raise RuntimeError("cannot pin connections to checked addresses with this httpcore")
    return transport


class _PerOrigin(httpx.AsyncBaseTransport):
    """A route's transport: one small connection pool per origin.

    httpcore's pool looks at every connection it holds for every request it
    assigns, so one big pool for a crawl of many sites costs time in proportion
    to its size; small pools, one per ``(scheme, host, port)``, each of at most
    ``per_origin`` connections, do not. ``total`` bounds the requests in flight
    over all origins (a request waits for a slot up to the pool timeout, then
    fails with :class:`httpx.PoolTimeout`). An origin's pool is created on its
    first request and closed once it has been idle for the keep-alive expiry,
    or, least recently used first, while more than ``max_idle`` origins are idle.
    """

    def __init__(
        self,
        proxy: str | None,
        *,
        per_origin: int,
        total: int,
        max_idle: int = _MAX_IDLE_ORIGINS,
        resolve: _Resolve | None = None,
    ) -> None:
        self._proxy = proxy
        self._resolve = resolve
        self._limits = httpx.Limits(
            max_connections=per_origin,
            max_keepalive_connections=per_origin,
            keepalive_expiry=_KEEPALIVE_S,
        )
        self._slots = asyncio.Semaphore(total)
        self._max_idle = max_idle
        self._origins: OrderedDict[_Key, _Origin] = OrderedDict()
        self._next_sweep = 0.0
        self._closed = False

    @property
    def origins(self) -> int:
        """How many origins have a pool open."""
        return len(self._origins)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        key = (url.raw_scheme, url.raw_host, url.port or _DEFAULT_PORTS.get(url.scheme, 0))
        now = time.monotonic()
        if now >= self._next_sweep:
            await self._sweep(now)
        origin = self._origins.get(key)
        if origin is None:
            if self._closed:
                raise RuntimeError("this Fetcher is closed")
            origin = _Origin(_origin_transport(self._limits, self._proxy, self._resolve))
            self._origins[key] = origin
            if len(self._origins) > self._max_idle:
                self._next_sweep = 0.0
        else:
            self._origins.move_to_end(key)
        origin.busy += 1
        try:
            if self._slots.locked():
                timeout = request.extensions.get("timeout", {}).get("pool")
                try:
                    await asyncio.wait_for(self._slots.acquire(), timeout)
                except TimeoutError:
                    raise httpx.PoolTimeout(
                        "no connection slot free in time", request=request
                    ) from None
            else:
                await self._slots.acquire()
        except BaseException:
            origin.busy -= 1
            origin.idle_since = time.monotonic()
            raise
        try:
            response = await origin.transport.handle_async_request(request)
        except BaseException:
            self._release(origin)
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _Released(response.stream, partial(self._release, origin))
        return response

    def _release(self, origin: _Origin) -> None:
        origin.busy -= 1
        origin.idle_since = time.monotonic()
        self._slots.release()

    async def _sweep(self, now: float) -> None:
        """Close the pools of origins idle past the keep-alive expiry, and the
        least recently used idle ones beyond ``max_idle``."""
        self._next_sweep = now + _SWEEP_S
        idle = [k for k, o in self._origins.items() if o.busy == 0]  # oldest use first
        excess = len(idle) - self._max_idle
        closing: list[_Origin] = []
        for i, key in enumerate(idle):
            origin = self._origins[key]
            if i < excess or now - origin.idle_since > _KEEPALIVE_S:
                closing.append(self._origins.pop(key))
        for origin in closing:
            await origin.transport.aclose()

    async def aclose(self) -> None:
        self._closed = True
        origins, self._origins = list(self._origins.values()), OrderedDict()
        for origin in origins:
            await origin.transport.aclose()


class Fetcher:
    """Fetch pages politely: pooled connections per route and origin, hand-followed
    redirects, a safety check before every hop, wire bytes counted.

    ``timeout_s`` bounds each hop as a whole (DNS, connect, send, headers and
    body together, however slowly they trickle), seconds;
    ``max_body_bytes`` bounds a body, decompressed or not, bytes. ``routes``
    maps a route name to an HTTP proxy URL (``""``, None or a missing name:
    direct). ``allow_private_networks`` lets targets on private and loopback
    addresses through (tests, intranet crawls). Each route keeps one small
    pool per origin (scheme, host, port) of at most ``connections_per_origin``
    connections (capped at ``max_connections``); ``max_connections`` bounds the
    requests in flight over all origins of a route (a request waits for a slot
    up to ``timeout_s``, then fails as a ``timeout``). An origin's idle
    connections are kept 5 s; the pools of at most 1000 idle origins are kept,
    the least recently used closed first. ``clock`` (unix seconds) stamps
    ``started_at``; latency is measured on the real monotonic clock.

    Successful safety checks of host names are cached for a minute (IP
    literals need no DNS), and the environment's proxy variables are ignored:
    a route is the only way to a proxy.
    """

    def __init__(
        self,
        *,
        user_agent: str = DEFAULT_USER_AGENT,
        timeout_s: float = 30.0,
        max_body_bytes: int = 16 * 1024 * 1024,
        routes: Mapping[str, str | None] | None = None,
        allow_private_networks: bool = False,
        max_redirects: int = 5,
        max_connections: int = 100,
        connections_per_origin: int = 8,
        clock: Clock = system_clock,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if max_body_bytes < 0 or max_redirects < 0 or max_connections < 1:
            raise ValueError("max_body_bytes and max_redirects must be >= 0, max_connections >= 1")
        if connections_per_origin < 1:
            raise ValueError(f"connections_per_origin must be >= 1, got {connections_per_origin}")
        self.user_agent = user_agent
        self.timeout_s = float(timeout_s)
        self.max_body_bytes = max_body_bytes
        self.routes: dict[str, str | None] = dict(routes or {})
        self.allow_private_networks = allow_private_networks
        self.max_redirects = max_redirects
        self.max_connections = max_connections
        self.connections_per_origin = min(connections_per_origin, max_connections)
        self.clock = clock
        self._clients: dict[str, httpx.AsyncClient] = {}
        self._checked: dict[tuple[str, int], float] = {}
        self._closed = False

    def _client(self, proxy: str) -> httpx.AsyncClient:
        client = self._clients.get(proxy)
        if client is None:
            if self._closed:
                raise RuntimeError("this Fetcher is closed")
            transport = _PerOrigin(
                proxy or None,
                per_origin=self.connections_per_origin,
                total=self.max_connections,
                resolve=None if proxy or self.allow_private_networks else self._pinned,
            )
            client = _Client(
                transport=transport,
                follow_redirects=False,
                timeout=httpx.Timeout(self.timeout_s),
                headers={"User-Agent": self.user_agent, "Accept-Encoding": _ACCEPT_ENCODING},
                trust_env=False,
            )
            self._clients[proxy] = client
        return client

    async def _pinned(self, host: str, port: int) -> list[str]:
        """The checked addresses a direct connection to ``host`` may use."""
        return await resolve_and_check(host, port, allow_private=self.allow_private_networks)

    async def _check(self, host: str, port: int, via_proxy: bool = False) -> None:
        if via_proxy and not _is_ip_literal(host):
            name = host.lower().rstrip(".")
            if not self.allow_private_networks and (
                name == "localhost" or name.endswith(".localhost")
            ):
                raise UnsafeTarget(host, "127.0.0.1")
            return  # the proxy resolves it, on its network
        key = (host, port)
        now = time.monotonic()
        if self._checked.get(key, 0.0) > now:
            return
        await resolve_and_check(host, port, allow_private=self.allow_private_networks)
        if len(self._checked) >= _DNS_CACHE_SIZE:
            self._checked.clear()
        self._checked[key] = now + _DNS_CACHE_S

    async def fetch(self, req: FetchRequest) -> FetchResult:
        """GET ``req.url``, following redirects; never raises for network trouble."""
        started_at = self.clock()
        t0 = time.perf_counter()
        proxy = self.routes.get(req.route) or ""
        client = self._client(proxy)
        via_proxy = bool(proxy)
        headers = dict(req.headers)
        conditional = any(name.lower() in _CONDITIONAL for name in headers)
        sent = received = 0
        status: int | None = None
        error: str | None = None
        final_headers: dict[str, str] = {}
        body = b""
        moved_to: str | None = None
        redirects: list[tuple[int, str]] = []
        url_text = req.url
        try:
            url = httpx.URL(req.url)
        except (httpx.InvalidURL, ValueError, TypeError):
            url, error = None, "bad_url"
        seen: set[str] = {str(url)} if url is not None else set()
        permanent = False
        waited = 0.0
        while url is not None:
            if redirects and req.before_hop is not None:
                w0 = time.perf_counter()
                await req.before_hop(url_text)
                waited += time.perf_counter() - w0
            if url.scheme not in _DEFAULT_PORTS or not url.host or not _valid_port(url.port):
                error = "bad_url"
                break
            request: httpx.Request | None = None
            response: httpx.Response | None = None
            events: set[str] = set()
            try:
                # the whole hop, not each read: a server that trickles its answer a
                # byte at a time never lets httpx's per-read timeout trip
                async with asyncio.timeout(self.timeout_s):
                    host = url.raw_host.decode("ascii")  # IDNA-encoded, as DNS wants it
                    await self._check(host, url.port or _DEFAULT_PORTS[url.scheme], via_proxy)
                    request = client.build_request("GET", url, headers=headers)
                    request.extensions["trace"] = partial(_trace, events)
                    response = await client.send(request, stream=True)
                    sent += _request_bytes(request, via_proxy)
                    received += _response_head_bytes(response)
                    status = response.status_code
                    location = response.headers.get("location")
                    if status in _REDIRECTS and location is not None:
                        await self._drain(response)
                        received += response.num_bytes_downloaded
                        try:
                            target = url.join(location).copy_with(fragment=None)
                        except (httpx.InvalidURL, ValueError):
                            error = "bad_url"
                            break
                        target_text = str(target)
                        redirects.append((status, target_text))
                        permanent = permanent or (len(redirects) == 1 and status in _PERMANENT)
                        if target_text in seen:
                            error = "redirect_loop"
                            break
                        if len(redirects) > self.max_redirects:
                            error = "too_many_redirects"
                            break
                        seen.add(target_text)
                        if (target.scheme, target.host, target.port) != (
                            url.scheme,
                            url.host,
                            url.port,
                        ):
                            headers = {
                                k: v for k, v in headers.items() if k.lower() not in _CREDENTIALS
                            }
                        url, url_text = target, target_text
                        continue
                    final_headers = dict(response.headers.items())
                    if permanent:
                        moved_to = url_text
                    body = await self._read(response)
                    received += response.num_bytes_downloaded
                    break
            except _TooLarge:
                error = "too_large"
                if response is not None:
                    received += response.num_bytes_downloaded
                break
            except Exception as exc:  # never raise out of a fetch: name what happened
                error = _error_word(exc)
                if not isinstance(
                    exc, httpx.HTTPError | OSError | UnicodeError | UnsafeTarget | _Undecodable
                ):
                    log.warning("fetching %s: unexpected %r", url_text, exc)
                if request is not None and response is None and _was_sent(exc, events):
                    sent += _request_bytes(request, via_proxy)
                if response is not None:
                    received += response.num_bytes_downloaded
                break
            finally:
                if response is not None:
                    await response.aclose()
        return FetchResult(
            request=req,
            final_url=url_text,
            status=status,
            error=error,
            headers=final_headers,
            body=b"" if error else body,
            content_type=final_headers.get("content-type", ""),
            bytes_sent=sent,
            bytes_received=received,
            latency_ms=(time.perf_counter() - t0 - waited) * 1000.0,
            started_at=started_at,
            route=req.route,
            conditional=conditional,
            moved_to=moved_to,
            redirects=redirects,
        )

    async def _read(self, response: httpx.Response) -> bytes:
        """The decompressed body; :class:`_TooLarge` past ``max_body_bytes``
        on the wire or decompressed (never inflating more than that),
        :class:`_Undecodable` when it does not decompress."""
        limit = self.max_body_bytes
        declared = response.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise _TooLarge
        stages = _inflaters(response.headers.get("content-encoding", ""), limit)
        chunks: list[bytes] = []
        size = 0
        async for raw in response.aiter_raw():
            if response.num_bytes_downloaded > limit:
                raise _TooLarge
            parts = [raw]
            for stage in stages:
                parts = [out for part in parts for out in stage.feed(part)]
            for part in parts:
                size += len(part)
                if size > limit:
                    raise _TooLarge
                if part:
                    chunks.append(part)
        for stage in stages:  # a stream cut short does not decompress
            stage.finish()
        return b"".join(chunks)

    async def _drain(self, response: httpx.Response) -> None:
        """Read and drop a redirect's body (raw, bounded) so the connection is reused."""
        async for _ in response.aiter_raw():
            if response.num_bytes_downloaded > self.max_body_bytes:
                raise _TooLarge

    async def aclose(self) -> None:
        """Close every route's connection pool."""
        self._closed = True
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    async def __aenter__(self) -> Fetcher:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _is_ip_literal(host: str) -> bool:
    """Whether ``host`` (as in a URL: IPv6 in brackets, maybe with a zone) is an IP address."""
    try:
        ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    return True


def _valid_port(port: int | None) -> bool:
    """Whether ``port`` (None: the scheme's) is one a connection can use."""
    return port is None or 0 < port < 65536


async def _trace(events: set[str], name: str, info: Mapping[str, Any]) -> None:
    """httpcore's trace callback: remember which steps of a request began."""
    events.add(name)


def _was_sent(exc: BaseException, events: AbstractSet[str] = frozenset()) -> bool:
    """Whether the request went out before ``exc`` (no: failed to connect);
    for a hop's own deadline, whether httpcore began sending it (``events``
    from :func:`_trace`)."""
    if isinstance(exc, TimeoutError):
        return not events.isdisjoint(_SENT_EVENTS)
    return not isinstance(
        exc,
        httpx.ConnectError
        | httpx.ConnectTimeout
        | httpx.PoolTimeout
        | httpx.LocalProtocolError
        | UnsafeTarget,
    )

"""A synthetic web on loopback: sites whose pages change at known times.

:class:`SimWeb` serves each :class:`SiteSpec` from its own
:class:`http.server.ThreadingHTTPServer` on ``127.0.0.1`` (a port the OS picks),
so a crawler under test makes real HTTP requests. A site is named by its
``host:port`` (``"127.0.0.1:41234"``) once started; its pages are
``http://127.0.0.1:41234/p/<i>`` for ``i`` in ``range(n_pages)``.

Time is an injected :data:`~recrawl.clock.Clock`. Every decision the server
makes (which version a page is at, whether a hostile window is open, the
``Last-Modified`` and ``Date`` headers) uses that clock's **virtual** unix
seconds, so with a :class:`~recrawl.clock.ScaledClock` a month of changes runs
in minutes. All times in this module are virtual unix seconds unless named
``real``; rates are **changes per day**; sizes are **bytes**.

Everything random about a site except the ad slot (which changes on every load,
as ads do) is drawn from ``numpy.random.default_rng([seed, site_index])`` when
the :class:`SimWeb` is built: per-page change rates (lognormal around
``rate_per_day``), Poisson change times over ``[origin, origin + horizon_s]``,
prices and padding. Two webs with the same specs, seed and origin have the same
change times. After the horizon pages stop changing.

What a site answers, in the order it checks:

* ``/robots.txt``: ``SiteSpec.robots`` as ``text/plain`` (404 when None). Never
  blocked by a hostile window, so robots handling can be tested on its own.
* inside a hostile window ``(start, end, kind)``: ``"429"`` → 429 with
  ``Retry-After: <retry_after_s>``; ``"403"`` → 403; ``"challenge"`` → 200 with a
  captcha page titled *Are you a robot?*.
* ``always_500`` → 500, ``gone`` → 404, ``moved`` → 301 to the new path (a normal
  page), ``soft_404`` → 200 with a *Page not found* page.
* ``/p/<i>``: the page at its current version, with ``ETag: "<i>-<version>"``
  and ``Last-Modified`` of its last change; ``If-None-Match`` (or, without it,
  ``If-Modified-Since``) that still matches gets 304.
* ``/private/<anything>``: 200, a page that never changes (robots.txt usually
  disallows it, so a crawler that ignores robots.txt is visible in the log).
* anything else: 404.

Ground truth for tests and benchmarks: :attr:`SimWeb.request_log` (every
request as a :class:`RequestRecord`), :meth:`SimWeb.change_times`,
:meth:`SimWeb.all_change_times` and :meth:`SimWeb.freshness_from_log`.

>>> from recrawl.clock import ManualClock
>>> import urllib.request
>>> clock = ManualClock(1_700_000_000.0)
>>> with SimWeb([SiteSpec("shop", n_pages=3)], clock=clock, seed=1) as web:
...     url = web.urls()[0]
...     with urllib.request.urlopen(url) as resp:
...         status, etag = resp.status, resp.headers["ETag"]
>>> status, etag
(200, '"0-0"')
>>> [(r.path, r.status, r.version) for r in web.request_log]
[('/p/0', 200, 0)]
"""

from __future__ import annotations

import bisect
import contextlib
import json
import random
import socket
import socketserver
import sys
import threading
import time
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Self, get_args
from urllib.parse import urlsplit

import numpy as np

from recrawl._exceptions import ConfigError, NotFound
from recrawl.clock import Clock, system_clock

__all__ = [
    "DEFAULT_ROBOTS",
    "HostileKind",
    "RequestLog",
    "RequestRecord",
    "SimWeb",
    "SiteSpec",
    "load_scenario",
    "write_ground_truth",
]

HostileKind = Literal["challenge", "429", "403"]
"""How a site pushes back inside a hostile window."""

Served = Literal[
    "page",
    "robots",
    "private",
    "error_500",
    "gone",
    "moved",
    "soft_404",
    "challenge",
    "429",
    "403",
    "not_found",
]
"""What a request was answered with (:attr:`RequestRecord.served`)."""

DEFAULT_ROBOTS: Final = "User-agent: *\nDisallow: /private/\n"
"""The robots.txt a site serves unless its spec says otherwise."""

_DAY_S: Final = 86400.0
_HOSTILE_KINDS: Final = frozenset(get_args(HostileKind))
_LOREM: Final = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua enim ad minim veniam quis nostrud "
    "exercitation ullamco laboris nisi aliquip ex ea commodo consequat duis aute irure "
    "in reprehenderit voluptate velit esse cillum fugiat nulla pariatur excepteur sint "
    "occaecat cupidatat non proident sunt culpa qui officia deserunt mollit anim id est"
)
_WORDS: Final = _LOREM.split()
_CORPUS_CHARS: Final = 24_000
_STOCK: Final = ("in stock", "low stock", "out of stock")


@dataclass
class SiteSpec:
    """One simulated site.

    ``name`` is a label (unique within a :class:`SimWeb`); the site's address is
    given when the web starts. ``n_pages`` pages ``/p/0`` … each change as a
    Poisson process whose rate (changes per day) is drawn per page from a
    lognormal with mean ``rate_per_day`` and log-sd ``rate_sigma`` (0: every page
    at exactly ``rate_per_day``).

    Faults, by path (a path may be a ``/p/<i>`` page, which then stops being a
    normal page, or any other path): ``always_500`` answer 500, ``gone`` 404,
    ``soft_404`` 200 with a not-found page, ``moved`` maps an old path to the
    ``/p/<i>`` page it answers 301 for. ``hostile`` lists windows
    ``(start_s, end_s, kind)`` in **seconds after the web's origin** (virtual
    time), half-open, during which every request except ``/robots.txt`` gets
    ``kind``; a 429 carries ``Retry-After: retry_after_s`` (virtual seconds).
    ``robots`` is the robots.txt body (None: 404). ``n_private`` pages
    ``/private/<j>`` are listed by ``SimWeb.urls(private=True)``; any path under
    ``/private/`` answers 200. Page bodies are ``page_bytes`` long (a range, drawn
    per page), ad slot included.
    """

    name: str
    n_pages: int = 100
    rate_per_day: float = 1.0
    rate_sigma: float = 1.0
    robots: str | None = DEFAULT_ROBOTS
    always_500: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    moved: dict[str, str] = field(default_factory=dict)
    soft_404: list[str] = field(default_factory=list)
    hostile: list[tuple[float, float, str]] = field(default_factory=list)
    retry_after_s: int = 60
    n_private: int = 3
    page_bytes: tuple[int, int] = (5000, 9000)

    def __post_init__(self) -> None:
        if self.n_pages < 0 or self.n_private < 0:
            raise ConfigError(f"site {self.name!r}: page counts must be non-negative")
        if not (self.rate_per_day >= 0 and self.rate_sigma >= 0):
            raise ConfigError(f"site {self.name!r}: rate_per_day and rate_sigma must be >= 0")
        if self.retry_after_s < 0:
            raise ConfigError(f"site {self.name!r}: retry_after_s must be >= 0")
        low, high = self.page_bytes
        if not 1000 <= low <= high:
            raise ConfigError(
                f"site {self.name!r}: page_bytes must be (low, high), 1000 <= low <= high"
            )
        seen: set[str] = set()
        for path in [*self.always_500, *self.gone, *self.soft_404, *self.moved]:
            if not path.startswith("/") or path == "/robots.txt":
                raise ConfigError(f"site {self.name!r}: bad fault path {path!r}")
            if path in seen:
                raise ConfigError(f"site {self.name!r}: {path!r} is listed under two faults")
            seen.add(path)
        for old, new in self.moved.items():
            i = _page_index(new)
            if i is None or i >= self.n_pages or new in seen:
                raise ConfigError(
                    f"site {self.name!r}: {old!r} moves to {new!r}, which is not a normal page"
                )
        for start, end, kind in self.hostile:
            if kind not in _HOSTILE_KINDS:
                raise ConfigError(
                    f"site {self.name!r}: hostile kind {kind!r} not in {sorted(_HOSTILE_KINDS)}"
                )
            if not start < end:
                raise ConfigError(f"site {self.name!r}: hostile window ({start}, {end}) is empty")

    @property
    def fault_paths(self) -> set[str]:
        """Every path listed under a fault."""
        return {*self.always_500, *self.gone, *self.soft_404, *self.moved}


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request a :class:`SimWeb` answered.

    ``t`` is the virtual time it arrived (unix seconds on the web's clock),
    ``real`` the real unix time. ``site`` is ``"127.0.0.1:PORT"``, ``path`` the
    path without the query. ``status`` is what was sent; ``served`` says what
    (``"page"``, ``"robots"``, ``"private"``, ``"error_500"``, ``"gone"``,
    ``"moved"``, ``"soft_404"``, ``"challenge"``, ``"429"``, ``"403"``,
    ``"not_found"``). ``version`` is the page version the answer stands for
    (200 or 304 of a ``/p/<i>`` page, 0 for private pages; else None).
    ``if_none_match`` and ``user_agent`` are the request headers (None when
    absent). ``retry_after_until`` is ``t + Retry-After`` on a 429, else None.
    """

    t: float
    real: float
    site: str
    path: str
    status: int
    served: Served
    version: int | None = None
    if_none_match: str | None = None
    user_agent: str | None = None
    retry_after_until: float | None = None
    method: str = "GET"

    @property
    def url(self) -> str:
        """``http://<site><path>``."""
        return f"http://{self.site}{self.path}"


class RequestLog:
    """A thread-safe, append-only list of :class:`RequestRecord`.

    Iterating, indexing and ``len`` read a snapshot; the server appends a
    request's record before it sends the response, so a client that has its
    answer finds the record already here.
    """

    def __init__(self, records: Iterable[RequestRecord] = ()) -> None:
        self._lock = threading.Lock()
        self._records = list(records)

    def append(self, record: RequestRecord) -> None:
        """Add one record."""
        with self._lock:
            self._records.append(record)

    def snapshot(self) -> list[RequestRecord]:
        """A copy of the records so far, in arrival order."""
        with self._lock:
            return list(self._records)

    def clear(self) -> None:
        """Forget every record."""
        with self._lock:
            self._records.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter(self.snapshot())

    def __getitem__(self, index: int) -> RequestRecord:
        with self._lock:
            return self._records[index]


def _page_index(path: str) -> int | None:
    """``i`` for ``/p/<i>`` (canonical decimal), else None."""
    if not path.startswith("/p/"):
        return None
    tail = path[3:]
    if not tail.isdigit() or (len(tail) > 1 and tail[0] == "0"):
        return None
    return int(tail)


def _http_date(t: float) -> str:
    return formatdate(t, usegmt=True)


def _etag_matches(header: str, etag: str) -> bool:
    if header.strip() == "*":
        return True
    return any(tag.strip().removeprefix("W/") == etag for tag in header.split(","))


@dataclass
class _Answer:
    status: int
    served: Served
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    version: int | None = None
    retry_after_until: float | None = None


class _Site:
    """One site's precomputed state; :meth:`answer` decides every response."""

    def __init__(self, spec: SiteSpec, index: int, seed: int, origin: float, horizon_s: float):
        self.spec = spec
        self.origin = origin
        self.host = ""
        rng = np.random.default_rng([seed, index])
        n = spec.n_pages
        sigma = spec.rate_sigma
        self.rates = (
            spec.rate_per_day * rng.lognormal(-(sigma**2) / 2, sigma, n)
            if sigma > 0
            else np.full(n, spec.rate_per_day)
        )
        counts = rng.poisson(self.rates * horizon_s / _DAY_S)
        offsets = rng.uniform(0.0, horizon_s, int(counts.sum()))
        self.changes: list[np.ndarray] = []
        start = 0
        for k in counts.tolist():
            times = np.sort(offsets[start : start + k]) + origin
            times.setflags(write=False)
            self.changes.append(times)
            start += k
        self._change_lists = [c.tolist() for c in self.changes]
        self._base_cents = rng.integers(500, 50_000, n).tolist()
        self._stock0 = rng.integers(0, len(_STOCK), n).tolist()
        self._corpus = " ".join(rng.choice(np.array(_WORDS), _CORPUS_CHARS // 4).tolist())[
            :_CORPUS_CHARS
        ]
        low, high = spec.page_bytes
        self._lengths = rng.integers(low, high + 1, n).tolist()
        self._pad_at = rng.integers(0, max(1, len(self._corpus) - high), n).tolist()
        self._ads = random.Random(int(rng.integers(0, 2**63)))
        self._faults: dict[str, Served] = {}
        for path in spec.always_500:
            self._faults[path] = "error_500"
        for path in spec.gone:
            self._faults[path] = "gone"
        for path in spec.soft_404:
            self._faults[path] = "soft_404"
        for path in spec.moved:
            self._faults[path] = "moved"
        self._hostile = [(origin + s, origin + e, kind) for s, e, kind in spec.hostile]
        self._robots = None if spec.robots is None else spec.robots.encode()

    def version_at(self, i: int, t: float) -> int:
        """Changes of page ``i`` at or before ``t``."""
        return bisect.bisect_right(self._change_lists[i], t)

    def answer(self, path: str, t: float, inm: str | None, ims: str | None) -> _Answer:
        if path == "/robots.txt":
            if self._robots is None:
                return _Answer(
                    404, "not_found", b"no robots.txt\n", [("Content-Type", "text/plain")]
                )
            return _Answer(
                200, "robots", self._robots, [("Content-Type", "text/plain; charset=utf-8")]
            )
        for start, end, kind in self._hostile:
            if start <= t < end:
                return self._hostile_answer(kind, t)
        fault = self._faults.get(path)
        if fault is not None:
            return self._fault_answer(fault, path)
        i = _page_index(path)
        if i is not None and i < self.spec.n_pages:
            return self._page(i, t, inm, ims)
        if path.startswith("/private/"):
            body = _html(f"Private {path[9:]}", "<p>Members only.</p>")
            return _Answer(
                200, "private", body, [("Content-Type", "text/html; charset=utf-8")], version=0
            )
        return _Answer(
            404,
            "not_found",
            _html("Not Found", "<p>No such page.</p>"),
            [("Content-Type", "text/html; charset=utf-8")],
        )

    def _hostile_answer(self, kind: str, t: float) -> _Answer:
        html = [("Content-Type", "text/html; charset=utf-8")]
        if kind == "429":
            wait = self.spec.retry_after_s
            return _Answer(
                429,
                "429",
                _html("Too Many Requests", "<p>Slow down.</p>"),
                [*html, ("Retry-After", str(wait))],
                retry_after_until=t + wait,
            )
        if kind == "403":
            return _Answer(403, "403", _html("Access denied", "<p>Forbidden.</p>"), html)
        captcha = (
            '<form class="captcha"><p>Please confirm you are human.</p><input name="c"></form>'
        )
        return _Answer(200, "challenge", _html("Are you a robot?", captcha), html)

    def _fault_answer(self, fault: Served, path: str) -> _Answer:
        html = [("Content-Type", "text/html; charset=utf-8")]
        if fault == "error_500":
            return _Answer(500, fault, _html("Internal Server Error", "<p>Oops.</p>"), html)
        if fault == "gone":
            return _Answer(404, fault, _html("Not Found", "<p>No such page.</p>"), html)
        if fault == "moved":
            location = f"http://{self.host}{self.spec.moved[path]}"
            return _Answer(
                301,
                fault,
                _html("Moved", f'<a href="{location}">here</a>'),
                [*html, ("Location", location)],
            )
        body = _html(
            "Page not found",
            "<h1>Sorry, we couldn't find that item.</h1><p>It may have been removed.</p>",
        )
        return _Answer(200, "soft_404", body, html)

    def _page(self, i: int, t: float, inm: str | None, ims: str | None) -> _Answer:
        v = self.version_at(i, t)
        last = self._change_lists[i][v - 1] if v else self.origin
        etag = f'"{i}-{v}"'
        headers = [("ETag", etag), ("Last-Modified", _http_date(last))]
        if inm is not None:
            if _etag_matches(inm, etag):
                return _Answer(304, "page", headers=headers, version=v)
        elif ims is not None and _not_modified_since(ims, last):
            return _Answer(304, "page", headers=headers, version=v)
        cents = self._base_cents[i] + (i * 7919 + v * 104_729) % 9973 - 4986
        stock = _STOCK[(self._stock0[i] + v) % len(_STOCK)]
        ad = self._ads.getrandbits(48)
        head = (
            f"<!doctype html><html><head><title>Item {i}</title></head><body>"
            f'<h1 class="name">Item {i}</h1><span class="price">{max(cents, 99) / 100:.2f}</span>'
            f'<span class="stock">{stock}</span><div class="ad">Sponsored offer #{ad:012x}</div>'
            '<div class="description"><p>'
        )
        tail = "</p></div></body></html>"
        fill = max(0, self._lengths[i] - len(head) - len(tail))
        at = self._pad_at[i]
        body = (head + self._corpus[at : at + fill] + tail).encode()
        return _Answer(
            200, "page", body, [("Content-Type", "text/html; charset=utf-8"), *headers], version=v
        )


def _not_modified_since(ims: str, last: float) -> bool:
    try:
        since = parsedate_to_datetime(ims).timestamp()
    except (TypeError, ValueError, IndexError):
        return False
    return int(last) <= since


def _html(title: str, inner: str) -> bytes:
    return f"<!doctype html><html><head><title>{title}</title></head><body>{inner}</body></html>".encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a crawl stopped, a timeout) is not an error of
        the web's: only anything else is printed, as the standard server does."""
        exc = sys.exc_info()[1]
        if not isinstance(exc, ConnectionError):
            super().handle_error(request, client_address)

    def __init__(self, address: tuple[str, int], web: SimWeb, site: _Site) -> None:
        self.web = web
        self.site = site
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks up the host's FQDN, which can stall on DNS.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conns_lock:
            self._conns.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._conns_lock:
            self._conns.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Cut every open keep-alive connection (so a stopped web answers nothing)."""
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60
    # Headers and body go out in two writes; with Nagle on, each keep-alive
    # response would wait ~40 ms for the client's delayed ACK.
    disable_nagle_algorithm = True
    server: _Server

    def do_GET(self) -> None:
        self._respond(head_only=False)

    def do_HEAD(self) -> None:
        self._respond(head_only=True)

    def _respond(self, *, head_only: bool) -> None:
        web, site = self.server.web, self.server.site
        t = web.clock()
        real = time.time()
        path = urlsplit(self.path).path or "/"
        inm = self.headers.get("If-None-Match")
        answer = site.answer(path, t, inm, self.headers.get("If-Modified-Since"))
        web.request_log.append(
            RequestRecord(
                t=t,
                real=real,
                site=site.host,
                path=path,
                status=answer.status,
                served=answer.served,
                version=answer.version if answer.status in (200, 304) else None,
                if_none_match=inm,
                user_agent=self.headers.get("User-Agent"),
                retry_after_until=answer.retry_after_until,
                method=self.command,
            )
        )
        self.send_response(answer.status)
        for name, value in answer.headers:
            self.send_header(name, value)
        if answer.status != 304:
            self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        if not head_only and answer.status != 304:
            self.wfile.write(answer.body)

    def date_time_string(self, timestamp: float | None = None) -> str:
        return _http_date(self.server.web.clock() if timestamp is None else timestamp)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class SimWeb:
    """Several simulated sites, each on its own loopback port, on one virtual clock.

    ``clock`` gives virtual unix seconds (a :class:`~recrawl.clock.ScaledClock`
    to run days in seconds, a :class:`~recrawl.clock.ManualClock` to step).
    ``origin`` is the virtual time change schedules and hostile windows count
    from (default: ``clock()`` when the web is built); pages change over
    ``[origin, origin + horizon_s]`` and not after. ``seed`` fixes everything
    but the ad slots.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Addresses
    exist only once started; a stopped web is not restarted.
    """

    def __init__(
        self,
        sites: Sequence[SiteSpec],
        *,
        clock: Clock = system_clock,
        seed: int = 0,
        horizon_s: float = 30 * _DAY_S,
        origin: float | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        names = [s.name for s in sites]
        if len(set(names)) != len(names):
            raise ConfigError(f"site names must be unique, got {names}")
        if not horizon_s >= 0:
            raise ConfigError(f"horizon_s must be >= 0, got {horizon_s}")
        self.clock = clock
        self.seed = seed
        self.horizon_s = float(horizon_s)
        self.origin = float(clock() if origin is None else origin)
        self.host = host
        self.request_log = RequestLog()
        self._sites = [
            _Site(spec, k, seed, self.origin, self.horizon_s) for k, spec in enumerate(sites)
        ]
        self._by_key: dict[str, _Site] = {s.spec.name: s for s in self._sites}
        self._servers: list[_Server] = []
        self._threads: list[threading.Thread] = []
        self._state: Literal["new", "running", "stopped"] = "new"

    def start(self) -> Self:
        """Bind every site to a free port on ``host`` and serve each from a daemon thread."""
        if self._state != "new":
            raise RuntimeError(f"SimWeb is {self._state}; build a new one")
        try:
            for site in self._sites:
                server = _Server((self.host, 0), self, site)
                site.host = f"{self.host}:{server.server_port}"
                self._by_key[site.host] = site
                self._servers.append(server)
        except BaseException:
            for server in self._servers:
                server.server_close()
            raise
        for server in self._servers:
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"simweb-{server.site.spec.name}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)
        self._state = "running"
        return self

    def stop(self) -> None:
        """Stop serving and close every socket (idempotent)."""
        if self._state != "running":
            self._state = "stopped"
            return
        for server in self._servers:
            server.shutdown()
            server.close_connections()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._state = "stopped"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def sites(self) -> list[str]:
        """Every site's ``host:port``, in spec order."""
        self._require_started()
        return [s.host for s in self._sites]

    def site(self, name: str) -> str:
        """The ``host:port`` of the site named ``name`` (a spec name, or already a ``host:port``)."""
        self._require_started()
        return self._site(name).host

    def base_url(self, site: str) -> str:
        """``http://host:port`` of ``site`` (a spec name or ``host:port``)."""
        return f"http://{self.site(site)}"

    def spec(self, site: str) -> SiteSpec:
        """The :class:`SiteSpec` of ``site`` (a spec name or ``host:port``)."""
        return self._site(site).spec

    def rates(self, site: str) -> np.ndarray:
        """Per-page change rates of ``site`` (changes per day), indexed by page number."""
        return self._site(site).rates.copy()

    def change_times(self, site: str, path: str) -> np.ndarray:
        """The virtual times (unix seconds, sorted, read-only) at which ``path`` on ``site`` changed.

        Version ``v`` of a page is current from its ``v``-th change (version 0
        from the start of time) until the next. Private pages never change (an
        empty array). Raises :class:`~recrawl.NotFound` for any other path.
        """
        s = self._site(site)
        i = _page_index(path)
        if i is not None and i < s.spec.n_pages:
            return s.changes[i]
        if path.startswith("/private/"):
            return np.empty(0)
        raise NotFound(f"{path!r} is not a page of site {site!r}")

    def all_change_times(self) -> dict[str, np.ndarray]:
        """:meth:`change_times` of every URL :meth:`urls` lists, by URL."""
        out: dict[str, np.ndarray] = {}
        for url in self.urls():
            parts = urlsplit(url)
            out[url] = self.change_times(parts.netloc, parts.path)
        return out

    def urls(
        self, site: str | None = None, *, private: bool = False, faults: bool = False
    ) -> list[str]:
        """The URLs of the normal pages (``/p/<i>`` not listed under a fault), site by site.

        ``private=True`` adds the ``/private/<j>`` pages, ``faults=True`` every
        fault path (500, gone, moved, soft 404).
        """
        self._require_started()
        chosen = self._sites if site is None else [self._site(site)]
        out: list[str] = []
        for s in chosen:
            bad = s.spec.fault_paths
            root = f"http://{s.host}"
            out.extend(f"{root}/p/{i}" for i in range(s.spec.n_pages) if f"/p/{i}" not in bad)
            if private:
                out.extend(f"{root}/private/{j}" for j in range(s.spec.n_private))
            if faults:
                out.extend(root + p for p in sorted(bad))
        return out

    def version_at(self, url: str, t: float) -> int:
        """The version of the page at ``url`` at virtual time ``t``."""
        parts = urlsplit(url)
        return int(np.searchsorted(self.change_times(parts.netloc, parts.path), t, side="right"))

    def freshness_from_log(
        self,
        urls: Sequence[str],
        start: float,
        end: float,
        log: Iterable[RequestRecord] | None = None,
    ) -> float:
        """Time-averaged share of ``urls`` whose last fetched copy is current, over ``[start, end]``.

        A fetch is a GET record with status 200 or 304 and a version (from
        ``log``, by default :attr:`request_log`). After a fetch of version ``v``
        at ``t_f`` and until the page's next fetch, the page counts as fresh
        while the page's true version is ``v``: from ``t_f`` to its next change.
        Pages not yet fetched count as stale. Exact, from the change times; the
        result is in ``[0, 1]``.
        """
        if not end > start:
            raise ValueError(f"need end > start, got [{start}, {end}]")
        if not urls:
            raise ValueError("no urls")
        keys: dict[tuple[str, str], np.ndarray] = {}
        for url in urls:
            parts = urlsplit(url)
            keys[(parts.netloc, parts.path)] = self.change_times(parts.netloc, parts.path)
        fetches: dict[tuple[str, str], list[tuple[float, int]]] = {k: [] for k in keys}
        for r in self.request_log if log is None else log:
            got = fetches.get((r.site, r.path))
            if (
                got is not None
                and r.status in (200, 304)
                and r.version is not None
                and r.method != "HEAD"
            ):
                got.append((r.t, r.version))
        total = 0.0
        for key, changes in keys.items():
            seen = sorted(fetches[key], key=lambda f: f[0])
            for k, (t_f, v) in enumerate(seen):
                if v > len(changes):
                    continue
                held_until = seen[k + 1][0] if k + 1 < len(seen) else np.inf
                current_from = float(changes[v - 1]) if v > 0 else -np.inf
                current_until = float(changes[v]) if v < len(changes) else np.inf
                lo = max(t_f, current_from, start)
                hi = min(held_until, current_until, end)
                if hi > lo:
                    total += hi - lo
        return total / (len(keys) * (end - start))

    def _site(self, key: str) -> _Site:
        site = self._by_key.get(key.removeprefix("http://").rstrip("/"))
        if site is None:
            raise NotFound(f"no site {key!r}")
        return site

    def _require_started(self) -> None:
        if self._state == "new":
            raise RuntimeError("SimWeb not started: sites get their addresses in start()")


def load_scenario(path: str | Path) -> list[SiteSpec]:
    """Sites from a TOML or JSON scenario file: a list ``sites`` of tables with
    :class:`SiteSpec`'s fields (``hostile`` windows and nothing else in **days**
    after the web's origin, as ``[start_days, end_days, kind]``).

    Example (TOML)::

        [[sites]]
        name = "shop"
        n_pages = 200
        rate_per_day = 0.5
        robots = "User-agent: *\\nDisallow: /private/\\nCrawl-delay: 10\\n"
        always_500 = ["/p/0"]
        moved = { "/old/1" = "/p/1" }

        [[sites]]
        name = "hostile"
        hostile = [[10, 11, "429"], [12, 30, "403"]]

    Raises :class:`~recrawl.ConfigError` naming the file and the site.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"scenario file {p} does not exist") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(
            f"{p} is not valid {'JSON' if p.suffix == '.json' else 'TOML'}: {exc}"
        ) from None
    rows = data.get("sites") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ConfigError(f"{p}: needs a non-empty list 'sites'")
    known = {f.name for f in fields(SiteSpec)}
    specs = []
    for k, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ConfigError(f"{p}: sites[{k}] must be a table")
        extra = set(row) - known
        if extra:
            raise ConfigError(f"{p}: site {row.get('name', k)!r}: unknown field(s) {sorted(extra)}")
        kw = dict(row)
        try:
            if "hostile" in kw:
                kw["hostile"] = [
                    (float(a) * _DAY_S, float(b) * _DAY_S, str(c)) for a, b, c in kw["hostile"]
                ]
            if "page_bytes" in kw:
                kw["page_bytes"] = tuple(kw["page_bytes"])
            specs.append(SiteSpec(**kw))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{p}: site {row.get('name', k)!r}: {exc}") from None
    return specs


def write_ground_truth(web: SimWeb, directory: str | Path) -> dict[str, str]:
    """Write what really happened: ``changes.jsonl`` (every normal page's change
    times as :mod:`recrawl.observe.traces` traces from the origin to now, so
    ``recrawl simulate`` can replay them), ``requests.jsonl`` (the request log)
    and ``sites.json`` (name → base URL). Returns the paths written."""
    from recrawl.observe.traces import Trace, dump_trace

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    now = min(web.clock(), web.origin + web.horizon_s)
    with (out / "changes.jsonl").open("w", encoding="utf-8") as f:
        for site in web.sites:
            for url in web.urls(site):
                path = "/" + url.split("/", 3)[3]
                ch = web.change_times(site, path)
                ch = ch[(ch > web.origin) & (ch <= now)]
                trace = Trace(url, site, "product", web.origin, max(now, web.origin + 1.0), ch)
                f.write(dump_trace(trace) + "\n")
    with (out / "requests.jsonl").open("w", encoding="utf-8") as f:
        for r in web.request_log.snapshot():
            f.write(json.dumps({**asdict(r), "url": r.url}) + "\n")
    (out / "sites.json").write_text(
        json.dumps({web.spec(s).name: web.base_url(s) for s in web.sites}, indent=2) + "\n"
    )
    return {name: str(out / name) for name in ("changes.jsonl", "requests.jsonl", "sites.json")}

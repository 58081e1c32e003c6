"""The FastAPI application: leases, observations, sites, pages, plan, stats, metrics.

:class:`Service` holds what the HTTP edge keeps between requests (the cached
plan of the current cycle, the last health evaluation, ingest counters);
:func:`create_app` wires it to routes. Every decision is a library call on the
:class:`~recrawl.engine.Engine` or a public store method.

The planner runs in the loop:

* observations re-estimate pages as they are stored (the store folds them in);
* the plan is recomputed when a cycle (``cycle_hours``) begins, after
  ``replan_after`` new observations or a write by another process to the
  store (the CLI's ingest, URLs, resume: :meth:`~recrawl.store.SQLStore.outside_writes`,
  on SQLite and PostgreSQL; at most every ``replan_min_s`` seconds),
  and at once when a site's controls change (band action, resume) or URLs are
  registered; a recomputation inside a cycle spends only what the cycle has
  not yet handed out;
* health is evaluated at most every ``health_every_s`` seconds when new
  observations arrived; the band's actions (concurrency cap, effective cost,
  pause with canaries only) are applied by the engine to the site controls,
  which both the plan and :meth:`~recrawl.store.SQLStore.claim` obey.

Request bodies may come compressed (``Content-Encoding: gzip``, or ``deflate``
zlib-wrapped or raw: :class:`DecodeBody`); ``/docs`` and ``/redoc`` serve their
scripts themselves (no CDN), so they work on an offline crawl host.

Writes from fetchers go through one writer thread (:mod:`.writer`): bodies are
parsed in worker threads, concurrent reports are committed together in one
transaction and acknowledged once it has committed, and a lease runs before
the reports queued behind the transaction in progress.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import threading
import time
import zlib
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, MutableMapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import unquote

import orjson
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, Field

from recrawl import __version__
from recrawl._exceptions import ConfigError, InvalidObservation, NotFound
from recrawl.config import Settings
from recrawl.engine.engine import HINT_FUTURE_S, HINT_TRUST_DAYS, Engine, PlanResult
from recrawl.estimate.calibration import Calibration
from recrawl.estimate.hints import Hint, InvalidHint, parse_lastmod, read_hint_document
from recrawl.observe.compression import is_gzip
from recrawl.observe.observation import Observation, line_key, normalize_url, parse_observation
from recrawl.service.writer import Committed, Writer
from recrawl.store import BatchResult, SQLStore, open_store

__all__ = ["Service", "create_app"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_MAX_LEASE = 1000
_Candidate = tuple[str, str, str]  # (url, site, reason)


@dataclass(slots=True)
class _LeasePool:
    """One plan's tasks as lease candidates: canaries apart, the others best first
    by URL without those reported since; each URL's task; the others' sites."""

    plan: PlanResult
    canaries: list[_Candidate]
    rest: dict[str, _Candidate]
    info: dict[str, dict[str, Any]]
    sites: frozenset[str]


_log = logging.getLogger("recrawl.service")
_INGEST_RATE_WINDOW_S = 60.0
_MAX_REJECTED = 100  # rejected hints described in an answer (all are counted)


class JSONResponse(Response):
    """JSON via orjson (NaN and infinities become null)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


# -- request and response bodies (for validation and the OpenAPI description) ---------------


class UrlIn(BaseModel):
    """A URL to discover: ``value`` is its business weight (≥ 0, default 1)."""

    url: str
    site: str | None = None
    page_type: str | None = None
    value: float = Field(1.0, ge=0)


class UrlBatch(BaseModel):
    """URLs to register, as an object; with ``update``, the known ones among
    them that carry a ``value`` take it (a re-tiering)."""

    urls: list[UrlIn]
    update: bool = False


class PauseRequest(BaseModel):
    """Why a human pauses a site (kept in its history)."""

    reason: str = Field("", max_length=500)
    by: str = Field("api", min_length=1, max_length=200)


class ValidatorsRequest(BaseModel):
    """Whether a site's leases carry validators (ETag / Last-Modified), and why."""

    on: bool
    reason: str = Field("", max_length=500)
    by: str = Field("api", min_length=1, max_length=200)


class UrlsAdded(BaseModel):
    """How many of the posted URLs were new, and (with ``update``) how many known
    ones changed value."""

    received: int
    added: int
    updated: int = 0


class UrlList(BaseModel):
    """URLs to forget."""

    urls: list[str] = Field(..., max_length=100_000)


class UrlsRemoved(BaseModel):
    """How many of the posted URLs were pages (and are gone now)."""

    received: int
    removed: int


class LeaseRequest(BaseModel):
    """A worker asks for up to ``max`` tasks."""

    worker: str = Field(..., min_length=1, max_length=200)
    max: int = Field(50, ge=1, le=_MAX_LEASE)


class Task(BaseModel):
    """One leased fetch. ``expires_at`` is unix seconds; report before then or the
    URL returns to the plan. ``headers`` are the validators for a conditional request."""

    lease_id: str
    url: str
    site: str
    page_type: str
    reason: str
    headers: dict[str, str]
    expires_at: float


class Leases(BaseModel):
    """Tasks leased to one worker, best first."""

    tasks: list[Task]


class Rejected(BaseModel):
    """One rejected observation: ``index`` counts from 0 in the posted batch."""

    index: int
    field: str | None
    error: str


class IngestAnswer(BaseModel):
    """``accepted`` observations are durable (new ones stored, known ones skipped)."""

    accepted: int
    stored: int
    duplicates: int
    rejected: list[Rejected]


_OBSERVATIONS_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "Fetch observations (SPEC §5): NDJSON, one object per line, or a "
        "JSON array. Each may carry the ``lease_id`` it reports.",
        "content": {
            "application/x-ndjson": {"schema": {"type": "string"}},
            "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
        },
    }
}


# -- JSON bodies whatever the Content-Type ---------------------------------------------------


class JSONBodyRoute(APIRoute):
    """A route whose body is read as JSON whatever its ``Content-Type`` says.

    ``curl -d '{...}'`` sends ``application/x-www-form-urlencoded``, which FastAPI
    would otherwise hand to the model as raw bytes (a 422 "valid dictionary"
    error). A body that is not JSON is still a 422 (``body is not valid JSON``).
    Safe for the write routes: they need a bearer token, which a browser never
    sends cross-site without a CORS preflight.

    The route's :class:`TokenCheck` runs before its body is read (FastAPI reads
    a body parameter before it solves the dependencies): without the token a
    client gets 401 whatever it sent, not the 400, 413 or 422 of its body.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        checks = [d.dependency for d in self.dependencies if isinstance(d.dependency, TokenCheck)]

        async def handle(request: Request) -> Response:
            if checks:
                creds = await _bearer(request)
                for check in checks:
                    await check(request, creds)
            scope = dict(request.scope)
            headers = [(k, v) for k, v in scope.get("headers", ()) if k != b"content-type"]
            scope["headers"] = [*headers, (b"content-type", b"application/json")]
            return await handler(Request(scope, request.receive))

        return handle


# -- the page a request names ----------------------------------------------------------------

_PAGES_PREFIX = "/v1/pages/"


def page_target(scope: Scope, url: str) -> str:
    """The page URL that ``GET /v1/pages/{url}`` names, before normalisation.

    ``url`` is the path remainder the server has already percent-decoded once;
    the raw one (``raw_path``) says what the client sent. When the raw remainder
    starts with ``http://`` or ``https://`` (any case) it is the URL appended raw
    and is taken as sent (its ``%XX`` escapes kept); otherwise it is the URL
    percent-encoded once and is decoded once. Either way, the request's query
    string is the URL's when the URL has none of its own (an appended raw URL's
    query string arrives as the request's).
    """
    remainder: str | None = None
    raw_path = scope.get("raw_path")
    if isinstance(raw_path, bytes):
        raw = raw_path.split(b"?", 1)[0].decode("latin-1")
        _, sep, tail = raw.partition(_PAGES_PREFIX)
        if sep and unquote(tail) == url:
            remainder = tail
    if remainder is None:  # no raw path to go by: what the server decoded
        target = url
    elif remainder[:8].lower().startswith(("http://", "https://")):
        target = remainder
    else:
        target = unquote(remainder)
    query = scope.get("query_string", b"").decode("latin-1")
    if query and "?" not in target:
        target += "?" + query
    return target


# -- body size limit -------------------------------------------------------------------------

# the scope key under which BodyLimit marks a request whose declared body is too large
_TOO_LARGE = "recrawl.body_too_large"


class _BodyMiddleware:
    """An ASGI middleware over HTTP request bodies of at most ``limit`` bytes;
    other traffic (lifespan) passes through to :meth:`http`'s caller untouched."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


def _no_body(receive: Receive) -> Receive:
    """A ``receive`` for an app that must not see the request's body: one empty
    body, then only what follows the body (a disconnect); the body's chunks
    are dropped as they arrive."""
    unread = True

    async def nothing() -> Message:
        nonlocal unread
        if unread:
            unread = False
            return {"type": "http.request", "body": b"", "more_body": False}
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                return msg

    return nothing


class BodyLimit(_BodyMiddleware):
    """ASGI middleware: refuse request bodies larger than ``limit`` bytes with 413.

    A chunked body is counted as it arrives and refused once it passes the
    limit. A declared ``Content-Length`` over the limit is never read: the
    request is passed on with an empty body (and no ``Content-Length``),
    marked, so that its route answers 413 once the request has passed
    authentication (:func:`refuse_too_large`): a client without the token gets
    401 and learns nothing of the limit. Every answer to such a request closes
    the connection (the body left on the wire is not read).
    """

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.limit:
                    await self._unread(scope, receive, send)
                    return
        seen = 0
        limit = self.limit

        async def counted() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > limit:
                    raise HTTPException(413, f"request body larger than {limit} bytes")
            return msg

        await self.app(scope, counted, send)

    async def _unread(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass on a request whose declared body is too large, without its body."""
        headers = [(k, v) for k, v in scope.get("headers", ()) if k != b"content-length"]
        nothing = _no_body(receive)

        async def closing(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                kept = [(k, v) for k, v in msg.get("headers", ()) if k.lower() != b"connection"]
                msg = {**msg, "headers": [*kept, (b"connection", b"close")]}
            await send(msg)

        marked = {**scope, "headers": headers, _TOO_LARGE: self.limit}
        await self.app(marked, nothing, closing)


def refuse_too_large(scope: Scope) -> None:
    """Raise HTTPException 413 when the request declared a body larger than
    :class:`BodyLimit` takes (its body was not read). The routes' token checks
    call it once they pass."""
    limit = scope.get(_TOO_LARGE)
    if limit is not None:
        raise HTTPException(
            413, f"request body larger than {limit} bytes", headers={"Connection": "close"}
        )


# -- compressed request bodies ---------------------------------------------------------------

# the Content-Encodings read, by the name a client may give them
_CODINGS = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate"}
# the scope key under which DecodeBody names a Content-Encoding it cannot read
_UNDECODABLE = "recrawl.undecodable_coding"
# zlib's ``wbits`` for each format: gzip (RFC 1952), zlib (RFC 1950), raw DEFLATE (RFC 1951)
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ZLIB_WBITS = zlib.MAX_WBITS
_RAW_WBITS = -zlib.MAX_WBITS


def _zlib_header(head: bytes) -> bool:
    """Whether two bytes open a zlib stream (RFC 1950): ``CM`` 8 (deflate) and the
    check bits make ``CMF·256 + FLG`` a multiple of 31."""
    return len(head) == 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0


class _Inflate:
    """One request body being decompressed, to at most ``limit`` bytes.

    ``deflate`` is read zlib-wrapped (RFC 9110) when the body opens with a zlib
    header, raw DEFLATE (what many clients send) otherwise; ``gzip`` may be
    several members (``cat a.gz b.gz``). Zero bytes after the end of the data
    are padding and ignored.
    """

    def __init__(self, coding: str, limit: int) -> None:
        self.coding = coding
        self.format = _CODINGS[coding]
        self.limit = limit
        self.size = 0  # bytes out so far
        self._z: Any = None  # the stream being read; None before one starts
        self._head = b""  # the first byte of a stream, while its second is awaited
        self._ended = False  # a stream has ended
        self._padding = False  # zero padding began: only zeros may follow

    def feed(self, data: bytes, final: bool) -> bytes:
        """The decompressed bytes of the next piece ``data`` of the body.

        Never produces more than one byte past the limit, however much ``data``
        expands. Raises HTTPException 413 past the limit, 400 on bytes that
        are not of the coding, a body that ends early or bytes after the end
        that are neither zero padding nor (gzip) another member.
        """
        out: list[bytes] = []
        if self._head:
            data, self._head = self._head + data, b""
        try:
            while data:
                if self._padding or (self._z is None and self._ended and data[0] == 0):
                    self._padding = True
                    if data.strip(b"\0"):
                        raise HTTPException(400, self._trailing())
                    break
                if self._z is None:
                    if len(data) < 2 and not final:  # the header is two bytes
                        self._head = data
                        break
                    self._z = zlib.decompressobj(self._wbits(data[:2]))
                piece = self._z.decompress(data, self.limit - self.size + 1)
                self.size += len(piece)
                if self.size > self.limit:
                    raise HTTPException(
                        413, f"request body larger than {self.limit} bytes once decompressed"
                    )
                out.append(piece)
                data = b""
                if self._z.eof:  # what follows: another gzip member, padding or nothing
                    data = self._z.unused_data
                    self._z = None
                    self._ended = True
        except zlib.error as exc:
            raise HTTPException(400, f"the body is not valid {self.coding} data ({exc})") from None
        if final and self._z is not None:
            raise HTTPException(400, f"the {self.coding} body ends before its end of stream")
        return b"".join(out)

    def _wbits(self, head: bytes) -> int:
        """The format of the stream that opens with ``head``: another gzip member
        after the first, one deflate stream only."""
        if self._ended:
            if self.format != "gzip" or not is_gzip(head):
                raise HTTPException(400, self._trailing())
            return _GZIP_WBITS
        if self.format == "gzip":
            return _GZIP_WBITS
        return _ZLIB_WBITS if _zlib_header(head) else _RAW_WBITS

    def _trailing(self) -> str:
        what = "neither zero padding nor another gzip member"
        if self.format != "gzip":
            what = "not zero padding"
        return f"the {self.coding} body goes on after its end of stream with bytes that are {what}"


class DecodeBody(_BodyMiddleware):
    """ASGI middleware: decompress request bodies sent with ``Content-Encoding``
    ``gzip`` or ``deflate``, as they arrive and to at most ``limit`` bytes.

    ``deflate`` may be zlib-wrapped (as RFC 9110 says) or raw DEFLATE (as many
    clients send it), ``gzip`` several members; zero bytes after the end of the
    data are padding. A body that would decompress past ``limit`` gets 413 once
    the limit is passed (a small "zip bomb" costs at most ``limit`` bytes of
    memory). The application sees the decompressed body, without
    ``Content-Encoding`` and ``Content-Length``.

    A request in another coding is passed on with an empty body (its own is not
    read) and marked, so that its route answers 415 once the request has passed
    authentication (:func:`refuse_undecodable`): a client without the token
    learns nothing of how bodies are read.
    """

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        coding = ""
        headers = []
        for name, value in scope.get("headers", ()):
            if name == b"content-encoding":
                coding = value.decode("latin-1").strip().lower()
            elif name != b"content-length":
                headers.append((name, value))
        if coding in ("", "identity"):
            await self.app(scope, receive, send)
            return
        if coding not in _CODINGS:
            await self.app(
                {**scope, "headers": headers, _UNDECODABLE: coding}, _no_body(receive), send
            )
            return
        body = _Inflate(coding, self.limit)

        async def decoded() -> Message:
            msg = await receive()
            if msg["type"] == "http.request":
                data = msg.get("body", b"")
                final = not msg.get("more_body", False)
                # off the event loop: zlib lets go of the interpreter lock
                msg = {**msg, "body": await run_in_threadpool(body.feed, data, final)}
            return msg

        await self.app({**scope, "headers": headers}, decoded, send)


def refuse_undecodable(scope: Scope) -> None:
    """Raise HTTPException 415 when the request's body is in a ``Content-Encoding``
    :class:`DecodeBody` cannot read (the connection is closed after the answer:
    the body was not read). The routes' token checks call it once they pass."""
    coding = scope.get(_UNDECODABLE)
    if coding is not None:
        raise HTTPException(
            415,
            f"Content-Encoding {coding} is not supported: send gzip, deflate or identity",
            headers={"Accept-Encoding": "gzip, deflate", "Connection": "close"},
        )


# -- the service state -----------------------------------------------------------------------


def _open_engine(engine_or_db: Engine | SQLStore | str | Path, settings: Settings) -> Engine:
    if isinstance(engine_or_db, Engine):
        return engine_or_db
    if isinstance(engine_or_db, SQLStore):
        return Engine(engine_or_db, settings)
    return Engine(open_store(str(engine_or_db), half_life_days=settings.half_life_days), settings)


def validate_settings(settings: Settings) -> None:
    """Start-up checks the service needs beyond :class:`~recrawl.config.Settings`.

    Raises :class:`~recrawl.ConfigError` with one clear sentence.
    """
    if not settings.token:
        raise ConfigError(
            "no write token: run `recrawl init` to create one in recrawl.toml, or set RECRAWL_TOKEN"
        )
    if settings.read_token is not None and settings.read_token == "":
        raise ConfigError("read_token is empty; remove it or give a value")
    if settings.budget_per_day is None and settings.billing_unit != "fetches":
        raise ConfigError(
            f"budget_per_day is required when billing_unit is {settings.billing_unit!r}"
        )


class Service:
    """What the HTTP edge keeps between requests, over one :class:`Engine`.

    Parameters
    ----------
    engine
        The engine (its ``clock`` is the service's clock, unix seconds).
    replan_after
        New observations after which the plan is recomputed.
    replan_min_s
        Shortest time between two recomputations triggered by observations, seconds.
    health_every_s
        Shortest time between two health evaluations, seconds.
    group_s
        Target duration, seconds, of one transaction in which the writer
        coalesces concurrent observation requests (:mod:`recrawl.service.writer`);
        a lease waits for at most one such transaction.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        replan_after: int = 1000,
        replan_min_s: float = 5.0,
        health_every_s: float = 60.0,
        group_s: float = 0.05,
    ) -> None:
        self.engine = engine
        self.store: SQLStore = engine.store
        self.settings = engine.settings
        # the engine's content checks, as `recrawl ingest` and Engine.ingest run them
        self.classifier = engine.classifier
        self.replan_after = replan_after
        self.replan_min_s = replan_min_s
        self.health_every_s = health_every_s
        self.started_at = time.time()
        self._lock = threading.RLock()
        self._plan: PlanResult | None = None
        self._plan_cycle = -1
        self._lease_pool: _LeasePool | None = None
        self._plan_at = -math.inf
        self._dirty = True
        self._outside: int | None = None
        self._outside_changed = False
        self._obs_since_plan = 0
        self._done: set[str] = set()
        self._done_pending: set[str] | None = None
        self._replanning = False
        self._generation = 0
        self._spent = 0.0
        # lease id → (plan cycle, cost charged at lease time), until its report
        # comes back and the cycle is charged what the fetch really cost
        self._charged: dict[str, tuple[int, float]] = {}
        self._health: list[dict[str, Any]] = []
        self._health_at = -math.inf
        self._obs_since_health = 1  # evaluate at the first chance
        self.accepted_total = 0
        self.stored_total = 0
        self.rejected_total = 0
        self.ingest_requests = 0
        self.leased_total = 0
        self._ingest_log: deque[tuple[float, int]] = deque()
        self._calibrations: dict[tuple[float, str, int], Calibration] = {}
        self._calibration_lock = threading.Lock()
        self._hint_reports: dict[tuple[float, int, int], dict[str, Any]] = {}
        self.writer = Writer(self._store_observations, group_s=group_s, on_commit=self._committed)

    # -- the model's calibration -----------------------------------------------------------

    def calibration(self, days: float, by: Literal["site", "group"]) -> Calibration:
        """:meth:`Engine.calibration`, computed at most once an hour for each
        ``days`` and ``by`` and a validators change: it reads and replays a
        whole window of the log (seconds on a large store; on the store's
        separate read connection, so leases and reports go on meanwhile)."""
        key = (days, by, int(self.now() // 3600))
        with self._calibration_lock:  # one computation at a time; the others wait for it
            cal = self._calibrations.get(key)
            off = sorted(self.store.sites_without_validators())
            if cal is None or cal.validators_off != off:
                cal = self.engine.calibration(days=days, by=by)
                self._calibrations = {
                    k: v for k, v in self._calibrations.items() if k[2] == key[2]
                } | {key: cal}
            return cal

    # -- clock and budget ------------------------------------------------------------------

    def now(self) -> float:
        """Unix seconds from the engine's clock."""
        return float(self.engine.clock())

    @property
    def cycle_s(self) -> float:
        """Length of one planning cycle, seconds."""
        return self.settings.cycle_hours * 3600.0

    def cycle_budget(self) -> float:
        """One cycle's budget in the billing unit: :meth:`Settings.daily_budget
        <recrawl.config.Settings.daily_budget>` × cycle length."""
        s = self.settings
        pages = 0 if s.budget_per_day is not None else len(self.store.page_columns()["url"])
        return s.daily_budget(pages) * s.cycle_hours / 24.0

    # -- health ----------------------------------------------------------------------------

    def refresh_health(self, now: float, *, force: bool = False) -> list[dict[str, Any]]:
        """Evaluate every site's health when due and apply the band actions.

        Due when ``health_every_s`` has passed since the last evaluation and new
        observations arrived since. A change of any site's controls invalidates
        the plan. Returns the last evaluation (``recrawl health --json`` shape).
        """
        with self._lock:
            due = force or (
                now - self._health_at >= self.health_every_s and self._obs_since_health > 0
            )
            if not due:
                return self._health
            health = getattr(self.engine, "health", None)
            if health is None:  # the engine predates health evaluation
                self._health = self._health_from_history()
            else:
                before = self.store.site_controls()
                self._health = list(health(at=now, record=True))
                if self.store.site_controls() != before:
                    self._dirty = True
            self._health_at = now
            self._obs_since_health = 0
            return self._health

    def _health_from_history(self) -> list[dict[str, Any]]:
        last: dict[str, dict[str, Any]] = {}
        for _, report in self.store.health_history():
            last[report["site"]] = report
        return [last[s] for s in sorted(last)]

    def health(self) -> list[dict[str, Any]]:
        """The last health evaluation, refreshed first when due."""
        return self.refresh_health(self.now())

    def site_caps(self) -> dict[str, int]:
        """Outstanding leases allowed per site (0 when paused); absent means no cap."""
        caps = getattr(self.engine, "site_caps", None)
        if caps is not None:
            return dict(caps())
        out: dict[str, int] = {}
        for site, c in self.store.site_controls().items():
            if c["paused"]:
                out[site] = 0
            elif c["concurrency_cap"] is not None:
                out[site] = int(c["concurrency_cap"])
        return out

    # -- plan ------------------------------------------------------------------------------

    def invalidate(self) -> None:
        """Recompute the plan at the next request (site controls or URLs changed)."""
        with self._lock:
            self._dirty = True

    def plan(self, now: float | None = None) -> PlanResult:
        """The current cycle's plan, recomputed when stale (see the module docstring).

        With no plan yet, or when site controls or URLs changed, the plan is
        recomputed before answering. When a new cycle begins or enough
        observations arrived, it is recomputed in a background thread and the
        previous plan keeps serving meanwhile (site caps and pauses are still
        enforced at lease time), so leases never wait for the planner.
        """
        t = self.now() if now is None else now
        # another process's writes matter only once a replan may start: poll then
        may_replan = t - self._plan_at >= self.replan_min_s
        outside = self.engine.store.outside_writes() if may_replan else self._outside
        with self._lock:
            if outside != self._outside:
                # another process wrote to the store (recrawl ingest, urls add, site
                # resume): its observations, URLs and controls count like ours
                self._outside_changed = self._outside is not None
                self._outside = outside
            cycle = int(t // self.cycle_s)
            if self._plan is None or self._dirty:
                self._install(self._compute(t, cycle), t, cycle, set())
            elif not self._replanning and (
                cycle != self._plan_cycle
                or (
                    (self._obs_since_plan >= self.replan_after or self._outside_changed)
                    and t - self._plan_at >= self.replan_min_s
                )
            ):
                self._outside_changed = False
                self._replanning = True
                self._generation += 1
                self._done_pending = set()
                threading.Thread(
                    target=self._replan_in_background,
                    args=(t, cycle, self._generation, self._obs_since_plan),
                    name="recrawl-replan",
                    daemon=True,
                ).start()
            assert self._plan is not None
            return self._plan

    def _compute(self, t: float, cycle: int) -> PlanResult:
        """Plan what the cycle has left to spend (the whole budget in a new cycle)."""
        spent = 0.0 if cycle != self._plan_cycle else self._spent
        return self.engine.plan(budget=max(self.cycle_budget() - spent, 0.0), now=t)

    def _install(self, plan: PlanResult, t: float, cycle: int, done: set[str]) -> None:
        if cycle != self._plan_cycle:
            self._spent = 0.0
            self._charged = {k: v for k, v in self._charged.items() if v[0] == cycle}
        self._plan = plan
        self._plan_cycle = cycle
        self._plan_at = t
        self._dirty = False
        self._outside_changed = False
        self._obs_since_plan = 0
        self._done = done
        self._generation += 1
        self._done_pending = None

    def _replan_in_background(self, t: float, cycle: int, generation: int, seen: int) -> None:
        try:
            plan = self._compute(t, cycle)
            with self._lock:
                if self._generation == generation:  # no recomputation overtook this one
                    pending = self._done_pending or set()
                    left = self._obs_since_plan - seen
                    # a write by another process noticed while ``plan`` was computed
                    # may be missing from it: it still asks for a recomputation
                    outside_changed = self._outside_changed
                    self._install(plan, t, cycle, pending)
                    self._obs_since_plan = max(left, 0)
                    self._outside_changed = outside_changed
        except Exception:  # the previous plan keeps serving; the next trigger retries
            _log.exception("recomputing the plan failed")
        finally:
            with self._lock:
                self._replanning = False

    def _pool(self, plan: PlanResult) -> _LeasePool:
        """The lease candidates of ``plan`` (the service lock held): built once per
        plan, then kept free of reported URLs by :meth:`_committed`."""
        pool = self._lease_pool
        if pool is not None and pool.plan is plan:
            return pool
        done = self._done
        canaries: list[_Candidate] = []
        rest: dict[str, _Candidate] = {}
        info: dict[str, dict[str, Any]] = {}
        for task in plan.tasks:
            url = task["url"]
            info[url] = task
            if task["reason"] == "canary":
                canaries.append((url, task["site"], task["reason"]))
            elif url not in done:
                rest.setdefault(url, (url, task["site"], task["reason"]))
        pool = _LeasePool(plan, canaries, rest, info, frozenset(c[1] for c in rest.values()))
        self._lease_pool = pool
        return pool

    def lease(self, worker: str, limit: int) -> list[dict[str, Any]]:
        """Lease up to ``limit`` tasks of the current plan to ``worker``.

        Canaries first and outside the site caps (a paused site keeps only its
        canaries); then the plan's tasks best first, each site held to its cap.
        URLs reported since the plan was computed are not handed out again.
        """
        now = self.now()
        self.refresh_health(now)
        ttl = self.settings.lease_seconds
        with self._lock:
            pool = self._pool(self.plan(now))
            done = self._done
            canaries = [c for c in pool.canaries if c[0] not in done]
            got = (
                self.store.claim(canaries, worker=worker, limit=limit, now=now, ttl_s=ttl)
                if canaries
                else []
            )
            caps = self.site_caps() if len(got) < limit and pool.rest else {}
            for _ in range(3):  # again only when another process claimed some meanwhile
                want = limit - len(got)
                if want <= 0 or not pool.rest:
                    break
                per_site = self.store.outstanding_leases(now)
                rest, whole = pick_candidates(pool.rest.values(), pool.sites, per_site, caps, want)
                if rest:
                    got += self.store.claim(
                        rest, worker=worker, limit=want, now=now, ttl_s=ttl, site_caps=caps
                    )
                if whole:
                    break
            info = pool.info
            for g in got:
                cost = float(info[g["url"]].get("cost") or 0.0)
                self._spent += cost
                self._charged[g["lease_id"]] = (self._plan_cycle, cost)
            self.leased_total += len(got)
        headers = self.engine.headers_for_tasks(got)
        return [
            {
                "lease_id": g["lease_id"],
                "url": g["url"],
                "site": g["site"],
                "page_type": info[g["url"]]["page_type"],
                "reason": g["reason"],
                "headers": headers.get(g["url"], {}),
                "expires_at": g["expires_at"],
            }
            for g in got
        ]

    # -- observations ----------------------------------------------------------------------

    def _store_observations(self, observations: Sequence[Observation]) -> BatchResult:
        return self.store.ingest(observations, classifier=self.classifier)

    def parse_body(self, body: bytes) -> tuple[list[Observation], list[int], list[dict[str, Any]]]:
        """Parse NDJSON or a JSON array of observations: ``(good, where, rejected)``,
        ``where`` the index of each good one.

        A rejection (``{"index", "field", "error"}``) counts ``index`` from 0:
        the line of an NDJSON body (blank lines count), or the position in a
        JSON array.

        An observation without ``id`` is keyed by its NDJSON line as ``recrawl
        ingest`` keys the same line (a log both posted and ingested from a file
        is stored once); an array item by its compact JSON.

        Raises HTTPException(400) when a JSON array body is not JSON at all.
        """
        rules = self.settings.page_types
        loads = orjson.loads
        good: list[Observation] = []
        where: list[int] = []
        rejected: list[dict[str, Any]] = []
        stripped = body.lstrip()
        if stripped[:1] == b"[":
            try:
                items = loads(body)
            except orjson.JSONDecodeError as exc:
                raise HTTPException(400, f"body is not a JSON array ({exc.msg})") from None
            for i, raw in enumerate(items):
                key = line_key(orjson.dumps(raw)) if isinstance(raw, dict) else None
                try:
                    good.append(parse_observation(raw, rules=rules, key=key))
                    where.append(i)
                except InvalidObservation as exc:
                    rejected.append({"index": i, "field": exc.field, "error": exc.reason})
        else:
            for i, line in enumerate(body.split(b"\n")):
                if not line.strip():
                    continue
                try:
                    raw = loads(line)
                except orjson.JSONDecodeError as exc:
                    rejected.append({"index": i, "field": None, "error": f"not JSON ({exc.msg})"})
                    continue
                try:
                    good.append(parse_observation(raw, rules=rules, key=line_key(line)))
                    where.append(i)
                except InvalidObservation as exc:
                    rejected.append({"index": i, "field": exc.field, "error": exc.reason})
        return good, where, rejected

    def submit_observations(self, good: list[Observation]) -> Future[Committed]:
        """Queue parsed observations for the writer's next group commit; the future
        resolves once they are on disk (see :mod:`recrawl.service.writer`)."""
        if not good:
            done: Future[Committed] = Future()
            done.set_result(Committed(0, 0))
            return done
        return self.writer.submit_batch(good)

    def count_rejected(self, good: list[Observation], rejected: list[dict[str, Any]]) -> None:
        """Count a request's rejected items, and the request when none was good
        (the writer counts the others once committed)."""
        with self._lock:
            self.rejected_total += len(rejected)
            if not good:
                self.ingest_requests += 1

    def _reconcile(self, good: Sequence[Observation]) -> None:
        """Charge the cycle what the leased fetches reported cost (wire bytes,
        or credits) instead of the plan's estimate (the service lock held). A
        lease of an earlier cycle charged that cycle: nothing to correct now."""
        charged = self._charged
        if not charged:
            return
        unit = self.settings.billing_unit
        for o in good:
            if o.lease_id is None:
                continue
            entry = charged.pop(o.lease_id, None)
            if entry is None or entry[0] != self._plan_cycle or unit == "fetches":
                continue
            real = o.bytes_sent + o.bytes_received if unit == "bytes" else o.billed_credits()
            self._spent = max(self._spent + real - entry[1], 0.0)

    def _committed(self, good: Sequence[Observation], share: Committed) -> None:
        """After a request's observations committed (in the writer thread)."""
        now = time.time()
        with self._lock:
            self.ingest_requests += 1
            self.accepted_total += len(good)
            self.stored_total += share.stored
            self._obs_since_plan += share.stored
            self._obs_since_health += share.stored
            self._done.update(o.url for o in good)
            self._reconcile(good)
            pool = self._lease_pool
            if pool is not None:
                for o in good:
                    pool.rest.pop(o.url, None)
            if self._done_pending is not None:
                self._done_pending.update(o.url for o in good)
            log = self._ingest_log
            log.append((now, len(good)))
            while log and log[0][0] < now - _INGEST_RATE_WINDOW_S:
                log.popleft()

    @staticmethod
    def answer(
        good: list[Observation],
        where: list[int],
        rejected: list[dict[str, Any]],
        share: Committed,
    ) -> dict[str, Any]:
        """The answer to one observations request (``where``: each good
        observation's index in the body). A report the store refused (older
        than its page's pruned log) is a rejection of field ``fetched_at``."""
        if share.refused:
            rejected = sorted(
                rejected
                + [
                    {"index": where[i], "field": "fetched_at", "error": why}
                    for i, why in share.refused
                ],
                key=lambda r: int(r["index"]),
            )
        return {
            "accepted": len(good) - len(share.refused),
            "stored": share.stored,
            "duplicates": share.duplicates,
            "rejected": rejected,
        }

    def parse_and_count(
        self, body: bytes
    ) -> tuple[list[Observation], list[int], list[dict[str, Any]]]:
        """:meth:`parse_body`, then :meth:`count_rejected` (off the event loop: the
        service lock may be held by a lease)."""
        good, where, rejected = self.parse_body(body)
        self.count_rejected(good, rejected)
        return good, where, rejected

    def ingest_body(self, body: bytes) -> dict[str, Any]:
        """Parse NDJSON or a JSON array of observations, store the good ones and
        answer ``{"accepted", "stored", "duplicates", "rejected"}`` once they are
        on disk (blocking; the HTTP route does the same without blocking).

        Raises HTTPException(400) when a JSON array body is not JSON at all.
        """
        good, where, rejected = self.parse_and_count(body)
        return self.answer(good, where, rejected, self.submit_observations(good).result())

    def ingest_rate(self) -> float:
        """Observations accepted per second over the last minute."""
        now = time.time()
        with self._lock:
            n = sum(k for t, k in self._ingest_log if t >= now - _INGEST_RATE_WINDOW_S)
        span = min(_INGEST_RATE_WINDOW_S, max(now - self.started_at, 1.0))
        return n / span

    # -- cheap signals (recrawl.hints) -----------------------------------------------------

    def parse_hints(
        self, body: bytes, *, source: str | None, seen_at: float | None
    ) -> tuple[list[Hint], list[dict[str, Any]], int]:
        """A sitemap (``<urlset>``, found by its content) or hint lines: the good
        hints, the first :data:`_MAX_REJECTED` rejections and how many there were.
        A sitemap without ``seen_at`` was read now. Raises HTTPException(400) for
        a document that is not a sitemap or not well-formed XML."""
        good: list[Hint] = []
        bad: list[dict[str, Any]] = []
        count = 0

        def reject(e: InvalidHint) -> None:
            nonlocal count
            count += 1
            if len(bad) < _MAX_REJECTED:
                bad.append({"line": e.line, "field": e.field, "error": str(e)})

        import io
        import xml.etree.ElementTree as ET

        _, entries = read_hint_document(
            io.BufferedReader(io.BytesIO(body)), source=source, seen_at=seen_at, read_at=self.now()
        )
        try:
            for h in entries:
                if isinstance(h, InvalidHint):
                    reject(h)
                else:
                    good.append(h)
        except ET.ParseError as exc:
            raise HTTPException(400, f"not well-formed XML ({exc})") from None
        except ValueError as exc:  # a sitemap index, or another document
            raise HTTPException(400, str(exc)) from None
        return good, bad, count

    def ingest_hints(self, hints: list[Hint], *, add_urls: bool) -> Future[Any]:
        """Store hints through the writer; a stored hint or a registered URL asks
        for a new plan in the background (as another process's writes do: a
        replan may judge the sources again, seconds the leases must not wait)."""

        def work() -> Any:
            result = self.engine.ingest_hints(hints, add_urls=add_urls)
            if result.stored or result.added_urls:
                with self._lock:
                    self._outside_changed = True
            return result

        return self.writer.submit(work)

    def hint_report(self, days: float) -> dict[str, Any]:
        """As ``recrawl hints --json``, judged again at most once an hour for each
        ``days`` or when hints were written (it replays the fetch log)."""
        key = (days, int(self.now() // 3600), self.store.hints_version())
        with self._calibration_lock:
            got = self._hint_reports.get(key)
            if got is None:
                got = self.engine.hint_report(days=days).as_dict()
                self._hint_reports = {
                    k: v for k, v in self._hint_reports.items() if k[1:] == key[1:]
                } | {key: got}
            return got

    # -- sites -----------------------------------------------------------------------------

    def sites(self) -> list[dict[str, Any]]:
        """Every known site: its health, controls and outstanding leases."""
        now = self.now()
        health = {h["site"]: h for h in self.refresh_health(now)}
        controls = self.store.site_controls()
        leases = self.store.outstanding_leases(now)
        names = sorted(set(self.store.sites()) | set(health) | set(controls))
        out = []
        for s in names:
            h = dict(health.get(s) or {"site": s, "score": None, "band": "unknown"})
            h["controls"] = controls.get(s)
            h["leases_outstanding"] = leases.get(s, 0)
            out.append(h)
        return out

    def site(self, site: str, since: float = 0.0) -> dict[str, Any] | None:
        """One site: health, controls, history (``since`` unix seconds) and events."""
        for s in self.sites():
            if s["site"] == site:
                s["history"] = [
                    {
                        "at": at,
                        "score": r.get("score"),
                        "raw_score": r.get("raw_score"),
                        "band": r.get("band"),
                        "reasons": r.get("reasons"),
                    }
                    for at, r in self.store.health_history(site, since=since)
                ]
                s["events"] = self.store.site_events(site)
                return s
        return None

    def pause(self, site: str, by: str, reason: str) -> dict[str, Any]:
        """Pause a site by hand (a human decision) and recompute the plan."""
        done = self.engine.pause(site, by=by, reason=reason, now=self.now())
        if done:
            self.invalidate()
        return {
            "site": site,
            "paused": True,
            "recorded": done,
            "controls": self.store.site_controls().get(site),
        }

    def resume(self, site: str, by: str) -> dict[str, Any]:
        """Lift a site's pause (a human decision) and recompute the plan."""
        self.engine.resume(site, by=by, now=self.now())
        self.invalidate()
        return {"site": site, "resumed": True, "controls": self.store.site_controls().get(site)}


def pick_candidates(
    candidates: Iterable[_Candidate],
    sites: frozenset[str],
    per_site: dict[str, int],
    caps: dict[str, int],
    limit: int,
) -> tuple[list[_Candidate], bool]:
    """The shortest run of ``candidates`` (``(url, site, reason)``, best first) that
    holds every candidate :meth:`~recrawl.store.SQLStore.claim` would take for
    ``limit`` tasks: ``(run, whole)``, ``whole`` when no candidate was left out
    for want of room.

    ``sites`` are the candidates' sites, ``per_site`` the leases out per site
    and ``caps`` the sites' caps. Which URLs are leased is not read: a site
    with ``n`` leases out may have them among its first ``n`` candidates, so
    only its candidates beyond those count as surely free, and a capped site
    needs no more than ``cap`` candidates. Spares ``claim`` the whole plan.
    """
    full = {s for s, cap in caps.items() if per_site.get(s, 0) >= cap}
    if sites <= full:
        return [], True
    out: list[_Candidate] = []
    taken: dict[str, int] = {}
    free = 0
    for c in candidates:
        site = c[1]
        if site in full:
            continue
        out.append(c)
        k = taken[site] = taken.get(site, 0) + 1
        if k > per_site.get(site, 0):
            free += 1
            if free >= limit:
                return out, False
        cap = caps.get(site)
        if cap is not None and k >= cap:
            full.add(site)
            if sites <= full:
                break
    return out, True


# -- the application -------------------------------------------------------------------------

_bearer = HTTPBearer(auto_error=False, description="The write token, or the read token.")
Creds = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _matches(given: str, token: str | None) -> bool:
    return token is not None and secrets.compare_digest(given.encode(), token.encode())


def _unauthorized(msg: str) -> HTTPException:
    return HTTPException(401, msg, headers={"WWW-Authenticate": "Bearer"})


class TokenCheck:
    """A route's token check, as a dependency: 401 without the right bearer
    token; once it passes, 413 or 415 for a body the middleware left unread
    (:func:`refuse_too_large`, :func:`refuse_undecodable`). The token comes
    first: a 413 or 415 would tell a stranger how bodies are read.

    ``write``: the write token only. Otherwise the read token or the write
    token, or none when no read token is configured (the dashboard at ``/``
    may give it as ``?token=``). Async: checked on the event loop, not in a
    worker thread (it only compares tokens). :class:`JSONBodyRoute` runs it
    before reading the body as well.
    """

    def __init__(self, write_token: str, read_token: str | None, *, write: bool) -> None:
        self.write_token = write_token
        self.read_token = read_token
        self.write = write

    async def __call__(self, request: Request, creds: Creds) -> None:
        if self.write:
            if creds is None:
                raise _unauthorized("missing bearer token")
            if not _matches(creds.credentials, self.write_token):
                raise _unauthorized("wrong token")
        elif self.read_token is not None:
            given = creds.credentials if creds is not None else None
            if given is None and request.url.path == "/":
                given = request.query_params.get("token")
            if given is None:
                raise _unauthorized("missing bearer token")
            if not (_matches(given, self.read_token) or _matches(given, self.write_token)):
                raise _unauthorized("wrong token")
        refuse_too_large(request.scope)
        refuse_undecodable(request.scope)


def create_app(
    engine_or_db: Engine | SQLStore | str | Path,
    settings: Settings | None = None,
    *,
    replan_after: int = 1000,
    replan_min_s: float = 5.0,
    health_every_s: float = 60.0,
    group_s: float = 0.05,
) -> FastAPI:
    """The recrawl HTTP service over an engine, a store or a store path.

    ``settings`` defaults to the engine's. Raises :class:`~recrawl.ConfigError`
    at start-up when the configuration cannot serve (no write token, no budget
    for a byte or credit billing unit). See :class:`Service` for the knobs.
    """
    if settings is None:
        settings = (
            engine_or_db.settings
            if isinstance(engine_or_db, Engine)
            else Settings.model_validate({})
        )
    validate_settings(settings)
    engine = _open_engine(engine_or_db, settings)
    if engine.settings is not settings:
        engine.settings = settings
    svc = Service(
        engine,
        replan_after=replan_after,
        replan_min_s=replan_min_s,
        health_every_s=health_every_s,
        group_s=group_s,
    )
    write_token = settings.token or ""
    read_token = settings.read_token

    # /docs and /redoc with their scripts and styles served by the app (no CDN:
    # crawl hosts are often offline or firewalled)
    app = FastAPIOffline(
        title="recrawl",
        version=__version__,
        summary="Lease fetch work under a budget, report observations, watch site health.",
        description="Writes need `Authorization: Bearer <token>`; reads need the read token "
        "when one is configured. Times are unix seconds; costs are in the billing unit.",
    )
    app.state.service = svc
    # the last added runs first: BodyLimit counts the bytes on the wire, then
    # DecodeBody bounds them decompressed
    app.add_middleware(DecodeBody, limit=settings.max_body_bytes)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)

    # the token first, then the body (see TokenCheck); JSONBodyRoute checks before reading it
    Write = Depends(TokenCheck(write_token, read_token, write=True))
    Read = Depends(TokenCheck(write_token, read_token, write=False))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"field": None, "error": f"body is not valid JSON ({e.get('ctx', {}).get('error')})"}
            if e["type"] == "json_invalid"
            else {"field": ".".join(str(p) for p in e["loc"] if p != "body"), "error": e["msg"]}
            for e in exc.errors()
        ]
        return JSONResponse({"detail": errors}, status_code=422)

    # -- writes ----------------------------------------------------------------------------

    # bodies read as JSON whatever the Content-Type (``curl -d`` sends a form's)
    json_writes = APIRouter(route_class=JSONBodyRoute, dependencies=[Write], tags=["write"])

    @json_writes.post("/v1/urls", response_model=UrlsAdded)
    def post_urls(body: list[UrlIn] | UrlBatch) -> Any:
        """Register URLs for discovery (a JSON array, or ``{"urls": [...]}``)."""
        rows = body.urls if isinstance(body, UrlBatch) else body
        updated = 0
        try:
            added = svc.engine.add_urls([r.model_dump() for r in rows], now=svc.now())
            if isinstance(body, UrlBatch) and body.update:
                given = [r.model_dump(exclude_unset=True) for r in rows]
                updated = svc.engine.update_values([r for r in given if "value" in r])
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        if added or updated:
            svc.invalidate()
        return {"received": len(rows), "added": added, "updated": updated}

    @json_writes.post("/v1/urls/remove", response_model=UrlsRemoved)
    def remove_urls(body: UrlList) -> Any:
        """Forget URLs: their pages, fetch logs, leases and canaries leave the
        store (stats and health keep their counts); one reported again later
        starts over as a new page."""
        try:
            removed = svc.engine.remove_urls(body.urls)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        if removed:
            svc.invalidate()
        return {"received": len(body.urls), "removed": removed}

    @json_writes.post("/v1/leases", response_model=Leases)
    async def post_leases(body: LeaseRequest) -> Any:
        """Lease up to ``max`` fetch tasks from the current plan to ``worker``.

        A URL is leased to one worker at a time; a lease not reported before
        ``expires_at`` returns its URL to the plan; each site's concurrency cap
        and pause (from its health band) are respected.
        """
        try:
            tasks = await asyncio.wrap_future(
                svc.writer.submit(lambda: svc.lease(body.worker, body.max))
            )
            return JSONResponse({"tasks": tasks})
        except ValueError as exc:
            raise HTTPException(409, str(exc)) from None

    @json_writes.post("/v1/sites/{site}/pause")
    def pause_site(site: str, body: PauseRequest | None = None) -> Any:
        """Pause a site by hand: none of its pages is planned or leased (its
        canaries still run) until a human resumes it; health never lifts it.
        ``recorded`` is false when it was paused already."""
        body = body or PauseRequest()
        try:
            return JSONResponse(svc.pause(site, by=body.by, reason=body.reason))
        except NotFound:
            raise HTTPException(404, "unknown site") from None

    @json_writes.post("/v1/sites/{site}/validators")
    def site_validators(site: str, body: ValidatorsRequest) -> Any:
        """Send conditional requests to a site's pages or not: off, its leases carry
        no validators (for a host whose 304s hide changes: ``GET /v1/calibration``).
        Recorded in its history; ``recorded`` is false when it already was so."""
        try:
            done = svc.engine.set_validators(
                site, body.on, by=body.by, reason=body.reason, now=svc.now()
            )
        except NotFound:
            raise HTTPException(404, "unknown site") from None
        return JSONResponse({"site": site, "validators": body.on, "recorded": done})

    app.include_router(json_writes)

    @app.post(
        "/v1/observations",
        response_model=IngestAnswer,
        dependencies=[Write],
        openapi_extra=_OBSERVATIONS_BODY,
        tags=["write"],
    )
    async def post_observations(request: Request) -> Any:
        """Report fetch observations (NDJSON or a JSON array). Good items are stored
        even when others are rejected; the answer comes once they are on disk."""
        body = await request.body()
        good, where, rejected = await run_in_threadpool(svc.parse_and_count, body)
        share = await asyncio.wrap_future(svc.submit_observations(good))
        return JSONResponse(svc.answer(good, where, rejected, share))

    @app.post("/v1/hints", dependencies=[Write], tags=["write"])
    async def post_hints(
        request: Request,
        source: Annotated[str | None, Query(min_length=1, max_length=100)] = None,
        seen_at: Annotated[str | None, Query()] = None,
        add_urls: bool = False,
    ) -> Any:
        """Report what a sitemap, feed or listing says of pages' last changes: a
        sitemap (``<urlset>``, read now unless ``seen_at``) or hint lines (JSON
        objects with ``url``, ``lastmod``, ``seen_at``, ``source``; the query's
        ``source`` and ``seen_at`` are their defaults). Good hints are stored even
        when others are rejected; hints for unknown URLs are counted and skipped
        unless ``add_urls``. As ``recrawl hints add``; ``GET /v1/hints`` tells
        which sources the plan trusts."""
        when = None
        if seen_at is not None:
            try:
                when = parse_lastmod(seen_at)
            except ValueError as exc:
                raise HTTPException(422, f"seen_at {exc}") from None
        body = await request.body()
        if is_gzip(body):  # gzipped, without a Content-Encoding saying so
            # bounded decompressed as DecodeBody bounds a body that says so
            body = await run_in_threadpool(
                _Inflate("gzip", settings.max_body_bytes).feed, body, True
            )
        good, bad, count = await run_in_threadpool(
            lambda: svc.parse_hints(body, source=source, seen_at=when)
        )
        result = await asyncio.wrap_future(svc.ingest_hints(good, add_urls=add_urls))
        if result.future:
            count += result.future
            if len(bad) < _MAX_REJECTED:
                bad.append(
                    {
                        "line": None,
                        "field": "seen_at",
                        "error": f"{result.future} hints seen after now (seen_at more than "
                        f"{HINT_FUTURE_S / 60:g} minutes after the service's clock): not stored",
                    }
                )
        return JSONResponse(
            {
                "received": len(good) + count - result.future,
                "stored": result.stored,
                "unchanged": result.unchanged,
                "unknown": result.unknown,
                "added_urls": result.added_urls,
                "rejected": count,
                "errors": bad,
            }
        )

    @app.post("/v1/sites/{site}/resume", dependencies=[Write], tags=["write"])
    def resume_site(site: str) -> Any:
        """Lift a site's pause: the owner has decided to go on."""
        try:
            return JSONResponse(svc.resume(site, by="api"))
        except NotFound:
            raise HTTPException(404, "unknown site") from None

    # -- reads -----------------------------------------------------------------------------

    @app.get("/v1/sites", dependencies=[Read], tags=["read"])
    def get_sites() -> Any:
        """Every site's health (as ``recrawl health --json``), controls and leases."""
        return JSONResponse({"sites": svc.sites()})

    @app.get("/v1/sites/{site}", dependencies=[Read], tags=["read"])
    def get_site(site: str, since: float = 0.0) -> Any:
        """One site's health, its history since ``since`` (unix seconds) and events."""
        out = svc.site(site, since)
        if out is None:
            raise HTTPException(404, "unknown site")
        return JSONResponse(out)

    @app.get("/v1/pages/{url:path}", dependencies=[Read], tags=["read"])
    def get_page(url: str, request: Request) -> Any:
        """A page's state, change-rate estimate (per day, with its standard
        deviation) and when it is next due. Append the URL raw
        (``/v1/pages/https://a.example/x?q=1``) or percent-encode it once as a whole
        (``/v1/pages/https%3A%2F%2Fa.example%2Fx%3Fq%3D1``)."""
        try:
            target = normalize_url(page_target(request.scope, url))
        except ValueError:
            raise HTTPException(404, "not an absolute http(s) URL") from None
        info = svc.engine.page_info(target, now=svc.now())
        if info is None:
            raise HTTPException(404, "unknown page")
        info["leased"] = target in svc.store.leased_urls(svc.now())
        return JSONResponse(info)

    @app.get("/v1/plan", dependencies=[Read], tags=["read"])
    def get_plan(limit: Annotated[int, Query(ge=0, le=100_000)] = 100) -> Any:
        """The current cycle's plan: budget, spend, split by reason and the first tasks,
        each with the ``headers`` its lease would carry (as ``recrawl plan --json``)."""
        try:
            plan = svc.plan()
        except ValueError as exc:
            raise HTTPException(409, str(exc)) from None
        return JSONResponse(svc.engine.plan_dict(plan, limit=limit))

    @app.get("/v1/budget", dependencies=[Read], tags=["read"])
    def get_budget(
        freshness: Annotated[list[float] | None, Query()] = None,
        per_day: Annotated[float | None, Query(gt=0, allow_inf_nan=False)] = None,
    ) -> Any:
        """What each mean freshness would cost a day at the learned rates, and what
        ``per_day`` (default: the configured budget) buys: as ``recrawl budget --json``.
        Repeat ``freshness`` for several targets (default 0.8, 0.9, 0.95)."""
        try:
            outlook = svc.engine.budget_outlook(
                *([freshness] if freshness else []), budget_per_day=per_day, now=svc.now()
            )
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        return JSONResponse(outlook.as_dict())

    @app.get("/v1/calibration", dependencies=[Read], tags=["read"])
    def get_calibration(
        days: Annotated[float, Query(gt=0, allow_inf_nan=False)] = 30.0,
        by: Annotated[Literal["site", "group"], Query()] = "site",
    ) -> Any:
        """Did the change model predict what the revisits of the last ``days`` (before
        the newest fetch) found, and can each site's 304s be trusted? As ``recrawl
        calibration --json``, recomputed at most once an hour (the report reads a
        whole window of the log); ``POST /v1/sites/{site}/validators`` acts on it."""
        try:
            cal = svc.calibration(days, by)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        return JSONResponse(cal.as_dict())

    @app.get("/v1/hints", dependencies=[Read], tags=["read"])
    def get_hints(
        days: Annotated[float, Query(gt=0, allow_inf_nan=False)] = HINT_TRUST_DAYS,
    ) -> Any:
        """Each hint source, and how far its ``lastmod`` agreed with the revisits of
        the last ``days`` per site: which the plan trusts. As ``recrawl hints --json``."""
        return JSONResponse(svc.hint_report(days))

    @app.get("/v1/stats", dependencies=[Read], tags=["read"])
    def get_stats() -> Any:
        """The same JSON as ``recrawl stats --json``."""
        return JSONResponse(svc.engine.stats())

    @app.get("/metrics", dependencies=[Read], tags=["read"], response_class=PlainTextResponse)
    def get_metrics() -> Response:
        """Prometheus text format."""
        from recrawl.service.metrics import CONTENT_TYPE, render_metrics

        return Response(render_metrics(svc), media_type=CONTENT_TYPE)

    # No token check, hence no 413 or 415 (refuse_too_large, refuse_undecodable):
    # it reads no body, so a body's coding or size cannot matter (the middleware
    # leaves one it cannot take unread), and a load balancer's probe gets 200
    # whatever it sends.
    # HEAD too (load balancers' probes may use it), kept out of the OpenAPI description
    @app.head("/healthz", include_in_schema=False)
    @app.get("/healthz", tags=["read"])
    def healthz() -> Any:
        """Liveness: the store answers (``GET`` or ``HEAD``)."""
        svc.store.outstanding_leases(svc.now())
        return JSONResponse({"status": "ok", "version": __version__})

    @app.get("/", dependencies=[Read], response_class=HTMLResponse, tags=["read"])
    def dashboard() -> HTMLResponse:
        """The dashboard: where the money goes, site health, freshness, the plan."""
        from recrawl.report.dashboard import render_dashboard

        try:
            plan: PlanResult | None = svc.plan()
        except ValueError:
            plan = None
        return HTMLResponse(
            render_dashboard(svc.engine, now=svc.now(), plan=plan, health=svc.health())
        )

    return app

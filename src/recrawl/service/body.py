"""Request bodies on their way in: size limit, decompression, refusals.

Two ASGI middlewares sit in front of the routes. :class:`BodyLimit` counts the
bytes on the wire and :class:`DecodeBody` decompresses ``gzip`` or ``deflate``
bodies as they arrive, bounded again once decompressed (a small "zip bomb"
costs at most ``max_body_bytes`` of memory). A body either cannot take is not
read: the request is passed on marked, and its route refuses it (413, 415)
once the token check has passed (:func:`refuse_too_large`,
:func:`refuse_undecodable`, called by :class:`~recrawl.service.auth.TokenCheck`),
so a client without the token learns nothing of how bodies are read.

A client that closes its connection before its body is all sent gets no
answer (none could reach it): :class:`BodyLimit` logs one INFO line and
the request ends there, stored nothing, without a traceback.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import HTTPException
from fastapi.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from recrawl.observe.compression import is_gzip

__all__ = [
    "ASGIApp",
    "BodyLimit",
    "DecodeBody",
    "Scope",
    "inflate",
    "refuse_too_large",
    "refuse_undecodable",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_log = logging.getLogger("recrawl.service")

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

    A client that disconnects before its body has all arrived ends the
    request with one INFO line: no answer, no traceback.
    """

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._limited(scope, receive, send)
        except ClientDisconnect:
            client = scope.get("client") or ("?", 0)
            _log.info(
                "client %s:%s disconnected mid-body: %s %s not read, nothing stored",
                client[0],
                client[1],
                scope.get("method", "?"),
                scope.get("path", "?"),
            )

    async def _limited(self, scope: Scope, receive: Receive, send: Send) -> None:
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


def inflate(body: bytes, coding: str, limit: int) -> bytes:
    """A whole ``body`` in ``coding`` (``gzip``, ``x-gzip``, ``deflate``)
    decompressed to at most ``limit`` bytes, as :class:`DecodeBody` reads one
    (HTTPException 413 past the limit, 400 on bytes not of the coding)."""
    return _Inflate(coding, limit).feed(body, True)

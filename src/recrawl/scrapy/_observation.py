"""A Scrapy download as a raw recrawl observation: bytes, latency, route, validators.

Pure functions of a :class:`scrapy.Request` and what came back (a
:class:`scrapy.http.Response` or the exception the download raised), so they
are tested without a crawl. Byte counts follow :mod:`recrawl.crawl.fetch`:
sent = request line + headers (+ body), received = status line + headers +
body as transferred; headers serialised as HTTP/1.1 writes them
(``Name: value\\r\\n``). Scrapy's downloader adds ``Host`` and, when needed,
``Content-Length`` itself, so they are counted here too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

__all__ = [
    "bytes_received",
    "bytes_sent",
    "error_word",
    "json_safe",
    "record_of",
]

_HTTP11: Final = len(" HTTP/1.1\r\n")
_CRLF: Final = 2

_TIMEOUT: Final = ("timeout", "timedout")
_DNS: Final = ("dnslookup", "cannotresolvehost")
_TLS: Final = ("ssl", "tls", "certificate")
_RESET: Final = (
    "connectionrefused",
    "connectionlost",
    "connectiondone",
    "connectionreset",
    "connecterror",
    "responsefailed",
    "responseneverreceived",
    "dataloss",
    "downloadfailed",
    "downloadconnectionrefused",
)


def _header_lines(headers: Iterable[tuple[Any, Any]]) -> int:
    n = 0
    for name, values in headers:
        for value in values if isinstance(values, list | tuple) else [values]:
            n += len(name) + 2 + len(value) + _CRLF  # "Name: value\r\n"
    return n


def bytes_sent(
    method: str, url: str, headers: Iterable[tuple[Any, Any]], body: bytes, proxy: str | None
) -> int:
    """Wire bytes of a request (``headers``: ``(name, values)`` pairs of bytes).

    Through a proxy the request line carries the absolute URL, as the proxy
    receives it. ``Host`` is counted when absent from ``headers``.

    >>> bytes_sent("GET", "http://a.example/p/1", [(b"Accept", [b"*/*"])], b"", None)
    51
    """
    parts = urlsplit(url)
    target = url if proxy else (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    n = len(method) + 1 + len(target) + _HTTP11
    pairs = list(headers)
    n += _header_lines(pairs)
    if not any(bytes(name).lower() == b"host" for name, _ in pairs):
        n += len("Host: ") + len(parts.netloc) + _CRLF
    if body:
        n += len(body)
        if not any(bytes(name).lower() == b"content-length" for name, _ in pairs):
            n += len("Content-Length: ") + len(str(len(body))) + _CRLF
    return n + _CRLF


def bytes_received(status: int, headers: Iterable[tuple[Any, Any]], body: bytes) -> int:
    """Wire bytes of a response: status line, headers and the body as it came
    (Scrapy's downloader hands over the body before any decompression).

    >>> bytes_received(200, [(b"Content-Length", [b"5"])], b"hello")
    43
    """
    reason_guess = 3  # " OK" and friends: the reason phrase is not kept by Scrapy
    return len("HTTP/1.1 ") + 3 + reason_guess + _CRLF + _header_lines(headers) + _CRLF + len(body)


def error_word(exc: BaseException) -> str:
    """The observation's ``error`` word for an exception a download raised:
    ``timeout``, ``dns``, ``tls``, ``connection_reset`` (refused, reset, lost,
    a broken exchange) or ``error``. Read from the exception's class names, so
    it holds across Scrapy and Twisted versions.

    >>> error_word(TimeoutError()), error_word(ConnectionRefusedError())
    ('timeout', 'connection_reset')
    """
    names = [c.__name__.lower() for c in type(exc).__mro__]
    for words, word in (
        (_TIMEOUT, "timeout"),
        (_DNS, "dns"),
        (_TLS, "tls"),
        (_RESET, "connection_reset"),
    ):
        if any(w in name for name in names for w in words):
            return word
    return "error"


def json_safe(value: Any) -> Any:
    """``value`` as plain JSON values (dates, decimals and the like as their ``str``).

    >>> import decimal
    >>> json_safe({"price": decimal.Decimal("9.99"), "tags": ("a", "b")})
    {'price': '9.99', 'tags': ['a', 'b']}
    """
    return json.loads(json.dumps(value, default=str))


def record_of(items: list[Mapping[str, Any]], fields: Iterable[str]) -> dict[str, Any] | None:
    """The record of a response from the items its callback yielded.

    One item is the record; several are ``{"items": [...]}`` in the order they
    came. With ``fields`` (the page type's fields in ``recrawl.toml``) only
    those fields of each item count. None when there is no item.

    >>> record_of([{"name": "A", "price": 2, "seen": "09:00"}], ["name", "price"])
    {'name': 'A', 'price': 2}
    >>> record_of([{"n": 1}, {"n": 2}], [])
    {'items': [{'n': 1}, {'n': 2}]}
    """
    if not items:
        return None
    keep = list(fields)
    picked = [{k: v for k, v in i.items() if k in keep} if keep else dict(i) for i in items]
    out: dict[str, Any] = json_safe(picked[0] if len(picked) == 1 else {"items": picked})
    return out

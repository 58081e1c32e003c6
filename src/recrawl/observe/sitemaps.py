"""Sitemaps: what a site lists, and when it says each page last changed.

A sitemap (sitemaps.org 0.9) is either a ``<urlset>``, whose ``<url>``
entries give a page's ``<loc>`` and, often, its ``<lastmod>``, or a
``<sitemapindex>``, whose ``<sitemap>`` entries name further sitemaps (with
the time each last changed). Either may be gzipped (``sitemap.xml.gz``,
served without a ``Content-Encoding``); it is recognised by its first bytes
and inflated to at most :data:`MAX_SITEMAP_BYTES`, so a small "zip bomb"
costs that much memory and no more.

Each ``lastmod`` becomes a :class:`Hint` (what the source said of one page
when it was read); :mod:`recrawl.estimate.hints` judges whether a site's
sitemap can be trusted. Everything here is pure: bytes in, hints out, no I/O
and no clock (``seen_at`` is given).

>>> doc = read_sitemap_document(
...     b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
...     b'<url><loc>https://shop.example/p/1</loc><lastmod>2024-05-01</lastmod></url>'
...     b'<url><loc>https://shop.example/p/2</loc></url></urlset>', seen_at=1.7e9)
>>> doc.kind, doc.urls, [h.url for h in doc.hints]
('urlset', ['https://shop.example/p/1', 'https://shop.example/p/2'], ['https://shop.example/p/1'])
"""

from __future__ import annotations

import io
import math
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any, Final, Literal

from recrawl._exceptions import InvalidHint
from recrawl.observe.compression import is_gzip
from recrawl.observe.observation import normalize_url, parse_timestamp

__all__ = [
    "MAX_INDEX_DEPTH",
    "MAX_SITEMAPS",
    "MAX_SITEMAP_BYTES",
    "Hint",
    "SitemapDocument",
    "SitemapRef",
    "inflate",
    "parse_lastmod",
    "read_sitemap",
    "read_sitemap_document",
]

MAX_SITEMAP_BYTES: Final = 50 * 1024 * 1024
"""Bytes a sitemap may hold once inflated: sitemaps.org's own limit (50 MiB)."""
MAX_INDEX_DEPTH: Final = 3
"""Sitemap indexes followed below the first one. sitemaps.org forbids nesting
indexes; sites nest them anyway, so a few levels are read and no more."""
MAX_SITEMAPS: Final = 1000
"""Sitemaps read from one index tree, all levels together (sitemaps.org allows
50,000 per index; past a thousand the read would be a crawl of its own)."""


@dataclass(frozen=True, slots=True)
class Hint:
    """What a source said of one page when it was read.

    ``seen_at``: unix seconds the source was read; ``lastmod``: unix seconds
    it gives as the page's last change (a date alone: its last second, so a
    change later that day is never taken for one before a fetch that day).
    """

    url: str
    seen_at: float
    source: str
    lastmod: float


@dataclass(frozen=True, slots=True)
class SitemapRef:
    """One ``<sitemap>`` of an index: its URL and, when given, the unix
    seconds it last changed (None: not said)."""

    url: str
    lastmod: float | None = None


@dataclass
class SitemapDocument:
    """One sitemap file, read whole.

    ``kind``: ``"urlset"`` (pages) or ``"index"`` (further sitemaps, in
    ``sitemaps``). ``urls``: every page it lists, in order, with or without a
    ``lastmod`` (for discovery); ``hints``: those with one; ``invalid``:
    entries refused (a bad ``<loc>`` or ``<lastmod>``), each naming its entry.
    """

    kind: Literal["urlset", "index"]
    urls: list[str] = field(default_factory=list)
    hints: list[Hint] = field(default_factory=list)
    sitemaps: list[SitemapRef] = field(default_factory=list)
    invalid: list[InvalidHint] = field(default_factory=list)


def parse_lastmod(value: Any) -> float:
    """Unix seconds from a sitemap's W3C datetime, RFC 3339 or unix seconds.

    A date alone (``2024-05-01``) is its last second, UTC; a time without an
    offset is refused (its zone is unknown).

    >>> parse_lastmod("2024-05-01") - parse_lastmod("2024-05-01T00:00:00Z")
    86399.0
    >>> parse_lastmod("2024-05-01T10:00+02:00")
    1714550400.0
    """
    if isinstance(value, str):
        s = value.strip()
        if len(s) == 10 and s[4] == "-" and s[7] == "-":
            try:
                day = datetime.strptime(s, "%Y-%m-%d").replace(tzinfo=UTC)
            except ValueError:
                raise ValueError("is not a date (YYYY-MM-DD)") from None
            return day.timestamp() + 86_399.0
        if s.endswith(("z", "Z")):
            s = s[:-1] + "+00:00"
        return parse_timestamp(s)
    return parse_timestamp(value)


def inflate(data: bytes, *, limit: int = MAX_SITEMAP_BYTES) -> bytes:
    """``data`` as is, or inflated when it is gzip (by its first bytes), to at
    most ``limit`` bytes: ValueError past it, or when the gzip is broken or cut
    short. (One gzip member: what follows it is ignored.)

    >>> import gzip
    >>> inflate(gzip.compress(b"<urlset/>")), inflate(b"<urlset/>")
    (b'<urlset/>', b'<urlset/>')
    """
    if not is_gzip(data):
        return data
    z = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = z.decompress(data, limit + 1)
    except zlib.error as exc:
        raise ValueError(f"not a readable gzip ({exc})") from None
    if len(out) > limit or z.unconsumed_tail:
        raise ValueError(f"larger than {limit} bytes once inflated")
    if not z.eof:
        raise ValueError("not a readable gzip (cut short)")
    return out


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _check(seen_at: float, source: str) -> tuple[float, str]:
    if not (isinstance(seen_at, int | float) and math.isfinite(seen_at) and seen_at >= 0):
        raise ValueError("seen_at must be unix seconds")
    src = source.strip()
    if not src or len(src) > 100 or "\x00" in src:
        raise ValueError("source must be a name of 1 to 100 characters")
    return float(seen_at), src


def _events(data: IO[bytes]) -> Iterator[tuple[str, ET.Element]]:
    """``iterparse``'s start and end events, with an encoding expat does not know
    (``<?xml version="1.0" encoding="bogus"?>``: a LookupError out of the parser)
    raised as the ValueError of a document that cannot be read."""
    try:
        yield from ET.iterparse(data, events=("start", "end"))
    except LookupError as exc:
        raise ValueError(f"not a readable XML document ({exc})") from None


def _entries(
    data: IO[bytes],
) -> tuple[str | None, Iterator[tuple[int, str, str]]]:
    """The root element's local name, and ``(entry number, loc, lastmod)`` for
    each ``<url>`` or ``<sitemap>`` entry under it, read as a stream."""
    events = _events(data)
    root = None
    for _, el in events:  # the first event opens the root element
        root = el
        break
    if root is None:
        return None, iter(())
    name = _local(root.tag)
    ns = root.tag[: -len(name)]  # "{http://www.sitemaps.org/schemas/sitemap/0.9}" or ""
    entry_tag = ns + ("sitemap" if name == "sitemapindex" else "url")
    loc_tag, lastmod_tag = ns + "loc", ns + "lastmod"
    top = root

    def entries() -> Iterator[tuple[int, str, str]]:
        n = 0
        for event, el in events:
            if event != "end" or el.tag != entry_tag:
                continue
            n += 1
            loc = (el.findtext(loc_tag) or "").strip()
            lastmod = (el.findtext(lastmod_tag) or "").strip()
            top.clear()  # done with this entry (and with the ones before it)
            yield n, loc, lastmod

    return name, entries()


def read_sitemap(
    data: IO[bytes], *, seen_at: float, source: str = "sitemap"
) -> Iterator[Hint | InvalidHint]:
    """Hints from a sitemap (``<urlset>``, sitemaps.org 0.9), read as a stream.

    Each ``<url>`` with a ``<loc>`` and a ``<lastmod>`` gives a hint seen at
    ``seen_at``; one without ``<lastmod>`` says nothing and is skipped; a bad
    one is an :class:`InvalidHint` naming its ``<loc>`` (``line`` is the
    entry's number). A sitemap index (``<sitemapindex>``) raises ValueError:
    give its sitemaps one by one, or read it with :func:`read_sitemap_document`.
    """
    seen, src = _check(seen_at, source)
    name, entries = _entries(data)
    if name is None:
        return
    if name == "sitemapindex":
        raise ValueError("a sitemap index: give the sitemaps it lists one by one")
    if name != "urlset":
        raise ValueError(f"not a sitemap: the root element is <{name}>, not <urlset>")
    when: dict[str, float] = {}  # a sitemap repeats its dates: parse each once
    for n, loc, lastmod in entries:
        if not lastmod:
            continue
        got = _entry(n, loc, lastmod, when)
        if isinstance(got, InvalidHint):
            yield got
        elif got[1] is not None:
            yield Hint(url=got[0], seen_at=seen, source=src, lastmod=got[1])


def _entry(
    n: int, loc: str, lastmod: str, when: dict[str, float]
) -> tuple[str, float | None] | InvalidHint:
    """``(normalised loc, lastmod seconds or None)`` of entry ``n``, or why not."""
    if not loc:
        return InvalidHint("entry without <loc>", field="url", line=n)
    try:
        url = normalize_url(loc)
    except ValueError as exc:
        return InvalidHint(f"{exc} (<loc>{loc}</loc>)", field="url", line=n)
    if not lastmod:
        return url, None
    t = when.get(lastmod)
    if t is None:
        try:
            t = parse_lastmod(lastmod)
        except ValueError as exc:
            return InvalidHint(f"{exc} (<loc>{loc}</loc>)", field="lastmod", line=n)
        if len(when) < 100_000:
            when[lastmod] = t
    return url, t


def read_sitemap_document(
    data: bytes,
    *,
    seen_at: float,
    source: str = "sitemap",
    limit: int = MAX_SITEMAP_BYTES,
) -> SitemapDocument:
    """A whole sitemap file, a ``<urlset>`` or a ``<sitemapindex>``, gzipped
    or not (:func:`inflate` to ``limit`` bytes), read at ``seen_at`` (unix
    seconds) as ``source``.

    Raises ValueError when it is not a sitemap (another root element, or past
    ``limit`` inflated) and ``xml.etree.ElementTree.ParseError`` when it is
    not well-formed XML.

    >>> doc = read_sitemap_document(
    ...     b"<sitemapindex><sitemap><loc>https://a.example/s1.xml.gz</loc>"
    ...     b"<lastmod>2024-05-01T00:00:00Z</lastmod></sitemap></sitemapindex>", seen_at=0)
    >>> doc.kind, doc.sitemaps
    ('index', [SitemapRef(url='https://a.example/s1.xml.gz', lastmod=1714521600.0)])
    """
    seen, src = _check(seen_at, source)
    name, entries = _entries(io.BytesIO(inflate(data, limit=limit)))
    if name not in ("urlset", "sitemapindex"):
        raise ValueError(f"not a sitemap: the root element is <{name}>, not <urlset>")
    doc = SitemapDocument(kind="urlset" if name == "urlset" else "index")
    when: dict[str, float] = {}
    for n, loc, lastmod in entries:
        got = _entry(n, loc, lastmod, when)
        if isinstance(got, InvalidHint):
            doc.invalid.append(got)
            continue
        url, t = got
        if doc.kind == "index":
            doc.sitemaps.append(SitemapRef(url, t))
            continue
        doc.urls.append(url)
        if t is not None:
            doc.hints.append(Hint(url=url, seen_at=seen, source=src, lastmod=t))
    return doc

"""Feeds: the pages an RSS or Atom feed announces, and when each changed.

A feed lists a site's latest items, each with a link and a date: Atom's
``<updated>`` (else ``<published>``), RSS 2.0's ``<pubDate>``. Read by
``feedparser`` (RSS 0.9x, 1.0, 2.0 and Atom, lenient about the malformed
feeds sites serve), each dated item becomes a :class:`~recrawl.observe.sitemaps.Hint`
whose ``lastmod`` is that date; :mod:`recrawl.estimate.hints` judges whether
a site's feed can be trusted as it judges a sitemap. A feed names only its
latest items: a page it no longer lists is simply not hinted.

Pure: bytes in (a gzipped feed is inflated, bounded, as a sitemap is), hints
out; ``feedparser`` is only ever given bytes, never a URL, so it fetches
nothing.

>>> doc = read_feed(b'<rss version="2.0"><channel><item><link>/p/1</link>'
...                 b'<pubDate>Wed, 01 May 2024 10:00:00 +0200</pubDate></item></channel></rss>',
...                 seen_at=1.8e9, base_url="https://news.example/feed.xml")
>>> doc.format, doc.urls, doc.hints[0].lastmod
('rss20', ['https://news.example/p/1'], 1714550400.0)
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

import feedparser

from recrawl._exceptions import InvalidHint
from recrawl.observe.observation import normalize_url
from recrawl.observe.sitemaps import MAX_SITEMAP_BYTES, Hint, inflate

__all__ = ["FeedDocument", "read_feed"]


@dataclass
class FeedDocument:
    """One feed, read whole.

    ``format``: feedparser's name of it (``rss20``, ``atom10``, …);
    ``urls``: every item's link, in order (for discovery); ``hints``: the
    dated ones; ``invalid``: items refused (no usable link), each naming its
    item (``line``: the item's number, from 1).
    """

    format: str
    urls: list[str] = field(default_factory=list)
    hints: list[Hint] = field(default_factory=list)
    invalid: list[InvalidHint] = field(default_factory=list)


def _link(entry: Any) -> str | None:
    """The item's page: its alternate link, else its link, else a permalink guid."""
    for link in entry.get("links") or ():
        if link.get("rel", "alternate") == "alternate" and link.get("href"):
            return str(link["href"])
    if entry.get("link"):
        return str(entry["link"])
    if entry.get("guidislink") and entry.get("id"):
        return str(entry["id"])
    return None


def read_feed(
    data: bytes,
    *,
    seen_at: float,
    source: str = "feed",
    base_url: str | None = None,
    limit: int = MAX_SITEMAP_BYTES,
) -> FeedDocument:
    """The items of an RSS or Atom feed read at ``seen_at`` (unix seconds) as
    ``source``; relative links resolve against ``base_url`` (the feed's URL).

    Raises ValueError when ``data`` is no feed at all (feedparser found
    neither a feed format nor an item) or inflates past ``limit`` bytes.
    """
    body = inflate(data, limit=limit)
    headers = {"content-location": base_url} if base_url else {}
    parsed = feedparser.parse(body, response_headers=headers)
    entries = parsed.get("entries") or []
    fmt = str(parsed.get("version") or "")
    if not fmt and not entries:
        raise ValueError("not a feed: neither RSS nor Atom, and no items")
    doc = FeedDocument(format=fmt or "unknown")
    for n, entry in enumerate(entries, 1):
        link = _link(entry)
        if not link:
            doc.invalid.append(InvalidHint("item without a link", field="url", line=n))
            continue
        try:
            url = normalize_url(urljoin(base_url, link) if base_url else link)
        except ValueError as exc:
            doc.invalid.append(InvalidHint(f"{exc} (link {link})", field="url", line=n))
            continue
        doc.urls.append(url)
        # the entry's own keys: feedparser's get() maps a missing updated_parsed
        # to published_parsed with a DeprecationWarning
        when = dict.get(entry, "updated_parsed") or dict.get(entry, "published_parsed")
        if when is not None:
            lastmod = float(calendar.timegm(when))
            doc.hints.append(Hint(url=url, seen_at=float(seen_at), source=source, lastmod=lastmod))
    return doc

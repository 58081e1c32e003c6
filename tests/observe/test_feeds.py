"""RSS 2.0 and Atom feeds read into hints."""

from __future__ import annotations

import gzip

import pytest

from recrawl.observe.feeds import read_feed
from recrawl.observe.sitemaps import parse_lastmod

T0 = 1_800_000_000.0

RSS = b"""<?xml version="1.0"?>
<rss version="2.0"><channel><title>News</title><link>https://news.example/</link>
<item><title>One</title><link>/a/1</link><pubDate>Wed, 01 May 2024 10:00:00 +0200</pubDate></item>
<item><title>Two</title><link>https://news.example/a/2</link></item>
<item><title>Three</title><guid isPermaLink="true">https://news.example/a/3</guid>
  <pubDate>Thu, 02 May 2024 00:00:00 GMT</pubDate></item>
<item><title>No link</title><description>x</description></item>
</channel></rss>"""

ATOM = b"""<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"><title>Docs</title><id>tag:docs</id>
<updated>2024-05-03T00:00:00Z</updated>
<entry><title>Guide</title><id>tag:docs,1</id>
  <link rel="enclosure" href="https://docs.example/guide.pdf"/>
  <link href="https://docs.example/guide"/>
  <published>2024-04-01T00:00:00Z</published><updated>2024-05-02T12:00:00Z</updated></entry>
</feed>"""


def test_rss_items_give_their_links_and_dates() -> None:
    doc = read_feed(RSS, seen_at=T0, base_url="https://news.example/feed.xml")
    assert doc.format == "rss20"
    assert doc.urls == [
        "https://news.example/a/1",
        "https://news.example/a/2",
        "https://news.example/a/3",
    ]
    assert [(h.url, h.lastmod) for h in doc.hints] == [
        ("https://news.example/a/1", parse_lastmod("2024-05-01T08:00:00Z")),
        ("https://news.example/a/3", parse_lastmod("2024-05-02T00:00:00Z")),
    ]
    assert all(h.seen_at == T0 and h.source == "feed" for h in doc.hints)
    (bad,) = doc.invalid
    assert bad.line == 4 and bad.field == "url"


def test_an_atom_entry_is_its_page_as_last_updated() -> None:
    doc = read_feed(gzip.compress(ATOM), seen_at=T0, source="atom")
    assert doc.format == "atom10"
    (h,) = doc.hints
    assert (h.url, h.lastmod, h.source) == (
        "https://docs.example/guide",
        parse_lastmod("2024-05-02T12:00:00Z"),
        "atom",
    )


def test_a_page_that_is_no_feed_is_refused() -> None:
    with pytest.raises(ValueError, match="not a feed"):
        read_feed(b"<html><body><p>hello</p></body></html>", seen_at=T0)

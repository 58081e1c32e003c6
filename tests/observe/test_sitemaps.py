"""Sitemaps and sitemap indexes, gzipped or not, read whole."""

from __future__ import annotations

import gzip
import io
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recrawl.estimate.hints import read_sitemap as read_sitemap_from_estimate
from recrawl.observe.sitemaps import (
    Hint,
    SitemapRef,
    inflate,
    parse_lastmod,
    read_sitemap,
    read_sitemap_document,
)

T0 = 1_800_000_000.0
NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def urlset(*entries: tuple[str, str | None]) -> bytes:
    body = "".join(
        f"<url><loc>{loc}</loc>" + (f"<lastmod>{lm}</lastmod>" if lm else "") + "</url>"
        for loc, lm in entries
    )
    return f'<?xml version="1.0"?><urlset {NS}>{body}</urlset>'.encode()


def test_every_listed_page_is_found_and_the_dated_ones_hinted() -> None:
    doc = read_sitemap_document(
        urlset(("https://a.example/p/1", "2024-05-01"), ("https://a.example/p/2", None),
               ("https://a.example/p/3", "yesterday")),
        seen_at=T0, source="sitemap",
    )  # fmt: skip
    assert doc.kind == "urlset"
    assert doc.urls == ["https://a.example/p/1", "https://a.example/p/2"]
    assert doc.hints == [Hint("https://a.example/p/1", T0, "sitemap", parse_lastmod("2024-05-01"))]
    (bad,) = doc.invalid
    assert bad.field == "lastmod" and bad.line == 3 and "p/3" in str(bad)


def test_a_gzipped_sitemap_reads_as_the_plain_one() -> None:
    plain = urlset(("https://a.example/p/1", "2024-05-01T10:00:00Z"))
    assert read_sitemap_document(gzip.compress(plain), seen_at=T0) == read_sitemap_document(
        plain, seen_at=T0
    )


def test_a_gzip_bomb_is_refused_past_the_limit() -> None:
    bomb = gzip.compress(b"<urlset>" + b" " * 5_000_000 + b"</urlset>")
    assert len(bomb) < 10_000
    with pytest.raises(ValueError, match="larger than 1000000 bytes"):
        read_sitemap_document(bomb, seen_at=T0, limit=1_000_000)
    with pytest.raises(ValueError, match="gzip"):
        inflate(bomb[:50])


def test_an_index_names_its_sitemaps_with_their_dates() -> None:
    index = (
        f"<sitemapindex {NS}><sitemap><loc>https://a.example/s1.xml.gz</loc>"
        "<lastmod>2024-05-01T00:00:00Z</lastmod></sitemap>"
        "<sitemap><loc>https://a.example/s2.xml</loc></sitemap></sitemapindex>"
    ).encode()
    doc = read_sitemap_document(gzip.compress(index), seen_at=T0)
    assert doc.kind == "index" and doc.urls == [] and doc.hints == []
    assert doc.sitemaps == [
        SitemapRef("https://a.example/s1.xml.gz", parse_lastmod("2024-05-01T00:00:00Z")),
        SitemapRef("https://a.example/s2.xml", None),
    ]
    with pytest.raises(ValueError, match="sitemap index"):  # the stream reader still refuses
        list(read_sitemap(io.BytesIO(index), seen_at=T0))


def test_other_documents_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="<html>"):
        read_sitemap_document(b"<html><body/></html>", seen_at=T0)
    with pytest.raises(ET.ParseError):
        read_sitemap_document(b"<urlset><url>", seen_at=T0)


def test_the_estimate_module_still_reads_sitemaps() -> None:
    assert read_sitemap_from_estimate is read_sitemap


@given(st.lists(st.tuples(st.integers(0, 10_000), st.booleans()), max_size=30))
def test_the_stream_reader_and_the_whole_reader_agree(entries: list[tuple[int, bool]]) -> None:
    data = urlset(*((f"https://a.example/p/{i}", "2024-05-01" if dated else None)
                    for i, dated in entries))  # fmt: skip
    doc = read_sitemap_document(data, seen_at=T0)
    assert list(read_sitemap(io.BytesIO(data), seen_at=T0)) == doc.hints
    assert len(doc.urls) == len(entries)
    assert inflate(gzip.compress(data)) == data

"""Fuzzing the parsers of outside input (issue 30): observations, hint lines,
sitemaps and feeds.

The property, for each: whatever the input, the parser returns a valid object
or raises the error it documents (:class:`~recrawl.InvalidObservation`,
:class:`~recrawl.InvalidHint`, ``ValueError`` / ``ParseError`` for a document
that is not a sitemap or not XML), never another exception, and within a
deadline. ``make test`` runs each target briefly (:data:`BRIEF` examples, a few
seconds in all); ``benchmarks/fuzz.py`` runs them long (``--examples``), and
``RECRAWL_FUZZ_EXAMPLES`` sets the count here too.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recrawl._exceptions import InvalidHint, InvalidObservation
from recrawl.estimate.hints import parse_hint, read_hint_document, read_hints
from recrawl.observe.feeds import FeedDocument, read_feed
from recrawl.observe.observation import Observation, parse_observation, read_observations
from recrawl.observe.sitemaps import (
    Hint,
    SitemapDocument,
    parse_lastmod,
    read_sitemap,
    read_sitemap_document,
)

BRIEF = int(os.environ.get("RECRAWL_FUZZ_EXAMPLES", "60"))
"""Examples per target in the test run."""
DEADLINE = timedelta(seconds=5)
"""Longest one example may take: a parser that loops or backtracks past it fails."""

# -- strategies ------------------------------------------------------------------------------

OBSERVATION_FIELDS = (
    "url", "fetched_at", "status", "error", "site", "page_type", "bytes_sent",
    "bytes_received", "credits", "rendered", "latency_ms", "route", "etag",
    "last_modified", "conditional", "record_hash", "record_empty", "record", "outcome", "id",
    "title", "body_excerpt", "lease_id", "canary", "moved_to",
)  # fmt: skip
HINT_FIELDS = ("url", "lastmod", "seen_at", "source")

urls = st.one_of(
    st.sampled_from(
        [
            "https://a.example/p",
            "http://A.Example:80/p?utm_source=x&b=1#f",
            "https://a.example:99999/",
            "https://[::1]/x",
            "https://a.example:0x1/",
            "https://ä.example/ü",
            "https://a.example/\x00",
            "ftp://a.example/",
            "https:///nohost",
            "//a.example/p",
            "https://a.example:/p",
            "https://user:pw@a.example/p",
            "https://[bad/",
            "https://a.example/" + "x" * 3000,
        ]
    ),
    st.builds(
        lambda scheme, host, port, path: f"{scheme}://{host}{port}/{path}",
        st.sampled_from(["http", "https", "HTTP", "javascript", ""]),
        st.text(min_size=0, max_size=12),
        st.sampled_from(["", ":", ":8080", ":-1", ":65536", ":1e3", ": 80"]),
        st.text(max_size=20),
    ),
    st.text(max_size=40),
)
timestamps = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            "2024-05-01T00:00:00Z",
            "2024-05-01",
            "2024-05-01T00:00:00",
            "2024-02-30",
            "1714521600",
            "9999-12-31T23:59:59+14:00",
            "0000-01-01",
            "-1",
            "1e400",
            "2024-05-01T00:00:00.123456789+01:00",
            "nan",
            "inf",
            "",
            " ",
            "2024",
            "2024-13-01T00:00:00Z",
            "+002024-05-01",
            "2024-05-01T24:00:00Z",
        ]
    ),
    st.text(max_size=30),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _field_value(name: str) -> st.SearchStrategy[Any]:
    if name in ("url", "moved_to"):
        return urls | json_values
    if name in ("fetched_at", "lastmod", "seen_at"):
        return timestamps | json_values
    if name == "status":
        return st.integers(min_value=-1000, max_value=1000) | json_values
    if name == "record":
        return st.dictionaries(st.text(max_size=8), json_values, max_size=5) | json_values
    return json_values


def _objects(fields: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    """Dicts of the known fields (each with plausible or arbitrary values) and stray keys."""
    known = st.fixed_dictionaries({}, optional={name: _field_value(name) for name in fields})
    stray = st.dictionaries(st.text(max_size=10), json_values, max_size=3)
    return st.builds(lambda a, b: {**b, **a}, known, stray)


observations = st.one_of(_objects(OBSERVATION_FIELDS), json_values)
hints = st.one_of(_objects(HINT_FIELDS), json_values)


def _json_line(obj: Any) -> str:
    import json

    return json.dumps(obj, default=str)


raw_lines = st.one_of(
    st.binary(max_size=200).map(lambda b: b.decode("utf-8", "surrogateescape")),
    st.text(max_size=200),
    _objects(OBSERVATION_FIELDS).map(_json_line),
    _objects(HINT_FIELDS).map(_json_line),
    # a valid line cut, or with a byte changed
    st.tuples(_objects(OBSERVATION_FIELDS).map(_json_line), st.integers(0, 300)).map(
        lambda t: t[0][: t[1]]
    ),
)
line_lists = st.lists(raw_lines, max_size=4)

# XML-ish documents: elements of the sitemap, RSS and Atom vocabularies (and others),
# namespaced or not, holding URLs, dates, entities, CDATA, comments and junk.
SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
TAGS = (
    "urlset", "sitemapindex", "url", "sitemap", "loc", "lastmod", "changefreq", "rss",
    "channel", "item", "link", "guid", "pubDate", "feed", "entry", "updated", "published",
    "title", "x", "html",
)  # fmt: skip
texts = st.one_of(
    urls,
    timestamps.map(str),
    st.sampled_from(
        [
            "&amp;",
            "&lt;",
            "&#0;",
            "&#x10FFFF;",
            "&#xD800;",
            "&bogus;",
            "&#99999999;",
            "<![CDATA[https://a.example/c]]>",
            "<!-- c -->",
            "<?pi x?>",
            "]]>",
            "<",
            "&",
        ]
    ),
    st.text(max_size=20).map(
        lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    ),
)


def _element(tag: str, attrs: str, children: list[str]) -> str:
    return f"<{tag}{attrs}>{''.join(children)}</{tag}>"


attributes = st.sampled_from(
    ["", f' xmlns="{SITEMAP_NS}"', ' xmlns="http://www.w3.org/2005/Atom"', ' version="2.0"',
     ' href="https://a.example/h"', ' rel="alternate" href="/rel"', ' a="1" a="2"', ' xmlns:x="u"']
)  # fmt: skip


def _nest(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.builds(_element, st.sampled_from(TAGS), attributes, st.lists(inner, max_size=4))


elements = st.recursive(texts, _nest, max_leaves=15)
PROLOGUES = (
    "",
    '<?xml version="1.0" encoding="UTF-8"?>',
    '<?xml version="1.0" encoding="latin-1"?>',
    '<?xml version="1.0" encoding="bogus"?>',
    "\ufeff",
    '<!DOCTYPE urlset [<!ENTITY e "https://a.example/e">]>',
    '<!DOCTYPE x [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
    '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">]>',
    '<!DOCTYPE x SYSTEM "file:///etc/passwd">',
)


def _document(prologue: str, root: str, body: list[str], cut: int | None, how: str) -> bytes:
    text = prologue + _element(root, f' xmlns="{SITEMAP_NS}"' if how == "ns" else "", body)
    data = text.encode("utf-8", "surrogatepass")
    if cut is not None:
        data = data[:cut]
    return gzip.compress(data) if how == "gzip" else data


documents = st.one_of(
    st.builds(
        _document,
        st.sampled_from(PROLOGUES),
        st.sampled_from(TAGS),
        st.lists(elements, max_size=5),
        st.none() | st.integers(0, 400),
        st.sampled_from(["plain", "ns", "gzip"]),
    ),
    st.binary(max_size=300),
    st.binary(max_size=100).map(lambda b: b"\x1f\x8b" + b),  # a gzip header and junk
)

# -- the checks: what each parser may return or raise ------------------------------------------


def check_observation(raw: Any) -> None:
    try:
        got = parse_observation(raw)
    except InvalidObservation as exc:
        assert str(exc)
        return
    assert isinstance(got, Observation)
    assert got.url.startswith(("http://", "https://"))
    assert math.isfinite(got.fetched_at)


def check_observation_lines(lines: list[str]) -> None:
    for fmt in ("jsonl", "csv"):
        for n, item in read_observations(lines, fmt=fmt):  # type: ignore[arg-type]
            assert 1 <= n <= len(lines)
            assert isinstance(item, Observation | InvalidObservation)


def check_hint(raw: Any) -> None:
    try:
        got = parse_hint(raw, source="fuzz", seen_at=1.7e9)
    except InvalidHint as exc:
        assert str(exc)
        return
    assert isinstance(got, Hint)
    assert math.isfinite(got.lastmod)
    assert math.isfinite(got.seen_at)


def check_hint_lines(lines: list[str]) -> None:
    for n, item in read_hints(lines, source="fuzz"):
        assert 1 <= n <= len(lines)
        assert isinstance(item, Hint | InvalidHint)


def check_lastmod(value: Any) -> None:
    try:
        t = parse_lastmod(value)
    except ValueError:
        return
    assert math.isfinite(t)


def _sitemap_items(data: bytes) -> None:
    doc = read_sitemap_document(data, seen_at=1.7e9, limit=1 << 20)
    assert isinstance(doc, SitemapDocument)
    assert all(isinstance(h, Hint) and math.isfinite(h.lastmod) for h in doc.hints)
    assert all(isinstance(e, InvalidHint) for e in doc.invalid)


def _sitemap_stream(data: bytes) -> None:
    for item in read_sitemap(io.BytesIO(data), seen_at=1.7e9):
        assert isinstance(item, Hint | InvalidHint)


def _hint_document(data: bytes) -> None:
    reader = io.BufferedReader(io.BytesIO(data))  # type: ignore[arg-type]
    _, items = read_hint_document(reader, source=None, seen_at=None, read_at=1.7e9)
    for item in items:
        assert isinstance(item, Hint | InvalidHint)


def _feed(data: bytes) -> None:
    doc = read_feed(data, seen_at=1.7e9, base_url="https://a.example/feed", limit=1 << 20)
    assert isinstance(doc, FeedDocument)
    assert all(isinstance(e, InvalidHint) for e in doc.invalid)


def check_document(data: bytes) -> None:
    """The sitemap readers, the hint-document reader and the feed reader: what
    they document is ValueError (not a sitemap or feed; a gzip that is not one
    or inflates too far) and ``ParseError`` (not well-formed XML)."""
    for read in (_sitemap_items, _sitemap_stream, _hint_document, _feed):
        with contextlib.suppress(ValueError, ET.ParseError):
            read(data)


TARGETS: dict[str, tuple[st.SearchStrategy[Any], Callable[[Any], None]]] = {
    "observation": (observations, check_observation),
    "observation_lines": (line_lists, check_observation_lines),
    "hint": (hints, check_hint),
    "hint_lines": (line_lists, check_hint_lines),
    "lastmod": (timestamps | json_values, check_lastmod),
    "document": (documents, check_document),
}


def run(name: str, examples: int, *, deadline: timedelta | None = DEADLINE) -> int:
    """Run target ``name`` on ``examples`` inputs; the count run. Raises the
    first failure Hypothesis finds (shrunk)."""
    strategy, check = TARGETS[name]
    ran = 0

    @settings(
        max_examples=examples,
        deadline=deadline,
        database=None,
        derandomize=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(strategy)
    def prop(value: Any) -> None:
        nonlocal ran
        ran += 1
        check(value)

    prop()
    return ran


@pytest.mark.parametrize("name", list(TARGETS))
def test_fuzz(name: str) -> None:
    assert run(name, BRIEF) >= 1


# -- what the fuzzer found, kept as examples -------------------------------------------------


def test_an_unknown_xml_encoding_is_an_unreadable_document() -> None:
    """Found by the fuzzer: expat's LookupError escaped the sitemap readers."""
    data = b'<?xml version="1.0" encoding="bogus"?><urlset></urlset>'
    with pytest.raises(ValueError, match="not a readable XML document"):
        read_sitemap_document(data, seen_at=1.7e9)
    with pytest.raises(ValueError, match="not a readable XML document"):
        list(read_sitemap(io.BytesIO(data), seen_at=1.7e9))
    check_document(data)

"""The record a fetched page yields: named fields pulled out by selectors.

An :class:`Extractor` is built per page type from a mapping
``{field_name: selector}``. A selector is one of

* a parsel CSS selector, with ``::text`` or ``::attr(name)`` as parsel reads them
  (``span.price::text``, ``a.next::attr(href)``);
* ``xpath:<expr>``, an XPath expression (``xpath://h1/text()``);
* ``jmespath:<expr>``, a JMESPath expression applied to a JSON body
  (``jmespath:product.price``).

A field whose name ends in ``[]`` collects every match as a list (the record
key keeps the ``[]``); any other field takes the first match. HTML matches are
stripped and their whitespace collapsed; a field that matched nothing is None.

:func:`page_title` and :func:`body_excerpt` produce the ``title`` and
``body_excerpt`` that :func:`recrawl.observe.classify.classify_response` scans
for block and challenge markers; :func:`summarize` yields the title, the
excerpt and the record of a page at once, parsing it once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import jmespath
import parsel
from jmespath.exceptions import JMESPathError
from parsel.csstranslator import HTMLTranslator

from recrawl._exceptions import ConfigError

__all__ = [
    "Extractor",
    "ListingExtractor",
    "ListingItem",
    "Value",
    "body_excerpt",
    "page_title",
    "summarize",
]

Value = str | list[str] | None
"""A record field: the first match, every match (``name[]`` fields), or None."""

_WS: Final = re.compile(r"\s+")
_XPATH: Final = "xpath:"
_JMESPATH: Final = "jmespath:"
_INVISIBLE: Final = ("script", "style", "noscript", "template", "head")
_INVISIBLE_TAGS: Final = frozenset(_INVISIBLE)


def _collapse(text: str) -> str:
    return _WS.sub(" ", text).strip()


def _as_text(body: bytes | str) -> str:
    if isinstance(body, bytes):
        return body.decode("utf-8", errors="replace")
    return body


def _is_json(content_type: str | None) -> bool:
    return content_type is not None and "json" in content_type.lower()


def _json_text(value: Any) -> str:
    """A JMESPath scalar as the record stores it."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kind: str  # "css", "xpath" or "jmespath"
    expr: str
    many: bool
    compiled: Any = None  # a compiled JMESPath expression


class Extractor:
    """Pull a record out of a page with one selector per field.

    Parameters
    ----------
    selectors
        ``{field_name: selector}``; see the module docstring for the forms.

    Raises
    ------
    ConfigError
        A selector is empty or does not parse; the message names the field.

    Examples
    --------
    >>> ex = Extractor({"name": "h1::text", "tags[]": "li.tag::text"})
    >>> ex.record(b"<h1> Blue  mug </h1><li class=tag>a</li><li class=tag>b</li>", "text/html")
    {'name': 'Blue mug', 'tags[]': ['a', 'b']}
    >>> Extractor({"price": "jmespath:price"}).record('{"price": 12.5}', "application/json")
    {'price': 12.5}
    """

    def __init__(self, selectors: Mapping[str, str]) -> None:
        self._fields: tuple[_Field, ...] = tuple(
            _compile(name, sel) for name, sel in selectors.items()
        )

    @property
    def fields(self) -> tuple[str, ...]:
        """The field names, as the record keys them."""
        return tuple(f.name for f in self._fields)

    def record(self, body: bytes | str, content_type: str | None) -> dict[str, Any]:
        """The record of one page: ``{field_name: value}`` for every field.

        A body is read as JSON when the content type contains ``json``, or when
        it parses as JSON and every selector is a JMESPath one. Then JMESPath
        fields take the JMESPath result as is (any JSON value, None when the
        path is absent) and CSS/XPath fields are None. Otherwise the body is
        read as HTML: CSS/XPath fields take the stripped, whitespace-collapsed
        first match (a list for ``name[]`` fields, empty matches dropped), None
        when nothing matched, and JMESPath fields are None.
        """
        text = _as_text(body)
        return self._record(text, content_type, lambda: parsel.Selector(text=text, type="html"))

    def _record(
        self, text: str, content_type: str | None, selector: Callable[[], parsel.Selector]
    ) -> dict[str, Any]:
        """:meth:`record` of a decoded body; ``selector`` parses it as HTML, if needed."""
        data, is_json = self._json(text, content_type)
        if is_json:
            return {f.name: self._jmes(f, data) for f in self._fields}
        sel = selector() if any(f.kind != "jmespath" for f in self._fields) else None
        out: dict[str, Any] = {}
        for f in self._fields:
            if f.kind == "jmespath" or sel is None:
                out[f.name] = None
                continue
            found = sel.css(f.expr) if f.kind == "css" else sel.xpath(f.expr)
            values = [v for v in (_collapse(s) for s in found.getall()) if v]
            if f.many:
                out[f.name] = values or None
            else:
                out[f.name] = values[0] if values else None
        return out

    def _json(self, text: str, content_type: str | None) -> tuple[Any, bool]:
        declared = _is_json(content_type)
        only_jmes = bool(self._fields) and all(f.kind == "jmespath" for f in self._fields)
        if not (declared or only_jmes):
            return None, False
        try:
            return json.loads(text), True
        except ValueError:
            # A body declared JSON that does not parse yields no JSON fields;
            # an undeclared one falls back to HTML.
            return None, declared

    @staticmethod
    def _jmes(f: _Field, data: Any) -> Any:
        if f.kind != "jmespath" or data is None:
            return None
        result = f.compiled.search(data)
        if f.many and result is not None and not isinstance(result, list):
            return [result]
        return result


def _compile(name: str, selector: str) -> _Field:
    if not isinstance(selector, str) or not selector.strip():
        raise ConfigError(f"field {name!r}: selector must be a non-empty string")
    many = name.endswith("[]")
    if selector.startswith(_JMESPATH):
        expr = selector[len(_JMESPATH) :].strip()
        try:
            compiled = jmespath.compile(expr)
        except JMESPathError as exc:
            raise ConfigError(f"field {name!r}: bad JMESPath {expr!r}: {exc}") from exc
        return _Field(name, "jmespath", expr, many, compiled)
    if selector.startswith(_XPATH):
        expr = selector[len(_XPATH) :].strip()
        kind = "xpath"
    else:
        expr = selector.strip()
        kind = "css"
    probe = parsel.Selector(text="<html></html>")
    try:
        if kind == "css":
            HTMLTranslator().css_to_xpath(expr)
            probe.css(expr)
        else:
            probe.xpath(expr)
    except Exception as exc:  # parsel/cssselect/lxml raise several types
        raise ConfigError(f"field {name!r}: bad {kind} selector {expr!r}: {exc}") from exc
    return _Field(name, kind, expr, many)


def page_title(body: bytes | str, content_type: str | None) -> str | None:
    """The page's ``<title>``, whitespace collapsed; None for JSON or no title.

    >>> page_title(b"<html><head><title> Just a\\n moment... </title></head></html>", "text/html")
    'Just a moment...'
    >>> page_title(b'{"a": 1}', "application/json") is None
    True
    """
    if _is_json(content_type):
        return None
    text = _as_text(body)
    if not text.strip():
        return None
    title = parsel.Selector(text=text, type="html").xpath("string(//title[1])").get()
    collapsed = _collapse(title or "")
    return collapsed or None


def body_excerpt(body: bytes | str, limit: int = 2000) -> str:
    """The start of the page's visible text, whitespace collapsed, at most ``limit`` characters.

    Script, style, noscript, template and head content is left out. A body that
    is not markup (JSON, plain text) is returned collapsed as it is.

    >>> body_excerpt(b"<html><head><title>t</title><script>x=1</script></head>"
    ...              b"<body><p>Checking   your\\nbrowser</p></body></html>")
    'Checking your browser'
    >>> body_excerpt("abcdef", limit=3)
    'abc'
    """
    if limit <= 0:
        return ""
    text = _as_text(body)
    if not text.strip():
        return ""
    if "<" not in text:
        return _collapse(text)[:limit]
    sel = parsel.Selector(text=text, type="html")
    skip = " or ".join(f"ancestor::{tag}" for tag in _INVISIBLE)
    parts = sel.xpath(f"//text()[not({skip})]").getall()
    return _collapse(" ".join(parts))[:limit]


def summarize(
    body: bytes | str,
    content_type: str | None,
    extractor: Extractor | None,
    *,
    excerpt_limit: int = 2000,
) -> tuple[str | None, str, dict[str, Any] | None]:
    """``(title, excerpt, record)`` of one page, the HTML parsed at most once.

    The same as ``(page_title(body, content_type), body_excerpt(body,
    excerpt_limit), extractor.record(body, content_type))`` (the record None
    without an extractor), cheaper: one decode, one parse shared by the three,
    and the excerpt's text collected only until it has ``excerpt_limit``
    characters.

    >>> name = Extractor({"n": "h1::text"})
    >>> summarize(b"<title>Mug</title><h1> Blue  mug </h1>", "text/html", name)
    ('Mug', 'Blue mug', {'n': 'Blue mug'})
    >>> summarize(b'{"price": 3}', "application/json", Extractor({"p": "jmespath:price"}))
    (None, '{"price": 3}', {'p': 3})
    """
    text = _as_text(body)
    blank = not text.strip()
    parsed: list[parsel.Selector] = []

    def selector() -> parsel.Selector:
        if not parsed:
            parsed.append(parsel.Selector(text=text, type="html"))
        return parsed[0]

    title: str | None = None
    if not blank and not _is_json(content_type):
        title = _collapse(selector().xpath("string(//title[1])").get() or "") or None
    if excerpt_limit <= 0 or blank:
        excerpt = ""
    elif "<" not in text:
        excerpt = _collapsed_head(text, excerpt_limit)
    else:
        excerpt = _visible_head(selector().root, excerpt_limit)
    record = extractor._record(text, content_type, selector) if extractor is not None else None
    return title, excerpt, record


def _collapsed_head(text: str, limit: int) -> str:
    """``_collapse(text)[:limit]``, collapsing no more of ``text`` than needed.

    The collapse of a prefix of ``text`` is a prefix of the collapse of
    ``text``, so once it has ``limit`` characters the rest cannot change them.
    """
    size = limit + 64
    while True:
        out = " ".join(text[:size].split())  # what _collapse does: same whitespace set
        if len(out) >= limit or size >= len(text):
            return out[:limit]
        size *= 4


def _visible_head(root: Any, limit: int) -> str:
    """:func:`body_excerpt` of a parsed page: its visible text nodes in document
    order, joined by spaces, collapsed and cut at ``limit``, reading only as
    many nodes as that needs."""
    parts: list[str] = []
    size = 0
    budget = limit + 64
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            text = node
        else:
            tag = node.tag
            if not isinstance(tag, str) or tag in _INVISIBLE_TAGS:
                continue  # comments and processing instructions (tag not a str) hold no text
            for child in reversed(node):
                tail = child.tail
                if tail:
                    stack.append(tail)
                stack.append(child)
            text = node.text
            if not text:
                continue
        parts.append(text)
        size += len(text) + 1
        if size >= budget:
            out = _collapsed_head(" ".join(parts), limit)
            if len(out) >= limit:
                return out
            budget = 2 * size
    return _collapsed_head(" ".join(parts), limit)


@dataclass(frozen=True, slots=True)
class ListingItem:
    """One item a listing page shows: the item page's URL (absolute, as
    written: normalise it before use) and its summary, one value per
    summary field (None: nothing matched)."""

    url: str
    summary: dict[str, Value]


class ListingExtractor:
    """Read a listing page (a category or search page): each item's URL and
    summary, and the next page's URL.

    ``items`` selects each item; ``url`` and every ``summary`` selector are
    read inside one item (CSS, or ``xpath:`` relative to it, as ``xpath:.//a/@href``);
    ``next`` (optional) finds the link to the listing's next page. HTML only:
    JMESPath selectors are a :class:`~recrawl.ConfigError`, as is a selector
    that does not compile.

    >>> ex = ListingExtractor("li.item", "a::attr(href)", {"price": ".price::text"},
    ...                       next="a[rel=next]::attr(href)")
    >>> items, nxt = ex.read(b'<ul><li class="item"><a href="/p/1">One</a>'
    ...                      b'<span class="price"> 9.90 </span></li></ul>'
    ...                      b'<a rel="next" href="?page=2">more</a>', "https://shop.example/c/shoes")
    >>> items, nxt
    ([ListingItem(url='https://shop.example/p/1', summary={'price': '9.90'})], 'https://shop.example/c/shoes?page=2')
    """

    def __init__(
        self, items: str, url: str, summary: Mapping[str, str], *, next: str | None = None
    ) -> None:
        fields = [_compile("items", items), _compile("url", url), _compile("next", next or "a")]
        fields += [_compile(name, sel) for name, sel in summary.items()]
        if any(f.kind == "jmespath" for f in fields):
            raise ConfigError("listing: selectors read HTML (CSS or xpath:), not JMESPath")
        self._items, self._url, nxt = fields[0], fields[1], fields[2]
        self._next = nxt if next else None
        self._summary = fields[3:]

    @staticmethod
    def _all(sel: parsel.Selector | parsel.SelectorList[Any], f: _Field) -> list[str]:
        found = sel.css(f.expr) if f.kind == "css" else sel.xpath(f.expr)
        return [v for v in (_collapse(s) for s in found.getall()) if v]

    def read(self, body: bytes | str, base_url: str) -> tuple[list[ListingItem], str | None]:
        """The items on the page (in page order; an item without a URL is left
        out), and the next page's absolute URL (None: none, or the page itself)."""
        from urllib.parse import urljoin

        root = parsel.Selector(text=_as_text(body), type="html")
        items = root.css(self._items.expr) if self._items.kind == "css" else (
            root.xpath(self._items.expr)
        )  # fmt: skip
        out: list[ListingItem] = []
        for item in items:
            urls = self._all(item, self._url)
            if not urls:
                continue
            summary: dict[str, Value] = {}
            for f in self._summary:
                values = self._all(item, f)
                summary[f.name] = (values or None) if f.many else (values[0] if values else None)
            out.append(ListingItem(urljoin(base_url, urls[0]), summary))
        nxt = None
        if self._next is not None:
            links = self._all(root, self._next)
            if links:
                nxt = urljoin(base_url, links[0])
                if nxt == base_url:
                    nxt = None
        return out, nxt

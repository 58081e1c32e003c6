"""The record extractor: what a product page yields, field by field."""

from __future__ import annotations

import random
from typing import Any

import parsel
import pytest

from recrawl._exceptions import ConfigError
from recrawl.observe.classify import find_marker
from recrawl.observe.extract import Extractor, body_excerpt, page_title, summarize

PRODUCT = b"""<!doctype html>
<html>
<head>
  <title>
    Acme Kettle 1.7 L | Acme Store
  </title>
  <script>window.dataLayer = [{"price": "0.00"}];</script>
  <style>.price { color: red }</style>
</head>
<body>
  <nav><a href="/">Home</a> &rsaquo; <a href="/kitchen">Kitchen</a></nav>
  <div class="product" data-sku="AK-17">
    <h1 class="product-title">
      Acme   Kettle
      1.7 L
    </h1>
    <span class="price" itemprop="price" content="39.99">&euro; 39.99</span>
    <p class="stock in-stock">  In stock  </p>
    <ul class="features">
      <li>Boil-dry protection</li>
      <li>   </li>
      <li>Removable  limescale filter</li>
    </ul>
  </div>
</body>
</html>
"""


def test_product_page_yields_name_price_and_stock() -> None:
    ex = Extractor(
        {
            "name": "h1.product-title::text",
            "price": "span.price::attr(content)",
            "stock": ".stock::text",
            "sku": "div.product::attr(data-sku)",
            "features[]": "ul.features li::text",
        }
    )
    assert ex.record(PRODUCT, "text/html; charset=utf-8") == {
        "name": "Acme Kettle 1.7 L",
        "price": "39.99",
        "stock": "In stock",
        "sku": "AK-17",
        "features[]": ["Boil-dry protection", "Removable limescale filter"],
    }
    assert ex.fields == ("name", "price", "stock", "sku", "features[]")


def test_xpath_selectors() -> None:
    ex = Extractor(
        {
            "name": "xpath://h1[@class='product-title']/text()",
            "shown_price": "xpath:normalize-space(//span[@itemprop='price'])",
            "crumbs[]": "xpath://nav/a/text()",
        }
    )
    assert ex.record(PRODUCT.decode(), None) == {
        "name": "Acme Kettle 1.7 L",
        "shown_price": "€ 39.99",
        "crumbs[]": ["Home", "Kitchen"],
    }


def test_missing_field_is_none_and_others_still_extracted() -> None:
    ex = Extractor({"name": "h1::text", "rating": ".rating::text", "reviews[]": ".review::text"})
    record = ex.record(PRODUCT, "text/html")
    assert record == {"name": "Acme Kettle 1.7 L", "rating": None, "reviews[]": None}


def test_json_body_by_content_type() -> None:
    body = b'{"product": {"name": "Acme Kettle", "price": 39.99, "stock": 0, "tags": ["kitchen", "kettle"]}}'
    ex = Extractor(
        {
            "name": "jmespath:product.name",
            "price": "jmespath:product.price",
            "stock": "jmespath:product.stock",
            "tags[]": "jmespath:product.tags",
            "colour": "jmespath:product.colour",
            "title": "h1::text",
        }
    )
    assert ex.record(body, "application/vnd.api+json") == {
        "name": "Acme Kettle",
        "price": 39.99,
        "stock": 0,
        "tags[]": ["kitchen", "kettle"],
        "colour": None,
        "title": None,
    }


def test_json_body_recognised_without_content_type_when_all_selectors_are_jmespath() -> None:
    ex = Extractor({"name": "jmespath:items[0].name", "names[]": "jmespath:items[].name"})
    body = '[{"name": "a"}, {"name": "b"}]'
    assert ex.record('{"items": ' + body + "}", "text/plain") == {
        "name": "a",
        "names[]": ["a", "b"],
    }


def test_json_declared_but_broken_yields_nones() -> None:
    ex = Extractor({"name": "jmespath:name"})
    assert ex.record(b"<html>oops</html>", "application/json") == {"name": None}


@pytest.mark.parametrize(
    ("selector", "kind"),
    [("div.price[", "css"), ("xpath://div[@class=", "xpath"), ("jmespath:product.[", "JMESPath")],
)
def test_bad_selector_names_the_field(selector: str, kind: str) -> None:
    with pytest.raises(ConfigError, match=rf"field 'price': bad {kind}"):
        Extractor({"name": "h1::text", "price": selector})


def test_empty_selector_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="'stock'"):
        Extractor({"stock": "  "})


def test_page_title() -> None:
    assert page_title(PRODUCT, "text/html") == "Acme Kettle 1.7 L | Acme Store"
    assert page_title(b"<html><body>no title</body></html>", "text/html") is None
    assert page_title(b"", None) is None
    assert page_title(b'{"title": "x"}', "application/json") is None


def test_body_excerpt_is_visible_text_only() -> None:
    excerpt = body_excerpt(PRODUCT)
    assert excerpt.startswith("Home › Kitchen Acme Kettle 1.7 L € 39.99 In stock")
    assert "dataLayer" not in excerpt
    assert "color" not in excerpt
    assert "Acme Store" not in excerpt  # the title is in <head>, reported by page_title
    assert len(body_excerpt(PRODUCT, limit=10)) == 10
    assert body_excerpt(b"") == ""


def test_challenge_page_is_found_by_the_classifier_from_title_and_excerpt() -> None:
    page = (
        b"<html><head><title>Just a moment...</title></head>"
        b"<body><div>Checking your browser before accessing shop.example</div></body></html>"
    )
    assert find_marker(page_title(page, "text/html"), body_excerpt(page)) is not None
    assert find_marker(page_title(PRODUCT, "text/html"), body_excerpt(PRODUCT)) is None


# -- summarize: title, excerpt and record in one parse ---------------------------------------

CATALOGUE = (
    b"""<!doctype html><html><head><title>Catalogue</title>
<script>var x = "<p>not text</p>";</script></head><body>
<!-- a comment, not text --><?php echo 1 ?>
<template><p>hidden template</p></template><noscript>enable JS</noscript>
<div id="list">"""
    + b"".join(
        b'<div class="item"><a href="/p/%d">Item  %d</a><span class="price">%d.99</span>'
        b"<style>.x{}</style>tail %d\n</div>" % (i, i, i, i)
        for i in range(300)
    )
    + b"</div></body></html>"
)

DOCUMENTS: list[tuple[bytes, str | None]] = [
    (PRODUCT, "text/html; charset=utf-8"),
    (PRODUCT, None),
    (CATALOGUE, "text/html"),
    (
        b"<html><head><title>Just a moment...</title></head>"
        b"<body><div>Checking your browser before accessing shop.example</div></body></html>",
        "text/html",
    ),
    (b"", None),
    (b"  \n\t ", "text/html"),
    (b"plain text,   not markup\n" * 300, "text/plain"),
    (b'{"product": {"name": "Acme", "price": 39.99, "tags": ["a", "b"]}}', "application/json"),
    (b'{"html": "<b>bold</b> <i>text</i>"}', "application/json"),
    (b'{"name": "not declared"}', "text/plain"),
    (b"<html>oops</html>", "application/json"),
    (b"text before <b>bold</b> after <title>late</title>tail", None),
    (b"<p>unclosed <b>tags <i>everywhere" + b" and more words" * 400, "text/html"),
    ("<p>caf\u00e9 \u00a0 na\u00efve\u2003spaces</p>\x00<p>nul</p>".encode(), "text/html"),
    (b"\xff\xfe<p>not utf-8 \xe9</p>", "text/html"),
]

EXTRACTORS: list[Extractor | None] = [
    None,
    Extractor({"name": "h1::text", "prices[]": ".price::text", "title": "xpath://title/text()"}),
    Extractor({"name": "jmespath:product.name", "tags[]": "jmespath:product.tags"}),
    Extractor({"name": "jmespath:name", "h1": "h1::text"}),
]


@pytest.mark.parametrize(("body", "content_type"), DOCUMENTS)
@pytest.mark.parametrize("limit", [2000, 0, 1, 37, 100_000])
def test_summarize_equals_the_three_separate_calls(
    body: bytes, content_type: str | None, limit: int
) -> None:
    for ex in EXTRACTORS:
        expected = (
            page_title(body, content_type),
            body_excerpt(body, limit),
            ex.record(body, content_type) if ex is not None else None,
        )
        assert summarize(body, content_type, ex, excerpt_limit=limit) == expected
        assert summarize(
            body.decode("utf-8", "replace"), content_type, ex, excerpt_limit=limit
        ) == (expected)


def test_summarize_equals_the_three_calls_on_random_markup() -> None:
    rng = random.Random(7)
    tags = ["p", "div", "b", "script", "style", "head", "title", "noscript", "template", "span"]
    words = ["a", "word", "  ", "\n", "\u00a0", "&amp;", "<!-- c -->", "<br>", "</p>", "x" * 50]
    ex = Extractor({"b[]": "b::text", "t": "title::text"})
    for _ in range(300):
        out = []
        for _ in range(rng.randrange(1, 80)):
            r = rng.random()
            tag = rng.choice(tags)
            if r < 0.3:
                out.append(f"<{tag}>")
            elif r < 0.5:
                out.append(f"</{tag}>")
            else:
                out.append(rng.choice(words))
        body = "".join(out)
        limit = rng.choice([1, 5, 20, 80, 2000])
        expected = (page_title(body, "text/html"), body_excerpt(body, limit), ex.record(body, None))
        assert summarize(body, "text/html", ex, excerpt_limit=limit) == expected, body


def test_summarize_parses_once(monkeypatch: pytest.MonkeyPatch) -> None:
    made = []
    real = parsel.Selector

    def counting(*args: Any, **kwargs: Any) -> Any:
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(parsel, "Selector", counting)
    ex = Extractor({"name": "h1::text"})
    made.clear()
    title, excerpt, record = summarize(PRODUCT, "text/html", ex)
    assert (title, record) == ("Acme Kettle 1.7 L | Acme Store", {"name": "Acme Kettle 1.7 L"})
    assert excerpt.startswith("Home › Kitchen Acme Kettle 1.7 L € 39.99 In stock")
    assert len(made) == 1
    made.clear()
    summarize(b'{"a": 1}', "application/json", Extractor({"a": "jmespath:a"}))
    assert made == []  # JSON without markup is not parsed as HTML


def test_a_json_looking_body_read_as_html_does_not_raise() -> None:
    # parsel would take such a body for JSON and refuse CSS and XPath on it
    ex = Extractor({"h1": "h1::text"})
    body = b'{"html": "<b>bold</b>"}'
    assert page_title(body, "text/html") is None
    assert body_excerpt(body) == '{"html": " bold "}'
    assert ex.record(body, "text/html") == {"h1": None}
    assert summarize(body, "text/html", ex) == (None, '{"html": " bold "}', {"h1": None})

"""Listing pages read into items (URL and summary) and the next page."""

from __future__ import annotations

import pytest

from recrawl import ConfigError
from recrawl.observe.extract import ListingExtractor, ListingItem

PAGE = b"""<html><body><ul>
<li class="item"><a class="link" href="/p/1">Item 1</a><span class="price">9.90</span>
  <span class="stock">in stock</span></li>
<li class="item"><a class="link" href="http://shop.example/p/2">Item 2</a>
  <span class="price">12.00</span></li>
<li class="item"><span class="price">no link</span></li>
</ul><a class="next" rel="next" href="/list/1">next</a></body></html>"""


def test_each_item_gives_its_url_and_summary() -> None:
    ex = ListingExtractor(
        "li.item",
        "a.link::attr(href)",
        {"price": ".price::text", "stock": "xpath:.//span[@class='stock']/text()"},
        next="a[rel=next]::attr(href)",
    )
    items, nxt = ex.read(PAGE, "http://shop.example/list/0")
    assert items == [
        ListingItem("http://shop.example/p/1", {"price": "9.90", "stock": "in stock"}),
        ListingItem("http://shop.example/p/2", {"price": "12.00", "stock": None}),
    ]
    assert nxt == "http://shop.example/list/1"


def test_the_last_page_has_no_next() -> None:
    ex = ListingExtractor("li.item", "a::attr(href)", {}, next="a.next::attr(href)")
    _, nxt = ex.read(b"<ul><li class='item'><a href='/p/1'>x</a></li></ul>", "http://s.example/l")
    assert nxt is None
    _, same = ex.read(b"<a class='next' href='/l'>again</a>", "http://s.example/l")
    assert same is None  # a next link back to the page itself ends the listing


def test_json_or_broken_selectors_are_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="JMESPath"):
        ListingExtractor("li", "a::attr(href)", {"price": "jmespath:price"})
    with pytest.raises(ConfigError, match="items"):
        ListingExtractor("li[", "a::attr(href)", {})

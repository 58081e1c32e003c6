"""JSON twins: which URL a crawl task fetches when its page type names a ``json_url``.

One rule for ``recrawl crawl`` (:mod:`recrawl.crawl.loop`) and the Scrapy
add-on (:mod:`recrawl.scrapy`): a page type with ``json_url`` is read from the
page's JSON twin on the page's own origin; a twin on another origin, one
robots.txt disallows or a ``json_url`` function that fails is logged once
per page type and site, and the page is fetched instead when the page type
has ``html_fields`` to read it with, else nothing. A page whose twin answered
404 or 410 (or was refused) is fetched as a page for the rest of the crawl
(:attr:`JsonTwins.missing`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from recrawl.config import PageTypeRule, json_origin_differs
from recrawl.observe.extract import Extractor

__all__ = ["JsonTwins"]


class JsonTwins:
    """The page types read from a JSON twin, and what a crawl learnt of their twins.

    Attributes
    ----------
    rules
        The page types with a ``json_url``, by name.
    html_extractors
        Their ``html_fields`` extractors, for a page read instead of its twin.
    missing
        Pages fetched as pages for the rest of the crawl (their twin answered
        404 or 410, or was refused).
    """

    def __init__(self, page_types: Mapping[str, PageTypeRule], logger: logging.Logger) -> None:
        self.rules: dict[str, PageTypeRule] = {
            name: rule for name, rule in page_types.items() if rule.json_url is not None
        }
        self.html_extractors = {
            name: Extractor(dict(rule.html_fields))
            for name, rule in self.rules.items()
            if rule.html_fields
        }
        self.missing: set[str] = set()
        self._said: set[tuple[str, str]] = set()  # (what, site) logged once
        self._log = logger

    def say_once(self, what: str, site: str, message: str, *args: Any) -> None:
        """Log a warning once per ``what`` and site."""
        if (what, site) not in self._said:
            self._said.add((what, site))
            self._log.warning(message, *args)

    def target(
        self,
        url: str,
        page_type: str,
        site: str,
        allowed: Callable[[str], bool] | None = None,
    ) -> str | None:
        """The URL a task for ``url`` fetches: its JSON twin when its page type
        has one on the page's own origin that ``allowed`` (robots.txt) lets
        through, else the page; None when the twin is refused and the page
        type has no ``html_fields`` (nothing is fetched)."""
        rule = self.rules.get(page_type)
        if rule is None or url in self.missing:
            return url
        fallback = url if rule.html_fields else None
        then = "fetching the pages" if rule.html_fields else "not fetching them (no html_fields)"
        try:
            target = rule.json_url_for(url)
        except Exception as exc:  # a user's function
            self.say_once(
                f"error:{page_type}", site,
                "json_url of page type %r failed on %s (%s): %s", page_type, url, exc, then,
            )  # fmt: skip
            return fallback
        if target is None:
            return url
        if json_origin_differs(url, target):
            self.say_once(
                f"origin:{page_type}", site,
                "json_url of page type %r refused: %s is not on the site of %s "
                "(only the page's own scheme, host and port are fetched); %s",
                page_type, target, url, then,
            )  # fmt: skip
            return fallback
        if allowed is not None and not allowed(target):
            self.say_once(
                f"robots:{page_type}", site,
                "robots.txt disallows %s, the JSON of %s (page type %r): %s",
                target, url, page_type, then,
            )  # fmt: skip
            return fallback
        return target

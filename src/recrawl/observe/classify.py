"""Classify one fetch response locally, without trusting its status code.

Status codes lie: sites serve block pages and empty results with ``200 OK``.
:func:`classify_response` reads what a fetcher has at hand (status or error,
body size, title or body excerpt, the extracted record) and returns the
outcome it can infer, or None when the response looks like an ordinary page
(the store then decides ``changed``, ``unchanged`` or ``new`` from the record
hash). The rules, first match wins:

1. A transport ``error``: ``connection_reset`` is a hard block (SPEC §3);
   ``timeout``, ``dns``, ``tls`` and any other word are ``error``.
2. A challenge marker in the title or body excerpt is a ``challenge``, whatever
   the status (Cloudflare serves its interstitial with 403 or 503).
3. A block-page marker is a ``hard_block`` under 403/429, else a ``soft_block``.
4. Status rules: 403 and 429 are ``hard_block``; 304 ``not_modified``; 404 and
   410 ``gone``; other 4xx and all 5xx ``error``; 1xx and 3xx None.
5. For 2xx: a *soft 404*, a removed page served as ``200 OK`` ("Page not
   found", "no longer available"), is ``gone``: a not-found marker
   (:data:`NOT_FOUND_MARKERS`) in the title, or in the body excerpt of a
   response that also lacks the page's content (an empty record, a required
   field missing, or a body under half the normal size). It is
   about the page, not the site: ``gone`` is no hostility signal, so a
   catalogue clean-up does not lower the site's health (rule 2 and 3 go
   first: a block page saying "not found" is still a block).
6. For 2xx: a body far smaller than the site's normal for the page type
   (below ``small_body_ratio`` × ``normal_body_bytes``) or an empty record is a
   ``soft_block``; a non-empty record missing a field it always had is a
   ``soft_block`` when the body is also small and ``extract_failed`` otherwise,
   because a page of normal size that lost a field is a parser problem (its
   owner is whoever maintains the parser), not the site pushing back.

:class:`ResponseNormals` keeps, per ``(site, page_type)``, the two things the
rules compare against: the median body size and the fields that every recent
good record carried. An ingest path feeds it every response it accepted as good.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "BLOCK_MARKERS",
    "CHALLENGE_MARKERS",
    "NOT_FOUND_MARKERS",
    "ResponseNormals",
    "classify_response",
    "find_marker",
    "says_not_found",
]

CHALLENGE_MARKERS: Final[tuple[str, ...]] = (
    "just a moment",
    "/cdn-cgi/challenge-platform/",
    "captcha-delivery.com",
    "_incapsula_resource",
    "g-recaptcha",
    "h-captcha",
    "pardon our interruption",
)
"""Lower-case substrings of common challenge interstitials (CAPTCHA, JS checks)."""

BLOCK_MARKERS: Final[tuple[str, ...]] = (
    "attention required",
    "access denied",
)
"""Lower-case substrings of common block pages that carry no challenge to pass."""

NOT_FOUND_MARKERS: Final[tuple[str, ...]] = (
    "not found",
    "no longer available",
    "no longer exists",
    "does not exist",
    "doesn't exist",
    "could not find",
    "couldn't find",
    "has been removed",
    "page unavailable",
)
"""Lower-case substrings of a not-found page served with 200 (a soft 404); a
``404`` standing alone (``Error 404``, ``404 - Page``) counts too."""

_NOT_FOUND_404: Final = re.compile(r"(?<![\w$€£.,])404(?![\w.,])")
_HARD_STATUSES: Final = frozenset({403, 429})
_HARD_ERRORS: Final = frozenset({"connection_reset", "reset", "econnreset"})
_OUTCOMES_FOR_MARKERS: Final = frozenset({"challenge", "soft_block", "hard_block"})

ExtraMarker = str | tuple[str, str]
"""A user marker: a substring (read as a challenge) or ``(substring, outcome)``."""


def find_marker(
    title: str | None,
    body_excerpt: str | None,
    extra_markers: Iterable[ExtraMarker] = (),
) -> tuple[str, str] | None:
    """The first block or challenge marker found in a title or body excerpt.

    Matching is case-insensitive on substrings. User markers are checked first.

    Parameters
    ----------
    title, body_excerpt
        Text the fetcher captured; either may be None.
    extra_markers
        User markers: a plain string counts as a challenge marker; a pair
        ``(substring, outcome)`` names its outcome, one of ``challenge``,
        ``soft_block`` or ``hard_block``.

    Returns
    -------
    tuple of (str, str) or None
        ``(marker, kind)`` where kind is ``challenge``, ``block`` or, for a user
        pair, its outcome; None when nothing matched.

    Examples
    --------
    >>> find_marker("Just a moment...", None)
    ('just a moment', 'challenge')
    >>> find_marker("Widgets", "<p>Fresh widgets</p>") is None
    True
    """
    text = " ".join(t for t in (title, body_excerpt) if t).lower()
    if not text:
        return None
    for extra in extra_markers:
        marker, kind = (extra, "challenge") if isinstance(extra, str) else extra
        if kind not in _OUTCOMES_FOR_MARKERS:
            raise ValueError(f"marker outcome must be one of {sorted(_OUTCOMES_FOR_MARKERS)}")
        if marker and marker.lower() in text:
            return marker.lower(), kind
    for marker in CHALLENGE_MARKERS:
        if marker in text:
            return marker, "challenge"
    for marker in BLOCK_MARKERS:
        if marker in text:
            return marker, "block"
    return None


def says_not_found(text: str | None) -> bool:
    """Whether ``text`` (a title or body excerpt) reads like a not-found page.

    >>> says_not_found("Page not found | Shop"), says_not_found("Error 404")
    (True, True)
    >>> says_not_found("Widgets from $404"), says_not_found(None)
    (False, False)
    """
    if not text:
        return False
    low = text.lower()
    return any(m in low for m in NOT_FOUND_MARKERS) or _NOT_FOUND_404.search(low) is not None


def _is_empty_record(record: Mapping[str, object]) -> bool:
    return all(_is_blank(v) for v in record.values())


def _is_blank(value: object) -> bool:
    return value is None or value == "" or value == [] or value == {}


def classify_response(
    status: int | None = None,
    error: str | None = None,
    body_bytes: int | None = None,
    title: str | None = None,
    body_excerpt: str | None = None,
    record: Mapping[str, object] | None = None,
    *,
    normal_body_bytes: float | None = None,
    required_fields: Iterable[str] | None = None,
    extra_markers: Iterable[ExtraMarker] = (),
    small_body_ratio: float = 0.25,
) -> str | None:
    """Infer the outcome of one response (module docstring lists the rules).

    Parameters
    ----------
    status
        HTTP status, or None when the request failed before a response.
    error
        Transport error word (``timeout``, ``connection_reset``, ``dns``, ...).
    body_bytes
        Size of the received body or response, bytes.
    title, body_excerpt
        Page title and the start of the body, for block-page markers.
    record
        The extracted record; None when the reporter sent none (nothing is
        inferred from its absence), ``{}`` when extraction found nothing.
    normal_body_bytes
        That site's normal size for this page type, bytes (the same measure as
        ``body_bytes``); None when unknown.
    required_fields
        Fields every earlier good record of this site and page type carried.
    extra_markers
        User markers, see :func:`find_marker`.
    small_body_ratio
        A 2xx body below this fraction of ``normal_body_bytes`` is "far smaller".

    Returns
    -------
    str or None
        One of ``hard_block``, ``challenge``, ``soft_block``, ``extract_failed``,
        ``not_modified``, ``gone``, ``error``; None for a response that looks
        like an ordinary page, or when nothing can be told.

    Examples
    --------
    >>> classify_response(status=200, title="Just a moment...")
    'challenge'
    >>> classify_response(status=200, body_bytes=900, normal_body_bytes=80_000)
    'soft_block'
    >>> classify_response(status=200, body_bytes=81_000, record={"title": "x"},
    ...                   normal_body_bytes=80_000, required_fields=["title", "price"])
    'extract_failed'
    >>> classify_response(status=200, title="Page not found")
    'gone'
    >>> classify_response(status=429)
    'hard_block'
    >>> classify_response(status=200, body_bytes=79_000, record={"price": 3},
    ...                   normal_body_bytes=80_000) is None
    True
    """
    if error:
        return "hard_block" if error.lower() in _HARD_ERRORS else "error"
    found = find_marker(title, body_excerpt, extra_markers)
    if found is not None:
        kind = found[1]
        if kind == "block":
            return "hard_block" if status in _HARD_STATUSES else "soft_block"
        return kind
    if status is None:
        return None
    if status in _HARD_STATUSES:
        return "hard_block"
    if status == 304:
        return "not_modified"
    if status in (404, 410):
        return "gone"
    if status >= 400:
        return "error"
    if not 200 <= status < 300:
        return None
    if says_not_found(title) or (
        says_not_found(body_excerpt)
        and _lacks_content(record, body_bytes, normal_body_bytes, required_fields)
    ):
        return "gone"  # a soft 404 (rule 5)
    small = (
        body_bytes is not None
        and normal_body_bytes is not None
        and normal_body_bytes > 0
        and body_bytes < small_body_ratio * normal_body_bytes
    )
    if small:
        return "soft_block"
    if record is None:
        return None
    if _is_empty_record(record):
        return "soft_block"
    if required_fields is not None:
        missing = [f for f in required_fields if _is_blank(record.get(f))]
        if missing:
            return "extract_failed"
    return None


def _lacks_content(
    record: Mapping[str, object] | None,
    body_bytes: int | None,
    normal_body_bytes: float | None,
    required_fields: Iterable[str] | None,
) -> bool:
    """A 2xx without what the page type's pages carry: an empty record, a
    required field missing, or a body under half the normal size (no record
    and no normal size: nothing tells, so it does not lack content)."""
    if record is not None:
        if _is_empty_record(record):
            return True
        if required_fields is not None and any(_is_blank(record.get(f)) for f in required_fields):
            return True
    return bool(
        body_bytes is not None and normal_body_bytes and body_bytes < 0.5 * normal_body_bytes
    )


@dataclass
class _Profile:
    sizes: deque[int]
    records: int = 0
    present: dict[str, int] = field(default_factory=dict)
    stale: int = 0
    median: float | None = None
    required: frozenset[str] | None = None


class ResponseNormals:
    """What is normal for each ``(site, page_type)``: body size and required fields.

    Body size is the median of the last ``window`` good responses, bytes,
    recomputed every ``refresh`` good responses (a median per response would
    cost more than the rest of ingest). A field is required once ``min_records`` good records were seen and every
    one of them carried it (non-blank). Feed only responses accepted as good
    (not blocked, not failed): a block wave must not become the new normal.

    Parameters
    ----------
    window
        Number of recent good body sizes kept per site and page type.
    min_records
        Good responses needed before a normal size or required field is claimed.
    refresh
        Good responses between two recomputations of the median and fields.

    Examples
    --------
    >>> normals = ResponseNormals(min_records=3)
    >>> for size in (80_000, 82_000, 79_000):
    ...     normals.update("shop", "item", size, {"title": "t", "price": 1})
    >>> normals.body_bytes("shop", "item")
    80000.0
    >>> sorted(normals.required_fields("shop", "item"))
    ['price', 'title']
    """

    def __init__(self, window: int = 201, min_records: int = 20, refresh: int = 25) -> None:
        self.window = window
        self.min_records = min_records
        self.refresh = refresh
        self._profiles: dict[tuple[str, str], _Profile] = {}

    def update(
        self,
        site: str,
        page_type: str,
        body_bytes: int | None,
        record: Mapping[str, object] | None,
    ) -> None:
        """Add one good response (body size in bytes, extracted record or None)."""
        key = (site, page_type)
        profile = self._profiles.get(key)
        if profile is None:
            profile = self._profiles[key] = _Profile(sizes=deque(maxlen=self.window))
        if body_bytes is not None:
            profile.sizes.append(int(body_bytes))
        if record is not None:
            profile.records += 1
            for name, value in record.items():
                if not _is_blank(value):
                    profile.present[name] = profile.present.get(name, 0) + 1
        profile.stale += 1
        if profile.median is None or profile.stale >= self.refresh:
            self._refresh(profile)

    def _refresh(self, profile: _Profile) -> None:
        profile.stale = 0
        if len(profile.sizes) >= self.min_records:
            ordered = sorted(profile.sizes)
            mid = len(ordered) // 2
            profile.median = (
                float(ordered[mid]) if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0
            )
        if profile.records >= self.min_records:
            profile.required = frozenset(
                k for k, c in profile.present.items() if c == profile.records
            )

    def body_bytes(self, site: str, page_type: str) -> float | None:
        """Median size of recent good bodies, bytes; None before ``min_records``."""
        profile = self._profiles.get((site, page_type))
        return None if profile is None else profile.median

    def required_fields(self, site: str, page_type: str) -> frozenset[str] | None:
        """Fields every good record carried; None before ``min_records`` records."""
        profile = self._profiles.get((site, page_type))
        return None if profile is None else profile.required

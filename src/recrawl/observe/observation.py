"""Fetch observations: the input contract (SPEC §5), parsed and validated.

One observation is what a fetcher saw on one request. :func:`parse_observation`
turns a mapping (a JSON object or a CSV row) into an :class:`Observation`, or
raises :class:`~recrawl.InvalidObservation` naming the field.
:func:`read_observations` streams a JSONL or CSV input line by line, yielding
either an observation or the error for that line, so one bad line never costs
the good ones around it.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from itertools import chain
from typing import Any, Final, Literal
from urllib.parse import urlsplit, urlunsplit

import orjson
from w3lib.url import canonicalize_url

from recrawl._exceptions import InvalidObservation
from recrawl.observe.fingerprint import FieldRule, fingerprint

__all__ = [
    "ERRORS",
    "MAX_BYTES",
    "MAX_NUMBER",
    "MAX_TIMESTAMP",
    "OUTCOMES",
    "TRACKING_PARAMS",
    "Observation",
    "host_of",
    "line_key",
    "normalize_url",
    "not_utf8",
    "parse_observation",
    "parse_timestamp",
    "read_observations",
    "show_value",
    "with_keys",
]

OUTCOMES: Final = (
    "changed",
    "unchanged",
    "not_modified",
    "new",
    "hard_block",
    "challenge",
    "soft_block",
    "extract_failed",
    "gone",
    "error",
)
"""Every outcome an observation can carry (SPEC §5), in storage order (the
order of the bucket columns, :mod:`recrawl.records.buckets`)."""

ERRORS: Final = ("timeout", "connection_reset", "dns", "tls")
"""Well-known values of ``error``; any other short word is accepted too."""

MAX_TIMESTAMP: Final = 7258118400.0
"""Latest time accepted, unix seconds (2200-01-01T00:00:00Z): anything later is
almost surely milliseconds (or microseconds) given where seconds are expected."""
TOO_LATE: Final = "is after the year 2200: milliseconds? give unix seconds"
"""Why a timestamp after :data:`MAX_TIMESTAMP` is refused."""

MAX_BYTES: Final = 1 << 40
"""Largest ``bytes_sent`` / ``bytes_received`` accepted (1 TiB, far beyond any one
fetch): the store sums them per page in 64-bit integers, which this keeps from
overflowing for millions of fetches."""
MAX_NUMBER: Final = 1 << 53
"""Largest ``credits`` / ``latency_ms`` accepted (and the largest integer a float
holds exactly): sums of them stay finite."""
MAX_SIGNAL_CHARS: Final = 64
"""Longest ``signal`` name accepted (a hint source's name)."""
CSV_FIELD_LIMIT: Final = 64 << 20
"""Longest CSV field read (characters; the csv module's default is 128 KiB)."""
SHOWN_CHARS: Final = 200
"""Most characters of a bad value an error message echoes (:func:`show_value`):
a 2 MB URL is named by its start and its length, not written back whole."""

_OUTCOME_SET: Final = frozenset(OUTCOMES)
_NOT_STATUS: Final = "is not an HTTP status"
_RARE_STRINGS: Final = ("etag", "last_modified", "title", "body_excerpt", "lease_id")
_RARE_SET: Final = frozenset(_RARE_STRINGS)
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_KNOWN_FIELDS: Final = frozenset(
    {
        "url", "fetched_at", "site", "page_type", "status", "error", "bytes_sent",
        "bytes_received", "credits", "rendered", "latency_ms", "route", "etag",
        "last_modified", "conditional", "record", "record_hash", "outcome", "id",
        "title", "body_excerpt", "lease_id", "value", "canary", "moved_to",
        "signal", "signal_read",
    }
)  # fmt: skip


@dataclass(slots=True)
class Observation:
    """One fetch as a fetcher saw it.

    Times are unix seconds, sizes are wire bytes (headers included), latency is
    milliseconds. ``record_hash`` is the fingerprint of the extracted record
    (given by the reporter, or computed from ``record``). ``key`` is the
    idempotency key: 16 bytes derived from ``id``, or from the input line when
    the reporter gave no id, so the same report stored twice is stored once.

    Beyond SPEC §5's table, optional fields:

    ===============  ========  ===================================================
    field            required  meaning
    ===============  ========  ===================================================
    ``moved_to``     no        absolute http(s) URL: the request's first hop
                               answered a permanent redirect (301 or 308) and the
                               chain ended at this URL (``status`` and the record
                               are the final response's). Ingest moves the page
                               there with its history, or, when that URL is
                               already a page, retires this one; its URL is not
                               fetched again. Canonicalised as ``url``.
    ``signal``       no        the cheap signal the fetch was spent for (at most
                               :data:`MAX_SIGNAL_CHARS` characters): a hint
                               source (``sitemap``, ``feed``, ``listing``, ...)
                               that proved the page changed, so the plan fetched
                               it; absent, the fetch was the schedule's. Counted
                               per site and signal (cost, changes found:
                               :meth:`recrawl.engine.Engine.signal_costs`).
    ``signal_read``  no        true: the fetch is ``signal``'s own read (a
                               listing page), its cost the signal's, its changes
                               not counted as the signal's finds.
    ===============  ========  ===================================================
    """

    url: str
    fetched_at: float
    site: str
    page_type: str
    status: int | None = None
    error: str | None = None
    bytes_sent: int = 0
    bytes_received: int = 0
    credits: float | None = None
    rendered: bool = False
    latency_ms: float | None = None
    route: str = ""
    etag: str | None = None
    last_modified: str | None = None
    conditional: bool = False
    record_hash: str | None = None
    record_empty: bool = False
    record: dict[str, Any] | None = None
    outcome: str | None = None
    id: str | None = None
    title: str | None = None
    body_excerpt: str | None = None
    lease_id: str | None = None
    canary: str | None = None
    moved_to: str | None = None
    signal: str | None = None
    signal_read: bool = False
    key: bytes = b""

    @property
    def ok(self) -> bool:
        """The server answered with a 2xx or 304 (the request succeeded)."""
        s = self.status
        return s is not None and (200 <= s < 300 or s == 304)

    def billed_credits(self) -> float:
        """Credits this fetch cost: as reported, else one per successful response."""
        if self.credits is not None:
            return self.credits
        return 1.0 if self.ok else 0.0


@lru_cache(maxsize=65536)
def _normalize_netloc(scheme: str, netloc: str) -> str:
    userinfo, at, hostport = netloc.rpartition("@")
    host, port = hostport, ""
    if hostport.startswith("["):
        end = hostport.find("]")
        host, rest = hostport[: end + 1], hostport[end + 1 :]
        port = rest[1:] if rest.startswith(":") else ""
    elif ":" in hostport:
        host, _, port = hostport.rpartition(":")
    host = host.lower().rstrip(".")
    if not host:
        raise ValueError("has no host")
    if port:
        if not port.isdigit() or int(port) > 65535:
            raise ValueError(f"has an invalid port {show_value(port)}")
        if int(port) == _DEFAULT_PORTS[scheme]:
            port = ""
    return (userinfo + at if at else "") + host + (":" + port if port else "")


_PLAIN_PATH: Final = re.compile(r"[A-Za-z0-9._~!$'()*+,=:@/-]*")
"""A path canonicalisation leaves as it is (once without dot segments): no
percent sign, no character to quote."""
_PLAIN_QUERY: Final = re.compile(r"[A-Za-z0-9._~=&-]*")
"""A query whose canonical form is its arguments sorted: unreserved characters only."""


@lru_cache(maxsize=64)
def _tracking_rule(patterns: tuple[str, ...]) -> tuple[frozenset[str], tuple[str, ...]]:
    """``patterns`` (names, or prefixes ending in ``*``) as exact names and prefixes, lower-case."""
    names = frozenset(p.lower() for p in patterns if not p.endswith("*"))
    prefixes = tuple(p[:-1].lower() for p in patterns if p.endswith("*"))
    return names, prefixes


def _without_tracking(query: str, patterns: tuple[str, ...]) -> str:
    """A canonical query string without the arguments ``patterns`` name."""
    names, prefixes = _tracking_rule(patterns)
    kept = []
    for arg in query.split("&"):
        name = arg.partition("=")[0].lower()
        if name in names or (prefixes and name.startswith(prefixes)):
            continue
        kept.append(arg)
    return "&".join(kept)


TRACKING_PARAMS: Final = (
    "utm_*", "gclid", "fbclid", "msclkid", "mc_cid", "mc_eid", "_ga", "yclid", "igshid",
)  # fmt: skip
"""Query parameters :func:`normalize_url` drops by default (``*`` matches any
suffix): they name the campaign, not the page (``tracking_params`` in recrawl.toml)."""


@lru_cache(maxsize=131072)
def normalize_url(url: str, tracking_params: tuple[str, ...] = TRACKING_PARAMS) -> str:
    """The canonical form of an absolute http(s) URL: one page, one string.

    Scheme and host lower-cased (a trailing dot dropped), default port and
    fragment dropped, an empty path written ``/``; then as
    :func:`w3lib.url.canonicalize_url` writes it: dot segments removed,
    percent-encoding of one case (``%7E`` → ``~``, ``%2f`` → ``%2F``), query
    arguments sorted, blank ones kept (``a=``), and the arguments named by
    ``tracking_params`` dropped (names, or prefixes ending in ``*``, compared
    case-insensitively; default :data:`TRACKING_PARAMS`:
    ``utm_*``, ``gclid``, ...), since they name the campaign, not the page.

    >>> normalize_url("HTTP://Example.COM:80/a/./b/../c?utm_source=x&b=1&a=2#frag")
    'http://example.com/a/c?a=2&b=1'

    Raises ValueError when the URL is not absolute http(s).
    """
    text = url.strip()
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError("is not an absolute http(s) URL")
    netloc = _normalize_netloc(scheme, parts.netloc)
    if "\0" in text:  # (quoting would hide it: refused as every text field holding one)
        raise ValueError("holds a NUL character (U+0000)")
    path, query = parts.path, parts.query
    if _PLAIN_PATH.fullmatch(path) and "/." not in path and _PLAIN_QUERY.fullmatch(query):
        # most URLs: what canonicalize_url would do, without its cost (8 times ours)
        if query:
            args = sorted(a.partition("=")[::2] for a in query.split("&") if a)
            query = "&".join(f"{k}={v.replace('=', '%3D')}" for k, v in args)
    else:
        canon = urlsplit(canonicalize_url(text, keep_fragments=False))
        path, query = canon.path, canon.query
    if query and tracking_params:
        query = _without_tracking(query, tracking_params)
    out = urlunsplit((scheme, netloc, path or "/", query, ""))
    # the URL given when it was normal: one string kept (here and wherever it goes), not two
    return url if out == url else out


def host_of(url: str) -> str:
    """The host of a normalised URL, without port or credentials.

    >>> host_of("http://user@[::1]:8080/x")
    '[::1]'
    """
    netloc = url.split("/", 3)[2]
    host = netloc.rpartition("@")[2]
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rpartition(":")[0] if ":" in host else host


def parse_timestamp(value: Any) -> float:
    """Unix seconds from unix seconds (number or numeric string) or RFC 3339.

    >>> parse_timestamp("2024-01-01T00:00:00Z")
    1704067200.0

    Raises ValueError for anything else, including a time without an offset or
    one after the year 2200 (:data:`MAX_TIMESTAMP`: milliseconds, most likely).
    """
    if isinstance(value, bool):
        raise ValueError("is not a timestamp")
    if isinstance(value, int | float):
        if value > MAX_TIMESTAMP:  # before float(): an int may be too large for one
            raise ValueError(TOO_LATE)
        t = float(value)
    elif isinstance(value, str):
        s = value.strip()
        try:
            t = float(s)
        except ValueError:
            try:
                dt = datetime.fromisoformat(s)
            except ValueError:
                raise ValueError("is not RFC 3339 nor unix seconds") from None
            if dt.tzinfo is None:
                raise ValueError("has no UTC offset (RFC 3339 needs one)") from None
            t = dt.timestamp()
    else:
        raise ValueError("is not a timestamp")
    if not math.isfinite(t) or t < 0:
        raise ValueError("is not a timestamp after 1970")
    if t > MAX_TIMESTAMP:
        raise ValueError(TOO_LATE)
    return t


def _opt_str(raw: Mapping[str, Any], name: str) -> str | None:
    v = raw.get(name)
    if v is None or v == "":
        return None
    if type(v) is not str:
        raise InvalidObservation("must be a string", field=name)
    return v


def show_value(v: Any) -> str:
    """``v`` for an error message, every echo of a value goes through here:
    its ``repr`` up to :data:`SHOWN_CHARS` characters, a longer one cut with an
    ellipsis and its length; a number short (never thousands of digits).

    >>> show_value("ftp://a.example/" + "x" * 5000)[-30:]
    "xxxxxxxxx'… (5,016 characters)"
    """
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        try:
            return f"{float(v):.6g}"
        except OverflowError:
            return f"a {v.bit_length()}-bit number"
    if isinstance(v, str):
        text = repr(v[: SHOWN_CHARS + 1])  # (never the repr of 2 MB to keep 200 characters)
        if len(v) <= SHOWN_CHARS and len(text) <= SHOWN_CHARS + 2:
            return text
        return f"{text[:SHOWN_CHARS]}{text[0]}… ({len(v):,} characters)"
    text = repr(v)
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}… ({len(text):,} characters)"


def _opt_number(
    raw: Mapping[str, Any],
    name: str,
    *,
    integer: bool,
    most: int = MAX_NUMBER,
    too_large: str | None = None,
) -> Any:
    """The number ``raw[name]`` (None when absent or empty), from 0 to ``most``.

    Anything else (not a number, not finite, negative, above ``most``: too
    large for the store's columns) raises InvalidObservation naming the field;
    ``too_large`` is the reason given above ``most``.
    """
    v = raw.get(name)
    if v is None:
        return None
    t = type(v)
    if t is int and 0 <= v <= most:
        return v if integer else float(v)
    if t is float and not integer and 0 <= v <= most:
        return v
    if v == "":
        return None
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            raise InvalidObservation("must be a number", field=name) from None
        if v == math.inf and any(c.isdigit() for c in raw[name]):  # "1e999", 400 digits
            raise InvalidObservation(too_large or f"is too large (at most {most})", field=name)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise InvalidObservation("must be a number", field=name)
    if isinstance(v, float) and not math.isfinite(v):  # (math.isfinite(int) may overflow)
        raise InvalidObservation("must be a number", field=name)
    if v < 0:
        raise InvalidObservation("must not be negative", field=name)
    if v > most:
        raise InvalidObservation(
            f"{show_value(v)} {too_large or f'is too large (at most {most})'}", field=name
        )
    if integer:
        if v != int(v):
            raise InvalidObservation("must be a whole number", field=name)
        return int(v)
    return float(v)


def _opt_bool(raw: Mapping[str, Any], name: str) -> bool:
    v = raw.get(name)
    if v is None or v == "":
        return False
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false", "1", "0", "yes", "no"):
        return v.lower() in ("true", "1", "yes")
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    raise InvalidObservation("must be true or false", field=name)


def parse_observation(
    raw: Mapping[str, Any],
    *,
    rules: Mapping[str, FieldRule] | None = None,
    key: bytes | None = None,
    line: str | bytes | None = None,
) -> Observation:
    """Validate one observation (a JSON object or a CSV row).

    ``rules`` maps a page type to the :class:`FieldRule` that decides which
    record fields count towards its fingerprint. ``key`` is the idempotency key
    to use when the observation carries no ``id`` (or give the input ``line``
    it came from, and the key is derived from it only when needed).
    """
    # The common case (fields of the right JSON type) is checked inline; anything
    # else goes through the _opt_* helpers, which convert or name the bad field.
    if raw.__class__ is not dict and not isinstance(raw, Mapping):
        raise InvalidObservation("an observation must be a JSON object")
    g = raw.get
    url_raw = g("url")
    if url_raw is None or url_raw == "":
        raise InvalidObservation("is missing", field="url")
    if url_raw.__class__ is not str:
        raise InvalidObservation("must be a string", field="url")
    try:
        url = normalize_url(url_raw)
    except (ValueError, KeyError) as exc:
        raise InvalidObservation(f"{show_value(url_raw)} {exc}", field="url") from None
    t_raw: Any = g("fetched_at")
    tc = t_raw.__class__
    if (tc is float or tc is int) and 0 <= t_raw <= MAX_TIMESTAMP:
        fetched_at = float(t_raw)
    else:
        if t_raw is None or t_raw == "":
            raise InvalidObservation("is missing", field="fetched_at")
        try:
            fetched_at = parse_timestamp(t_raw)
        except ValueError as exc:
            raise InvalidObservation(f"{show_value(t_raw)} {exc}", field="fetched_at") from None
    status = g("status")
    if status is not None and (status.__class__ is not int or not 100 <= status <= 599):
        status = _opt_number(raw, "status", integer=True, most=599, too_large=_NOT_STATUS)
        if status is not None and status < 100:
            raise InvalidObservation(f"{status} {_NOT_STATUS}", field="status")
    error = g("error")
    if error is not None and (error.__class__ is not str or not error):
        error = _opt_str(raw, "error")
    outcome = g("outcome")
    if outcome is not None:
        if outcome.__class__ is not str or not outcome:
            outcome = _opt_str(raw, "outcome")
        if outcome is not None and outcome not in _OUTCOME_SET:
            raise InvalidObservation(
                f"unknown outcome {show_value(outcome)} (one of {', '.join(OUTCOMES)})",
                field="outcome",
            )
    if status is None and error is None and outcome is None:
        raise InvalidObservation("is missing (give 'status' or 'error')", field="status")
    site = g("site")
    if site.__class__ is not str or not site:
        site = _opt_str(raw, "site") or host_of(url)
    page_type = g("page_type")
    if page_type.__class__ is not str or not page_type:
        page_type = _opt_str(raw, "page_type") or "page"
    record_hash = g("record_hash")
    if record_hash is not None and (record_hash.__class__ is not str or not record_hash):
        record_hash = _opt_str(raw, "record_hash")
    record_empty = False
    record = g("record")
    if record is not None and record != "":
        if isinstance(record, str):
            # read as a JSONL line's record is: no NaN, no integer beyond 64 bits
            try:
                record = orjson.loads(record)
            except orjson.JSONDecodeError as exc:
                raise InvalidObservation(
                    f"is not a JSON object ({exc.msg} at column {exc.colno})", field="record"
                ) from None
        if not isinstance(record, dict):
            raise InvalidObservation("must be a JSON object", field="record")
        record_empty = not record
        if record_hash is None:
            try:
                record_hash = fingerprint(record, rules.get(page_type) if rules else None)
            except UnicodeEncodeError:  # a JSON string's escaped lone surrogate ("\\udce9")
                raise InvalidObservation(
                    "holds a lone surrogate (\\ud800-\\udfff), not valid UTF-8 text",
                    field="record",
                ) from None
            except ValueError:  # (a Python caller's) integer of thousands of digits
                raise InvalidObservation("holds a number too large", field="record") from None
    else:
        record = None
    ident = g("id")
    if ident is not None and ident.__class__ is not str:
        if isinstance(ident, int) and not isinstance(ident, bool) and ident.bit_length() <= 64:
            ident = str(ident)
        else:
            raise InvalidObservation("must be a string", field="id")
    if ident:
        key = _id_key(ident)
    elif key is None and line is not None:
        key = line_key(line)
    # the bounds keep every number within its store column (int64, finite sums)
    bytes_sent = g("bytes_sent")
    if bytes_sent.__class__ is not int or not 0 <= bytes_sent <= MAX_BYTES:
        bytes_sent = _opt_number(raw, "bytes_sent", integer=True, most=MAX_BYTES) or 0
    bytes_received = g("bytes_received")
    if bytes_received.__class__ is not int or not 0 <= bytes_received <= MAX_BYTES:
        bytes_received = _opt_number(raw, "bytes_received", integer=True, most=MAX_BYTES) or 0
    latency_ms = g("latency_ms")
    if latency_ms is not None:
        if latency_ms.__class__ is float and 0 <= latency_ms <= MAX_NUMBER:
            pass
        else:
            latency_ms = _opt_number(raw, "latency_ms", integer=False)
    route = g("route")
    if route.__class__ is not str:
        route = _opt_str(raw, "route") or ""
    # rarer fields
    credits = g("credits")
    if credits is not None:
        credits = _opt_number(raw, "credits", integer=False)
    rendered = g("rendered", False)
    if not (rendered is False or rendered is True):
        rendered = _opt_bool(raw, "rendered")
    conditional = g("conditional", False)
    if not (conditional is False or conditional is True):
        conditional = _opt_bool(raw, "conditional")
    etag = last_modified = title = body_excerpt = lease_id = None
    if not _RARE_SET.isdisjoint(raw):  # (most observations carry none of them)
        etag, last_modified, title, body_excerpt, lease_id = (
            _opt_str(raw, name) if name in raw else None for name in _RARE_STRINGS
        )
    canary = g("canary")
    if canary is not None:
        canary = _canary(raw)
    moved_to = g("moved_to")
    if moved_to is not None:
        moved_to = _moved_to(moved_to)
    signal = g("signal")
    signal_read = False
    if signal is not None:
        signal = _signal(raw)
        signal_read = g("signal_read", False)
        if not (signal_read is False or signal_read is True):
            signal_read = bool(_opt_bool(raw, "signal_read"))
    # PostgreSQL refuses text holding NUL: a JSON line can only carry one escaped,
    # a CSV row a raw one (looking for a backslash first is 4 times faster: most
    # lines hold none)
    if line is None or (
        ("\0" in line or ("\\" in line and "\\u0000" in line))
        if isinstance(line, str)
        else b"\\u0000" in line
    ):
        _no_nul(
            url=url, site=site, page_type=page_type, error=error, route=route, etag=etag,
            last_modified=last_modified, record_hash=record_hash, id=ident, lease_id=lease_id,
        )  # fmt: skip
    if key is None:  # (after the fields: a bad one is named first)
        try:
            body = json.dumps(raw, sort_keys=True, default=str).encode()
        except ValueError:  # an integer of thousands of digits (Python callers only)
            raise InvalidObservation("holds a number too large") from None
        key = hashlib.blake2b(b"obs\0" + body, digest_size=16).digest()
    return Observation(
        url,
        fetched_at,
        site,
        page_type,
        status,
        error,
        bytes_sent,
        bytes_received,
        credits,
        rendered,
        latency_ms,
        route,
        etag,
        last_modified,
        conditional,
        record_hash,
        record_empty,
        record,
        outcome,
        ident or None,
        title,
        body_excerpt,
        lease_id,
        canary,
        moved_to,
        signal,
        signal_read,
        key,
    )


def _no_nul(**fields: str | None) -> None:
    """Raise InvalidObservation naming the first of ``fields`` holding a NUL character."""
    for name, v in fields.items():
        if v is not None and "\0" in v:
            raise InvalidObservation("holds a NUL character (U+0000)", field=name)


def _signal(raw: Mapping[str, Any]) -> str | None:
    """The ``signal`` field (None when empty)."""
    v = _opt_str(raw, "signal")
    if v is not None and (len(v) > MAX_SIGNAL_CHARS or "\0" in v):
        raise InvalidObservation(
            f"{show_value(v)} is not a signal name (at most {MAX_SIGNAL_CHARS} characters)",
            field="signal",
        )
    return v


def _moved_to(v: Any) -> str | None:
    """The ``moved_to`` field, canonicalised (None when empty)."""
    if v == "":
        return None
    if v.__class__ is not str:
        raise InvalidObservation("must be a string (a URL)", field="moved_to")
    try:
        return normalize_url(v)
    except (ValueError, KeyError) as exc:
        raise InvalidObservation(f"{show_value(v)} {exc}", field="moved_to") from None


def _canary(raw: Mapping[str, Any]) -> str | None:
    v = raw.get("canary")
    if v is None or v == "" or v is False:
        return None
    if v in ("ok", "mismatch"):
        return str(v)
    raise InvalidObservation(
        "must be 'ok' or 'mismatch' (the reporter's canary check)", field="canary"
    )


Parsed = tuple[int, "Observation | InvalidObservation"]


def not_utf8(text: str, *, column: bool = True) -> str | None:
    """Why ``text`` is not valid UTF-8 text (it holds a surrogate), or None.

    A byte that is not UTF-8, read with ``errors="surrogateescape"``, arrives as
    U+DC80..U+DCFF: the message names the byte and its column. Only called once
    something has failed (a per-character scan of every line would cost).
    """
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        c = ord(text[exc.start])
        byte = f"byte 0x{c - 0xDC00:02X}" if 0xDC80 <= c <= 0xDCFF else f"U+{c:04X}"
        where = f" at column {exc.start + 1}" if column else ""
        return f"not valid UTF-8 text ({byte}{where})"
    return None


def _bad_utf8_row(row: Mapping[str | None, Any], n: int) -> InvalidObservation:
    """The error for a CSV row holding text that is not UTF-8, naming its field."""
    for k, v in row.items():
        why = not_utf8(v, column=False) if isinstance(v, str) else None
        if why is not None:
            return InvalidObservation(why, field=k, line=n)
    return InvalidObservation("not valid UTF-8 text", line=n)


def with_keys(observations: Sequence[Observation]) -> None:
    """Give each observation built without an idempotency key (``key == b""``:
    made in code, not by :func:`parse_observation`) the key parsing would give
    it: from its ``id``, else from its fields, so distinct reports are not
    taken for repeats of one another and the same report twice still is."""
    for o in observations:
        if not o.key:
            if o.id:
                o.key = _id_key(o.id)
            else:
                # (``moved_to`` only when set: the keys of observations made
                # before it existed stay what they were)
                fields = {
                    f: getattr(o, f)
                    for f in o.__slots__
                    if f != "key" and (f != "moved_to" or o.moved_to is not None)
                }
                body = json.dumps(fields, sort_keys=True, default=str).encode()
                o.key = hashlib.blake2b(b"obj\0" + body, digest_size=16).digest()


def _id_key(ident: str) -> bytes:
    """Idempotency key of an observation with an ``id``."""
    return hashlib.blake2b(b"id\0" + ident.encode(), digest_size=16).digest()


def line_key(line: bytes | str) -> bytes:
    """The idempotency key of an observation without an ``id``: a 16-byte hash
    of its input line (surrounding whitespace ignored), so ingesting the same
    line twice stores it once (the service keys request lines the same way)."""
    data = line.encode() if isinstance(line, str) else line
    return hashlib.blake2b(b"line\0" + data.strip(), digest_size=16).digest()


def read_observations(
    lines: Iterable[str],
    *,
    fmt: Literal["jsonl", "csv"] = "jsonl",
    rules: Mapping[str, FieldRule] | None = None,
) -> Iterator[Parsed]:
    """Yield ``(line_number, Observation or InvalidObservation)`` for each input line.

    Line numbers count from 1 (for CSV, the header is line 1). Blank lines are
    skipped. An observation without an ``id`` gets an idempotency key derived
    from its line, so ingesting the same file twice stores each line once.
    """
    if fmt == "csv":
        yield from _read_csv(lines, rules)
        return
    loads = orjson.loads
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            raw = loads(line)
        except orjson.JSONDecodeError as exc:
            # orjson refuses a str that is not valid UTF-8 (a byte the caller
            # decoded with errors="surrogateescape" is a lone surrogate in it)
            why = not_utf8(line) or f"not JSON ({exc.msg} at column {exc.colno})"
            yield n, InvalidObservation(why, line=n)
            continue
        try:
            yield n, parse_observation(raw, rules=rules, line=line)
        except InvalidObservation as exc:
            exc.line = n
            exc.args = (f"line {n}: {exc.args[0]}",)
            yield n, exc


def _header_name(name: str) -> str:
    """A CSV header cell as a field name: ``" URL"`` and ``' "url"'`` (quoted after
    a space, which the csv module keeps) are ``url`` (:func:`_read_csv` has already
    dropped a byte-order mark)."""
    return name.strip().strip('"').strip().lower()


def _no_url_column(names: list[str]) -> InvalidObservation:
    """The error for a CSV header without a ``url`` column (line 1)."""
    why = (
        "the CSV header must name the columns (url, fetched_at, status, ...) "
        "and has no 'url' column"
    )
    first = names[0].strip().lower() if names else ""
    if "://" in first:
        why += f": the file seems to have no header row (its first line is data: {first[:60]!r})"
    return InvalidObservation(why, line=1)


def _csv_error(exc: csv.Error) -> str:
    """Why the csv module could not read a row, in the input's terms."""
    text = str(exc)
    if text.startswith("new-line character"):
        return "not valid CSV: a carriage return (\\r) inside an unquoted field (quote the field)"
    return f"not valid CSV: {text}"


def _read_csv(lines: Iterable[str], rules: Mapping[str, FieldRule] | None) -> Iterator[Parsed]:
    if csv.field_size_limit() < CSV_FIELD_LIMIT:  # (a process-wide setting)
        csv.field_size_limit(CSV_FIELD_LIMIT)
    it = iter(lines)
    first = next(it, None)
    if first is not None and first.startswith("\ufeff"):
        # a byte-order mark that reached the parser (stdin, or a file opened as utf-8)
        first = first[1:]
    reader = csv.DictReader(chain((first,), it) if first is not None else it)
    rows = reader.reader  # its line_num counts the lines of a row that failed too
    try:
        names = reader.fieldnames
    except csv.Error as exc:
        n = rows.line_num or 1
        yield n, InvalidObservation(f"the CSV header is {_csv_error(exc)}", line=n)
        return
    if names is None:  # no input at all
        return
    fieldnames = [_header_name(h) for h in names]
    if "url" not in fieldnames:
        yield 1, _no_url_column(list(names))
        return
    reader.fieldnames = fieldnames
    failed = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # that row only: the reader goes on with the next line
            n = rows.line_num
            yield n, InvalidObservation(_csv_error(exc), line=n)
            if n == failed:  # read nothing since the last failure: it cannot go on
                return
            failed = n
            continue
        n = reader.line_num
        if row.get(None):
            yield n, InvalidObservation("has more columns than the header", line=n)
            continue
        clean = {k: v for k, v in row.items() if k is not None and v not in (None, "")}
        buf = io.StringIO()
        csv.writer(buf).writerow(row.values())
        text = buf.getvalue()
        try:
            key = line_key(text)
        except UnicodeEncodeError:
            yield n, _bad_utf8_row(row, n)
            continue
        try:
            yield n, parse_observation(clean, rules=rules, key=key, line=text)
        except InvalidObservation as exc:
            exc.line = n
            exc.args = (f"line {n}: {exc.args[0]}",)
            yield n, exc


def is_known_field(name: str) -> bool:
    """True for a field the observation contract defines."""
    return name in _KNOWN_FIELDS

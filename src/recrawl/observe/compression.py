"""Recognising compressed input by its first bytes, not its name or headers.

A fetch log, a sitemap or a request body may be gzipped without saying so
(``log.jsonl`` holding gzip, a body without ``Content-Encoding``); every
reader asks :func:`is_gzip` of the bytes that open it.
"""

from __future__ import annotations

__all__ = ["GZIP_MAGIC", "is_gzip"]

GZIP_MAGIC = b"\x1f\x8b"
"""The two bytes that open every gzip member (RFC 1952: ``ID1 ID2``, hex 1f 8b)."""


def is_gzip(head: bytes) -> bool:
    """Whether ``head``, the first bytes of a file or body (at least two of
    them to say yes), opens a gzip member.

    >>> import gzip
    >>> is_gzip(gzip.compress(b"{}")), is_gzip(b'{"url": 1}'), is_gzip(b"")
    (True, False, False)
    """
    return head[:2] == GZIP_MAGIC

"""DecodeBody, the service's request-body decoder, however the body is cut into pieces.

A body arrives in pieces of any size (chunked uploads, TCP segments): a zlib
header, a gzip member's start or zero padding may straddle two of them, or
come one byte at a time.
"""

from __future__ import annotations

import asyncio
import gzip
import zlib
from itertools import pairwise
from typing import Any

import pytest
from fastapi import HTTPException
from hypothesis import given, settings
from hypothesis import strategies as st

from recrawl.service.body import DecodeBody

LIMIT = 1 << 20


def compress(data: bytes, fmt: str, level: int) -> bytes:
    """``data`` as a gzip member, a zlib stream or raw DEFLATE."""
    if fmt == "gzip":
        return gzip.compress(data, compresslevel=level, mtime=0)
    c = zlib.compressobj(level, zlib.DEFLATED, zlib.MAX_WBITS if fmt == "zlib" else -15)
    return c.compress(data) + c.flush()


def decode(coding: str, pieces: list[bytes], limit: int = LIMIT) -> tuple[int, Any]:
    """Run ``pieces`` as one request body through DecodeBody: ``(200, the body the
    application read)`` or ``(status, detail)`` of the refusal."""
    read = bytearray()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            msg = await receive()
            read.extend(msg.get("body", b""))
            if not msg.get("more_body", False):
                return

    queue = [
        {"type": "http.request", "body": p, "more_body": i < len(pieces) - 1}
        for i, p in enumerate(pieces or [b""])
    ]

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    async def send(msg: Any) -> None:
        raise AssertionError("the decoder answered by itself")

    scope = {"type": "http", "headers": [(b"content-encoding", coding.encode())]}
    try:
        asyncio.run(DecodeBody(app, limit)(scope, receive, send))
    except HTTPException as exc:
        return exc.status_code, exc.detail
    return 200, bytes(read)


def cut(body: bytes, at: list[int]) -> list[bytes]:
    """``body`` cut at the offsets ``at``."""
    edges = [0, *sorted(set(at)), len(body)]
    return [body[a:b] for a, b in pairwise(edges)]


payloads = st.lists(st.binary(max_size=300) | st.sampled_from([b"a" * 2000, b"\n" * 700]))


@settings(deadline=None, max_examples=200)
@given(
    parts=payloads.filter(bool),
    fmt=st.sampled_from(["gzip", "zlib", "raw"]),
    level=st.integers(0, 9),
    padding=st.integers(0, 600),
    data=st.data(),
)
def test_any_body_cut_anywhere_reads_as_its_plain_bytes(
    parts: list[bytes], fmt: str, level: int, padding: int, data: st.DataObject
) -> None:
    """gzip as one member per part, deflate (zlib or raw) as one stream; zero
    padding after either; pieces cut anywhere, down to single bytes."""
    if fmt == "gzip":
        body = b"".join(compress(p, fmt, level) for p in parts)
    else:
        body = compress(b"".join(parts), fmt, level)
    body += bytes(padding)
    at = data.draw(st.lists(st.integers(0, len(body)), max_size=40))
    coding = "gzip" if fmt == "gzip" else "deflate"
    assert decode(coding, cut(body, at)) == (200, b"".join(parts))


@settings(deadline=None, max_examples=100)
@given(
    plain=st.binary(min_size=1, max_size=500),
    fmt=st.sampled_from(["gzip", "zlib", "raw"]),
    padding=st.integers(0, 50),
    garbage=st.binary(min_size=1, max_size=20).filter(lambda b: b[0] != 0),
    data=st.data(),
)
def test_bytes_after_the_end_that_are_not_zeros_are_refused(
    plain: bytes, fmt: str, padding: int, garbage: bytes, data: st.DataObject
) -> None:
    body = compress(plain, fmt, 6) + bytes(padding) + garbage
    at = data.draw(st.lists(st.integers(0, len(body)), max_size=10))
    coding = "gzip" if fmt == "gzip" else "deflate"
    status, detail = decode(coding, cut(body, at))
    if fmt == "gzip" and padding == 0 and garbage[:2] == b"\x1f\x8b":
        assert status == 400  # the start of a member, broken or cut short
    else:
        assert (status, detail[: detail.index(" with")]) == (
            400,
            f"the {coding} body goes on after its end of stream",
        )


@pytest.mark.parametrize("fmt", ["gzip", "zlib", "raw"])
def test_a_body_cut_short_anywhere_is_refused(fmt: str) -> None:
    body = compress(b"x" * 100 + bytes(range(256)), fmt, 6)
    coding = "gzip" if fmt == "gzip" else "deflate"
    for end in range(1, len(body)):
        status, detail = decode(coding, [body[:end]])
        assert status == 400, end
        assert detail.startswith((f"the {coding} body ends before", "the body is not valid")), end


@pytest.mark.parametrize("fmt", ["zlib", "raw"])
def test_deflate_past_the_limit_is_413_one_byte_at_a_time(fmt: str) -> None:
    body = compress(bytes(5000), fmt, 9)
    assert decode("deflate", cut(body, list(range(len(body)))), limit=5000) == (200, bytes(5000))
    assert decode("deflate", cut(body, list(range(len(body)))), limit=4999) == (
        413,
        "request body larger than 4999 bytes once decompressed",
    )


def test_a_zlib_header_is_told_from_raw_deflate_by_its_check_bits() -> None:
    """Every header zlib writes (each window size and level), even split across
    two pieces, is read as a zlib stream's."""
    for wbits in range(9, 16):
        for level in range(10):
            c = zlib.compressobj(level, zlib.DEFLATED, wbits)
            body = c.compress(b"hello") + c.flush()
            assert decode("deflate", [body[:1], body[1:]]) == (200, b"hello")
    assert decode("deflate", [b"", b""]) == (200, b"")  # no body: nothing to decode

from __future__ import annotations

import gzip
import zlib

from hypothesis import given
from hypothesis import strategies as st

from recrawl.observe.compression import is_gzip


@given(st.binary(max_size=200))
def test_gzip_is_recognised_by_its_first_bytes_and_nothing_else_is(data: bytes) -> None:
    assert is_gzip(gzip.compress(data))
    assert not is_gzip(zlib.compress(data))
    assert is_gzip(data) == data.startswith(b"\x1f\x8b")

"""Strings packed in one buffer (recrawl.records.strings): read back as given."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from recrawl.records.strings import StringColumn, string_hashes


@given(st.lists(st.lists(st.text(max_size=40), max_size=30), max_size=6))
def test_a_column_reads_back_its_strings_in_order(chunks: list[list[str]]) -> None:
    col = StringColumn()
    for chunk in chunks:
        col.extend(chunk)
    flat = [s for chunk in chunks for s in chunk]
    assert len(col) == len(flat) and col == flat and list(col) == flat
    assert [col[i] for i in range(len(flat))] == flat
    assert col[1:-1] == flat[1:-1] and col[::3] == flat[::3]
    assert col.hashes.tolist() == [hash(s) for s in flat]


def test_reading_a_column() -> None:
    urls = ["https://a.example/", "https://b.example/é?q=1", "", "https://a.example/"]
    col = StringColumn.of(urls)
    assert col[-1] == urls[-1] and col[1] == "https://b.example/é?q=1" and col[2] == ""
    assert col != urls[:3] and col == StringColumn.of(urls)
    with pytest.raises(IndexError):
        col[4]
    with pytest.raises(ValueError, match="read-only"):
        col.hashes[0] = 1
    at = np.array([3, 1])
    assert string_hashes(col, at).tolist() == string_hashes(urls, at).tolist()
    assert string_hashes(urls).tolist() == [hash(u) for u in urls]
    assert repr(col) == "StringColumn(4 strings, 60 bytes)"  # UTF-8: é takes two

"""Strings packed in one buffer (recrawl.records.strings): read back as given."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from recrawl.records.strings import CodeBuilder, CodeColumn, StringColumn, string_hashes


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


@given(st.lists(st.lists(st.sampled_from(["b.example", "a.example", "c", "é"]), max_size=30),
                max_size=6), st.integers(0, 200))  # fmt: skip
def test_a_code_column_reads_back_its_strings_in_order(chunks: list[list[str]], ahead: int) -> None:
    build = CodeBuilder(ahead)
    for chunk in chunks:
        build.extend(chunk)
    col = build.column()
    flat = [s for chunk in chunks for s in chunk]
    assert len(col) == len(flat) and col == flat and list(col) == flat
    assert col.names == sorted(set(flat)) and col.codes.dtype == np.uint8
    assert [col[i] for i in range(len(flat))] == flat and col[1:-1] == flat[1:-1]
    assert np.asarray(col, dtype=object).tolist() == flat
    assert col == CodeColumn.of(flat) and col == StringColumn.of(flat)


def test_a_code_column_takes_the_narrowest_codes() -> None:
    many = [f"s{i}.example" for i in range(300)]
    col = CodeColumn.of(many[::-1])
    assert col.codes.dtype == np.uint16 and col.names == sorted(many)
    assert col[0] == many[-1] and repr(col) == "CodeColumn(300 strings, 300 distinct)"
    assert CodeColumn.of([]) == [] and len(CodeColumn.of([])) == 0


def test_a_reserved_column_grows_no_array() -> None:
    col = StringColumn()
    col.reserve(5)
    ends = col._ends
    col.extend(["a", "bb"])
    col.extend(["ccc", "", "d"])
    assert col._ends is ends and col == ["a", "bb", "ccc", "", "d"]
    col.extend(["e"])  # past what was reserved: it grows
    assert col._ends is not ends and col[-1] == "e" and len(col) == 6

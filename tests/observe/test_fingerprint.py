from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recrawl.observe.fingerprint import FieldRule, fingerprint

_keys = st.text(min_size=1, max_size=8).filter(lambda k: "." not in k)
_vals = st.one_of(st.integers(), st.text(max_size=10), st.booleans(), st.none())
_records = st.dictionaries(_keys, _vals, max_size=6)


@given(_records)
def test_key_order_does_not_matter(rec):
    shuffled = dict(reversed(list(rec.items())))
    assert fingerprint(rec) == fingerprint(shuffled)


@given(_records, _keys, _vals, _vals)
def test_ignored_fields_never_change_the_fingerprint(rec, noisy, a, b):
    rule = FieldRule(ignore=(noisy,))
    assert fingerprint({**rec, noisy: a}, rule) == fingerprint({**rec, noisy: b}, rule)


@given(_records, _keys, st.integers(), st.integers())
def test_included_field_change_is_seen(rec, k, a, b):
    rule = FieldRule(include=(k,))
    same = fingerprint({**rec, k: a}, rule) == fingerprint({**rec, k: b}, rule)
    assert same == (a == b)


def test_nested_dotted_paths():
    rule = FieldRule(include=("offer.price",))
    a = fingerprint({"offer": {"price": 3, "session": "x"}, "ts": 1}, rule)
    b = fingerprint({"offer": {"price": 3, "session": "y"}, "ts": 2}, rule)
    c = fingerprint({"offer": {"price": 4, "session": "y"}, "ts": 2}, rule)
    assert a == b != c


def test_include_and_ignore_together_is_an_error():
    with pytest.raises(ValueError, match="either"):
        FieldRule(include=("a",), ignore=("b",))

from __future__ import annotations

import json
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recrawl import InvalidObservation
from recrawl.observation import normalize_url, parse_observation, parse_timestamp, read_observations


def test_url_normalised():
    assert normalize_url("HTTPS://Shop.Example.COM:443/A?b=1#x") == "https://shop.example.com/A?b=1"
    assert normalize_url("http://example.com:8080") == "http://example.com:8080/"
    assert normalize_url("http://[::1]:80/x") == "http://[::1]/x"


@pytest.mark.parametrize(
    "bad", ["ftp://x.com/", "/relative", "mailto:a@b", "http://", "http://h:99999/"]
)
def test_non_http_urls_rejected(bad: str):
    with pytest.raises(InvalidObservation) as e:
        parse_observation({"url": bad, "fetched_at": 1, "status": 200})
    assert e.value.field == "url"


def test_timestamps():
    assert parse_timestamp("2024-01-01T00:00:00Z") == 1704067200.0
    assert parse_timestamp("2024-01-01T01:00:00+01:00") == 1704067200.0
    assert parse_timestamp(1704067200) == 1704067200.0
    assert parse_timestamp("1704067200.5") == 1704067200.5
    for bad in ("yesterday", "2024-01-01T00:00:00", -5, True, None):
        with pytest.raises(ValueError):
            parse_timestamp(bad)


def test_defaults_site_from_host_and_page_type():
    o = parse_observation({"url": "https://A.example/x", "fetched_at": 5, "status": 200})
    assert (o.site, o.page_type) == ("a.example", "page")


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"fetched_at": 1, "status": 200}, "url"),
        ({"url": "http://a/", "status": 200}, "fetched_at"),
        ({"url": "http://a/", "fetched_at": "soon", "status": 200}, "fetched_at"),
        ({"url": "http://a/", "fetched_at": 1, "status": 200, "bytes_sent": -3}, "bytes_sent"),
        ({"url": "http://a/", "fetched_at": 1, "status": 200, "outcome": "maybe"}, "outcome"),
        ({"url": "http://a/", "fetched_at": 1}, "status"),
        ({"url": "http://a/", "fetched_at": 1, "status": 999}, "status"),
        ({"url": "http://a/", "fetched_at": 1, "status": 200, "record": [1]}, "record"),
        ({"url": "http://a/", "fetched_at": 1, "status": 200, "rendered": "perhaps"}, "rendered"),
    ],
)
def test_errors_name_the_field(raw, field):
    with pytest.raises(InvalidObservation) as e:
        parse_observation(raw)
    assert e.value.field == field
    assert field in str(e.value)


def test_read_names_line_numbers_and_keeps_good_lines():
    lines = [
        json.dumps({"url": "http://a.example/1", "fetched_at": 1, "status": 200}),
        "{not json",
        "",
        json.dumps({"url": "gopher://a/", "fetched_at": 1, "status": 200}),
        json.dumps({"url": "http://a.example/2", "fetched_at": 2, "status": 304}),
    ]
    items = list(read_observations(lines))
    assert [n for n, _ in items] == [1, 2, 4, 5]
    errors = [x for _, x in items if isinstance(x, InvalidObservation)]
    assert [e.line for e in errors] == [2, 4]
    assert str(errors[0]).startswith("line 2: ")
    assert "url" in str(errors[1])


def test_csv_same_columns():
    lines = [
        "url,fetched_at,status,bytes_received\n",
        "http://a.example/x,2024-01-01T00:00:00Z,200,10\n",
        "http://a.example/y,,200,\n",
    ]
    items = list(read_observations(lines, fmt="csv"))
    assert items[0][1].bytes_received == 10  # type: ignore[union-attr]
    assert isinstance(items[1][1], InvalidObservation)
    assert items[1][0] == 3 and items[1][1].field == "fetched_at"


def test_idempotency_key_from_id_or_line():
    a = parse_observation({"url": "http://a/", "fetched_at": 1, "status": 200, "id": "x"})
    b = parse_observation({"url": "http://a/", "fetched_at": 2, "status": 500, "id": "x"})
    assert a.key == b.key
    (_, c), (_, d) = read_observations(['{"url":"http://a/","fetched_at":1,"status":200}'] * 2)
    assert c.key == d.key  # type: ignore[union-attr]


_text = st.text(alphabet=string.printable, max_size=30)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(_text, c, max_size=3),
    max_leaves=8,
)


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "url",
                "fetched_at",
                "status",
                "error",
                "bytes_sent",
                "record",
                "outcome",
                "id",
                "site",
            ]
        ),
        _json,
    )
)
def test_parser_never_crashes_on_arbitrary_objects(raw):
    try:
        parse_observation(raw)
    except InvalidObservation as e:
        assert str(e)


@given(st.text(max_size=60))
def test_reader_never_crashes_on_arbitrary_lines(line):
    for _, item in read_observations([line]):
        assert item is not None


@given(
    scheme=st.sampled_from(["http", "HTTP", "https", "HtTpS"]),
    host=st.from_regex(r"[a-zA-Z][a-zA-Z0-9-]{0,10}(\.[a-zA-Z]{2,5}){1,2}", fullmatch=True),
    path=st.from_regex(r"(/[a-z0-9]{0,5}){0,3}", fullmatch=True),
    frag=st.text(alphabet=string.ascii_letters, max_size=5),
)
def test_normalisation_is_idempotent_and_lowercases_host(scheme, host, path, frag):
    u = normalize_url(f"{scheme}://{host}{path}#{frag}")
    assert normalize_url(u) == u
    assert host.lower() in u and "#" not in u

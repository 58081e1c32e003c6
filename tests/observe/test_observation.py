from __future__ import annotations

import json
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recrawl import InvalidObservation
from recrawl.observe.observation import (
    normalize_url,
    parse_observation,
    parse_timestamp,
    read_observations,
)


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


def test_timestamps_after_2200_are_refused_as_milliseconds():
    from recrawl.observe.observation import MAX_TIMESTAMP

    assert parse_timestamp(MAX_TIMESTAMP) == MAX_TIMESTAMP  # 2200-01-01 itself
    assert parse_timestamp("2199-12-31T23:59:59Z") == MAX_TIMESTAMP - 1
    for late in (1796000000000, 1796000000000.5, "1796000000000", "2250-01-01T00:00:00Z"):
        with pytest.raises(ValueError, match="after the year 2200: milliseconds"):
            parse_timestamp(late)
    with pytest.raises(InvalidObservation) as e:
        parse_observation(
            {"url": "https://q.example/ms", "fetched_at": 1796000000000, "status": 200}
        )
    assert e.value.field == "fetched_at"
    assert str(e.value) == (
        "field 'fetched_at': 1796000000000 is after the year 2200: milliseconds? give unix seconds"
    )
    lines = [
        '{"url":"https://q.example/s","fetched_at":1796000000,"status":200}',
        '{"url":"https://q.example/ms","fetched_at":1796000000000,"status":200}',
    ]
    (_, good), (n, bad) = read_observations(lines)
    assert not isinstance(good, InvalidObservation) and good.fetched_at == 1796000000
    assert n == 2 and isinstance(bad, InvalidObservation)
    assert (bad.line, bad.field) == (2, "fetched_at")
    assert str(bad).startswith("line 2: field 'fetched_at': 1796000000000 is after the year 2200")
    csv_lines = ["url,fetched_at,status", "https://q.example/ms,1796000000000,200"]
    ((n, bad),) = read_observations(csv_lines, fmt="csv")
    assert isinstance(bad, InvalidObservation) and (bad.line, bad.field) == (2, "fetched_at")


def test_a_line_not_utf8_is_rejected_by_number():
    # a byte that is not UTF-8 (here 0xE9, Latin-1 "é"), read with
    # errors="surrogateescape", is a lone surrogate in the line
    lines = [
        json.dumps({"url": "http://a.example/1", "fetched_at": 1, "status": 200}),
        '{"url": "http://a.example/caf\udce9", "fetched_at": 2, "status": 200}',
        "\udce9",
        json.dumps({"url": "http://a.example/2", "fetched_at": 3, "status": 200}),
    ]
    items = list(read_observations(lines))
    assert [n for n, _ in items] == [1, 2, 3, 4]
    errors = [x for _, x in items if isinstance(x, InvalidObservation)]
    assert [(e.line, e.field) for e in errors] == [(2, None), (3, None)]
    assert str(errors[0]) == "line 2: not valid UTF-8 text (byte 0xE9 at column 30)"
    assert str(errors[1]) == "line 3: not valid UTF-8 text (byte 0xE9 at column 1)"


def test_a_csv_row_not_utf8_is_rejected_naming_line_and_field():
    lines = [
        "url,fetched_at,status,title\n",
        "http://a.example/1,1,200,ok\n",
        "http://a.example/2,2,200,caf\udce9\n",
        "http://a.example/3,3,200,\n",
    ]
    items = list(read_observations(lines, fmt="csv"))
    assert [n for n, _ in items] == [2, 3, 4]
    bad = items[1][1]
    assert isinstance(bad, InvalidObservation) and (bad.line, bad.field) == (3, "title")
    assert str(bad) == "line 3: field 'title': not valid UTF-8 text (byte 0xE9)"
    assert not any(isinstance(x, InvalidObservation) for i, (_, x) in enumerate(items) if i != 1)


def test_a_record_holding_an_escaped_lone_surrogate_is_rejected():
    for record in ('{"a": "\\udce9"}', '{"\\ud800": 1}'):
        with pytest.raises(InvalidObservation) as e:
            parse_observation(
                {"url": "http://a/", "fetched_at": 1, "status": 200, "record": record}
            )
        assert e.value.field == "record"


def test_csv_header_after_a_byte_order_mark():
    for header in ("\ufeffurl,fetched_at,status\n", '\ufeff"url",fetched_at,status\n'):
        items = list(read_observations([header, "http://a.example/x,5,200\n"], fmt="csv"))
        ((n, o),) = items
        assert n == 2 and not isinstance(o, InvalidObservation)
        assert (o.url, o.fetched_at, o.status) == ("http://a.example/x", 5.0, 200)


_surrogate = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, exclude_categories=())
_plain = st.characters(exclude_characters='\r\n"')  # one CSV line, no quoting


@given(
    st.lists(
        st.text(_plain, max_size=12) | st.text(_surrogate, min_size=1, max_size=2), max_size=5
    ),
    st.sampled_from(["jsonl", "csv"]),
)
def test_reader_never_crashes_on_lines_holding_surrogates(parts, fmt):
    good = '{"url": "http://a.example/x", "fetched_at": 1, "status": 200, "title": "'
    lines = (
        [good + "".join(parts) + '"}']
        if fmt == "jsonl"
        else ["url,fetched_at,status,title", "http://a.example/x,1,200," + "".join(parts)]
    )
    for _, item in read_observations(lines, fmt=fmt):
        if isinstance(item, InvalidObservation):
            assert str(item).startswith("line ")
        else:
            item.key.hex()


_GOOD = {"url": "http://a.example/x", "fetched_at": 1, "status": 200}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("bytes_received", 1e300),
        ("bytes_received", 9223372036854775808),  # 2**63: beyond int64
        ("bytes_received", 2**53 + 1),
        ("bytes_received", "1e300"),
        ("bytes_sent", 18446744073709551616),
        ("bytes_sent", -5),
        ("status", 1e300),
        ("status", 18446744073709551615),
        ("status", "1e300"),
        ("status", 99),
        ("credits", 1e300),
        ("credits", -1),
        ("latency_ms", 1.7e308),
        ("latency_ms", 2**64),
        ("fetched_at", 2**64),
    ],
)
def test_numbers_beyond_their_columns_are_rejected_naming_the_field(field, value):
    lines = [
        json.dumps(_GOOD),
        json.dumps({**_GOOD, "fetched_at": 2, field: value}),
        json.dumps({**_GOOD, "fetched_at": 3}),
    ]
    items = list(read_observations(lines))
    assert [n for n, _ in items] == [1, 2, 3]
    bad = items[1][1]
    assert isinstance(bad, InvalidObservation) and (bad.line, bad.field) == (2, field)
    assert len(str(bad)) < 200  # the value is shown short, never hundreds of digits
    assert not any(isinstance(x, InvalidObservation) for _, x in (items[0], items[2]))


def test_python_callers_huge_integers_are_rejected_not_crashing():
    huge = 10**5000  # more digits than int() converts to text
    for field in ("bytes_received", "status", "credits", "latency_ms", "fetched_at"):
        with pytest.raises(InvalidObservation) as e:
            parse_observation({**_GOOD, field: huge})
        assert e.value.field == field and len(str(e.value)) < 200
    with pytest.raises(InvalidObservation) as e:
        parse_observation({**_GOOD, "id": huge})
    assert e.value.field == "id"


def test_largest_accepted_numbers_and_huge_record_values():
    from recrawl.observe.observation import MAX_BYTES, MAX_NUMBER

    o = parse_observation(
        {**_GOOD, "bytes_received": MAX_BYTES, "bytes_sent": float(MAX_BYTES),
         "credits": MAX_NUMBER, "latency_ms": float(MAX_NUMBER), "status": "599"}
    )  # fmt: skip
    assert (o.bytes_received, o.bytes_sent, o.status) == (MAX_BYTES, MAX_BYTES, 599)
    assert (o.credits, o.latency_ms) == (float(MAX_NUMBER), float(MAX_NUMBER))
    # a record's numbers only feed its fingerprint: any size is fine
    line = '{"url": "http://a.example/x", "fetched_at": 1, "status": 200, '
    line += '"record": {"a": 18446744073709551615, "b": 1e300, "c": -9223372036854775809}}'
    ((_, o),) = read_observations([line])
    assert not isinstance(o, InvalidObservation) and o.record_hash
    # a record given as text (a CSV column) is read as JSONL's: no NaN, no 400-digit integers
    for text in ('{"a": NaN}', '{"a": 1e400}'):
        with pytest.raises(InvalidObservation) as e:
            parse_observation({**_GOOD, "record": text})
        assert e.value.field == "record"
    o = parse_observation({**_GOOD, "record": '{"a": 1' + "0" * 30 + "}"})
    assert o.record == {"a": 1e30}


def test_text_holding_nul_is_rejected_naming_the_field():
    lines = [
        json.dumps({**_GOOD, "route": "pool\u0000a"}),
        json.dumps({**_GOOD, "url": "http://a.example/x\u0000y"}),
        json.dumps({**_GOOD, "title": "a\u0000b"}),  # not stored: accepted
    ]
    items = list(read_observations(lines))
    assert [(x.line, x.field) for _, x in items if isinstance(x, InvalidObservation)] == [
        (1, "route"), (2, "url"),
    ]  # fmt: skip
    with pytest.raises(InvalidObservation) as e:
        parse_observation({**_GOOD, "etag": "x\x00"})
    assert e.value.field == "etag"


def test_csv_field_over_128_kib_is_read():
    big = "x" * 300_000
    lines = ["url,fetched_at,status,title\n", f"http://a.example/1,1,200,{big}\n"]
    ((n, o),) = read_observations(lines, fmt="csv")
    assert n == 2 and not isinstance(o, InvalidObservation) and o.title == big


def test_a_malformed_csv_row_is_rejected_by_number_and_reading_goes_on():
    lines = [
        "url,fetched_at,status,title\n",
        "http://a.example/1,1,200,ok\n",
        "http://a.example/2,2,200,a\rb\n",  # a bare carriage return, unquoted
        "http://a.example/3,3,200,ok\n",
        "http://a.example/4\0,4,200,ok\n",  # NUL in the URL
        "http://a.example/5,5,200,ok\n",
    ]
    items = list(read_observations(lines, fmt="csv"))
    assert [n for n, _ in items] == [2, 3, 4, 5, 6]
    errors = [x for _, x in items if isinstance(x, InvalidObservation)]
    assert [(e.line, e.field) for e in errors] == [(3, None), (5, "url")]
    assert str(errors[0]).startswith("line 3: not valid CSV: a carriage return")
    good = [x.url for _, x in items if not isinstance(x, InvalidObservation)]
    assert good == ["http://a.example/1", "http://a.example/3", "http://a.example/5"]


def test_csv_header_names_are_trimmed_and_lower_cased():
    for header in ("URL, Fetched_At ,Status\n", '\ufeff "Url" ,FETCHED_AT,status\n'):
        ((n, o),) = read_observations([header, "http://a.example/x,5,200\n"], fmt="csv")
        assert n == 2 and not isinstance(o, InvalidObservation)
        assert (o.url, o.fetched_at, o.status) == ("http://a.example/x", 5.0, 200)


def test_csv_without_url_column_is_rejected_on_line_1():
    rows = ["http://a.example/1,1,200\n", "http://a.example/2,2,200\n"]
    ((n, e),) = read_observations(rows, fmt="csv")  # no header row: the first is data
    assert isinstance(e, InvalidObservation) and (n, e.line) == (1, 1)
    assert "has no 'url' column" in str(e) and "no header row" in str(e)
    ((n, e),) = read_observations(
        ["link,fetched_at,status\n", "http://a.example/1,1,200\n"], fmt="csv"
    )
    assert isinstance(e, InvalidObservation) and (n, e.line) == (1, 1)
    assert "must name the columns" in str(e) and "no header row" not in str(e)


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("https://shop.example/p?b=2&a=1", "https://shop.example/p?a=1&b=2"),
        ("https://shop.example/%7euser/a%2fb", "https://shop.example/~user/a%2Fb"),
        ("https://shop.example/a/./b/../c", "https://shop.example/a/c"),
        (
            "https://shop.example/p?id=3&utm_source=news&utm_medium=mail",
            "https://shop.example/p?id=3",
        ),
        ("https://shop.example/p?gclid=abc&fbclid=x&UTM_Campaign=y", "https://shop.example/p"),
        ("https://shop.example/a b?q=x y", "https://shop.example/a%20b?q=x+y"),
        ("HTTPS://Shop.Example:443/p?z=1&a=#top", "https://shop.example/p?a=&z=1"),
    ],
)
def test_urls_are_canonicalised_so_one_page_is_one_url(given: str, canonical: str) -> None:
    assert normalize_url(given) == canonical
    assert normalize_url(canonical) == canonical


def test_tracking_parameters_can_be_configured() -> None:
    url = "https://shop.example/p?ref=mail&id=3&utm_source=x"
    assert normalize_url(url, ("ref",)) == "https://shop.example/p?id=3&utm_source=x"
    assert normalize_url(url, ()) == "https://shop.example/p?id=3&ref=mail&utm_source=x"


def test_the_same_page_reported_with_two_spellings_is_one_page() -> None:
    a = parse_observation(
        {"url": "https://shop.example/p?b=2&a=1&utm_source=x", "fetched_at": 1, "status": 200}
    )
    b = parse_observation({"url": "https://shop.example/p?a=1&b=2", "fetched_at": 2, "status": 200})
    assert a.url == b.url == "https://shop.example/p?a=1&b=2"


@given(
    path=st.text(alphabet="abcAB%7e2F/.~-_ é", max_size=12),
    query=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "utm_x", "gclid", "Q"]), st.text("xy1%2 ", max_size=3)
        ),
        max_size=4,
    ),
)
def test_canonicalisation_is_idempotent(path: str, query: list[tuple[str, str]]) -> None:
    q = "&".join(f"{k}={v}" for k, v in query)
    u = normalize_url(f"https://shop.example/{path}?{q}")
    assert normalize_url(u) == u
    assert "utm_" not in u and "gclid" not in u


@given(
    path=st.text(alphabet="abc/_-~!$()*+,;=:@.%2F", max_size=10),
    query=st.text(alphabet="abAB09._~-=&%+ ", max_size=14),
)
def test_canonical_urls_are_what_w3lib_canonicalize_url_gives(path: str, query: str) -> None:
    """The fast path (most URLs) and w3lib's, without tracking parameters:
    the same URL, but for the default port and host case, which recrawl drops too."""
    from urllib.parse import urlsplit, urlunsplit

    from w3lib.url import canonicalize_url

    url = f"https://shop.example/{path}?{query}#frag"
    ref = urlsplit(canonicalize_url(url))
    assert normalize_url(url, ()) == urlunsplit(
        (ref.scheme, ref.netloc, ref.path or "/", ref.query, "")
    )

"""Local response classification: status codes lie, bodies and records tell."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recrawl.health.buckets import OUTCOMES
from recrawl.observe.classify import (
    BLOCK_MARKERS,
    CHALLENGE_MARKERS,
    ResponseNormals,
    classify_response,
    find_marker,
)


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        (403, None, "hard_block"),
        (429, None, "hard_block"),
        (None, "connection_reset", "hard_block"),
        (None, "timeout", "error"),
        (None, "dns", "error"),
        (304, None, "not_modified"),
        (404, None, "gone"),
        (410, None, "gone"),
        (500, None, "error"),
        (418, None, "error"),
        (301, None, None),
        (200, None, None),
        (None, None, None),
    ],
)
def test_status_rules(status: int | None, error: str | None, expected: str | None) -> None:
    assert classify_response(status=status, error=error) == expected


@pytest.mark.parametrize(
    ("title", "excerpt"),
    [
        ("Just a moment...", None),
        (None, '<script src="/cdn-cgi/challenge-platform/h/b/orchestrate/jsch/v1">'),
        (None, '<iframe src="https://geo.captcha-delivery.com/captcha/">'),
        (None, '<script src="/_Incapsula_Resource?SWJIYLWA=719d34d3">'),
        (None, '<div class="g-recaptcha" data-sitekey="x">'),
        (None, '<div class="h-captcha" data-sitekey="x">'),
        ("Pardon Our Interruption", None),
    ],
)
def test_challenge_pages_are_challenges_whatever_the_status(
    title: str | None, excerpt: str | None
) -> None:
    for status in (200, 403, 503):
        assert classify_response(status=status, title=title, body_excerpt=excerpt) == "challenge"


def test_block_pages_are_soft_under_200_and_hard_under_403() -> None:
    assert classify_response(status=200, title="Access Denied") == "soft_block"
    assert classify_response(status=403, title="Attention Required! | Cloudflare") == "hard_block"


def test_user_markers_extend_the_list() -> None:
    page = {"status": 200, "body_excerpt": "<h1>Please wait while we check your browser</h1>"}
    assert classify_response(**page) is None
    assert classify_response(**page, extra_markers=["check your browser"]) == "challenge"
    assert (
        classify_response(**page, extra_markers=[("check your browser", "soft_block")])
        == "soft_block"
    )
    with pytest.raises(ValueError, match="marker outcome"):
        classify_response(**page, extra_markers=[("check", "gone")])


def test_tiny_200_body_is_a_soft_block_only_against_a_known_normal() -> None:
    assert classify_response(status=200, body_bytes=2_000) is None
    assert classify_response(status=200, body_bytes=2_000, normal_body_bytes=80_000) == "soft_block"
    assert classify_response(status=200, body_bytes=60_000, normal_body_bytes=80_000) is None


def test_empty_record_is_a_soft_block() -> None:
    assert classify_response(status=200, record={}) == "soft_block"
    assert classify_response(status=200, record={"title": None, "price": ""}) == "soft_block"


def test_missing_required_field_is_a_parser_problem_unless_the_body_is_small() -> None:
    kw = {"normal_body_bytes": 80_000, "required_fields": ["title", "price"]}
    full = classify_response(status=200, body_bytes=81_000, record={"title": "x"}, **kw)
    assert full == "extract_failed"
    tiny = classify_response(status=200, body_bytes=3_000, record={"title": "x"}, **kw)
    assert tiny == "soft_block"
    good = classify_response(status=200, body_bytes=81_000, record={"title": "x", "price": 3}, **kw)
    assert good is None


def test_no_record_sent_means_nothing_is_inferred_from_its_absence() -> None:
    assert classify_response(status=200, body_bytes=80_000, normal_body_bytes=80_000) is None


def test_markers_are_lower_case_and_found_case_insensitively() -> None:
    assert all(m == m.lower() for m in CHALLENGE_MARKERS + BLOCK_MARKERS)
    assert find_marker("JUST A MOMENT", None) == ("just a moment", "challenge")


@given(
    status=st.one_of(st.none(), st.integers(100, 599)),
    error=st.one_of(st.none(), st.sampled_from(["timeout", "connection_reset", "dns", "x"])),
    body=st.one_of(st.none(), st.integers(0, 10**7)),
    normal=st.one_of(st.none(), st.floats(0, 10**7)),
    title=st.one_of(st.none(), st.text(max_size=30)),
    record=st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3)),
)
def test_always_returns_a_known_outcome_or_none(
    status: int | None,
    error: str | None,
    body: int | None,
    normal: float | None,
    title: str | None,
    record: dict[str, int] | None,
) -> None:
    out = classify_response(
        status=status,
        error=error,
        body_bytes=body,
        title=title,
        record=record,
        normal_body_bytes=normal,
        required_fields=["a"],
    )
    assert out is None or out in OUTCOMES


def test_normals_learn_size_and_required_fields_from_good_responses() -> None:
    normals = ResponseNormals(min_records=20)
    assert normals.body_bytes("s", "item") is None
    for i in range(40):
        record = {"title": "t", "price": i, "promo": "x" if i % 2 else None}
        normals.update("s", "item", 80_000 + i, record)
    assert normals.body_bytes("s", "item") == pytest.approx(80_020, abs=15)
    assert normals.required_fields("s", "item") == frozenset({"title", "price"})
    assert normals.required_fields("s", "list") is None


@pytest.mark.parametrize(
    ("title", "excerpt", "record"),
    [
        ("Page not found", "Sorry, we couldn't find that item.", None),
        ("Error 404 | Shop", None, {"name": "x"}),
        ("Shop", "This item is no longer available.", {}),
        ("Shop", "Sorry, we could not find that page", {"name": "Shop", "price": None}),
    ],
)
def test_a_soft_404_is_gone_not_a_block(
    title: str, excerpt: str | None, record: dict | None
) -> None:
    got = classify_response(
        status=200,
        body_bytes=30_000,
        title=title,
        body_excerpt=excerpt,
        record=record,
        normal_body_bytes=32_000,
        required_fields=["name", "price"],
    )
    assert got == "gone"


def test_a_real_page_mentioning_not_found_is_not_gone() -> None:
    # the body excerpt says it, but the page has its content: a normal page
    assert (
        classify_response(
            status=200,
            body_bytes=40_000,
            title="Lost & Found umbrella",
            body_excerpt="Item not found? Call us.",
            record={"name": "Umbrella", "price": 9},
            normal_body_bytes=41_000,
            required_fields=["name", "price"],
        )
        is None
    )
    assert classify_response(status=200, title="Widgets from $404") is None


def test_a_block_page_saying_not_found_is_still_a_block() -> None:
    assert classify_response(status=200, title="Access denied - page not found") == "soft_block"
    assert classify_response(status=200, title="Just a moment... not found") == "challenge"

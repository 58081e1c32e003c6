"""recrawl.toml: the documented example loads, the crawl's settings are checked."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import recrawl.config as config
from recrawl import ConfigError
from recrawl.config import Settings, load_settings


def test_the_documented_example_is_a_valid_config(tmp_path: Path) -> None:
    doc = config.__doc__ or ""
    block = doc.split("Example ``recrawl.toml``::")[1].split("Environment variables")[0]
    text = "\n".join(line[4:] for line in block.splitlines())
    (tmp_path / "recrawl.toml").write_text(text)
    s = load_settings(tmp_path / "recrawl.toml", env={})
    assert dict(s.page_types["product"].fields) == {
        "name": "h1.name::text",
        "price": ".price::text",
    }
    assert s.crawl.routes["pool-a"] == "http://proxy-a:3128"
    assert s.block_markers == ["are you a robot"]
    assert tomllib.loads(text)["crawl"]["min_delay_s"] == 1.0


def test_the_crawl_defaults_are_safe_and_name_recrawl() -> None:
    s = Settings()
    assert s.crawl.allow_private_networks is False
    assert s.crawl.agent().startswith("recrawl/") and "(+http" in s.crawl.agent()
    assert s.crawl.min_delay_s >= 1.0
    assert "utm_*" in s.tracking_params


def test_a_bad_crawl_setting_is_one_clear_sentence(tmp_path: Path) -> None:
    (tmp_path / "recrawl.toml").write_text("[crawl]\nconcurrency = 0\n")
    with pytest.raises(ConfigError, match=r"crawl\.concurrency"):
        load_settings(tmp_path / "recrawl.toml", env={})


def test_sitemaps_and_feeds_the_crawl_reads(tmp_path: Path) -> None:
    path = tmp_path / "recrawl.toml"
    path.write_text(
        '[crawl]\nsitemaps = ["https://a.example/s.xml.gz"]\nfeeds = ["https://a.example/f"]\n'
    )
    c = load_settings(path, env={}).crawl
    assert (c.sitemaps, c.feeds, c.robots_sitemaps) == (
        ["https://a.example/s.xml.gz"], ["https://a.example/f"], True)  # fmt: skip
    path.write_text('[crawl]\nfeeds = ["file:///etc/passwd"]\n')
    with pytest.raises(ConfigError, match="not an http"):
        load_settings(path, env={})
    path.write_text("[crawl]\nsignal_min_interval_s = 90000\n")
    with pytest.raises(ConfigError, match="signal_min_interval_s"):
        load_settings(path, env={})


def test_a_listing_page_type(tmp_path: Path) -> None:
    path = tmp_path / "recrawl.toml"
    path.write_text(
        '[crawl.listings.category]\nitems = "li.item"\nurl = "a::attr(href)"\n'
        'summary = { price = ".price::text" }\n'
    )
    rule = load_settings(path, env={}).crawl.listings["category"]
    assert (rule.items, rule.summary, rule.next, rule.max_pages) == (
        "li.item", {"price": ".price::text"}, None, 20)  # fmt: skip
    path.write_text('[crawl.listings.category]\nitems = "li.item"\n')
    with pytest.raises(ConfigError, match="url"):
        load_settings(path, env={})

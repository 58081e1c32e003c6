from __future__ import annotations

import asyncio
import ipaddress

import pytest

from recrawl import Error
from recrawl.crawl.safety import (
    ResolutionFailed,
    UnsafeTarget,
    is_public_address,
    resolve_and_check,
)

REFUSED = [
    "127.0.0.1",
    "10.1.2.3",
    "172.16.0.5",
    "192.168.1.1",
    "100.64.0.1",
    "169.254.169.254",
    "0.0.0.0",
    "224.0.0.1",
    "240.0.0.1",
    "255.255.255.255",
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "64:ff9b::7f00:1",
    "2002:7f00:1::",
]


@pytest.mark.parametrize("address", REFUSED)
def test_non_public_addresses_are_refused(address: str) -> None:
    assert not is_public_address(address)
    with pytest.raises(UnsafeTarget) as caught:
        asyncio.run(resolve_and_check(address, 80, allow_private=False))
    assert address in str(caught.value)
    assert isinstance(caught.value, Error) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:4700::1111", "::ffff:8.8.8.8"])
def test_public_literals_pass_without_dns(address: str) -> None:
    assert is_public_address(address)
    resolved = asyncio.run(resolve_and_check(address, 443, allow_private=False))
    assert resolved == [str(ipaddress.ip_address(address))]


def test_not_an_address_is_not_public() -> None:
    assert not is_public_address("example.com")
    assert not is_public_address("")


def test_allow_private_lets_loopback_through() -> None:
    assert asyncio.run(resolve_and_check("127.0.0.1", 80, allow_private=True)) == ["127.0.0.1"]
    assert asyncio.run(resolve_and_check("[::1]", 80, allow_private=True)) == ["::1"]


def test_a_name_resolving_to_loopback_is_refused_with_both_in_the_message() -> None:
    with pytest.raises(UnsafeTarget) as caught:
        asyncio.run(resolve_and_check("localhost", 80, allow_private=False))
    assert caught.value.host == "localhost"
    assert "localhost" in str(caught.value) and caught.value.address in str(caught.value)
    assert asyncio.run(resolve_and_check("localhost", 80, allow_private=True))


def test_a_name_that_does_not_resolve_is_a_resolution_failure() -> None:
    with pytest.raises(ResolutionFailed) as caught:
        asyncio.run(resolve_and_check("no-such-host.invalid", 80, allow_private=False))
    assert "no-such-host.invalid" in str(caught.value)
    assert not isinstance(caught.value, UnsafeTarget)

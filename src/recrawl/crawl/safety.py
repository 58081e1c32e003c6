"""Refuse to fetch private networks: the fetcher's guard against SSRF.

A crawl target comes from outside (a sitemap, a link, a redirect), so a hostile
page can point the crawler at ``http://169.254.169.254/`` (a cloud metadata
service), at ``localhost`` or at the office network. Before every connection
the fetcher calls :func:`resolve_and_check`, which resolves the host and
refuses it when **any** of its addresses is not public.

The fetcher checks a name before each hop (a passed check is remembered for a
minute), and again when it opens a direct connection: it then connects to one
of the addresses this check just passed, never to what the name resolves to
later, so a name whose DNS answer changes in between (DNS rebinding) cannot
reach a private address.

>>> is_public_address("93.184.216.34"), is_public_address("10.0.0.1")
(True, False)
>>> is_public_address("::ffff:127.0.0.1"), is_public_address("64:ff9b::a00:1")
(False, False)
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Final

from recrawl._exceptions import Error

__all__ = ["ResolutionFailed", "UnsafeTarget", "is_public_address", "resolve_and_check"]

_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL: Final = ipaddress.IPv6Network("64:ff9b:1::/48")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class UnsafeTarget(Error, ValueError):
    """A fetch target resolves to a private, loopback, link-local, multicast,
    reserved or unspecified address, and private networks are not allowed.

    ``host`` is the host as written in the URL, ``address`` the refused address.
    """

    def __init__(self, host: str, address: str) -> None:
        self.host = host
        self.address = address
        where = address if host == address else f"{host} (it resolves to {address})"
        super().__init__(f"refusing to fetch {where}: {address} is not a public internet address")


class ResolutionFailed(Error, OSError):
    """The host name could not be resolved (DNS failure); ``host`` names it."""

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        super().__init__(f"cannot resolve {host}: {reason}")


def _embedded_ipv4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, NAT64, 6to4), if any."""
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr in _NAT64:
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return addr.sixtofour


def _is_public(addr: IPAddress) -> bool:
    if isinstance(addr, ipaddress.IPv6Address):
        if addr in _NAT64_LOCAL:
            return False
        inner = _embedded_ipv4(addr)
        if inner is not None:
            return _is_public(inner)
    return (
        addr.is_global
        and not addr.is_multicast
        and not addr.is_reserved
        and not addr.is_unspecified
        and not addr.is_loopback
        and not addr.is_link_local
        and not addr.is_private
    )


def _parse_ip(text: str) -> IPAddress | None:
    """``text`` as an IP address (brackets and an IPv6 zone id allowed), else None."""
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        if "%" in text:  # fe80::1%eth0: the zone makes it link-local anyway
            try:
                return ipaddress.ip_address(text.split("%", 1)[0])
            except ValueError:
                return None
        return None


def is_public_address(ip: str) -> bool:
    """True when ``ip`` (an IPv4 or IPv6 literal) is a public internet address.

    False for private, shared (100.64/10), loopback, link-local, multicast,
    reserved and unspecified addresses, and for IPv4-mapped, NAT64 and 6to4
    forms of those. A string that is not an IP address is not public.
    """
    addr = _parse_ip(ip)
    return addr is not None and _is_public(addr)


async def resolve_and_check(host: str, port: int, *, allow_private: bool) -> list[str]:
    """Resolve ``host`` and return its addresses, refusing non-public ones.

    An IP literal is checked as it is, without DNS; a name is resolved with
    the running loop's ``getaddrinfo`` (TCP). Raises :class:`UnsafeTarget` when
    any address is not public (see :func:`is_public_address`) unless
    ``allow_private``, and :class:`ResolutionFailed` when the name does not
    resolve. The addresses come back in resolver order, without repeats.
    """
    literal = _parse_ip(host)
    if literal is not None:
        if not allow_private and not _is_public(literal):
            raise UnsafeTarget(host, str(literal))
        return [str(literal)]
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ResolutionFailed(host, str(exc)) from exc
    addresses: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address in addresses:
            continue
        if not allow_private and not is_public_address(address):
            raise UnsafeTarget(host, address)
        addresses.append(address)
    if not addresses:
        raise ResolutionFailed(host, "no address")
    return addresses

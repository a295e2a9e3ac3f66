"""What the web tools may reach: their limits, and the guard that keeps them off private networks.

The agent runs on the server, so a fetch of ``http://127.0.0.1:8000/admin/`` or of a cloud metadata
address would reach what the person chatting cannot. Every host a fetch names, and every host a
redirect leads to, is resolved once (``resolve_checked``); an address that is loopback, private,
link-local, reserved or multicast, or an IPv6 address that carries such an IPv4 address (NAT64,
IPv4-mapped, IPv4-translated, IPv4-compatible, 6to4, Teredo), is refused unless the host is listed in
``allowed_private_hosts`` (WEB_ALLOWED_PRIVATE_HOSTS). The caller connects to an address it was given,
never to the name again: a name that resolves to a public address for the check may resolve to
loopback a moment later (DNS rebinding).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass, field


class HostRefused(Exception):
    """The host may not be reached; the message says why, for the model to read."""


@dataclass(slots=True, frozen=True)
class WebConfig:
    brave_api_key: str = ""
    brave_search_url: str = "https://api.search.brave.com/res/v1/web/search"
    max_bytes: int = 2 * 1024 * 1024
    timeout_seconds: float = 20.0
    max_redirects: int = 5
    allowed_private_hosts: frozenset[str] = field(default_factory=frozenset)


# IPv6 ranges whose last 32 bits are an IPv4 address that a packet to them reaches (a translator
# forwards it there) or that names it: an address in them is as public as that IPv4 address.
_CARRIES_IPV4 = (
    ipaddress.IPv6Network("64:ff9b::/96"),  # NAT64's well-known prefix (RFC 6052)
    ipaddress.IPv6Network("::ffff:0:0:0/96"),  # IPv4-translated, SIIT (RFC 2765)
    ipaddress.IPv6Network("::/96"),  # IPv4-compatible, deprecated (RFC 4291); holds :: and ::1 too
)
# NAT64 prefixes for use inside one network (RFC 8215): a translator there reaches private space.
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")


def is_public(address: str) -> bool:
    """True when ``address``, and every IPv4 address it carries, is globally reachable unicast.
    Python's ``is_global`` alone judges ``64:ff9b::7f00:1`` (NAT64 of 127.0.0.1) public."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv4Address):
        return _global(ip)
    if ip.ipv4_mapped is not None:  # ::ffff:a.b.c.d is how a dual-stack socket shows an IPv4 peer
        return _global(ip.ipv4_mapped)
    if ip in _LOCAL_NAT64:
        return False
    carried: list[ipaddress.IPv4Address] = []
    if any(ip in network for network in _CARRIES_IPV4):
        carried.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if ip.sixtofour is not None:  # 2002:AABB:CCDD::/48 routes to A.B.C.D
        carried.append(ip.sixtofour)
    if ip.teredo is not None:  # 2001::/32 carries its server and (obfuscated) client
        carried.extend(ip.teredo)
    return _global(ip) and all(_global(ipv4) for ipv4 in carried)


def _global(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return ip.is_global and not ip.is_multicast


async def resolve_checked(host: str, port: int, config: WebConfig) -> list[str]:
    """web_fetch's check: ``resolve_public`` with WEB_ALLOWED_PRIVATE_HOSTS."""
    return await resolve_public(
        host, port, config.allowed_private_hosts, refused_by="web_fetch", setting="WEB_ALLOWED_PRIVATE_HOSTS"
    )


async def resolve_public(
    host: str, port: int, allowed_private_hosts: frozenset[str], *, refused_by: str, setting: str
) -> list[str]:
    """The addresses ``host`` resolves to, resolved once, in the resolver's order, for the caller to
    connect to (one of) them and to nothing else. Raises HostRefused when the name does not resolve,
    or when any address is not public (``is_public``) and the host is not in ``allowed_private_hosts``:
    one private answer among public ones is how a rebinding name would get through. The message
    names ``refused_by`` (who does not reach it) and ``setting`` (where an operator allows it).
    Every tool that reaches the network on the agent's behalf (web_fetch, bash's proxy) checks here."""
    name = host.lower().strip("[]")
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise HostRefused(f"{host}: the name does not resolve ({exc.strerror})") from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise HostRefused(f"{host}: the name resolves to no address")
    if name in allowed_private_hosts or _unicode(name) in allowed_private_hosts:
        return addresses
    for address in addresses:
        if not is_public(address):
            raise HostRefused(
                f"{host} resolves to {address}, a loopback, private or reserved address, "
                f"which {refused_by} does not reach (an operator can list the host in {setting})"
            )
    return addresses


def _unicode(name: str) -> str:
    """An internationalised name as an operator writes it (``bücher.example``, not ``xn--bcher-kva...``)."""
    try:
        return name.encode("ascii").decode("idna").lower()
    except UnicodeError:
        return name

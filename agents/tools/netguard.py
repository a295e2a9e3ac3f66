"""What the web tools may reach: their limits, and the guard that keeps them off private networks.

The agent runs on the server, so a fetch of ``http://127.0.0.1:8000/admin/`` or of a cloud metadata
address would reach what the person chatting cannot. Every host a fetch names, and every host a
redirect leads to, is resolved first; an address that is loopback, private, link-local, reserved or
multicast is refused unless the host is listed in ``allowed_private_hosts`` (WEB_ALLOWED_PRIVATE_HOSTS).
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


def is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def check_host(host: str, port: int, config: WebConfig) -> None:
    """Raises HostRefused unless every address ``host`` resolves to is public, or the host is allowed."""
    name = host.lower().strip("[]")
    if name in config.allowed_private_hosts:
        return
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise HostRefused(f"{host}: the name does not resolve ({exc.strerror})") from exc
    for info in infos:
        address = str(info[4][0])
        if not is_public(address):
            raise HostRefused(
                f"{host} resolves to {address}, a loopback, private or reserved address, "
                "which web_fetch does not reach (an operator can list the host in WEB_ALLOWED_PRIVATE_HOSTS)"
            )

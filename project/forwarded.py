"""Who a request comes from when a trusted proxy stands in front (``FORWARDED_ALLOW_IPS``).

uvicorn's convention: a comma-separated list of the proxies' addresses and networks, ``*`` for
every peer; loopback (``127.0.0.1,::1``) when unset; empty for none. Only a peer in that list is
believed when it names the client in ``X-Forwarded-For`` (or, without that header, RFC 7239's
``Forwarded: for=``): the client is the rightmost address of the chain that is not a trusted proxy,
as uvicorn's ProxyHeadersMiddleware reads it. Anyone else's headers are ignored, so a client cannot
pass itself off as another.

The server's protocol (project/server.py) applies this once a request's headers are read: the
per-client connection cap counts the real client, and the request's scope carries it (and the
scheme from ``X-Forwarded-Proto``) as uvicorn's middleware would have set them. uvicorn's own
``proxy_headers`` is off, so there is one setting and one reading of it.
"""

from __future__ import annotations

import ipaddress

# uvicorn's own trust list and address parsing: the same matching (addresses, networks, ``*``) and
# the same walk along the chain as its middleware, which Threadline used before this module.
from uvicorn.middleware.proxy_headers import _TrustedHosts


def _unmapped(host: str) -> str:
    """An IPv4 peer on a dual-stack socket (``::ffff:10.0.0.1``) as its IPv4 address."""
    if host.startswith("::ffff:"):
        try:
            mapped = ipaddress.IPv6Address(host).ipv4_mapped
        except ValueError:
            return host
        if mapped is not None:
            return str(mapped)
    return host


def _forwarded_for(value: str) -> list[str]:
    """The ``for=`` values of an RFC 7239 ``Forwarded`` header, first hop first (``host`` or
    ``host:port``, IPv6 in brackets, as ``X-Forwarded-For`` would carry them)."""
    hops: list[str] = []
    for element in value.split(","):
        for pair in element.split(";"):
            key, found, raw = pair.partition("=")
            if found and key.strip().lower() == "for":
                hops.append(raw.strip().strip('"'))
    return hops


def _forwarded_proto(value: str) -> str | None:
    """The first ``proto=`` of an RFC 7239 ``Forwarded`` header: the scheme the client used to reach
    the first proxy, which is what the request's scheme means (``X-Forwarded-Proto``'s sense)."""
    for element in value.split(","):
        for pair in element.split(";"):
            key, found, raw = pair.partition("=")
            if found and key.strip().lower() == "proto":
                return raw.strip().strip('"').lower()
    return None


class TrustedProxies:
    """``FORWARDED_ALLOW_IPS`` applied to a peer and to its request's headers."""

    def __init__(self, trusted: list[str]) -> None:
        self._hosts = _TrustedHosts(trusted)

    def trusts(self, peer: str) -> bool:
        """Whether the peer ``peer`` (an address) is a proxy whose forwarding headers are believed."""
        return _unmapped(peer) in self._hosts

    def client(self, headers: list[tuple[bytes, bytes]]) -> tuple[str, int] | None:
        """The client a trusted peer's request names, as (host, port); None when it names none (the
        proxy's own request). ``X-Forwarded-For`` is read when present (its lines joined, as uvicorn
        does), else ``Forwarded``."""
        x_forwarded_for = [value for name, value in headers if name == b"x-forwarded-for"]
        if x_forwarded_for:
            chain = b", ".join(x_forwarded_for).decode("latin-1")
        else:
            forwarded = [value for name, value in headers if name == b"forwarded"]
            if not forwarded:
                return None
            chain = ", ".join(_forwarded_for(b", ".join(forwarded).decode("latin-1")))
        host, port = self._hosts.get_trusted_client_address(chain)
        if not host:
            return None  # an empty header names nobody (uvicorn's issue #1068)
        return host, port

    @staticmethod
    def scheme(headers: list[tuple[bytes, bytes]]) -> str | None:
        """The scheme the client used to reach the proxy, when a trusted peer's request says it."""
        x_forwarded_proto = [value for name, value in headers if name == b"x-forwarded-proto"]
        if x_forwarded_proto:  # the last one, as uvicorn reads it
            proto: str | None = x_forwarded_proto[-1].decode("latin-1").strip().lower()
        else:
            forwarded = [value for name, value in headers if name == b"forwarded"]
            proto = _forwarded_proto(b", ".join(forwarded).decode("latin-1")) if forwarded else None
        return proto if proto in ("http", "https") else None

"""Where bash's network proxy lets a sandboxed command go (issue #47): the operator's host lists,
the mode, and the bounds of one command's network use.

Hosts are written ``name``, ``*.name`` (any name below ``name``, not ``name`` itself) or an IP
address, each with an optional ``:port`` (without one, any port). The deny list wins over the allow
list and over ``on`` mode. Whatever a list says, the addresses a name resolves to are checked by
netguard (``resolve_public``): loopback, private, link-local and metadata addresses are refused
unless the host is in ``allowed_private_hosts`` (AGENT_BASH_ALLOWED_PRIVATE_HOSTS)."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import re
from dataclasses import dataclass, field
from typing import Literal

EgressMode = Literal["allowlist", "on"]

_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")


@dataclass(slots=True, frozen=True)
class HostPattern:
    host: str  # lower case, ASCII (IDNA), no trailing dot; for a wildcard, the name below ``*.``
    wildcard: bool = False
    port: int | None = None

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    def __str__(self) -> str:
        name = f"*.{self.host}" if self.wildcard else self.host
        shown = f"[{name}]" if ":" in name else name
        return shown if self.port is None else f"{shown}:{self.port}"


def normalise_host(host: str) -> str:
    """A host as the lists hold it: lower case, ASCII, no brackets or trailing dot. Raises
    ValueError for what is neither an IP address nor a well-formed name."""
    name = host.strip().lower().strip("[]").rstrip(".")
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    try:
        name = name.encode("idna").decode("ascii")
    except UnicodeError as exc:
        raise ValueError(f"{host!r} is not a host name") from exc
    labels = name.split(".")
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"{host!r} is not a host name")
    return name


def parse_host_pattern(text: str) -> HostPattern:
    """One entry of AGENT_BASH_ALLOWED_HOSTS or AGENT_BASH_DENIED_HOSTS; ValueError saying what is
    wrong with it."""
    entry = text.strip()
    if "/" in entry or "@" in entry:
        raise ValueError(f"{entry!r}: write a host (and :port), not a URL")
    port: int | None = None
    host = entry
    if entry.startswith("["):  # [IPv6] or [IPv6]:port
        inside, _, rest = entry[1:].partition("]")
        host = inside
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"{entry!r} is not [address] or [address]:port")
            port = _port(entry, rest[1:])
    elif entry.count(":") == 1:
        host, _, digits = entry.partition(":")
        port = _port(entry, digits)
    wildcard = host.startswith("*.")
    if wildcard:
        host = host[2:]
    if "*" in host:
        raise ValueError(f"{entry!r}: a wildcard is only '*.' in front of a name")
    name = normalise_host(host)
    if wildcard and (_is_address(name) or "." not in name):
        raise ValueError(f"{entry!r}: '*.' goes in front of a domain with at least two labels")
    return HostPattern(name, wildcard, port)


def _port(entry: str, digits: str) -> int:
    if not digits.isdigit() or not 0 < int(digits) < 65536:
        raise ValueError(f"{entry!r}: the port must be a number from 1 to 65535")
    return int(digits)


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def parse_host_patterns(text: str) -> tuple[HostPattern, ...]:
    """A comma-separated list of entries (blank: none)."""
    return tuple(parse_host_pattern(entry) for entry in text.split(",") if entry.strip())


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
Headers = tuple[tuple[str, str], ...]


@dataclass(slots=True, frozen=True)
class HostHeaders:
    """Headers the proxy adds to every plain-HTTP request to ``host`` (a registry's token): the
    sandbox never sees them. Over CONNECT (HTTPS) the proxy only relays bytes and adds nothing."""

    host: HostPattern
    headers: Headers = field(repr=False)  # secrets: never in a repr, a log or an event


def parse_host_headers(text: str) -> tuple[HostHeaders, ...]:
    """AGENT_BASH_NETWORK_HEADERS: a JSON object of host (as the lists write it) to an object of
    header name to value; blank: none. ValueError saying what is wrong (never the values)."""
    if not text.strip():
        return ()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError('not JSON; write {"host[:port]": {"Header-Name": "value"}}') from None
    if not isinstance(data, dict):
        raise ValueError('write an object: {"host[:port]": {"Header-Name": "value"}}')
    parsed: list[HostHeaders] = []
    for host, headers in data.items():
        pattern = parse_host_pattern(host)
        if not isinstance(headers, dict) or not headers:
            raise ValueError(f"{host!r}: give an object of header names to values")
        pairs: list[tuple[str, str]] = []
        for name, value in headers.items():
            if not _HEADER_NAME.fullmatch(name) or name.lower() in ("host", "connection", "content-length"):
                raise ValueError(f"{host!r}: {name!r} is not a header the proxy may add")
            if not isinstance(value, str) or "\r" in value or "\n" in value:
                raise ValueError(f"{host!r}: the value of {name!r} must be a string on one line")
            pairs.append((name, value))
        parsed.append(HostHeaders(pattern, tuple(pairs)))
    return tuple(parsed)


@dataclass(slots=True, frozen=True)
class EgressBounds:
    max_connections: int = 64  # per command
    max_bytes: int = 1 << 30  # per command, both ways
    connect_timeout_seconds: float = 10.0
    idle_timeout_seconds: float = 60.0  # a connection with no byte either way for this long is closed


@dataclass(slots=True, frozen=True)
class EgressPolicy:
    mode: EgressMode
    allowed: tuple[HostPattern, ...] = ()
    denied: tuple[HostPattern, ...] = ()
    allowed_private_hosts: frozenset[str] = field(default_factory=frozenset)
    bounds: EgressBounds = EgressBounds()
    headers: tuple[HostHeaders, ...] = field(default=(), repr=False)

    def headers_for(self, host: str, port: int) -> Headers:
        """The operator's headers for a plain-HTTP request to ``host``:``port`` (the first entry that matches)."""
        return next((entry.headers for entry in self.headers if entry.host.matches(host, port)), ())

    def refusal(self, host: str, port: int) -> str | None:
        """Why the lists refuse ``host``:``port`` (already normalised), or None when they let it through
        to the address check."""
        denied = self.denied_by(host, port)
        if denied is not None:
            return f"the operator denies it (AGENT_BASH_DENIED_HOSTS or the agent's denied hosts have {denied})"
        if self.mode == "on":
            return None
        if not any(pattern.matches(host, port) for pattern in self.allowed):
            return "it is not in the operator's list of hosts bash may reach (AGENT_BASH_ALLOWED_HOSTS)"
        return None

    def denied_by(self, host: str, port: int) -> HostPattern | None:
        return next((pattern for pattern in self.denied if pattern.matches(host, port)), None)

    def with_hosts(self, allowed: tuple[HostPattern, ...], denied: tuple[HostPattern, ...]) -> EgressPolicy:
        """This policy with more hosts allowed and more denied (an agent's lists, a thread's grants)."""
        return dataclasses.replace(self, allowed=(*self.allowed, *allowed), denied=(*self.denied, *denied))

    def denial(self, pattern: HostPattern) -> HostPattern | None:
        """The deny entry that covers every host ``pattern`` names, if one does (a grant of it is moot)."""
        port = pattern.port or 0
        for denied in self.denied:
            if denied.port is not None and denied.port != pattern.port:
                continue
            if pattern.wildcard:
                if denied.wildcard and (pattern.host == denied.host or pattern.host.endswith("." + denied.host)):
                    return denied
            elif denied.matches(pattern.host, port if denied.port is None else denied.port):
                return denied
        return None

    def describe(self) -> str:
        if self.mode == "on":
            return "network to every public host through Threadline's proxy"
        return f"network to {len(self.allowed)} allowed host pattern(s) through Threadline's proxy"

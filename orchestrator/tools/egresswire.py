"""What bash's proxy reads and writes before a connection is a plain byte stream (issue #47): an
HTTP proxy request (``CONNECT host:port`` or an absolute ``http://`` URL) or a SOCKS5 handshake, and
the answers that refuse one. Each reader returns the destination, host normalised, or None once the
client was told what was wrong."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress

from orchestrator.tools.egress import normalise_host

_MAX_HEAD = 64 * 1024


async def http_destination(head: bytes, writer: asyncio.StreamWriter) -> tuple[str, int, bytes | None] | None:
    """``_destination`` of a request's head, or None once a 400 saying what is wrong was sent."""
    if len(head) > _MAX_HEAD:
        return None
    lines = head.decode("latin-1").split("\r\n")
    request_line = lines[0].split(" ")
    if len(request_line) != 3:
        await answer_http(writer, 400, "the proxy did not understand the request line")
        return None
    method, target, version = request_line
    try:
        return _destination(method, target, version, lines[1:-2])
    except ValueError as exc:
        await answer_http(writer, 400, str(exc))
        return None


# SOCKS5 (RFC 1928), for TCP that is not HTTP (git over SSH through a ProxyCommand, say): no
# authentication, CONNECT only; the address types IPv4, domain name and IPv6.
SOCKS5 = b"\x05"
SOCKS_SUCCEEDED, SOCKS_NOT_ALLOWED, SOCKS_UNREACHABLE = 0x00, 0x02, 0x04
_SOCKS_COMMAND_NOT_SUPPORTED, _SOCKS_ADDRESS_NOT_SUPPORTED = 0x07, 0x08


def socks_reply(code: int) -> bytes:
    return bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0])


async def socks_destination(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> tuple[str, int] | None:
    """The host and port of a SOCKS5 CONNECT (the version byte already read), or None once the
    client was told why not."""
    methods = await reader.readexactly((await reader.readexactly(1))[0])
    if 0 not in methods:
        writer.write(b"\x05\xff")  # only "no authentication" is offered
        return None
    writer.write(b"\x05\x00")
    version, command, _, kind = await reader.readexactly(4)
    if kind == 1:
        host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
    elif kind == 3:
        host = (await reader.readexactly((await reader.readexactly(1))[0])).decode("latin-1")
    elif kind == 4:
        host = str(ipaddress.IPv6Address(await reader.readexactly(16)))
    else:
        writer.write(socks_reply(_SOCKS_ADDRESS_NOT_SUPPORTED))
        return None
    port = int.from_bytes(await reader.readexactly(2), "big")
    if version != 5 or command != 1:
        writer.write(socks_reply(_SOCKS_COMMAND_NOT_SUPPORTED))
        return None
    try:
        return normalise_host(host), port
    except ValueError:
        writer.write(socks_reply(_SOCKS_ADDRESS_NOT_SUPPORTED))
        return None


def _destination(method: str, target: str, version: str, headers: list[str]) -> tuple[str, int, bytes | None]:
    """Host, port and, for a plain HTTP request, the request to send on (in origin form, without the
    proxy's headers, asking the server to close after it: one request per upstream connection)."""
    if not version.startswith("HTTP/1."):
        raise ValueError("the proxy speaks HTTP/1.x")
    if method == "CONNECT":
        host, port = _splitauthority(target, default_port=None)
        return host, port, None
    if not target.lower().startswith("http://"):
        raise ValueError("send an absolute http:// URL, or CONNECT host:port for anything else (https)")
    rest = target[len("http://") :]
    authority, slash, path = rest.partition("/")
    authority = authority.rsplit("@", 1)[-1]
    host, port = _splitauthority(authority, default_port=80)
    kept = [line for line in headers if line and not line.lower().startswith(("proxy-", "connection:", "keep-alive:"))]
    request = "\r\n".join([f"{method} {slash or '/'}{path} {version}", *kept, "Connection: close", "", ""])
    return host, port, request.encode("latin-1")


def _splitauthority(authority: str, *, default_port: int | None) -> tuple[str, int]:
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        digits = rest[1:] if rest.startswith(":") else ""
    elif authority.count(":") == 1:
        host, _, digits = authority.partition(":")
    else:
        host, digits = authority, ""
    if not digits:
        if default_port is None:
            raise ValueError(f"CONNECT {authority}: name the port")
        digits = str(default_port)
    if not digits.isdigit() or not 0 < int(digits) < 65536:
        raise ValueError(f"{authority}: not a port")
    return normalise_host(host), int(digits)


def authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def answer_http(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    reasons = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}
    body = (message + "\n").encode()
    head = (
        f"HTTP/1.1 {status} {reasons.get(status, 'Error')}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode() + body)
    with contextlib.suppress(OSError):
        await writer.drain()


def with_headers(request: bytes, headers: tuple[tuple[str, str], ...]) -> bytes:
    """A plain-HTTP request head with ``headers`` added, any the client sent of the same names dropped."""
    if not headers:
        return request
    lines = request.decode("latin-1").split("\r\n")
    names = {name.lower() for name, _ in headers}
    kept = [lines[0], *(line for line in lines[1:-2] if line.split(":", 1)[0].strip().lower() not in names)]
    return "\r\n".join([*kept, *(f"{name}: {value}" for name, value in headers), "", ""]).encode("latin-1")

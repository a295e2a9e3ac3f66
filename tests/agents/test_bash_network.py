"""bash reaches the network only through Threadline's proxy (issue #47): the sandbox never shares the
host's network, the proxy lets through the hosts the operator allows and refuses the rest with a
reason, and it never reaches loopback, private, link-local or metadata addresses, whatever the mode.

Only loopback servers started here are reached: an "allowed" host is one on 127.0.0.2 that the
operator has listed in AGENT_BASH_ALLOWED_PRIVATE_HOSTS, the one way a private address is let through."""

from __future__ import annotations

import asyncio
import http.server
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from agents.runtime import tool_context
from agents.workspaces import hand_over
from orchestrator.tools.base import ToolOutput, ToolRegistry
from orchestrator.tools.egress import parse_host_patterns
from orchestrator.tools.mutating import BASH
from tests.certs import TLSServer

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("curl") is None,
    reason="bubblewrap and curl are needed to run commands in the sandbox",
)

ALLOWED_ADDRESS = "127.0.0.2"  # a loopback address of the host, not in the sandbox's no_proxy
PAYLOAD = b"hello from the allowed host\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.server.hits += 1  # type: ignore[attr-defined]
        if self.path.startswith("/big/"):
            size = int(self.path.rsplit("/", 1)[1])
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            chunk = b"x" * 65536
            sent = 0
            while sent < size:
                self.wfile.write(chunk[: size - sent])
                sent += len(chunk[: size - sent])
            return
        if self.path == "/slow":
            self.send_response(200)
            self.send_header("Content-Length", "8")
            self.end_headers()
            for _ in range(8):
                self.wfile.write(b"s")
                self.wfile.flush()
                time.sleep(0.4)
            return
        if self.path == "/stall":
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.flush()
            time.sleep(5)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAYLOAD)))
        self.end_headers()
        self.wfile.write(PAYLOAD)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(TLSServer):
    hits = 0


@pytest.fixture
def web() -> Iterator[_Server]:
    server = _Server((ALLOWED_ADDRESS, 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def tls_web(tmp_path: Path) -> Iterator[tuple[_Server, Path]]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=threadline-test"),
            *("-addext", f"subjectAltName=IP:{ALLOWED_ADDRESS}", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    server = _Server((ALLOWED_ADDRESS, 0), _Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server.tls = context
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, cert
    server.shutdown()
    server.server_close()


@pytest.fixture
def listener() -> Iterator[tuple[socket.socket, int]]:
    """A port on the host's 127.0.0.1 that stands for the database's: nothing in the sandbox may open it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock, sock.getsockname()[1]
    sock.close()


def _accepted(sock: socket.socket) -> bool:
    try:
        sock.accept()[0].close()
    except BlockingIOError:
        return False
    return True


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "ws"
    root.mkdir()
    data = tmp_path / "data"
    data.mkdir()
    with override_settings(AGENT_WORKSPACE=root, DATA_DIR=data, AGENT_BASH_SANDBOX="on"):
        hand_over(root)
        yield root


def network(mode: str, allowed: str = "", denied: str = "", private: frozenset[str] = frozenset(), **bounds: object):
    names = {f"AGENT_BASH_NETWORK_{name.upper()}": value for name, value in bounds.items()}
    return override_settings(
        AGENT_BASH_NETWORK=mode,
        AGENT_BASH_ALLOWED_HOSTS=parse_host_patterns(allowed),
        AGENT_BASH_DENIED_HOSTS=parse_host_patterns(denied),
        AGENT_BASH_ALLOWED_PRIVATE_HOSTS=private,
        **names,
    )


def bash(command: str) -> ToolOutput:
    return asyncio.run(ToolRegistry.of([BASH]).call("bash", {"command": command}, tool_context()))


def _port(server: _Server) -> int:
    return int(server.server_address[1])


def test_an_allowed_host_is_reached_over_http_by_curl_and_python(ws, web):
    url = f"http://{ALLOWED_ADDRESS}:{_port(web)}/hello"
    with network("allowlist", allowed=f"{ALLOWED_ADDRESS}:{_port(web)}", private=frozenset({ALLOWED_ADDRESS})):
        out = bash(
            f"curl -sS {url}; python3 -c 'import urllib.request; print(urllib.request.urlopen(\"{url}\").read())'"
        )
    assert PAYLOAD.decode() in out.content
    assert repr(PAYLOAD) in out.content
    assert web.hits == 2
    assert "[network: 2 connection(s) through the proxy" in out.content


def test_an_allowed_host_is_reached_over_https_through_connect(ws, tls_web):
    server, cert = tls_web
    shutil.copy(cert, ws / "cert.pem")
    with network("allowlist", allowed=ALLOWED_ADDRESS, private=frozenset({ALLOWED_ADDRESS})):
        out = bash(f"curl -sS --cacert cert.pem https://{ALLOWED_ADDRESS}:{_port(server)}/hello")
    assert PAYLOAD.decode() in out.content
    assert server.hits == 1


def test_an_unlisted_host_is_refused_with_the_reason_and_how_to_ask(ws):
    with network("allowlist", allowed="*.example.org"):
        out = bash("curl -sS http://example.com/; curl -sS https://example.com/ 2>&1")
    assert "Threadline's network proxy refused example.com:80: it is not in the operator's list" in out.content
    assert "AGENT_BASH_ALLOWED_HOSTS" in out.content
    assert "[network: refused example.com:443: it is not in the operator's list" in out.content


def test_the_deny_list_wins_over_the_allow_list(ws, web):
    with network(
        "allowlist",
        allowed=ALLOWED_ADDRESS,
        denied=f"{ALLOWED_ADDRESS}:{_port(web)}",
        private=frozenset({ALLOWED_ADDRESS}),
    ):
        out = bash(f"curl -sS http://{ALLOWED_ADDRESS}:{_port(web)}/hello")
    assert "the operator denies it (AGENT_BASH_DENIED_HOSTS" in out.content
    assert web.hits == 0


def test_loopback_is_refused_in_on_mode(ws, web):
    with network("on"):
        out = bash(f"curl -sS http://{ALLOWED_ADDRESS}:{_port(web)}/hello")
    assert f"resolves to {ALLOWED_ADDRESS}, a loopback, private or reserved address" in out.content
    assert "AGENT_BASH_ALLOWED_PRIVATE_HOSTS" in out.content
    assert web.hits == 0


@pytest.mark.parametrize("address", ["10.1.2.3", "192.168.0.10", "172.16.5.4", "169.254.169.254", "[fd00::1]"])
def test_private_link_local_and_metadata_addresses_are_refused(ws, address):
    with network("on"):
        out = bash(f"curl -sS --max-time 20 http://{address}/latest/meta-data/")
    assert "a loopback, private or reserved address" in out.content
    assert f"[network: refused {address}:80:" in out.content


def test_a_listed_name_that_resolves_to_loopback_is_refused(ws, web):
    port = _port(web)
    with network("allowlist", allowed="localhost"):
        out = bash(f"curl -sS --noproxy '' http://localhost:{port}/hello")
    assert "localhost resolves to" in out.content and "a loopback, private or reserved address" in out.content
    assert web.hits == 0


def test_the_databases_port_on_loopback_is_out_of_reach(ws, listener):
    sock, port = listener
    with network("on"):
        out = bash(
            f"curl -sS --noproxy '' -p http://127.0.0.1:{port}/ 2>&1; "
            f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo direct-connected || echo direct-refused"
        )
    assert "[network: refused 127.0.0.1:" in out.content
    assert "direct-refused" in out.content
    assert not _accepted(sock)


def test_a_raw_socket_without_the_proxy_finds_no_network(ws, web):
    script = (
        "import socket\n"
        "print('interfaces', [name for _, name in socket.if_nameindex()])\n"
        "try:\n"
        f"    socket.create_connection(('{ALLOWED_ADDRESS}', {_port(web)}), timeout=5); print('connected')\n"
        "except OSError as exc:\n"
        "    print('no route', exc.errno)\n"
    )
    (ws / "raw.py").write_text(script)
    with network("on", private=frozenset({ALLOWED_ADDRESS})):
        out = bash("python3 raw.py")
    assert "interfaces ['lo']" in out.content
    assert "no route" in out.content and "connected" not in out.content
    assert web.hits == 0


def test_the_connections_of_a_command_are_bounded(ws, web):
    url = f"http://{ALLOWED_ADDRESS}:{_port(web)}/hello"
    with network("allowlist", allowed=ALLOWED_ADDRESS, private=frozenset({ALLOWED_ADDRESS}), max_connections=2):
        out = bash(f"for i in 1 2 3; do curl -sS {url}; done")
    assert out.content.count(PAYLOAD.decode()) == 2
    assert "this command has used its 2 connections (AGENT_BASH_NETWORK_MAX_CONNECTIONS)" in out.content
    assert web.hits == 2


def test_the_bytes_of_a_command_are_bounded(ws, web):
    url = f"http://{ALLOWED_ADDRESS}:{_port(web)}/big/1000000"
    with network("allowlist", allowed=ALLOWED_ADDRESS, private=frozenset({ALLOWED_ADDRESS}), max_bytes=100_000):
        out = bash(f"curl -sS -o big {url} 2>&1; echo size=$(wc -c < big)")
    assert "this command reached its 100000 bytes (AGENT_BASH_NETWORK_MAX_BYTES)" in out.content
    size = next(line for line in out.content.splitlines() if line.startswith("size="))
    assert int(size.removeprefix("size=")) < 1_000_000


def test_an_idle_connection_is_closed_after_the_timeout(ws, web):
    url = f"http://{ALLOWED_ADDRESS}:{_port(web)}/stall"
    with network("allowlist", allowed=ALLOWED_ADDRESS, private=frozenset({ALLOWED_ADDRESS}), idle_timeout_seconds=1.0):
        out = bash(f"curl -sS -o /dev/null {url} 2>&1")
    assert f"[network: cut {ALLOWED_ADDRESS}:{_port(web)}: idle for 1 s (AGENT_BASH_NETWORK_IDLE_TIMEOUT_SECONDS)]" in (
        out.content
    )


def test_a_download_that_keeps_moving_is_not_cut_by_the_idle_timeout(ws, web):
    url = f"http://{ALLOWED_ADDRESS}:{_port(web)}/slow"  # 8 bytes, one every 0.4 s: over 3 s in all
    with network("allowlist", allowed=ALLOWED_ADDRESS, private=frozenset({ALLOWED_ADDRESS}), idle_timeout_seconds=1.0):
        out = bash(f"curl -sS {url}; echo")
    assert "ssssssss" in out.content
    assert "idle for" not in out.content


def test_a_call_sees_only_its_own_proxy_socket(ws):
    with network("on"):
        out = bash("ls -A /run /run/threadline; ls -d /tmp/threadline-egress-* 2>&1 | head -1")
    assert out.content.splitlines()[:3] == ["/run:", "threadline", ""]
    assert "proxy.sock" in out.content
    assert "No such file or directory" in out.content


def test_a_rebinding_name_with_a_loopback_answer_among_public_ones_is_refused(ws, web, monkeypatch):
    """The resolver is the network's edge, so it is what is faked: a name whose answers mix a public
    address with the loopback one of a server here, as a rebinding resolver gives them."""
    real = socket.getaddrinfo

    def resolver(host: object, *args: object, **kwargs: object) -> list[tuple[object, ...]]:
        if host == "rebind.example.net":
            stream = (socket.AF_INET, socket.SOCK_STREAM, 6, "")
            return [(*stream, ("93.184.215.14", _port(web))), (*stream, (ALLOWED_ADDRESS, _port(web)))]
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    with network("allowlist", allowed="*.example.net"):
        out = bash(f"curl -sS http://rebind.example.net:{_port(web)}/hello")
    assert f"rebind.example.net resolves to {ALLOWED_ADDRESS}, a loopback, private or reserved address" in out.content
    assert web.hits == 0


def test_other_tcp_goes_through_the_same_checks_over_socks5(ws, web):
    url = f"http://{ALLOWED_ADDRESS}:{_port(web)}/hello"
    socks = "--noproxy '' --socks5-hostname 127.0.0.1:3128"
    with network("allowlist", allowed=f"{ALLOWED_ADDRESS}:{_port(web)}", private=frozenset({ALLOWED_ADDRESS})):
        out = bash(f"curl -sS {socks} {url}; curl -sS {socks} http://example.com/ 2>&1; echo rc=$?")
    assert PAYLOAD.decode() in out.content
    assert web.hits == 1
    assert "rc=97" in out.content  # curl: the SOCKS proxy refused the connection
    assert "[network: refused example.com:80: it is not in the operator's list" in out.content

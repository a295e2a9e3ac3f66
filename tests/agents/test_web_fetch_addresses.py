"""web_fetch connects to the address it checked (issue #23): a name that rebinds to loopback between
the check and the connection reaches nothing; IPv6 forms that carry a private IPv4 address are
private; a redirect keeps to the port the call named.

The network's edges are faked, nothing else: the resolver (``socket.getaddrinfo``, which asyncio's
resolver and httpx's connections both call) answers what each test says, and every connection this
process opens is recorded and refused unless it goes to a loopback server the test started, so a
"public" address is only ever attempted, never reached.
"""

from __future__ import annotations

import asyncio
import datetime
import errno
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from orchestrator.tools.base import ToolContext, ToolOutput, ToolRegistry, Workspace
from orchestrator.tools.netguard import WebConfig, is_public
from orchestrator.tools.web import WEB_TOOLS
from tests.certs import TLSServer
from tests.fakes.web_site import FakeWeb

PUBLIC = "93.184.215.14"  # a globally routable address; the connection guard below never lets it out


@dataclass
class Network:
    """The faked edge: names' answers, the lookups made, and the connections attempted."""

    answers: dict[str, list[list[str]]] = field(default_factory=dict)
    lookups: list[str] = field(default_factory=list)
    connects: list[tuple[str, int]] = field(default_factory=list)
    open_ports: set[int] = field(default_factory=set)  # loopback ports a connection may reach

    def answer(self, name: str, *answers: list[str]) -> None:
        """``name`` resolves to each answer in turn, the last one from then on."""
        self.answers[name] = list(answers)


@pytest.fixture
def network(monkeypatch: pytest.MonkeyPatch) -> Network:
    net = Network()
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name not in net.answers:
            return real_getaddrinfo(host, port, *args, **kwargs)
        net.lookups.append(name)
        queue = net.answers[name]
        addresses = queue.pop(0) if len(queue) > 1 else queue[0]
        infos = []
        for address in addresses:
            if ipaddress.ip_address(address).version == 6:
                infos.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, int(port or 0), 0, 0)))
            else:
                infos.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port or 0))))
        return infos

    def connect(sock: socket.socket, address: Any) -> None:
        host, port = str(address[0]), int(address[1])
        net.connects.append((host, port))
        if not (ipaddress.ip_address(host).is_loopback and port in net.open_ports):
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"the test refuses a connection to {host}:{port}")
        real_connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    return net


@pytest.fixture
def web(network: Network) -> Iterator[FakeWeb]:
    """The internal service a rebinding name would point at."""
    with FakeWeb() as fake:
        network.open_ports.add(_port_of(fake))
        yield fake


def _port_of(web: FakeWeb) -> int:
    return int(web.base_url.rsplit(":", 1)[1])


def fetch(tmp_path: Path, url: str, *, allowed: frozenset[str] = frozenset()) -> ToolOutput:
    config = WebConfig(timeout_seconds=5.0, allowed_private_hosts=allowed)
    context = ToolContext(Workspace(tmp_path), web=config)
    return asyncio.run(ToolRegistry.of(WEB_TOOLS).call("web_fetch", {"url": url}, context))


def test_a_name_that_rebinds_to_loopback_after_the_check_reaches_nothing(tmp_path, network, web):
    port = _port_of(web)
    network.answer("rebind.test", [PUBLIC], ["127.0.0.1"])
    out = fetch(tmp_path, f"http://rebind.test:{port}/page")
    assert out.is_error
    assert web.requests == []  # the loopback service never saw the GET
    assert network.lookups == ["rebind.test"]  # resolved once
    assert network.connects == [(PUBLIC, port)]  # and the connection went to the address checked


def test_every_address_of_a_name_is_checked_not_only_the_first(tmp_path, network, web):
    network.answer("mixed.test", [PUBLIC, "127.0.0.1"])
    out = fetch(tmp_path, f"http://mixed.test:{_port_of(web)}/page")
    assert out.is_error and "resolves to 127.0.0.1, a loopback, private or reserved address" in out.content
    assert network.connects == [] and web.requests == []


CARRYING_PRIVATE = [
    "64:ff9b::7f00:1",  # NAT64 (well-known prefix) of 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254, the cloud metadata address
    "64:ff9b:1::808:808",  # NAT64 for local use: private whatever it carries
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:0:7f00:1",  # IPv4-translated (SIIT)
    "::ffff:0:a00:1",  # IPv4-translated 10.0.0.1
    "::7f00:1",  # IPv4-compatible
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "2002:c0a8:101::1",  # 6to4 of 192.168.1.1
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
]


@pytest.mark.parametrize("address", CARRYING_PRIVATE)
def test_an_ipv6_address_that_carries_a_private_ipv4_address_is_refused(tmp_path, network, address):
    network.answer("embedded.test", [address])
    out = fetch(tmp_path, "http://embedded.test/")
    assert out.is_error and f"resolves to {address}, a loopback, private or reserved address" in out.content
    assert network.connects == []


@pytest.mark.parametrize("address", ["64:ff9b::808:808", "::ffff:8.8.8.8", "::ffff:0:808:808", "2606:4700::1111"])
def test_the_same_forms_carrying_a_public_address_stay_public(address):
    assert is_public(address)


def test_a_public_nat64_address_is_connected_to_as_it_was_checked(tmp_path, network):
    network.answer("nat64.test", ["64:ff9b::808:808"])
    out = fetch(tmp_path, "http://nat64.test/")
    assert out.is_error and "ConnectError" in out.content
    assert network.connects == [("64:ff9b::808:808", 80)]


def test_the_request_carries_the_host_it_named_though_it_goes_to_the_address(tmp_path, network, web):
    port = _port_of(web)
    network.answer("pinned.test", ["127.0.0.1"])
    out = fetch(tmp_path, f"http://pinned.test:{port}/page", allowed=frozenset({"pinned.test"}))
    assert not out.is_error, out.content
    assert f"URL: http://pinned.test:{port}/page" in out.content and "Hello from the fake web" in out.content
    assert web.hosts == [f"pinned.test:{port}"]
    assert network.connects == [("127.0.0.1", port)]


def test_an_internationalised_host_is_resolved_and_named_in_its_ascii_form(tmp_path, network, web):
    port = _port_of(web)
    network.answer("xn--bcher-kva.test", ["127.0.0.1"])
    out = fetch(tmp_path, f"http://bücher.test:{port}/page", allowed=frozenset({"bücher.test"}))
    assert not out.is_error, out.content
    assert network.lookups == ["xn--bcher-kva.test"] and web.hosts == [f"xn--bcher-kva.test:{port}"]


def test_the_next_address_is_tried_when_the_first_refuses_the_connection(tmp_path, network, web):
    port = _port_of(web)
    network.answer("two.test", ["127.0.0.2", "127.0.0.1"])  # nothing listens on 127.0.0.2 for this test
    out = fetch(tmp_path, f"http://two.test:{port}/page", allowed=frozenset({"two.test"}))
    assert not out.is_error, out.content
    assert network.connects == [("127.0.0.2", port), ("127.0.0.1", port)]


def test_a_redirect_to_another_port_of_the_same_host_is_not_followed(tmp_path, network, web):
    with FakeWeb() as other:
        network.open_ports.add(_port_of(other))
        target = f"http://127.0.0.1:{_port_of(other)}/page"
        out = fetch(tmp_path, web.url(f"/redirect?to={target}"), allowed=frozenset({"127.0.0.1"}))
        assert out.is_error and f"redirects (302) to another site: {target}" in out.content
        assert other.requests == []
    assert network.connects == [("127.0.0.1", _port_of(web))]


@pytest.mark.parametrize(("target", "port"), [("http://127.0.0.1/page", 80), ("https://127.0.0.1/page", 443)])
def test_a_redirect_to_the_schemes_own_port_is_followed(tmp_path, network, web, target, port):
    """The port of a site's plain address, and the upgrade to https: the connection is attempted
    there (and refused by the test's guard: nothing of this machine's listens for it)."""
    out = fetch(tmp_path, web.url(f"/redirect?to={target}"), allowed=frozenset({"127.0.0.1"}))
    assert out.is_error and "ConnectError" in out.content
    assert network.connects == [("127.0.0.1", _port_of(web)), ("127.0.0.1", port)]


# -- TLS: the server name and the certificate's name are the URL's host, not the address --------


@dataclass
class TlsSite:
    port: int
    server_names: list[str]  # the SNI of each handshake
    hosts: list[str]  # the Host header of each request


@pytest.fixture
def tls_site(tmp_path: Path, network: Network, monkeypatch: pytest.MonkeyPatch) -> Iterator[TlsSite]:
    """An https site on loopback with a certificate for ``pinned.test`` from a test authority, which
    httpx trusts in place of its usual bundle (the trust store is the network's edge too)."""
    import certifi

    ca_file, context = _authority_and_server_context(tmp_path, "pinned.test")
    monkeypatch.setattr(certifi, "where", lambda: str(ca_file))
    site = TlsSite(0, [], [])
    context.sni_callback = lambda _sock, name, _ctx: site.server_names.append(str(name)) and None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            site.hosts.append(self.headers.get("Host", ""))
            body = b"secure page"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = TLSServer(("127.0.0.1", 0), Handler)
    server.tls = context
    site.port = int(server.server_address[1])
    network.open_ports.add(site.port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield site
    server.shutdown()
    server.server_close()


def _authority_and_server_context(directory: Path, name: str) -> tuple[Path, ssl.SSLContext]:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "threadline test authority")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_file, cert_file, key_file = directory / "ca.pem", directory / "site.pem", directory / "site.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return ca_file, context


def test_tls_names_the_host_of_the_url_and_its_certificate_must_match_it(tmp_path, network, tls_site):
    network.answer("pinned.test", ["127.0.0.1"])
    out = fetch(tmp_path, f"https://pinned.test:{tls_site.port}/", allowed=frozenset({"pinned.test"}))
    assert not out.is_error, out.content
    assert "secure page" in out.content
    assert tls_site.server_names == ["pinned.test"]
    assert tls_site.hosts == [f"pinned.test:{tls_site.port}"]


def test_a_certificate_for_another_name_is_refused_though_the_address_is_the_same(tmp_path, network, tls_site):
    network.answer("other.test", ["127.0.0.1"])
    out = fetch(tmp_path, f"https://other.test:{tls_site.port}/", allowed=frozenset({"other.test"}))
    assert out.is_error and "CERTIFICATE_VERIFY_FAILED" in out.content
    assert tls_site.server_names == ["other.test"] and tls_site.hosts == []

"""A self-signed certificate for 127.0.0.1, for the tests that serve or reach TLS."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (its own authority) and its key, as PEM files in ``directory``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


class TLSServer(ThreadingHTTPServer):
    """A threaded HTTP server, speaking TLS with ``tls`` when it is set.

    Each connection's handshake is made in that connection's thread, and bounded. Made where
    ``serve_forever`` accepts (the listening socket wrapped whole), one client that connected and
    went quiet held every later connection, and ``shutdown()``, forever: a test whose client sat
    on the event loop that the server's shutdown then held never finished."""

    daemon_threads = True
    tls: ssl.SSLContext | None = None
    handshake_timeout = 10.0

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        conn = self.tls.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        try:
            conn.settimeout(self.handshake_timeout)
            try:
                conn.do_handshake()
            except OSError:
                return  # refused, cut short or timed out: as if never accepted
            conn.settimeout(None)
            super().finish_request(conn, client_address)
        finally:
            conn.close()  # it took the accepted socket over: shutdown_request closes nothing

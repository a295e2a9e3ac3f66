"""A loopback fake of the web for the web tools: a few pages, bad answers, a slow page, a huge page,
redirects, and the Brave Search API (``/res/v1/web/search``, which wants its token header).

    with FakeWeb() as web:
        web.url("/page")            # http://127.0.0.1:<port>/page
        web.url("/redirect?to=<url>")   # a 302 to <url>
        web.searches                # the queries Brave received, with their token
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

BRAVE_TOKEN = "brave-test-key"
PAGE = """<!doctype html><html><head><title>The Fake Page</title><style>body{color:red}</style>
<script>var secret = "do not show";</script></head>
<body><h1>Hello from the fake web</h1><p>First paragraph.</p><p>Second   paragraph.</p></body></html>"""


@dataclass
class FakeWeb:
    base_url: str = ""
    searches: list[dict[str, Any]] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)  # the Host header of each request
    authorizations: list[str] = field(default_factory=list)  # the Authorization header of each request
    address: str = "127.0.0.1"  # where it listens (bash's sandbox reaches 127.0.0.2, not 127.0.0.1)
    big_bytes: int = 5 * 1024 * 1024
    _release: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str) -> str:
        return self.base_url + path

    def __enter__(self) -> FakeWeb:
        web = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(
                self, status: int, body: bytes, content_type: str = "text/html; charset=utf-8", **headers: str
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers.items():
                    self.send_header(name.replace("_", "-"), value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                web.requests.append(parts.path)
                web.hosts.append(self.headers.get("Host", ""))
                web.authorizations.append(self.headers.get("Authorization", ""))
                route = parts.path
                if route == "/page":
                    self._send(200, PAGE.encode())
                elif route == "/plain":
                    self._send(200, b"just text\n", "text/plain")
                elif route == "/missing":
                    self._send(404, b"<html><body><p>No such page here.</p></body></html>")
                elif route == "/broken":
                    self._send(500, b"internal trouble", "text/plain")
                elif route == "/image":
                    self._send(200, b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "image/png")
                elif route == "/slow":
                    web._release.wait(30)  # longer than any test's fetch timeout; released at teardown
                    self._send(200, b"too late", "text/plain")
                elif route == "/big":
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(web.big_bytes))
                    self.end_headers()
                    line = b"x" * 1023 + b"\n"
                    try:
                        for _ in range(web.big_bytes // 1024):
                            self.wfile.write(line)
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                elif route == "/hop":
                    self._send(302, b"", Location="/page")
                elif route == "/elsewhere":
                    self._send(301, b"", Location="http://example.org/landing")
                elif route == "/to-file":
                    self._send(302, b"", Location="file:///etc/passwd")
                elif route == "/loop":
                    self._send(302, b"", Location="/loop")
                elif route == "/redirect":
                    self._send(302, b"", Location=parse_qs(parts.query)["to"][0])
                elif route == "/res/v1/web/search":
                    query = parse_qs(parts.query)
                    web.searches.append(
                        {
                            "q": query.get("q", [""])[0],
                            "count": query.get("count", [""])[0],
                            "token": self.headers.get("X-Subscription-Token"),
                        }
                    )
                    if self.headers.get("X-Subscription-Token") != BRAVE_TOKEN:
                        self._send(401, b'{"error": "bad token"}', "application/json")
                        return
                    results = [
                        {
                            "title": "Django",
                            "url": "https://www.djangoproject.com/",
                            "description": "The <strong>web</strong> framework",
                        },
                        {"title": "Channels", "url": "https://channels.readthedocs.io/", "description": "Async Django"},
                    ]
                    self._send(200, json.dumps({"web": {"results": results}}).encode(), "application/json")
                else:
                    self._send(404, b"unknown route", "text/plain")

        self._server = ThreadingHTTPServer((self.address, 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://{self.address}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-web", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

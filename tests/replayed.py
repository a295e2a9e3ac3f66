"""A stream a client has been sent in pieces (before a crash, then after a reattach), put through the real
``@ag-ui/client`` verifiers: a loopback server answers the client's POST with exactly those bytes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.agui_client import run_client


@contextmanager
def _serving(body: bytes) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/agui/coder"
    finally:
        server.shutdown()
        server.server_close()


def verified(version: str, body: bytes, *, thread_id: str, run_id: str) -> dict[str, Any]:
    """What the client of ``version`` ("1" or "0") made of the SSE ``body`` as one run's response."""
    with _serving(body) as url:
        message = {"id": "u1", "role": "user", "content": "go"}
        (result,) = run_client(version, url, "", [{"threadId": thread_id, "runId": run_id, "messages": [message]}])
    return result

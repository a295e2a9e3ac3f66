"""The fake's HTTP server: a threaded loopback server that records each request and answers it
with the next scripted turn, streamed, paced, paused, failed or dropped as the turn says."""

from __future__ import annotations

import contextlib
import dataclasses
import http
import itertools
import json
import select
import socket
import ssl
import struct
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.certs import TLSServer
from tests.fakes.anthropic_api.script import (
    DEFAULT_MODEL,
    STATUS_FOR_ERROR,
    AnyTurn,
    DropTurn,
    ErrorTurn,
    ToolUseBlock,
    Turn,
)
from tests.fakes.anthropic_api.wire import TERMINATOR, dumps, error_body, frame

# --------------------------------------------------------------------------- server


@dataclass
class RecordedRequest:
    """One request the fake received.  ``body`` is the parsed JSON (None if not JSON)."""

    index: int
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any
    raw_body: bytes
    turn: AnyTurn | None = None
    outcome: str | None = None  # completed | stream_error | ended_early | dropped | error_response |
    #                             client_disconnected | script_exhausted | not_found | fake_error
    client_address: tuple[str, int] | None = None  # same port across requests => keep-alive reuse
    done: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)
    client_disconnected: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and self.body.get("stream") is True

    def __getitem__(self, key: str) -> Any:
        return self.body[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.body.get(key, default) if isinstance(self.body, dict) else default


class _ClientGone(Exception):
    pass


class _Server(TLSServer):
    request_queue_size = 1024
    allow_reuse_address = True
    fake: FakeAnthropic

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, OSError, ValueError)):
            return  # a client or the fake itself closed the socket
        self.fake._note_error(f"unhandled server error: {exc!r}")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeAnthropic/1.0"
    sys_version = ""
    timeout = None
    server: _Server

    def setup(self) -> None:
        super().setup()
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.fake._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.fake._track(self.connection, False)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.server.fake._dispatch(self)

    do_GET = do_PUT = do_DELETE = do_PATCH = do_POST


_STREAM_OUTCOME = {None: "completed", "error": "stream_error", "end": "ended_early"}


class FakeAnthropic:
    """Threaded loopback HTTP server faking ``POST /v1/messages`` (and count_tokens).

    Use as a context manager (or call start()/stop())::

        with FakeAnthropic([text_turn("hi")]) as fake:
            client = anthropic.Anthropic(api_key="test", base_url=fake.base_url, max_retries=0)

    With ``tls`` (a server-side SSLContext) it speaks HTTPS, as the real API does.
    """

    def __init__(
        self,
        turns: Iterable[AnyTurn] = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._host = host
        self._port = port
        self._tls = tls
        self._lock = threading.Condition()
        self._queue: deque[AnyTurn] = deque(turns)
        # Scripts for the requests whose first message contains a marker (see script_for).
        self._keyed: dict[str, deque[AnyTurn]] = {}
        self._stepped: dict[str, list[AnyTurn]] = {}
        self._served_stepped = 0
        self._requests: list[RecordedRequest] = []
        self._all_requests: list[RecordedRequest] = []
        self._connections: set[socket.socket] = set()
        self._ids = itertools.count(1)
        self.errors: list[str] = []
        self.count_tokens_result: int | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle

    def start(self) -> FakeAnthropic:
        if self._server is not None:
            return self
        server = _Server((self._host, self._port), _Handler)
        server.fake = self
        server.tls = self._tls
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="FakeAnthropic", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        with self._lock:
            conns = list(self._connections)
        for conn in conns:  # unblock handler threads sitting in keep-alive reads / pauses
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "FakeAnthropic is not running"
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"{'https' if self._tls is not None else 'http'}://{self._host}:{self.port}"

    # ---- script

    def script(self, turns: Iterable[AnyTurn]) -> FakeAnthropic:
        """Append turns to the FIFO (does not clear what is still queued)."""
        with self._lock:
            self._queue.extend(turns)
        return self

    def script_for(self, marker: str, turns: Iterable[AnyTurn]) -> FakeAnthropic:
        """Turns for the conversations whose first message contains ``marker``, apart from
        the main FIFO: runs that call the API concurrently (sub-agents working in parallel)
        each get their own script, whatever order their requests arrive in."""
        with self._lock:
            self._keyed.setdefault(marker, deque()).extend(turns)
        return self

    def script_by_step(self, marker: str, turns: list[AnyTurn]) -> FakeAnthropic:
        """Turns for the conversations whose first message contains ``marker``, chosen by how many
        model turns the request holds already (the last one again past the end): a turn made again
        (a run taken over mid-turn by another process) gets the same reply, whatever order and
        however often requests come, with fresh tool call ids, as the real API gives each reply."""
        with self._lock:
            self._stepped[marker] = list(turns)
        return self

    def _stepped_turn(self, body: Any) -> AnyTurn | None:
        if not body.get("messages"):
            return None
        first = json.dumps(body["messages"][0].get("content"), ensure_ascii=False)
        for marker, turns in self._stepped.items():
            if marker in first:
                done = sum(1 for message in body["messages"] if message.get("role") == "assistant")
                chosen = turns[min(done, len(turns) - 1)]
                if not isinstance(chosen, Turn):
                    return chosen
                self._served_stepped += 1
                fresh = tuple(
                    dataclasses.replace(block, id=f"{block.id}_{self._served_stepped}")
                    if isinstance(block, ToolUseBlock)
                    else block
                    for block in chosen.blocks
                )
                return dataclasses.replace(chosen, blocks=fresh)
        return None

    def _keyed_queue(self, body: Any) -> deque[AnyTurn] | None:
        if not self._keyed or not isinstance(body, dict) or not body.get("messages"):
            return None
        first = json.dumps(body["messages"][0].get("content"), ensure_ascii=False)
        for marker, queue in self._keyed.items():
            if marker in first:
                return queue
        return None

    def add_turn(self, turn: AnyTurn, times: int = 1) -> FakeAnthropic:
        with self._lock:
            self._queue.extend([turn] * times)
        return self

    @property
    def pending(self) -> int:
        """Number of scripted turns not yet consumed (keyed scripts included)."""
        with self._lock:
            return len(self._queue) + sum(len(q) for q in self._keyed.values())

    def reset(self) -> None:
        """Clear queued turns, recorded requests and errors."""
        with self._lock:
            self._queue.clear()
            self._keyed.clear()
            self._stepped.clear()
            self._requests.clear()
            self._all_requests.clear()
            self.errors.clear()

    def assert_all_consumed(self) -> None:
        with self._lock:
            left = len(self._queue) + sum(len(q) for q in self._keyed.values())
            errors = list(self.errors)
        assert not errors, f"FakeAnthropic errors: {errors}"
        assert left == 0, f"FakeAnthropic: {left} scripted turn(s) were never requested"

    # ---- inspection

    @property
    def requests(self) -> list[RecordedRequest]:
        """POST /v1/messages requests, in arrival order (snapshot)."""
        with self._lock:
            return list(self._requests)

    @property
    def all_requests(self) -> list[RecordedRequest]:
        """Every request, including count_tokens and unknown paths."""
        with self._lock:
            return list(self._all_requests)

    @property
    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]

    @property
    def last_request(self) -> RecordedRequest:
        with self._lock:
            assert self._requests, "FakeAnthropic received no /v1/messages request"
            return self._requests[-1]

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least ``n`` /v1/messages requests have arrived."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self._requests) >= n, timeout):
                raise TimeoutError(f"FakeAnthropic: expected {n} requests, got {len(self._requests)}")
            return list(self._requests)

    # ---- convenience clients

    def client(self, **kwargs: Any) -> Any:
        import anthropic

        kwargs.setdefault("max_retries", 0)
        return anthropic.Anthropic(api_key="test", base_url=self.base_url, **kwargs)

    def async_client(self, **kwargs: Any) -> Any:
        import anthropic

        kwargs.setdefault("max_retries", 0)
        return anthropic.AsyncAnthropic(api_key="test", base_url=self.base_url, **kwargs)

    # ---- internals

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _note_error(self, msg: str) -> None:
        with self._lock:
            self.errors.append(msg)

    def _dispatch(self, h: _Handler) -> None:
        raw = _read_body(h)
        path = h.path.split("?", 1)[0].rstrip("/")
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in h.headers.items()}
        is_messages = h.command == "POST" and path == "/v1/messages"
        with self._lock:
            n = next(self._ids)
            index = len(self._requests) if is_messages else len(self._all_requests)
            rec = RecordedRequest(index, h.command, h.path, headers, body, raw, client_address=h.client_address)
            self._all_requests.append(rec)
            if is_messages:
                self._requests.append(rec)
                stepped = self._stepped_turn(body) if self._stepped and isinstance(body, dict) else None
                keyed = self._keyed_queue(body)
                queue = keyed if keyed is not None else self._queue
                rec.turn = stepped if stepped is not None else queue.popleft() if queue else None
            self._lock.notify_all()
        request_id = f"req_fake_{n:06d}"
        try:
            if is_messages:
                self._serve_messages(h, rec, request_id, f"msg_fake_{n:06d}")
            elif h.command == "POST" and path == "/v1/messages/count_tokens":
                count = self.count_tokens_result
                if count is None:
                    count = max(1, len(raw) // 4)
                _send_json(h, 200, {"input_tokens": count}, request_id)
                rec.outcome = "completed"
            else:
                _send_json(
                    h,
                    404,
                    error_body("not_found_error", f"FakeAnthropic has no {h.command} {path}", request_id),
                    request_id,
                    (("x-should-retry", "false"),),
                )
                rec.outcome = "not_found"
        except _ClientGone:
            rec.outcome = "client_disconnected"
            rec.client_disconnected.set()
            h.close_connection = True
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            rec.outcome = "client_disconnected"
            rec.client_disconnected.set()
            h.close_connection = True
        except Exception as exc:  # a bug in the fake: make it visible
            self._note_error(f"request #{rec.index} failed inside FakeAnthropic: {exc!r}")
            rec.outcome = "fake_error"
            h.close_connection = True
            raise
        finally:
            rec.done.set()

    def _serve_messages(self, h: _Handler, rec: RecordedRequest, request_id: str, message_id: str) -> None:
        t = rec.turn
        if t is None:
            msg = (
                f"FakeAnthropic: script ran out of turns (request #{rec.index} to /v1/messages had no "
                f"scripted reply; add more turns with fake.script()/fake.add_turn())"
            )
            self._note_error(msg)
            no_retry = (("x-should-retry", "false"),)
            _send_json(h, 500, error_body("api_error", msg, request_id), request_id, no_retry)
            rec.outcome = "script_exhausted"
            return
        if isinstance(t, DropTurn):
            if t.delay:
                _wait(h.connection, t.delay)
            rec.outcome = "dropped"
            _abort(h, t.reset)
            return
        if isinstance(t, ErrorTurn):
            if t.delay and _wait(h.connection, t.delay):
                raise _ClientGone
            rec.outcome = "error_response"
            _send_json(h, t.status, t.body(request_id), request_id, t.headers)
            return
        model = t.model or (rec.get("model") if isinstance(rec.get("model"), str) else None) or DEFAULT_MODEL
        mid = t.message_id or message_id
        if rec.stream:
            self._stream(h, rec, t, request_id, mid, model)
        else:
            self._non_stream(h, rec, t, request_id, mid, model)

    def _non_stream(self, h: _Handler, rec: RecordedRequest, t: Turn, request_id: str, mid: str, model: str) -> None:
        if t.headers_delay and _wait(h.connection, t.headers_delay):
            raise _ClientGone
        if t.pause_at is not None:
            t.paused.set()
            if _wait(h.connection, t.pause_timeout, t.resume):
                raise _ClientGone
        if t.failure in ("drop", "reset"):
            rec.outcome = "dropped"
            _abort(h, t.failure == "reset")
            return
        if t.failure == "error":
            status = STATUS_FOR_ERROR.get(t.error_type, 500)
            body = error_body(t.error_type, t.error_message, request_id)
            rec.outcome = "error_response"
            _send_json(h, status, body, request_id, t.headers)
            return
        rec.outcome = "ended_early" if t.failure == "end" else "completed"
        _send_json(h, 200, t.message_json(mid, model), request_id, t.headers)

    def _stream(self, h: _Handler, rec: RecordedRequest, t: Turn, request_id: str, mid: str, model: str) -> None:
        enc = t.encoded()
        sock = h.connection
        head = _head(
            200,
            (
                ("Content-Type", "text/event-stream; charset=utf-8"),
                ("Cache-Control", "no-cache"),
                ("Transfer-Encoding", "chunked"),
                ("request-id", request_id),
                *t.headers,
            ),
            h.close_connection,
        )
        start = t.message_start(mid, model)
        dropping = t.failure in ("drop", "reset")
        final_outcome = "dropped" if dropping else _STREAM_OUTCOME[t.failure]
        if t.headers_delay and _wait(sock, t.headers_delay):
            raise _ClientGone
        if not t.delay and t.pause_at is None:
            # fast path: everything is pre-framed; one sendall
            payload = head + (frame(start) if enc.cut >= 1 else b"") + enc.framed_rest
            if not dropping:
                payload += TERMINATOR
            rec.outcome = final_outcome  # set before the client can observe the end
            sock.sendall(payload)
        else:
            events = [start, *enc.post_start[: enc.cut - 1]] if enc.cut >= 1 else []
            pause_n = t.resolve(t.pause_at, enc.block_ends, 1 + len(enc.post_start)) if t.pause_at else -1
            sock.sendall(head)
            for i, ev in enumerate(events):
                if i == pause_n:
                    t.paused.set()
                    if _wait(sock, t.pause_timeout, t.resume):
                        raise _ClientGone
                if i and t.delay and _wait(sock, t.delay):
                    raise _ClientGone
                sock.sendall(frame(ev))
            if pause_n >= len(events):
                t.paused.set()
                if _wait(sock, t.pause_timeout, t.resume):
                    raise _ClientGone
            if enc.tail:
                if t.delay and _wait(sock, t.delay):
                    raise _ClientGone
                sock.sendall(frame(enc.tail))
            rec.outcome = final_outcome
            if not dropping:
                sock.sendall(TERMINATOR)
        if dropping:
            _abort(h, t.failure == "reset")


# --------------------------------------------------------------------------- socket helpers


def _reason(status: int) -> str:
    if status == 529:
        return "Overloaded"
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _head(status: int, headers: Iterable[tuple[str, str]], close: bool) -> bytes:
    lines = [f"HTTP/1.1 {status} {_reason(status)}"]
    lines.extend(f"{k}: {v}" for k, v in headers)
    lines.append("Connection: close" if close else "Connection: keep-alive")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _send_json(h: _Handler, status: int, obj: Any, request_id: str, extra: Iterable[tuple[str, str]] = ()) -> None:
    body = dumps(obj).encode()
    head = _head(
        status,
        (
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            ("request-id", request_id),
            *extra,
        ),
        h.close_connection,
    )
    h.connection.sendall(head + body)


def _read_body(h: _Handler) -> bytes:
    if "chunked" in h.headers.get("Transfer-Encoding", "").lower():
        parts = []
        while True:
            size = int(h.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                break
            parts.append(h.rfile.read(size))
            h.rfile.readline()
        return b"".join(parts)
    n = int(h.headers.get("Content-Length") or 0)
    return h.rfile.read(n) if n else b""


def _wait(sock: socket.socket, seconds: float, event: threading.Event | None = None) -> bool:
    """Sleep up to ``seconds`` (or until ``event`` is set); return True if the client hung up."""
    deadline = time.monotonic() + seconds
    while True:
        if event is not None and event.is_set():
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        step = min(remaining, 0.02) if event is not None else remaining
        try:
            readable, _, _ = select.select([sock], [], [], step)
        except (OSError, ValueError):
            return True
        if readable:
            try:
                data = sock.recv(1, socket.MSG_PEEK)
            except OSError:
                return True
            if not data:
                return True
            # the client sent bytes (unexpected pipelining): stop polling, just wait
            if event is not None:
                event.wait(max(0.0, deadline - time.monotonic()))
            else:
                time.sleep(max(0.0, deadline - time.monotonic()))
            return False


def _abort(h: _Handler, reset: bool) -> None:
    """Kill the connection: FIN without completing the response, or an RST."""
    h.close_connection = True
    sock = h.connection
    try:
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.rfile.close()  # drop the makefile() reference so close() really closes (-> RST)
            sock.close()
        else:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass

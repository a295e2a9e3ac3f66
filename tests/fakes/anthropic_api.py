"""A loopback fake of the Anthropic Messages API for tests and benchmarks.

It speaks the real wire format (HTTP/1.1 keep-alive, chunked ``text/event-stream``
with ``event:``/``data:`` lines) so the *real* ``anthropic`` SDK can be pointed
at it through ``base_url``::

    from tests.fakes.anthropic_api import FakeAnthropic, text_turn, tool_turn, http_error

    with FakeAnthropic() as fake:
        fake.script([
            http_error(529, "overloaded_error", "Overloaded", retry_after_ms=1),
            tool_turn("get_weather", {"city": "Paris"}),
            text_turn(["It is ", "sunny."]),
        ])
        client = anthropic.AsyncAnthropic(api_key="test", base_url=fake.base_url, max_retries=2)
        ...
        assert fake.requests[1].body["messages"][-1]["content"][0]["type"] == "tool_result"

Every POST /v1/messages consumes the next scripted turn (FIFO).  When the script
is exhausted the fake answers 500 ``api_error`` with ``x-should-retry: false``
and a message saying so, so a test fails loudly instead of hanging.

Only the standard library is used.  The server runs in a background thread, so it
works the same from sync and async tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http
import itertools
import json
import re
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "DropTurn",
    "ErrorTurn",
    "FakeAnthropic",
    "RecordedRequest",
    "RedactedThinkingBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolUseBlock",
    "Turn",
    "api_error",
    "benchmark_turn",
    "dropped_connection",
    "http_error",
    "overloaded",
    "rate_limited",
    "redacted_thinking",
    "split_tokens",
    "text",
    "text_turn",
    "thinking",
    "tool_turn",
    "tool_use",
    "turn",
]

DEFAULT_MODEL = "claude-fake-model"
DEFAULT_SIGNATURE = "ZmFrZS1zaWduYXR1cmUtZm9yLXRlc3Rz"  # base64("fake-signature-for-tests")
DEFAULT_REDACTED_DATA = "RmFrZVJlZGFjdGVkVGhpbmtpbmdEYXRh"

_CHUNK_SIZE = 64 * 1024
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_tool_ids = itertools.count(1)


def _dumps(obj: Any) -> str:
    return _JSON.encode(obj)


def _sse(event_type: str, data: Any) -> bytes:
    payload = data if isinstance(data, str) else _dumps(data)
    return f"event: {event_type}\ndata: {payload}\n\n".encode()


def _frame(data: bytes) -> bytes:
    """One HTTP/1.1 chunk (empty input gives empty output, never the terminator)."""
    if not data:
        return b""
    return b"%x\r\n%s\r\n" % (len(data), data)


def _frame_many(data: bytes) -> bytes:
    return b"".join(_frame(data[i : i + _CHUNK_SIZE]) for i in range(0, len(data), _CHUNK_SIZE))


_TERMINATOR = b"0\r\n\r\n"
_PING = _sse("ping", {"type": "ping"})


def split_tokens(s: str) -> list[str]:
    """Split text into word-ish chunks ("Hello", " world", "!") for text/thinking blocks."""
    return re.findall(r"\s*\S+|\s+", s)


def _as_chunks(chunks: str | Iterable[str]) -> tuple[str, ...]:
    if isinstance(chunks, str):
        return (chunks,)
    return tuple(chunks)


# --------------------------------------------------------------------------- blocks


class _DeltaEncoder:
    """Builds content_block_delta events cheaply (memoises the JSON of repeated chunks)."""

    def __init__(self, index: int, delta_type: str, field_name: str) -> None:
        self.prefix = (
            f'event: content_block_delta\ndata: {{"type":"content_block_delta","index":{index},'
            f'"delta":{{"type":"{delta_type}","{field_name}":'
        )
        self.memo: dict[str, bytes] = {}

    def __call__(self, chunk: str) -> bytes:
        ev = self.memo.get(chunk)
        if ev is None:
            ev = (self.prefix + _dumps(chunk) + "}}\n\n").encode()
            if len(self.memo) < 4096:
                self.memo[chunk] = ev
        return ev


@dataclass(frozen=True)
class TextBlock:
    chunks: tuple[str, ...]

    def start(self) -> dict[str, Any]:
        return {"type": "text", "text": ""}

    def deltas(self, index: int) -> list[bytes]:
        enc = _DeltaEncoder(index, "text_delta", "text")
        return [enc(c) for c in self.chunks]

    def final(self) -> dict[str, Any]:
        return {"type": "text", "text": "".join(self.chunks)}

    def tokens(self) -> int:
        return len(self.chunks)


@dataclass(frozen=True)
class ThinkingBlock:
    chunks: tuple[str, ...]
    signature: str = DEFAULT_SIGNATURE

    def start(self) -> dict[str, Any]:
        return {"type": "thinking", "thinking": "", "signature": ""}

    def deltas(self, index: int) -> list[bytes]:
        enc = _DeltaEncoder(index, "thinking_delta", "thinking")
        out = [enc(c) for c in self.chunks]
        sig = {"type": "signature_delta", "signature": self.signature}
        out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": sig}))
        return out

    def final(self) -> dict[str, Any]:
        return {"type": "thinking", "thinking": "".join(self.chunks), "signature": self.signature}

    def tokens(self) -> int:
        return len(self.chunks)


@dataclass(frozen=True)
class RedactedThinkingBlock:
    data: str = DEFAULT_REDACTED_DATA

    def start(self) -> dict[str, Any]:
        return {"type": "redacted_thinking", "data": self.data}

    def deltas(self, index: int) -> list[bytes]:
        return []

    def final(self) -> dict[str, Any]:
        return {"type": "redacted_thinking", "data": self.data}

    def tokens(self) -> int:
        return 1


@dataclass(frozen=True)
class ToolUseBlock:
    id: str
    name: str
    input: Any
    partial_json: tuple[str, ...]

    def start(self) -> dict[str, Any]:
        return {"type": "tool_use", "id": self.id, "name": self.name, "input": {}}

    def deltas(self, index: int) -> list[bytes]:
        enc = _DeltaEncoder(index, "input_json_delta", "partial_json")
        return [enc(c) for c in self.partial_json]

    def final(self) -> dict[str, Any]:
        return {"type": "tool_use", "id": self.id, "name": self.name, "input": self.input}

    def tokens(self) -> int:
        return max(1, len(self.partial_json))


Block = TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock


def text(chunks: str | Iterable[str]) -> TextBlock:
    """A text block; each chunk becomes one ``text_delta``."""
    return TextBlock(_as_chunks(chunks))


def thinking(chunks: str | Iterable[str], signature: str = DEFAULT_SIGNATURE) -> ThinkingBlock:
    """A thinking block: one ``thinking_delta`` per chunk, then a ``signature_delta``."""
    return ThinkingBlock(_as_chunks(chunks), signature)


def redacted_thinking(data: str = DEFAULT_REDACTED_DATA) -> RedactedThinkingBlock:
    """A redacted_thinking block (start + stop, no deltas, like the real API)."""
    return RedactedThinkingBlock(data)


def tool_use(
    name: str,
    input: dict[str, Any] | None = None,
    *,
    id: str | None = None,
    pieces: int = 3,
    partial_json: Sequence[str] | None = None,
) -> ToolUseBlock:
    """A tool_use block whose input is streamed as ``input_json_delta`` fragments.

    The JSON of ``input`` is split into ``pieces`` fragments, preceded by an empty
    fragment as the real API does.  ``input={}``/``None`` gives an empty-input call
    (a single ``""`` fragment).  ``partial_json`` streams the given raw fragments
    verbatim instead (e.g. to test invalid JSON).
    """
    tool_id = id or f"toolu_fake_{next(_tool_ids):06d}"
    if partial_json is not None:
        frags = tuple(partial_json)
        joined = "".join(frags)
        try:
            value = json.loads(joined) if joined else {}
        except ValueError:
            value = joined
        return ToolUseBlock(tool_id, name, value, frags)
    value = dict(input or {})
    if not value:
        return ToolUseBlock(tool_id, name, value, ("",))
    s = json.dumps(value, ensure_ascii=False)
    n = max(1, min(pieces, len(s)))
    step = -(-len(s) // n)
    frags = ("", *tuple(s[i : i + step] for i in range(0, len(s), step)))
    return ToolUseBlock(tool_id, name, value, frags)


# --------------------------------------------------------------------------- turns


@dataclass
class _Encoded:
    post_start: list[bytes]  # every event after message_start, in order (no failure applied)
    block_ends: list[int]  # block_ends[k] = number of events sent once k blocks are complete
    cut: int  # number of events (incl. message_start) sent before the failure point
    tail: bytes  # bytes written after the cut (in-stream error event), unframed
    framed_rest: bytes  # chunk-framed bytes of post_start[:cut-1] + tail, for the fast path


@dataclass
class Turn:
    """A scripted successful (or failing mid-stream) model reply.

    Build with :func:`turn`, :func:`text_turn`, :func:`tool_turn` or
    :func:`benchmark_turn`; derive failure variants with :meth:`error_mid_stream`,
    :meth:`end_early`, :meth:`drop_connection`, :meth:`paced`, :meth:`pause`.
    A Turn may be queued several times; its encoded bytes are cached.

    Event positions (``after_events``) count SSE events actually sent, with
    ``message_start`` being event 1 and the ``ping`` after it event 2.
    ``after_blocks=k`` means "right after the k-th content_block_stop".
    """

    blocks: tuple[Block, ...] = ()
    stop_reason: str | None = "auto"  # "auto" => "tool_use" if any tool_use block else "end_turn"
    stop_sequence: str | None = None
    input_tokens: int = 25
    output_tokens: int | None = None  # None => number of chunks streamed
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    model: str | None = None  # None => echo the request's model
    message_id: str | None = None  # None => msg_fake_<n> per request
    ping: bool = True
    delay: float = 0.0  # seconds between SSE events
    headers_delay: float = 0.0  # seconds before the response headers
    failure: str | None = None  # None | "error" | "end" | "drop" | "reset"
    failure_at: tuple[int | None, int | None] = (None, None)  # (after_events, after_blocks)
    error_type: str = "overloaded_error"
    error_message: str = "Overloaded"
    pause_at: tuple[int | None, int | None] | None = None
    pause_timeout: float = 30.0
    headers: tuple[tuple[str, str], ...] = ()
    # set by the server when it reaches the pause point; set `resume` to continue
    paused: threading.Event = field(default_factory=threading.Event, init=False, repr=False, compare=False)
    resume: threading.Event = field(default_factory=threading.Event, init=False, repr=False, compare=False)
    _cache: _Encoded | None = field(default=None, init=False, repr=False, compare=False)
    _cache_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    # ---- derived variants

    def error_mid_stream(
        self,
        *,
        after_events: int | None = None,
        after_blocks: int | None = None,
        error_type: str = "overloaded_error",
        message: str = "Overloaded",
    ) -> Turn:
        """After the given point, send ``event: error`` and end the stream (default: after all blocks)."""
        return dataclasses.replace(
            self,
            failure="error",
            failure_at=(after_events, after_blocks),
            error_type=error_type,
            error_message=message,
        )

    def end_early(self, *, after_events: int | None = None, after_blocks: int | None = None) -> Turn:
        """End the body cleanly after the given point: no message_delta / message_stop."""
        return dataclasses.replace(self, failure="end", failure_at=(after_events, after_blocks))

    def drop_connection(
        self, *, after_events: int | None = None, after_blocks: int | None = None, reset: bool = False
    ) -> Turn:
        """Abort the socket mid-body (no chunked terminator).  ``reset=True`` sends an RST instead of FIN."""
        kind = "reset" if reset else "drop"
        return dataclasses.replace(self, failure=kind, failure_at=(after_events, after_blocks))

    def paced(self, delay: float, *, headers_delay: float = 0.0) -> Turn:
        """Sleep ``delay`` seconds between events (and ``headers_delay`` before the headers)."""
        return dataclasses.replace(self, delay=delay, headers_delay=headers_delay)

    def pause(self, *, after_events: int | None = None, after_blocks: int | None = None, timeout: float = 30.0) -> Turn:
        """Hold the stream at a point until ``turn.resume`` is set (or the client disconnects / timeout).

        ``turn.paused`` is set when the server reaches the point.  Use the returned turn's events.
        """
        return dataclasses.replace(self, pause_at=(after_events, after_blocks), pause_timeout=timeout)

    def with_headers(self, **headers: str) -> Turn:
        """Extra response headers (underscores become dashes)."""
        extra = tuple((k.replace("_", "-"), str(v)) for k, v in headers.items())
        return dataclasses.replace(self, headers=self.headers + extra)

    # ---- encoding

    @property
    def resolved_stop_reason(self) -> str | None:
        if self.stop_reason != "auto":
            return self.stop_reason
        return "tool_use" if any(isinstance(b, ToolUseBlock) for b in self.blocks) else "end_turn"

    @property
    def resolved_output_tokens(self) -> int:
        if self.output_tokens is not None:
            return self.output_tokens
        return max(1, sum(b.tokens() for b in self.blocks))

    def usage(self, output_tokens: int) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }

    def _resolve(self, at: tuple[int | None, int | None], enc_block_ends: list[int], total: int) -> int:
        after_events, after_blocks = at
        if after_events is not None:
            return max(0, min(after_events, total))
        if after_blocks is None:
            after_blocks = len(self.blocks)
        return enc_block_ends[max(0, min(after_blocks, len(self.blocks)))]

    def prepare(self) -> Turn:
        """Encode the SSE bytes now (otherwise done lazily on first use).  Returns self."""
        self._encoded()
        return self

    def _encoded(self) -> _Encoded:
        cache = self._cache
        if cache is not None:
            return cache
        with self._cache_lock:
            if self._cache is not None:
                return self._cache
            post: list[bytes] = []
            if self.ping:
                post.append(_PING)
            block_ends = [1 + len(post)]
            for i, block in enumerate(self.blocks):
                start = {"type": "content_block_start", "index": i, "content_block": block.start()}
                post.append(_sse("content_block_start", start))
                post.extend(block.deltas(i))
                post.append(_sse("content_block_stop", {"type": "content_block_stop", "index": i}))
                block_ends.append(1 + len(post))
            delta = {"stop_reason": self.resolved_stop_reason, "stop_sequence": self.stop_sequence}
            usage = {"output_tokens": self.resolved_output_tokens}
            post.append(_sse("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
            post.append(_sse("message_stop", {"type": "message_stop"}))
            total = 1 + len(post)
            cut = total if self.failure is None else self._resolve(self.failure_at, block_ends, total)
            tail = b""
            if self.failure == "error":
                error = {"type": self.error_type, "message": self.error_message}
                tail = _sse("error", {"type": "error", "error": error})
            framed = _frame_many(b"".join(post[: max(0, cut - 1)]) + tail)
            self._cache = _Encoded(post, block_ends, cut, tail, framed)
            return self._cache

    def message_start(self, message_id: str, model: str) -> bytes:
        message = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self.usage(1),
        }
        return _sse("message_start", {"type": "message_start", "message": message})

    def message_json(self, message_id: str, model: str) -> dict[str, Any]:
        """The equivalent non-streaming response body."""
        return {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [b.final() for b in self.blocks],
            "stop_reason": None if self.failure == "end" else self.resolved_stop_reason,
            "stop_sequence": self.stop_sequence,
            "usage": self.usage(self.resolved_output_tokens),
        }


@dataclass
class ErrorTurn:
    """A non-200 JSON error response: {"type":"error","error":{"type":..., "message":...}}."""

    status: int
    error_type: str
    message: str
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0

    def body(self, request_id: str) -> dict[str, Any]:
        return _error_body(self.error_type, self.message, request_id)


@dataclass
class DropTurn:
    """Close the connection without sending any response (FIN, or RST with reset=True)."""

    reset: bool = False
    delay: float = 0.0


AnyTurn = Turn | ErrorTurn | DropTurn


def turn(
    *blocks: Block,
    stop_reason: str | None = "auto",
    input_tokens: int = 25,
    output_tokens: int | None = None,
    cache_creation_input_tokens: int = 0,
    cache_read_input_tokens: int = 0,
    model: str | None = None,
    message_id: str | None = None,
    ping: bool = True,
    stop_sequence: str | None = None,
) -> Turn:
    """A streamed reply made of the given blocks.  stop_reason "auto" => tool_use/end_turn."""
    return Turn(
        blocks=tuple(blocks),
        stop_reason=stop_reason,
        stop_sequence=stop_sequence,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_creation_input_tokens=cache_creation_input_tokens,
        cache_read_input_tokens=cache_read_input_tokens,
        model=model,
        message_id=message_id,
        ping=ping,
    )


def text_turn(chunks: str | Iterable[str], **kwargs: Any) -> Turn:
    """A reply with a single text block (a str is one chunk; use split_tokens() for many)."""
    return turn(text(chunks), **kwargs)


def tool_turn(
    name: str,
    input: dict[str, Any] | None = None,
    *,
    id: str | None = None,
    preamble: str | Iterable[str] | None = None,
    **kwargs: Any,
) -> Turn:
    """A reply that calls one tool (optionally preceded by a text block)."""
    blocks: list[Block] = []
    if preamble is not None:
        blocks.append(text(preamble))
    blocks.append(tool_use(name, input, id=id))
    return turn(*blocks, **kwargs)


def benchmark_turn(n_chunks: int = 20_000, chunk: str = "tok ", **kwargs: Any) -> Turn:
    """A text reply of ``n_chunks`` one-token deltas, pre-encoded and served in 64 KiB writes."""
    return turn(TextBlock((chunk,) * n_chunks), **kwargs).prepare()


def http_error(
    status: int,
    error_type: str,
    message: str,
    *,
    retry_after: float | None = None,
    retry_after_ms: float | None = None,
    should_retry: bool | None = None,
    headers: dict[str, str] | None = None,
    delay: float = 0.0,
) -> ErrorTurn:
    """A non-200 JSON error.  ``retry_after`` -> ``retry-after`` header (seconds),
    ``retry_after_ms`` -> ``retry-after-ms``, ``should_retry`` -> ``x-should-retry``."""
    hdrs: list[tuple[str, str]] = []
    if retry_after is not None:
        seconds = str(int(retry_after)) if float(retry_after).is_integer() else str(retry_after)
        hdrs.append(("retry-after", seconds))
    if retry_after_ms is not None:
        hdrs.append(("retry-after-ms", str(retry_after_ms)))
    if should_retry is not None:
        hdrs.append(("x-should-retry", "true" if should_retry else "false"))
    hdrs.extend((headers or {}).items())
    return ErrorTurn(status, error_type, message, tuple(hdrs), delay)


def rate_limited(message: str = "Number of request tokens has exceeded your rate limit.", **kwargs: Any) -> ErrorTurn:
    return http_error(429, "rate_limit_error", message, **kwargs)


def overloaded(message: str = "Overloaded", **kwargs: Any) -> ErrorTurn:
    return http_error(529, "overloaded_error", message, **kwargs)


def api_error(message: str = "Internal server error", **kwargs: Any) -> ErrorTurn:
    return http_error(500, "api_error", message, **kwargs)


def dropped_connection(*, reset: bool = False, delay: float = 0.0) -> DropTurn:
    """Close the socket before any response bytes are sent."""
    return DropTurn(reset=reset, delay=delay)


_STATUS_FOR_ERROR = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
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
    """

    def __init__(self, turns: Iterable[AnyTurn] = (), *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._port = port
        self._lock = threading.Condition()
        self._queue: deque[AnyTurn] = deque(turns)
        # Scripts for the requests whose first message contains a marker (see script_for).
        self._keyed: dict[str, deque[AnyTurn]] = {}
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
        return f"http://{self._host}:{self.port}"

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
                keyed = self._keyed_queue(body)
                queue = keyed if keyed is not None else self._queue
                rec.turn = queue.popleft() if queue else None
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
                    _error_body("not_found_error", f"FakeAnthropic has no {h.command} {path}", request_id),
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
            _send_json(h, 500, _error_body("api_error", msg, request_id), request_id, no_retry)
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
            status = _STATUS_FOR_ERROR.get(t.error_type, 500)
            body = _error_body(t.error_type, t.error_message, request_id)
            rec.outcome = "error_response"
            _send_json(h, status, body, request_id, t.headers)
            return
        rec.outcome = "ended_early" if t.failure == "end" else "completed"
        _send_json(h, 200, t.message_json(mid, model), request_id, t.headers)

    def _stream(self, h: _Handler, rec: RecordedRequest, t: Turn, request_id: str, mid: str, model: str) -> None:
        enc = t._encoded()
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
            payload = head + (_frame(start) if enc.cut >= 1 else b"") + enc.framed_rest
            if not dropping:
                payload += _TERMINATOR
            rec.outcome = final_outcome  # set before the client can observe the end
            sock.sendall(payload)
        else:
            events = [start, *enc.post_start[: enc.cut - 1]] if enc.cut >= 1 else []
            pause_n = t._resolve(t.pause_at, enc.block_ends, 1 + len(enc.post_start)) if t.pause_at else -1
            sock.sendall(head)
            for i, ev in enumerate(events):
                if i == pause_n:
                    t.paused.set()
                    if _wait(sock, t.pause_timeout, t.resume):
                        raise _ClientGone
                if i and t.delay and _wait(sock, t.delay):
                    raise _ClientGone
                sock.sendall(_frame(ev))
            if pause_n >= len(events):
                t.paused.set()
                if _wait(sock, t.pause_timeout, t.resume):
                    raise _ClientGone
            if enc.tail:
                if t.delay and _wait(sock, t.delay):
                    raise _ClientGone
                sock.sendall(_frame(enc.tail))
            rec.outcome = final_outcome
            if not dropping:
                sock.sendall(_TERMINATOR)
        if dropping:
            _abort(h, t.failure == "reset")


# --------------------------------------------------------------------------- socket helpers


def _error_body(error_type: str, message: str, request_id: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}, "request_id": request_id}


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
    body = _dumps(obj).encode()
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

"""The script of turns the fake plays: content blocks, a reply made of them (and its failure
variants), error answers and dropped connections, each encoded once into its wire bytes."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.anthropic_api.wire import PING, DeltaEncoder, error_body, frame_many, sse

DEFAULT_MODEL = "claude-fake-model"
DEFAULT_SIGNATURE = "ZmFrZS1zaWduYXR1cmUtZm9yLXRlc3Rz"  # base64("fake-signature-for-tests")
DEFAULT_REDACTED_DATA = "RmFrZVJlZGFjdGVkVGhpbmtpbmdEYXRh"

_tool_ids = itertools.count(1)


def split_tokens(s: str) -> list[str]:
    """Split text into word-ish chunks ("Hello", " world", "!") for text/thinking blocks."""
    return re.findall(r"\s*\S+|\s+", s)


def _as_chunks(chunks: str | Iterable[str]) -> tuple[str, ...]:
    if isinstance(chunks, str):
        return (chunks,)
    return tuple(chunks)


# --------------------------------------------------------------------------- blocks


@dataclass(frozen=True)
class TextBlock:
    chunks: tuple[str, ...]

    def start(self) -> dict[str, Any]:
        return {"type": "text", "text": ""}

    def deltas(self, index: int) -> list[bytes]:
        enc = DeltaEncoder(index, "text_delta", "text")
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
        enc = DeltaEncoder(index, "thinking_delta", "thinking")
        out = [enc(c) for c in self.chunks]
        sig = {"type": "signature_delta", "signature": self.signature}
        out.append(sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": sig}))
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
        enc = DeltaEncoder(index, "input_json_delta", "partial_json")
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
class Encoded:
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
    _cache: Encoded | None = field(default=None, init=False, repr=False, compare=False)
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

    def resolve(self, at: tuple[int | None, int | None], enc_block_ends: list[int], total: int) -> int:
        after_events, after_blocks = at
        if after_events is not None:
            return max(0, min(after_events, total))
        if after_blocks is None:
            after_blocks = len(self.blocks)
        return enc_block_ends[max(0, min(after_blocks, len(self.blocks)))]

    def prepare(self) -> Turn:
        """Encode the SSE bytes now (otherwise done lazily on first use).  Returns self."""
        self.encoded()
        return self

    def encoded(self) -> Encoded:
        cache = self._cache
        if cache is not None:
            return cache
        with self._cache_lock:
            if self._cache is not None:
                return self._cache
            post: list[bytes] = []
            if self.ping:
                post.append(PING)
            block_ends = [1 + len(post)]
            for i, block in enumerate(self.blocks):
                start = {"type": "content_block_start", "index": i, "content_block": block.start()}
                post.append(sse("content_block_start", start))
                post.extend(block.deltas(i))
                post.append(sse("content_block_stop", {"type": "content_block_stop", "index": i}))
                block_ends.append(1 + len(post))
            delta = {"stop_reason": self.resolved_stop_reason, "stop_sequence": self.stop_sequence}
            usage = {"output_tokens": self.resolved_output_tokens}
            post.append(sse("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
            post.append(sse("message_stop", {"type": "message_stop"}))
            total = 1 + len(post)
            cut = total if self.failure is None else self.resolve(self.failure_at, block_ends, total)
            tail = b""
            if self.failure == "error":
                error = {"type": self.error_type, "message": self.error_message}
                tail = sse("error", {"type": "error", "error": error})
            framed = frame_many(b"".join(post[: max(0, cut - 1)]) + tail)
            self._cache = Encoded(post, block_ends, cut, tail, framed)
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
        return sse("message_start", {"type": "message_start", "message": message})

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
        return error_body(self.error_type, self.message, request_id)


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


STATUS_FOR_ERROR = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}

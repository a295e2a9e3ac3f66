"""The Messages API's streaming wire format: SSE events (``event:`` and ``data:`` lines, which
the SDK requires), HTTP/1.1 chunk framing, and the error body."""

from __future__ import annotations

import json
from typing import Any

CHUNK_SIZE = 64 * 1024
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(obj: Any) -> str:
    return _JSON.encode(obj)


def sse(event_type: str, data: Any) -> bytes:
    payload = data if isinstance(data, str) else dumps(data)
    return f"event: {event_type}\ndata: {payload}\n\n".encode()


def frame(data: bytes) -> bytes:
    """One HTTP/1.1 chunk (empty input gives empty output, never the terminator)."""
    if not data:
        return b""
    return b"%x\r\n%s\r\n" % (len(data), data)


def frame_many(data: bytes) -> bytes:
    return b"".join(frame(data[i : i + CHUNK_SIZE]) for i in range(0, len(data), CHUNK_SIZE))


TERMINATOR = b"0\r\n\r\n"
PING = sse("ping", {"type": "ping"})


class DeltaEncoder:
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
            ev = (self.prefix + dumps(chunk) + "}}\n\n").encode()
            if len(self.memo) < 4096:
                self.memo[chunk] = ev
        return ev


def error_body(error_type: str, message: str, request_id: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}, "request_id": request_id}

"""A strict SSE reader for tests: parses frames, and checks each event against the ag-ui-protocol models."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from ag_ui.core import Event
from pydantic import TypeAdapter

EVENT = TypeAdapter(Event)


@dataclass
class Frame:
    id: int | None
    raw: bytes
    event: dict[str, Any]


@dataclass
class Stream:
    status: int
    headers: httpx.Headers
    frames: list[Frame] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    body: bytes = b""

    @property
    def events(self) -> list[dict[str, Any]]:
        return [f.event for f in self.frames]

    @property
    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    def json(self) -> Any:
        return orjson.loads(self.body)


def parse_frames(body: bytes) -> tuple[list[Frame], list[str]]:
    """Splits an SSE body into frames; LF framing only (CRLF breaks the official clients)."""
    assert b"\r" not in body, "frames must use LF line endings only"
    frames: list[Frame] = []
    comments: list[str] = []
    for block in body.split(b"\n\n"):
        if not block:
            continue
        frame_id: int | None = None
        data: bytes | None = None
        for line in block.split(b"\n"):
            if line.startswith(b":"):
                comments.append(line[1:].strip().decode())
            elif line.startswith(b"id: "):
                frame_id = int(line[4:])
            elif line.startswith(b"data: "):
                assert data is None, "one data line per frame"
                data = line[6:]
            else:
                raise AssertionError(f"unexpected SSE line {line!r}")
        if data is not None:
            frames.append(Frame(frame_id, data, orjson.loads(data)))
    return frames, comments


def check_frame(frame: Frame) -> None:
    """The frame is a valid AG-UI 1.0 event and byte-identical to what the official models encode."""
    model = EVENT.validate_json(frame.raw)
    assert model.model_dump_json(by_alias=True).encode() == frame.raw, frame.raw
    assert all(v is not None for v in frame.event.values()), f"null value in {frame.raw!r}"


def post_run(
    base_url: str,
    agent: str,
    body: dict[str, Any],
    *,
    token: str = "test-token",
    headers: dict[str, str] | None = None,
    timeout: float = 30,
) -> Stream:
    all_headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    all_headers.update(headers or {})
    response = httpx.post(f"{base_url}/agui/{agent}", content=orjson.dumps(body), headers=all_headers, timeout=timeout)
    return to_stream(response)


def get_stream(
    url: str, *, token: str = "test-token", headers: dict[str, str] | None = None, timeout: float = 30
) -> Stream:
    all_headers = {"Authorization": f"Bearer {token}", **(headers or {})}
    return to_stream(httpx.get(url, headers=all_headers, timeout=timeout))


def to_stream(response: httpx.Response) -> Stream:
    stream = Stream(response.status_code, response.headers, body=response.content)
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        stream.frames, stream.comments = parse_frames(response.content)
        for frame in stream.frames:
            check_frame(frame)
    return stream

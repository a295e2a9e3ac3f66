"""The stored form of a run's event log: frames, each holding the events one flush wrote.

A row per event cost more than the events themselves: a 20,000-token reply grew the database by
2.28 times the bytes its client was sent, most of it row and index overhead (issue #27). A frame
holds a contiguous run of events (``first_seq`` to ``last_seq``) as one compressed body:

    body = b"z" + zlib(orjson([[type, payload], ...]), preset dictionary DICTIONARY_V1)
         | b"j" + orjson([[type, payload], ...])          (when compressing does not pay)

The first byte names the encoding, so a later one can be added without rewriting old frames.
Payloads are kept as the exact text the client was sent. The preset dictionary holds what every
run's events spell (their types and keys), so even the few events of a frame written at a
model's pace compress: zlib finds them in it instead of spelling them out once per frame.
"""

from __future__ import annotations

import zlib
from typing import Any, NamedTuple

import orjson

from vocabulary import agui as ev

ZLIB = b"z"
JSON = b"j"
# Level 1: a flush of 2,000 events compresses in about a millisecond, and a higher level saved
# little on these bodies (bench/stream.py --growth).
LEVEL = 1


def _dictionary() -> bytes:
    # The end of the dictionary is what zlib finds nearest: the text deltas, the most frequent.
    common = [
        ev.run_started("thread", "run", v1=True),
        ev.custom(ev.TOOL_PROGRESS, {"toolCallId": "", "progress": 0, "total": 0}),
        {"type": ev.STATE_DELTA, "delta": [{"op": "replace", "path": "/", "value": None}]},
        {"type": ev.STATE_SNAPSHOT, "snapshot": {}},
        {"type": ev.RUN_FINISHED, "threadId": "", "runId": "", "result": None},
        {"type": ev.RUN_ERROR, "message": "", "code": ""},
        {"type": ev.STEP_STARTED, "stepName": ""},
        {"type": ev.STEP_FINISHED, "stepName": ""},
        {"type": ev.TOOL_CALL_RESULT, "messageId": "", "toolCallId": "", "content": "", "role": "tool"},
        {"type": ev.TOOL_CALL_START, "toolCallId": "toolu_", "toolCallName": "", "parentMessageId": ""},
        {"type": ev.TOOL_CALL_ARGS, "toolCallId": "toolu_", "delta": ""},
        {"type": ev.TOOL_CALL_END, "toolCallId": "toolu_"},
        {"type": ev.REASONING_MESSAGE_CONTENT, "messageId": "", "delta": ""},
        {"type": ev.TEXT_MESSAGE_START, "messageId": "", "role": "assistant"},
        {"type": ev.TEXT_MESSAGE_END, "messageId": ""},
        {"type": ev.TEXT_MESSAGE_CONTENT, "messageId": "", "delta": " "},
        {"type": ev.TEXT_MESSAGE_CONTENT, "messageId": "", "delta": " the"},
    ]
    return orjson.dumps([[event["type"], orjson.dumps(event).decode()] for event in common])


# Frozen once frames are stored with it: a frame written with it can be read only with it
# (tests/threads/test_event_log.py pins its digest).
DICTIONARY_V1 = _dictionary()


class LoggedEvent(NamedTuple):
    """One event of a run's log, as it was streamed."""

    seq: int
    type: str
    payload: str
    created_at: Any = None

    @property
    def data(self) -> Any:
        return orjson.loads(self.payload)


def encode(events: list[tuple[str, str]]) -> bytes:
    """The body of a frame holding ``events`` ((type, payload JSON) pairs, in order)."""
    plain = orjson.dumps(events)
    packer = zlib.compressobj(LEVEL, zdict=DICTIONARY_V1)
    packed = packer.compress(plain) + packer.flush()
    return ZLIB + packed if len(packed) < len(plain) else JSON + plain


def decode(body: bytes | memoryview) -> list[tuple[str, str]]:
    """The (type, payload) pairs of a frame's body."""
    body = bytes(body)
    kind, rest = body[:1], body[1:]
    if kind == ZLIB:
        unpacker = zlib.decompressobj(zdict=DICTIONARY_V1)
        rest = unpacker.decompress(rest) + unpacker.flush()
    elif kind != JSON:
        raise ValueError(f"unknown event frame encoding {kind!r}")
    pairs: list[tuple[str, str]] = orjson.loads(rest)
    return pairs


def events_of(first_seq: int, body: bytes | memoryview, *, after: int = 0, created_at: Any = None) -> list[LoggedEvent]:
    """The events of the frame starting at ``first_seq`` with a seq above ``after``."""
    pairs = decode(body)
    skip = max(0, after + 1 - first_seq)
    return [
        LoggedEvent(seq, type_, payload, created_at)
        for seq, (type_, payload) in enumerate(pairs[skip:], first_seq + skip)
    ]

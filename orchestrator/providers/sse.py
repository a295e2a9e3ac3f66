"""Server-sent events from a byte stream, decoded a network read at a time.

The model API streams one SSE event per token. The SDK's own decoder
(``AsyncStream.raw_events``) goes line by line through two async generators and
builds a ``ServerSentEvent`` per event; on the per-token path that was a third of
the event loop's time (bench/stream.py --profile py-spy). This one splits each read
into whole events at once (a read of usual events only, as the API sends, by regex in
C) and hands them over as a list of ``(event, data)`` pairs of bytes, names undecoded,
following the SSE rules the API relies on: ``event:`` and ``data:`` fields (several
``data:`` lines are joined by newlines), an optional space after the colon, comment
lines, LF, CRLF or CR line ends (even when a read ends between a CR and its LF),
and an event cut off by the end of the stream is dropped.
"""

from __future__ import annotations

import re

SSEEvent = tuple[bytes, bytes]  # (event name, b"" when absent; data), both as the bytes read

_EVENT_PREFIX = b"event: "
_DATA_SEP = b"\ndata: "
# A read made only of events in the usual shape, "event: NAME\ndata: JSON\n\n", is
# checked and split by two regex passes in C rather than a Python step per event.
_USUAL_EVENT = re.compile(rb"event: ([^\n]*)\ndata: ([^\n]*)\n\n")
_USUAL_EVENTS = re.compile(rb"(?:event: [^\n]*\ndata: [^\n]*\n\n)+")


def _parse(frame: bytes) -> SSEEvent | None:
    """One event's lines (LF-separated) -> (event, data); None for a frame with neither."""
    if frame.startswith(_EVENT_PREFIX):
        # The usual shape, "event: NAME\ndata: JSON", without a line loop.
        head, sep, data = frame.partition(_DATA_SEP)
        if sep and b"\n" not in head and b"\n" not in data:
            name = head[len(_EVENT_PREFIX) :]
            return name, data
    event = b""
    data_lines: list[bytes] = []
    for line in frame.split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        field, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if field == b"event":
            event = value
        elif field == b"data":
            data_lines.append(value)
    if not event and not data_lines:
        return None
    return event, b"\n".join(data_lines)


class SSESplitter:
    """Splits the reads of one stream into whole events: ``feed`` each read, in order, and take
    back the events it completed (an empty list when it completes none). A plain call per read,
    not an async generator around the reads: each generator level cost every token a step."""

    def __init__(self) -> None:
        self._rest = b""
        self._held_cr = False  # a read that ended in CR: its LF may start the next read

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if self._held_cr or b"\r" in chunk:
            if self._held_cr:
                chunk = b"\r" + chunk
            self._held_cr = chunk.endswith(b"\r")
            if self._held_cr:
                chunk = chunk[:-1]
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        rest = self._rest
        buffer = rest + chunk if rest else chunk
        end = buffer.rfind(b"\n\n") + 2
        if end > 1 and _USUAL_EVENTS.fullmatch(buffer, 0, end):
            self._rest = buffer[end:]
            # findall's (name, data) pairs as they are: a tuple per event, not two.
            return _USUAL_EVENT.findall(buffer, 0, end)
        frames = buffer.split(b"\n\n")
        self._rest = frames.pop()
        # What is left at the stream's end has no blank line after it: an incomplete event, which
        # the SSE rules drop (it is never completed by a later feed).
        return [event for frame in frames if frame and (event := _parse(frame)) is not None]

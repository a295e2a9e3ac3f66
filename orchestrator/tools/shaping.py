"""Shaping a tool's output before the model sees it: long outputs keep their head and tail.

Pure functions; the registry applies them to every tool's output (see ``ToolRegistry.call``)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_BYTES = 50_000
DEFAULT_MAX_LINES = 600
DEFAULT_KEEP_HEAD = 200
DEFAULT_KEEP_TAIL = 200


@dataclass(slots=True, frozen=True)
class OutputLimits:
    """When an output is cut (over ``max_bytes`` or ``max_lines``) and how much of it is kept."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_lines: int = DEFAULT_MAX_LINES
    keep_head: int = DEFAULT_KEEP_HEAD
    keep_tail: int = DEFAULT_KEEP_TAIL

    def __post_init__(self) -> None:
        if self.max_bytes < 2 or self.max_lines < 1 or self.keep_head < 0 or self.keep_tail < 0:
            raise ValueError(f"output limits out of range: {self}")


@dataclass(slots=True, frozen=True)
class ShapedOutput:
    text: str
    lines: int  # lines in the original output
    bytes: int  # UTF-8 bytes in the original output
    truncated: bool


def count_lines(text: str) -> int:
    """Lines as a reader counts them: a final newline does not open another line."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def shape_tool_output(
    text: str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_lines: int = DEFAULT_MAX_LINES,
    keep_head: int = DEFAULT_KEEP_HEAD,
    keep_tail: int = DEFAULT_KEEP_TAIL,
) -> ShapedOutput:
    """Returns ``text`` unchanged when it is within both limits. Otherwise keeps the first
    ``keep_head`` and last ``keep_tail`` lines, and, if those still weigh more than
    ``max_bytes`` (a few enormous lines), at most ``max_bytes // 2`` bytes of each end.
    A marker line between the two ends says how many lines and bytes were dropped."""
    data = text.encode("utf-8")
    limits = OutputLimits(max_bytes, max_lines, keep_head, keep_tail)
    return _shape(data, data, len(data), data.count(b"\n"), limits)


class StreamShaper:
    """``shape_tool_output`` for a stream of bytes of any length, in memory bounded by the limits:
    it keeps the first and the last ``max_bytes`` (and a few) bytes and counts the rest, which is
    all the shaping ever shows. ``feed`` the chunks, then ask for ``result``; the result is the
    one ``shape_tool_output`` gives for the whole stream (invalid UTF-8 is replaced)."""

    def __init__(self, limits: OutputLimits) -> None:
        self.limits = limits
        self._head_room = limits.max_bytes + _SLACK
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.newlines = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.newlines += chunk.count(b"\n")
        if len(self.head) < self._head_room:
            self.head += chunk[: self._head_room - len(self.head)]
        self.tail += chunk[-self.limits.max_bytes :]
        if len(self.tail) > self.limits.max_bytes:
            del self.tail[: len(self.tail) - self.limits.max_bytes]

    def result(self) -> ShapedOutput:
        return _shape(bytes(self.head), bytes(self.tail), self.total, self.newlines, self.limits)


# The head keeps a few bytes past max_bytes: moving a cut off the middle of a UTF-8 character looks there.
_SLACK = 4


def _shape(head: bytes, tail: bytes, total_bytes: int, newlines: int, limits: OutputLimits) -> ShapedOutput:
    """The shaping of a text of ``total_bytes`` bytes and ``newlines`` newlines, of which ``head``
    is at least the first ``max_bytes + 4`` bytes and ``tail`` at least the last ``max_bytes``
    (or the whole text, when it is shorter)."""
    max_bytes, max_lines, keep_head, keep_tail = limits.max_bytes, limits.max_lines, limits.keep_head, limits.keep_tail
    tail_at = total_bytes - len(tail)  # where ``tail`` starts in the text
    ends_with_newline = tail.endswith(b"\n")
    total_lines = 0 if total_bytes == 0 else newlines + (0 if ends_with_newline else 1)
    if total_bytes <= max_bytes and total_lines <= max_lines:
        return ShapedOutput(_decode(head), total_lines, total_bytes, False)

    # The kept ends are the byte ranges [0, head_end) and [tail_start, total_bytes). An end not
    # found in what is kept lies further than max_bytes, so the byte cap below moves it anyway.
    if total_lines > keep_head + keep_tail:
        head_end = _offset_after_lines(head, keep_head)
        head_end = total_bytes if head_end is None else head_end
        tail_offset = _offset_of_last_lines(tail, keep_tail)
        tail_start = 0 if tail_offset is None else tail_at + tail_offset
    else:
        head_end = tail_start = total_bytes // 2
    half = max_bytes // 2
    if head_end + (total_bytes - tail_start) > max_bytes:
        head_end = min(head_end, half)
        tail_start = max(tail_start, total_bytes - half)
    head_end = _char_boundary(head, head_end, forward=False)
    tail_start = tail_at + _char_boundary(tail, tail_start - tail_at, forward=True)
    if head_end >= tail_start:  # only when the whole text is within max_bytes, so all in ``head``
        return ShapedOutput(_decode(head), total_lines, total_bytes, False)

    kept_head = head[:head_end]
    kept_tail = tail[tail_start - tail_at :]
    dropped_bytes = tail_start - head_end
    dropped_lines = newlines - kept_head.count(b"\n") - kept_tail.count(b"\n")
    marker = (
        f"[... {dropped_lines:,} lines ({dropped_bytes:,} bytes) omitted; "
        f"the full output had {total_lines:,} lines, {total_bytes:,} bytes ...]"
    )
    shown_head = _decode(kept_head)
    if shown_head and not shown_head.endswith("\n"):
        shown_head += "\n"
    return ShapedOutput(f"{shown_head}{marker}\n{_decode(kept_tail)}", total_lines, total_bytes, True)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _offset_after_lines(data: bytes, count: int) -> int | None:
    offset = 0
    for _ in range(count):
        found = data.find(b"\n", offset)
        if found < 0:
            return None
        offset = found + 1
    return offset


def _offset_of_last_lines(data: bytes, count: int) -> int | None:
    if count == 0:
        return len(data)
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(count):
        end = data.rfind(b"\n", 0, end)
        if end < 0:
            return None
    return end + 1


def _char_boundary(data: bytes, offset: int, *, forward: bool) -> int:
    """Moves ``offset`` off the middle of a UTF-8 sequence (continuation bytes are 0b10xxxxxx)."""
    step = 1 if forward else -1
    while 0 < offset < len(data) and data[offset] & 0xC0 == 0x80:
        offset += step
    return offset

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
    total_bytes = len(data)
    total_lines = count_lines(text)
    if total_bytes <= max_bytes and total_lines <= max_lines:
        return ShapedOutput(text, total_lines, total_bytes, False)

    # The kept ends are the byte ranges [0, head_end) and [tail_start, total_bytes).
    if total_lines > keep_head + keep_tail:
        head_end = _offset_after_lines(data, keep_head)
        tail_start = _offset_of_last_lines(data, keep_tail)
    else:
        head_end = tail_start = total_bytes // 2
    half = max_bytes // 2
    if head_end + (total_bytes - tail_start) > max_bytes:
        head_end = min(head_end, half)
        tail_start = max(tail_start, total_bytes - half)
    head_end = _char_boundary(data, head_end, forward=False)
    tail_start = _char_boundary(data, tail_start, forward=True)
    if head_end >= tail_start:
        return ShapedOutput(text, total_lines, total_bytes, False)

    head = data[:head_end].decode("utf-8")
    tail = data[tail_start:].decode("utf-8")
    dropped_bytes = tail_start - head_end
    dropped_lines = data.count(b"\n", head_end, tail_start)
    marker = (
        f"[... {dropped_lines:,} lines ({dropped_bytes:,} bytes) omitted; "
        f"the full output had {total_lines:,} lines, {total_bytes:,} bytes ...]"
    )
    if head and not head.endswith("\n"):
        head += "\n"
    return ShapedOutput(f"{head}{marker}\n{tail}", total_lines, total_bytes, True)


def _offset_after_lines(data: bytes, count: int) -> int:
    offset = 0
    for _ in range(count):
        offset = data.index(b"\n", offset) + 1
    return offset


def _offset_of_last_lines(data: bytes, count: int) -> int:
    if count == 0:
        return len(data)
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(count):
        end = data.rindex(b"\n", 0, end)
    return end + 1


def _char_boundary(data: bytes, offset: int, *, forward: bool) -> int:
    """Moves ``offset`` off the middle of a UTF-8 sequence (continuation bytes are 0b10xxxxxx)."""
    step = 1 if forward else -1
    while 0 < offset < len(data) and data[offset] & 0xC0 == 0x80:
        offset += step
    return offset

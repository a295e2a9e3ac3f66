"""Tool output over 50,000 bytes or 600 lines keeps its first and last 200 lines, and says what it dropped."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from orchestrator.tools.base import Tool, ToolContext, ToolOutput, ToolRegistry, Workspace
from orchestrator.tools.shaping import OutputLimits, count_lines, shape_tool_output


def numbered(count: int, width: int = 0) -> str:
    return "".join(f"line {i:0{width}d}\n" for i in range(1, count + 1))


def test_short_output_is_left_alone_and_measured():
    shaped = shape_tool_output("héllo\nworld\n")
    assert shaped.text == "héllo\nworld\n"
    assert (shaped.lines, shaped.bytes, shaped.truncated) == (2, 13, False)


def test_lines_are_counted_as_a_reader_counts_them():
    assert count_lines("") == 0
    assert count_lines("a") == 1
    assert count_lines("a\nb") == 2
    assert count_lines("a\nb\n") == 2
    assert count_lines("\n\n") == 2


def test_output_at_the_line_limit_is_kept_and_one_more_line_is_cut():
    assert not shape_tool_output(numbered(600)).truncated
    shaped = shape_tool_output(numbered(601))
    assert shaped.truncated and shaped.lines == 601


def test_too_many_lines_keep_the_first_and_last_two_hundred():
    text = numbered(1000)
    shaped = shape_tool_output(text)
    lines = shaped.text.splitlines()
    assert lines[:200] == [f"line {i}" for i in range(1, 201)]
    assert lines[-200:] == [f"line {i}" for i in range(801, 1001)]
    assert len(lines) == 401
    dropped = len("".join(f"line {i}\n" for i in range(201, 801)).encode())
    total = len(text.encode())
    assert (
        lines[200]
        == f"[... 600 lines ({dropped:,} bytes) omitted; the full output had 1,000 lines, {total:,} bytes ...]"
    )
    assert (shaped.lines, shaped.bytes) == (1000, len(text.encode()))


def test_too_many_bytes_in_few_lines_are_cut_to_the_byte_limit():
    text = "".join(f"{i:03d}" + "x" * 996 + "\n" for i in range(300))  # 300 lines, 300,000 bytes
    shaped = shape_tool_output(text)
    assert shaped.truncated and (shaped.lines, shaped.bytes) == (300, 300_000)
    body = shaped.text.encode()
    assert len(body) <= 50_000 + 200
    assert shaped.text.startswith("000xxx") and shaped.text.endswith("x\n")
    assert "299" + "x" * 996 + "\n" in shaped.text
    assert "bytes) omitted" in shaped.text


def test_many_long_lines_are_cut_by_lines_and_then_by_bytes():
    text = "y" * 1000 + "\n"
    text *= 2000  # 2000 lines of 1001 bytes: 400 kept lines would still weigh 400 KB
    shaped = shape_tool_output(text)
    assert len(shaped.text.encode()) <= 50_000 + 200
    assert shaped.lines == 2000


def test_a_single_enormous_line_is_cut_too():
    text = "START" + "z" * 1_000_000 + "END"
    shaped = shape_tool_output(text)
    assert shaped.truncated and (shaped.lines, shaped.bytes) == (1, 1_000_008)
    assert shaped.text.startswith("START") and shaped.text.endswith("END")
    assert len(shaped.text.encode()) <= 50_000 + 200
    marker = re.search(r"\[\.\.\. 0 lines \(([\d,]+) bytes\) omitted", shaped.text)
    assert marker and int(marker.group(1).replace(",", "")) == 1_000_008 - 50_000


def test_cuts_never_split_a_multibyte_character():
    shaped = shape_tool_output("é" * 100_000, max_bytes=1001)
    head, _, tail = shaped.text.partition("\n[...")
    assert set(head) == {"é"} and tail.endswith("é")
    assert "\ufffd" not in shaped.text


def test_thresholds_and_kept_lines_can_be_chosen():
    shaped = shape_tool_output(numbered(50), max_lines=10, keep_head=3, keep_tail=2)
    lines = shaped.text.splitlines()
    assert lines[:3] == ["line 1", "line 2", "line 3"]
    assert lines[-2:] == ["line 49", "line 50"]
    assert lines[3].startswith("[... 45 lines")


async def _many_lines(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    return ToolOutput(numbered(int(arguments["count"])))


def test_the_registry_shapes_every_tool_output_with_the_contexts_limits(tmp_path):
    registry = ToolRegistry.of([Tool("many", "prints lines", {"type": "object"}, _many_lines)])
    context = ToolContext(Workspace(tmp_path))
    out = asyncio.run(registry.call("many", {"count": 1000}, context))
    assert out.truncated and out.line_count == 1000 and len(out.content.splitlines()) == 401

    small = asyncio.run(registry.call("many", {"count": 3}, context))
    assert not small.truncated and (small.line_count, small.byte_count) == (3, len(numbered(3)))

    context.output_limits = OutputLimits(max_lines=20, keep_head=5, keep_tail=5)
    out = asyncio.run(registry.call("many", {"count": 100}, context))
    assert out.truncated and len(out.content.splitlines()) == 11

    error = asyncio.run(registry.call("missing", {}, context))
    assert error.is_error and error.line_count == 1

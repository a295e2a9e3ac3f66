"""The stdio reader of MCP messages (agents/mcp/stdio.py): lines split across and within chunks,
a line over the bound kept as its size and ends only, and the request it answers found in them."""

from __future__ import annotations

import json

from agents.mcp.stdio import LineReader, Oversized, answer_id


def test_lines_are_split_across_and_within_chunks() -> None:
    reader = LineReader(100)
    assert reader.feed(b'{"a"') == []
    assert reader.feed(b': 1}\n{"b": 2}\n{"c"') == [b'{"a": 1}', b'{"b": 2}']
    assert reader.feed(b": 3}\n") == [b'{"c": 3}']


def test_a_line_over_the_bound_keeps_only_its_size_and_ends() -> None:
    reader = LineReader(1000)
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"text": "x" * 50_000}}).encode()
    lines = [line for start in range(0, len(body), 4096) for line in reader.feed(body[start : start + 4096])]
    (line,) = [*lines, *reader.feed(b"\n")]
    assert isinstance(line, Oversized) and line.size == len(body)
    assert len(line.head) <= 512 and len(line.tail) <= 512
    assert answer_id(line) == 7
    assert reader.feed(b'{"next": true}\n') == [b'{"next": true}']  # the next line is whole again


def test_the_answered_id_is_found_last_too_and_never_in_the_content() -> None:
    last = json.dumps({"result": {"content": "y" * 5000}, "jsonrpc": "2.0", "id": "req-9"}).encode()
    (line,) = LineReader(100).feed(last + b"\n")
    assert isinstance(line, Oversized) and answer_id(line) == "req-9"
    nested = json.dumps({"method": "notifications/message", "params": {"data": "z" * 5000, "id": 3}}).encode()
    (line,) = LineReader(100).feed(nested + b"\n")
    assert isinstance(line, Oversized) and answer_id(line) is None

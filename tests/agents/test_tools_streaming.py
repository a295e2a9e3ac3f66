"""file_read and bash cost memory bounded by their output, not by their input (issue #11 item 6,
issue #13 section 2)."""

from __future__ import annotations

import asyncio
import random
import tracemalloc
from pathlib import Path

from orchestrator.tools.base import ToolContext, ToolOutput, ToolRegistry, Workspace
from orchestrator.tools.mutating import BASH
from orchestrator.tools.readonly import READ_ONLY_TOOLS
from orchestrator.tools.shaping import OutputLimits, StreamShaper, shape_tool_output

BIG = 256 * 1024 * 1024
BOUND = 16 * 1024 * 1024  # generous: the window, read buffers and the interpreter's own noise


def call(root: Path, name: str, **arguments: object) -> tuple[ToolOutput, int]:
    registry = ToolRegistry.of((*READ_ONLY_TOOLS, BASH))
    tracemalloc.start()
    try:
        out = asyncio.run(registry.call(name, dict(arguments), ToolContext(Workspace(root))))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, peak


def test_file_read_of_a_huge_file_keeps_only_its_window(tmp_path):
    big = tmp_path / "big.log"
    with big.open("wb") as fh:
        fh.write(b"".join(b"line %d\n" % n for n in range(2000)))
        fh.truncate(BIG)  # a sparse tail: 256 MB on paper, nothing on disk
    out, peak = call(tmp_path, "file_read", path="big.log", limit=1)
    assert out.content.startswith("1\tline 0\n")
    assert "more lines; read on with offset=1" in out.content
    assert peak < BOUND, f"file_read of a 256 MB file peaked at {peak:,} bytes"


def test_file_read_of_one_enormous_line_shows_its_start(tmp_path):
    (tmp_path / "one.txt").write_bytes(b"x" * (8 * 1024 * 1024) + b"\nsecond\n")
    out, peak = call(tmp_path, "file_read", path="one.txt")
    assert out.content.splitlines()[0] == "1\t" + "x" * 2000
    assert out.content.splitlines()[1] == "2\tsecond"
    assert peak < BOUND


def test_bash_output_under_the_limits_is_kept_whole(tmp_path):
    # 45 KB in 90 lines: under 50,000 bytes and 600 lines, so nothing is cut (a 30 KB pre-cut did).
    out, _ = call(tmp_path, "bash", command="for i in $(seq 1 90); do printf '%0499d\\n' $i; done")
    lines = out.content.splitlines()
    assert not out.truncated and len(lines) == 91 and lines[-1] == "[exit code 0]"
    assert lines[44] == f"{45:0499d}"


def test_bash_output_of_any_size_costs_bounded_memory(tmp_path):
    out, peak = call(
        tmp_path, "bash", command="echo FIRST; head -c 100000000 /dev/zero | tr '\\0' 'y'; echo; echo LAST"
    )
    assert out.content.startswith("FIRST\n") and out.content.endswith("LAST\n[exit code 0]")
    assert out.byte_count == 100_000_000 + 12 and out.truncated
    assert peak < BOUND


def test_the_stream_shaper_shapes_exactly_as_the_whole_text_would_be():
    rng = random.Random(11)
    for _ in range(400):
        limits = OutputLimits(
            max_bytes=rng.choice([40, 100, 1000]), max_lines=rng.choice([5, 20, 60]), keep_head=3, keep_tail=2
        )
        pieces = [
            rng.choice(["a", "é", "\n", "line\n", "€€", "z" * rng.randint(0, 300)]) for _ in range(rng.randint(0, 80))
        ]
        text = "".join(pieces)
        data = text.encode()
        shaper = StreamShaper(limits)
        at = 0
        while at < len(data):
            step = rng.randint(1, 50)
            shaper.feed(data[at : at + step])
            at += step
        expected = shape_tool_output(
            text,
            max_bytes=limits.max_bytes,
            max_lines=limits.max_lines,
            keep_head=limits.keep_head,
            keep_tail=limits.keep_tail,
        )
        assert shaper.result() == expected, text

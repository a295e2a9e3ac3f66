"""glob, grep and file_read stay inside the workspace, whatever the path."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from orchestrator.tools.base import ToolContext, ToolRegistry, Workspace
from orchestrator.tools.readonly import READ_ONLY_TOOLS


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("import os\n\ndef f():\n    return 42\n")
    (root / ".hidden").write_text("secret-ish but inside\n")
    (root / "blob.bin").write_bytes(b"\x00\x01\x02")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET\n")
    os.symlink(outside / "secret.txt", root / "link_to_secret.txt")
    os.symlink(outside, root / "link_dir")
    return root


def call(ws: Path, name: str, **arguments):
    registry = ToolRegistry.of(READ_ONLY_TOOLS)
    return asyncio.run(registry.call(name, arguments, ToolContext(Workspace(ws))))


@pytest.mark.parametrize(
    "path",
    [
        "../outside/secret.txt",
        "/etc/passwd",
        "pkg/../../outside/secret.txt",
        "link_to_secret.txt",
        "link_dir/secret.txt",
    ],
)
def test_file_read_refuses_every_way_out(ws, path):
    out = call(ws, "file_read", path=path)
    assert out.is_error
    assert "TOP SECRET" not in out.content


def test_file_read_numbers_lines_and_pages(ws):
    out = call(ws, "file_read", path="pkg/mod.py", offset=2, limit=1)
    assert not out.is_error
    assert out.content.startswith("3\tdef f():")
    assert "read on with offset=3" in out.content
    assert out.touched == (("pkg/mod.py", "read"),)


@pytest.mark.parametrize("offset", [4, 50])
def test_file_read_past_the_end_says_so(ws, offset):
    out = call(ws, "file_read", path="pkg/mod.py", offset=offset)
    assert out.is_error
    assert out.content == (
        f"pkg/mod.py: offset {offset} is past the end of the file, which has 4 lines; "
        "the last offset that shows a line is 3"
    )
    assert out.touched == ()
    (ws / "one.txt").write_text("only")
    assert "which has 1 line;" in call(ws, "file_read", path="one.txt", offset=1).content


def test_file_read_of_the_last_line_and_of_an_empty_file(ws):
    assert call(ws, "file_read", path="pkg/mod.py", offset=3).content == "4\t    return 42"
    (ws / "empty.txt").write_text("")
    assert call(ws, "file_read", path="empty.txt", offset=7).content == "(empty file)"


def test_file_read_refuses_binary_and_directories(ws):
    assert "binary" in call(ws, "file_read", path="blob.bin").content
    assert call(ws, "file_read", path="pkg").is_error


def test_glob_lists_matches_but_not_through_links(ws):
    out = call(ws, "glob", pattern="**/*")
    lines = out.content.splitlines()
    assert "pkg/mod.py" in lines and ".hidden" in lines
    assert not any("secret" in line for line in lines)


@pytest.mark.parametrize("pattern", ["../*", "/etc/*", "pkg/../../*"])
def test_glob_refuses_patterns_that_leave(ws, pattern):
    assert call(ws, "glob", pattern=pattern).is_error


def test_glob_refuses_a_base_path_outside(ws):
    assert call(ws, "glob", pattern="*", path="..").is_error
    assert call(ws, "glob", pattern="*", path="link_dir").is_error


def test_grep_finds_lines_and_skips_links_and_binaries(ws):
    out = call(ws, "grep", pattern="return|SECRET")
    assert out.content.splitlines() == ["pkg/mod.py:4:    return 42"]
    assert call(ws, "grep", pattern="x", path="../outside").is_error


def test_grep_reports_a_bad_regex(ws):
    out = call(ws, "grep", pattern="(")
    assert out.is_error and "regular expression" in out.content


def test_bad_arguments_come_back_as_errors_the_model_can_read(ws):
    assert "pattern" in call(ws, "glob").content
    assert "must be an integer" in call(ws, "file_read", path="pkg/mod.py", offset="x").content
    assert "unknown tool" in call(ws, "nope").content

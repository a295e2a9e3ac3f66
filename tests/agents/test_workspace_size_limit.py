"""The workspace size limit holds during a call, and a workspace over it can always be brought back
under it (issue #49, item 6). Before, the limit was checked before a call only: one bash call wrote
50 MB into a 10 MB workspace, and the large file then wedged it, since every tool that could remove
it was refused. Run as root, with the sandbox."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from agents.runtime import tool_context
from agents.workspaces import place_of, prepare
from orchestrator.tools.base import ToolContext, ToolOutput, ToolRegistry
from orchestrator.tools.catalog import KNOWN_TOOLS
from orchestrator.tools.usage import walk_bytes

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")

MB = 1 << 20
LIMIT = 10 * MB


@pytest.fixture
def workspace(tmp_path: Path, db):
    shared = tmp_path / "shared"
    shared.mkdir()
    with override_settings(
        AGENT_WORKSPACE=shared,
        AGENT_WORKSPACES_ROOT=tmp_path / "ws",
        AGENT_WORKSPACE_MODE="owner",
        AGENT_WORKSPACE_TEMPLATE="",
        AGENT_BASH_SANDBOX="on",
        AGENT_WORKSPACE_MAX_BYTES=LIMIT,
    ):
        place = place_of(owner_id=2, thread_pk=None)
        prepare(place)
        yield place.path


def call(workspace: Path, tool: str, arguments: dict[str, Any], context: ToolContext | None = None) -> ToolOutput:
    context = context or tool_context(workspace=workspace)
    return asyncio.run(ToolRegistry.of([KNOWN_TOOLS[tool]]).call(tool, arguments, context))


def fill(workspace: Path, name: str, size: int) -> Path:
    """A file the workspace holds, written behind the tools' back (as a past call could have)."""
    path = workspace / name
    path.write_bytes(b"x" * size)
    return path


def test_one_bash_call_cannot_write_a_file_past_the_limit(workspace):
    out = call(workspace, "bash", {"command": "head -c 50M /dev/zero > big; echo after=$?"})
    held = walk_bytes(workspace)
    assert held <= LIMIT, (held, out.content)
    assert "size limit" in out.content


def test_a_bash_call_writing_many_files_is_stopped_once_the_workspace_passes_its_limit(workspace):
    command = "for i in $(seq 100); do head -c 1M /dev/urandom > f$i; sleep 0.05; done; echo finished"
    out = call(workspace, "bash", {"command": command})
    assert out.is_error and "finished" not in out.content
    assert "passed its size limit of 10,485,760 bytes" in out.content
    held = walk_bytes(workspace)
    # Stopped within a look or two at the workspace (every 20 ms here; a loaded machine is slower):
    # a few files past the limit, not a hundred.
    assert held < LIMIT + 20 * MB, held


def test_a_file_write_that_would_pass_the_limit_is_refused(workspace):
    assert not call(workspace, "file_write", {"path": "a.txt", "content": "a" * (6 * MB)}).is_error
    refused = call(workspace, "file_write", {"path": "b.txt", "content": "b" * (6 * MB)})
    assert refused.is_error and "limit of 10,485,760" in refused.content
    assert not (workspace / "b.txt").exists()


def test_bash_deletes_bring_a_workspace_over_its_limit_back_under_it(workspace):
    fill(workspace, "big.bin", 30 * MB)
    out = call(workspace, "bash", {"command": "rm big.bin && echo removed"})
    assert "removed" in out.content and not (workspace / "big.bin").exists()
    assert not call(workspace, "file_write", {"path": "ok.txt", "content": "fine"}).is_error


def test_bash_over_the_limit_may_shrink_the_workspace_but_not_grow_it(workspace):
    fill(workspace, "big.bin", 30 * MB)
    out = call(workspace, "bash", {"command": "echo more > new.txt; head -c 5M /dev/zero > other.bin; ls"})
    assert walk_bytes(workspace) <= 30 * MB, out.content
    assert "big.bin" in out.content  # it ran, and read what is there


def test_apply_patch_deletions_and_smaller_writes_work_over_the_limit(workspace):
    fill(workspace, "big.bin", 30 * MB)
    (workspace / "notes.txt").write_text("one\ntwo\n")
    fill(workspace, "log.txt", 2 * MB)
    patch = "--- a/notes.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-one\n-two\n"
    run = tool_context(workspace=workspace)  # one run's calls: it read the file it deletes
    call(workspace, "file_read", {"path": "notes.txt"}, run)
    deleted = call(workspace, "apply_patch", {"patch": patch}, run)
    assert not deleted.is_error, deleted.content
    assert not (workspace / "notes.txt").exists()
    shrunk = call(workspace, "file_write", {"path": "log.txt", "content": "short\n"})
    assert not shrunk.is_error, shrunk.content
    assert (workspace / "log.txt").read_text() == "short\n"
    grown = call(workspace, "file_write", {"path": "new.txt", "content": "x"})
    assert grown.is_error and "over its limit" in grown.content

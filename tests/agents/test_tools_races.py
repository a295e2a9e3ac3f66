"""A link swapped while the tools work never leads them out of the workspace (issue #11, item 4).

A separate process flips a link inside the workspace between a directory inside and one outside as fast as
it can, while the tools read, write, edit, patch, grep and glob through it many times."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.tools.base import ToolContext, ToolOutput, ToolRegistry, Workspace
from orchestrator.tools.mutating import APPLY_PATCH, FILE_EDIT, FILE_WRITE
from orchestrator.tools.readonly import READ_ONLY_TOOLS

ATTEMPTS = 300
OUTSIDE_SECRET = "OUTSIDE-SECRET"


def start_flipper(mode: str, root: Path, outside: Path) -> subprocess.Popen[bytes]:
    # A process of its own, as a command run through bash would be: it swaps without waiting for
    # this interpreter's GIL, so the windows between a check and an open really get hit.
    return subprocess.Popen([sys.executable, "-c", FLIPPER, mode, str(root), str(outside)])


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """``swap`` is a link that flips between ``inside`` and the outside directory."""
    root = tmp_path / "ws"
    inside = root / "inside"
    inside.mkdir(parents=True)
    (inside / "f.txt").write_text("inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text(OUTSIDE_SECRET + "\n")
    link = root / "swap"
    os.symlink("inside", link)
    flipper = start_flipper("link", root, outside)
    yield root, outside
    flipper.kill()
    flipper.wait()


@pytest.fixture
def dir_world(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """``swap`` flips between a real directory and a link to the outside directory."""
    root = tmp_path / "ws"
    (root / "swap").mkdir(parents=True)
    (root / "swap" / "f.txt").write_text("inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text(OUTSIDE_SECRET + "\n")
    flipper = start_flipper("dir", root, outside)
    yield root, outside
    flipper.kill()
    flipper.wait()


FLIPPER = """
import ctypes, os, sys
mode, root, outside = sys.argv[1], sys.argv[2], sys.argv[3]
swap, spare = os.path.join(root, "swap"), os.path.join(root, ".swap-next")
if mode == "dir":  # exchange the real directory and a link to the outside, atomically (renameat2)
    os.symlink(outside, spare)
    libc = ctypes.CDLL(None, use_errno=True)
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    a, b = swap.encode(), spare.encode()
    while True:
        libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)
n = 0
while True:
    n += 1
    try:
        os.symlink([outside, "inside"][n % 2], spare)
        os.replace(spare, swap)
    except OSError:
        pass
"""


def call(context: ToolContext, name: str, **arguments: object) -> ToolOutput:
    registry = ToolRegistry.of((*READ_ONLY_TOOLS, FILE_WRITE, FILE_EDIT, APPLY_PATCH))
    return asyncio.run(registry.call(name, dict(arguments), context))


def outside_files(outside: Path) -> list[str]:
    return sorted(p.name for p in outside.iterdir())


@pytest.mark.parametrize("flips", ["world", "dir_world"])
def test_reads_through_a_swapping_link_never_leak(flips, request):
    world = request.getfixturevalue(flips)
    root, _ = world
    context = ToolContext(Workspace(root))
    leaks = 0
    for _ in range(ATTEMPTS):
        for out in (
            call(context, "file_read", path="swap/f.txt"),
            call(context, "grep", pattern="SECRET|inside", path="swap"),
            call(context, "grep", pattern="SECRET", include="swap/*"),
        ):
            leaks += OUTSIDE_SECRET in out.content
    assert leaks == 0


def test_writes_through_a_swapping_directory_never_land_outside(dir_world):
    root, outside = dir_world
    context = ToolContext(Workspace(root))
    for n in range(ATTEMPTS):
        call(context, "file_write", path=f"swap/new-{n}.txt", content="written\n")
        call(context, "file_write", path="swap/f.txt", content=f"overwrite {n}\n")
        read = call(context, "file_read", path="swap/f.txt")
        if not read.is_error:
            call(context, "file_edit", path="swap/f.txt", old_string="overwrite", new_string="edited")
        call(context, "apply_patch", patch=f"--- /dev/null\n+++ swap/patched-{n}.txt\n@@ -0,0 +1 @@\n+p\n")
    assert outside_files(outside) == ["f.txt"]  # nothing new, no temporary file left there
    assert (outside / "f.txt").read_text() == OUTSIDE_SECRET + "\n"

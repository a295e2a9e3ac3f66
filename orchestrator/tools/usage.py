"""How many bytes a workspace holds, for its size limit (issues #24 and #49, item 6).

Walking a large workspace costs milliseconds per thousand files, so a figure is kept for a moment
per root and the walk runs on a worker thread: a burst of writes pays for one walk, and the event
loop never waits for the disk. While a command runs, ``watch_until_over`` walks again and again, as
often as the walk's own cost allows, and returns once the workspace holds more than its ceiling."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from pathlib import Path

from orchestrator.tools.errors import ToolError

FRESH_SECONDS = 1.0
# While a command runs: at most this often, and never more than a fifth of a core on the walk
# (a walk that takes 30 ms is repeated every 150 ms; one of a small workspace every 20 ms).
WATCH_SECONDS = 0.02
WATCH_COST_SHARE = 5
_known: dict[Path, tuple[float, int]] = {}


def walk_bytes(root: Path) -> int:
    """The bytes of every regular file beneath ``root``, links not followed, each inode once."""
    total = 0
    seen: set[tuple[int, int]] = set()
    pending = [str(root)]
    while pending:
        try:
            scan = os.scandir(pending.pop())
        except OSError:
            continue
        with scan:
            for entry in scan:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    pending.append(entry.path)
                elif stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) not in seen:
                    if info.st_nlink > 1:
                        seen.add((info.st_dev, info.st_ino))
                    total += min(info.st_size, info.st_blocks * 512)  # a sparse file counts what it holds
    return total


def current_bytes(root: Path) -> int:
    """``walk_bytes(root)``, at most FRESH_SECONDS old; walks on the calling thread when it must."""
    now = time.monotonic()
    known = _known.get(root)
    if known is not None and now - known[0] < FRESH_SECONDS:
        return known[1]
    total = walk_bytes(root)
    _known[root] = (time.monotonic(), total)
    return total


async def bytes_of(root: Path) -> int:
    """``current_bytes(root)``, any walk on a worker thread."""
    known = _known.get(root)
    if known is not None and time.monotonic() - known[0] < FRESH_SECONDS:
        return known[1]
    return await asyncio.to_thread(current_bytes, root)


async def watch_until_over(root: Path, ceiling: int) -> int:
    """Walks ``root`` until it holds more than ``ceiling`` bytes, and returns what it then holds.
    Never returns while it stays under: the caller races it against what may fill the workspace."""
    while True:
        started = time.monotonic()
        used = await asyncio.to_thread(walk_bytes, root)
        if used > ceiling:
            _known[root] = (time.monotonic(), used)
            return used
        cost = time.monotonic() - started
        await asyncio.sleep(max(WATCH_SECONDS, cost * WATCH_COST_SHARE))


def forget(root: Path) -> None:
    """Drops the kept figure (after files were removed, the next call walks again)."""
    _known.pop(root, None)


def refuse_growth(root: Path, limit: int | None, growth: int) -> None:
    """Raises a ToolError when a change that adds ``growth`` bytes would leave the workspace at
    ``root`` over its ``limit`` (None: no limit; issue #24). A change that does not grow it (a
    deletion, a smaller content) always passes, even over the limit: that is how a full workspace is
    brought back under it (issue #49, item 6). Walks the disk when the kept figure is stale: call it
    from a worker thread."""
    if limit is None or growth <= 0:
        return
    used = current_bytes(root)
    if used + growth > limit:
        forget(root)  # refused: the next call looks again, files may have gone since
        state = "over" if used > limit else "under"
        raise ToolError(
            f"this change adds {growth:,} bytes to a workspace that holds {used:,}, {state} its limit of "
            f"{limit:,} (AGENT_WORKSPACE_MAX_BYTES), which it would pass; remove files or shrink them "
            "first (deleting, and writing a file smaller than it was, always work). Reading still works."
        )


async def bash_ceiling(root: Path, limit: int | None) -> tuple[int, int] | None:
    """What a command may fill the workspace at ``root`` to, and what it holds now: the limit, or
    what it holds when it is already over (a command may then shrink it, never grow it). None: no
    limit."""
    if limit is None:
        return None
    forget(root)
    used = await bytes_of(root)
    return max(limit, used), used

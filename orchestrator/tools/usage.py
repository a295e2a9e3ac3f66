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

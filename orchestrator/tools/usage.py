"""How many bytes a workspace holds, for its size limit (issue #24).

Walking a large workspace costs milliseconds per thousand files, so a figure is kept for a moment
per root and the walk runs on a worker thread: a burst of writes pays for one walk, and the event
loop never waits for the disk."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from pathlib import Path

FRESH_SECONDS = 1.0
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


async def bytes_of(root: Path) -> int:
    """``walk_bytes(root)``, at most FRESH_SECONDS old."""
    now = time.monotonic()
    known = _known.get(root)
    if known is not None and now - known[0] < FRESH_SECONDS:
        return known[1]
    total = await asyncio.to_thread(walk_bytes, root)
    _known[root] = (time.monotonic(), total)
    return total


def forget(root: Path) -> None:
    """Drops the kept figure (after files were removed, the next call walks again)."""
    _known.pop(root, None)

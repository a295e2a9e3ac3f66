"""The server's own files (its data dir with the database and secrets, its virtual environment):
refused to every tool whatever the path and whatever the permission rules say, by the identity
(device and inode) of the directories and files, so no link, hard link or second path reaches them."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.tools.errors import ToolError


@dataclass(slots=True, frozen=True)
class Protected:
    """The identities (device, inode) of the server's own files and directories."""

    paths: tuple[Path, ...] = ()
    identities: frozenset[tuple[int, int]] = frozenset()

    @classmethod
    def of(cls, paths: Iterable[Path]) -> Protected:
        kept: list[Path] = []
        identities: set[tuple[int, int]] = set()
        for path in paths:
            try:
                info = path.stat()
            except OSError:
                continue
            kept.append(path)
            identities.add((info.st_dev, info.st_ino))
            if stat.S_ISDIR(info.st_mode):
                # A hard link to the token elsewhere in the workspace is the same file.
                with os.scandir(path) as entries:
                    for entry in entries:
                        if entry.is_file(follow_symlinks=False):
                            child = entry.stat(follow_symlinks=False)
                            identities.add((child.st_dev, child.st_ino))
        return cls(tuple(kept), frozenset(identities))

    def covers(self, info: os.stat_result) -> bool:
        return (info.st_dev, info.st_ino) in self.identities


class ProtectedPath(ToolError):
    """A path that reaches the server's own files."""


def refused_as_protected(shown: str) -> ToolError:
    return ProtectedPath(
        f"{shown}: is one of the server's own files (its data dir, database, secrets or virtual "
        "environment); no tool may read or change it"
    )

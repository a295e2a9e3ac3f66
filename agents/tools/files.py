"""Reading text files and writing them all-or-nothing, for the tools that change files."""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

from agents.tools.base import ToolError


def decode_text(data: bytes, relative: str) -> str:
    """The file's text, or a ToolError for binary or non-UTF-8 files (which these tools do not edit)."""
    if b"\x00" in data[:8192]:
        raise ToolError(f"{relative}: the file is binary; only text files can be changed")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{relative}: the file is not valid UTF-8 text; it cannot be changed here") from None


def read_existing(path: Path, relative: str) -> bytes:
    if not path.is_file():
        raise ToolError(f"{relative}: {'not a file' if path.exists() else 'no such file'}")
    return path.read_bytes()


@dataclass(slots=True, frozen=True)
class Change:
    path: Path
    data: bytes | None  # None deletes the file


def apply_changes(changes: list[Change]) -> None:
    """Writes every new content to a temporary file next to its target first, then moves them all
    into place and deletes what is to be deleted; a failure while staging leaves every target as it was.
    Existing files keep their permission bits; new ones get the usual 0o666 less the umask."""
    staged: list[tuple[Path, Path]] = []
    try:
        for change in changes:
            if change.data is not None:
                staged.append((_stage(change.path, change.data), change.path))
    except BaseException:
        for temporary, _ in staged:
            temporary.unlink(missing_ok=True)
        raise
    for temporary, target in staged:
        os.replace(temporary, target)
    for change in changes:
        if change.data is None:
            change.path.unlink()


def _stage(target: Path, data: bytes) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = None
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if mode is not None:
            os.chmod(temporary, mode)  # the umask may have masked bits the original had
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    return temporary


def ensure_creatable(path: Path, root: Path, relative: str) -> None:
    """Refuses a new file whose parent directories cannot exist because a file stands in the way."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ToolError(f"{relative}: {parent.relative_to(root).as_posix()} is a file, not a directory")
            return

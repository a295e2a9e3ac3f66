"""Reading text files and writing them all-or-nothing, for the tools that change files.

Every target is a ``Located`` (orchestrator/tools/workspace.py): the directory that holds it is an open
descriptor, so the temporary file, the rename and the delete all happen in that directory, never
through a link swapped in on the way."""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from dataclasses import dataclass

from orchestrator.tools import usage
from orchestrator.tools.errors import ToolError
from orchestrator.tools.workspace import CallGuard, Located, keep_owner


def decode_text(data: bytes, relative: str) -> str:
    """The file's text, or a ToolError for binary or non-UTF-8 files (which these tools do not edit)."""
    if b"\x00" in data[:8192]:
        raise ToolError(f"{relative}: the file is binary; only text files can be changed")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{relative}: the file is not valid UTF-8 text; it cannot be changed here") from None


def read_existing(target: Located, guard: CallGuard, tool_name: str) -> bytes:
    """The content of the file at ``target``, unless a deny rule covers another of its names."""
    info = target.lstat()
    if info is None:
        raise ToolError(f"{target.relative}: no such file")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"{target.relative}: not a file")
    fd, opened = target.open_regular()
    with os.fdopen(fd, "rb") as fh:
        if (refusal := guard.file_refusal(target.relative, opened, tool_name)) is not None:
            raise ToolError(refusal)
        return fh.read()


def refuse_denied(guard: CallGuard, target: Located, tool_name: str) -> None:
    """A deny rule covers the path a call really reaches, its links resolved (issue #11, item 3)."""
    if guard.denies(target.relative):
        raise ToolError(f"{target.relative}: a permission rule denies {tool_name} this path")


def refuse_directory(target: Located) -> None:
    if target.name is None or target.is_dir():
        raise ToolError(f"{target.relative}: is a directory")


@dataclass(slots=True, frozen=True)
class Change:
    target: Located
    data: bytes | None  # None deletes the file


def apply_changes(changes: list[Change]) -> None:
    """Writes every new content to a temporary file next to its target first, then moves them all
    into place and deletes what is to be deleted; a failure while staging leaves every target as it was.
    Existing files keep their permission bits; new ones get the usual 0o666 less the umask."""
    for change in changes:
        change.target.workspace.refuse_read_only(change.target.relative, change.target.shown)
    if changes:
        workspace = changes[0].target.workspace
        usage.refuse_growth(workspace.root, workspace.max_bytes, sum(_growth(change) for change in changes))
    staged: list[tuple[str, Located]] = []
    try:
        for change in changes:
            if change.data is not None:
                change.target.make_parents()
                staged.append((_stage(change.target, change.data), change.target))
    except BaseException:
        for temporary, target in staged:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=target.dir_fd)
        raise
    for temporary, target in staged:
        assert target.name is not None
        os.replace(temporary, target.name, src_dir_fd=target.dir_fd, dst_dir_fd=target.dir_fd)
    for change in changes:
        if change.data is None and change.target.name is not None:
            os.unlink(change.target.name, dir_fd=change.target.dir_fd)


def _growth(change: Change) -> int:
    """How many bytes ``change`` adds to the workspace (less than 0 when it frees some)."""
    info = change.target.lstat()
    # A file with other links keeps its bytes when this name is replaced or deleted.
    if info is None or not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        before = 0
    else:
        before = min(info.st_size, info.st_blocks * 512)
    return (0 if change.data is None else len(change.data)) - before


def _stage(target: Located, data: bytes) -> str:
    assert target.name is not None
    temporary = f".{target.name[:200]}.{uuid.uuid4().hex[:12]}.tmp"
    info = target.lstat()
    mode = stat.S_IMODE(info.st_mode) if info is not None else None
    fd = os.open(
        temporary,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o666 if mode is None else mode,
        dir_fd=target.dir_fd,
    )
    try:
        owner = info if info is not None else os.fstat(target.dir_fd)
        keep_owner(fd, owner)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if mode is not None:
                os.fchmod(fh.fileno(), mode)  # the umask may have masked bits the original had
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=target.dir_fd)
        raise
    return temporary

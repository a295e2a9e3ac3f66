"""The workspace: the one directory the tools work in, opened without a race.

Every path is walked from a descriptor of the workspace root one component at a time, each
directory opened with ``O_NOFOLLOW`` relative to the one before (``openat`` with ``dir_fd``). A
symbolic link met on the way is read (``readlinkat``) and its target walked the same way, from the
directory that holds it; a target that climbs above the root, or is absolute and outside it, is
refused. The file at the end is opened with ``O_NOFOLLOW`` too. So a link swapped while a call runs
is either seen as a link and judged, or not followed at all: there is no window between a check
and an open (issue #11, item 4).

The server's own files (its data dir with the database and secrets, its virtual environment) are
refused whatever the path and whatever the permission rules say, by the identity (device and
inode) of the directories and files, so no link, hard link or second path reaches them; listings
skip them (issue #11, item 1).

A permission rule names paths, and a hard link is a second path to the same file: a deny rule on
``secrets/key`` was passed by reading ``notes/key``, made with ``ln`` (issue #23, item 7). So a file a
tool opens that has more than one name, while a deny rule is in scope, is judged by every name it has
in the workspace (``CallGuard.file_refusal``): the call walks the workspace once, the first time it
meets such a file, and a file any of whose names is denied is refused. Names outside the workspace
are no rule's business. A workspace too large to walk (``LINK_SCAN_MAX_ENTRIES``) cannot show that
no name is denied, and its files with several names are refused while a deny rule is in scope.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections import deque
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from orchestrator.tools.errors import ToolError
from orchestrator.tools.pathguard import AllowAll, PathGuard, PathRules
from orchestrator.tools.protected import Protected, ProtectedPath, refused_as_protected

if TYPE_CHECKING:
    from orchestrator.tools.sandbox import Sandbox

MAX_LINKS = 40  # the kernel's own limit on links followed in one lookup
# How many entries a call walks to find the other names of a hard-linked file (a few tenths of a second).
LINK_SCAN_MAX_ENTRIES = 200_000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SWAPPED = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)


class CallGuard:
    """One call's guard: the rules' verdict on a path (``denies``), and on a file the call has
    opened (``file_refusal``), which counts every name the file has in the workspace."""

    def __init__(self, rules: PathGuard, workspace: Workspace) -> None:
        self.rules = rules
        self.workspace = workspace
        self._names: dict[tuple[int, int], list[str]] | None = None
        self._walked_whole = True

    def denies(self, relative: str) -> bool:
        return self.rules.denies(relative)

    def file_refusal(self, relative: str, info: os.stat_result, tool_name: str) -> str | None:
        """Why ``tool_name`` may not use the file it opened at ``relative`` (``info``: the open
        file's status), or None when it may: a deny rule covers that path, or another of the
        file's names in the workspace (see the module's docstring)."""
        if self.rules.denies(relative):
            return f"{relative}: a permission rule denies {tool_name} this path"
        if info.st_nlink < 2 or not stat.S_ISREG(info.st_mode) or not self.rules.may_deny:
            return None
        names = self._linked_names().get((info.st_dev, info.st_ino))
        if names is None and not self._walked_whole:
            return (
                f"{relative}: the file has other names (hard links), and the workspace is too large "
                f"(over {LINK_SCAN_MAX_ENTRIES} entries) to show that a permission rule denies {tool_name} none of them"
            )
        if any(name != relative and self.rules.denies(name) for name in names or ()):
            return f"{relative}: is another name (a hard link) of a file a permission rule denies {tool_name}"
        return None

    def _linked_names(self) -> dict[tuple[int, int], list[str]]:
        """The names of every file with more than one, by identity; walked once per call."""
        if self._names is None:
            self._names = {}
            with self.workspace.locate(".") as root, contextlib.closing(self.workspace.walk(root)) as entries:
                for count, entry in enumerate(entries):
                    if count >= LINK_SCAN_MAX_ENTRIES:
                        self._walked_whole = False
                        break
                    if entry.kind == stat.S_IFREG and entry.links > 1:
                        self._names.setdefault(entry.identity, []).append(entry.relative)
        return self._names


@dataclass(slots=True)
class Located:
    """A path of the workspace with its links resolved: the directory that holds it (an open
    descriptor, owned: close it), its name there (None when the path is that directory itself),
    the parent directories still to create, and its canonical path relative to the root."""

    workspace: Workspace
    dir_fd: int
    name: str | None
    relative: str
    shown: str  # the path as the caller gave it, for messages
    missing: list[str] = field(default_factory=list)

    def close(self) -> None:
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def __enter__(self) -> Located:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def lstat(self) -> os.stat_result | None:
        """The entry's status (None when it does not exist); refuses the server's own files."""
        if self.missing:
            return None
        try:
            info = os.stat(self.name or ".", dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if self.workspace.protected.covers(info):
            raise refused_as_protected(self.shown)
        return info

    def is_dir(self) -> bool:
        info = self.lstat()
        return info is not None and stat.S_ISDIR(info.st_mode)

    def open(self, flags: int, mode: int = 0o666) -> int:
        """Opens the entry itself, never a link in its place."""
        if self.name is None:
            raise ToolError(f"{self.shown}: is a directory")
        if self.missing:
            raise ToolError(f"{self.shown}: no such file")
        try:
            fd = os.open(self.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self.dir_fd)
        except FileNotFoundError:
            raise ToolError(f"{self.shown}: no such file") from None
        except OSError as exc:
            if exc.errno in _SWAPPED:
                raise ToolError(f"{self.shown}: became a symbolic link while it was being opened") from None
            raise
        if self.workspace.protected.covers(os.fstat(fd)):
            os.close(fd)
            raise refused_as_protected(self.shown)
        return fd

    def open_regular(self) -> tuple[int, os.stat_result]:
        """A read descriptor of a regular file (a FIFO or a device would block or never end)."""
        fd = self.open(os.O_RDONLY | os.O_NONBLOCK)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise ToolError(f"{self.shown}: not a file")
        os.set_blocking(fd, True)
        return fd, info

    def read_bytes(self) -> bytes:
        fd, _ = self.open_regular()
        with os.fdopen(fd, "rb") as fh:
            return fh.read()

    def open_dir(self) -> int:
        """A descriptor of the directory the path names."""
        if self.missing:
            raise ToolError(f"{self.shown}: no such file or directory")
        fd = os.open(self.name or ".", _DIR_FLAGS, dir_fd=self.dir_fd)
        if self.workspace.protected.covers(os.fstat(fd)):
            os.close(fd)
            raise refused_as_protected(self.shown)
        return fd

    def make_parents(self) -> None:
        """Creates the missing parent directories, each beneath the last and never through a link."""
        while self.missing:
            part = self.missing[0]
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o777, dir_fd=self.dir_fd)
            try:
                fd = os.open(part, _DIR_FLAGS, dir_fd=self.dir_fd)
            except OSError as exc:
                if exc.errno in _SWAPPED:
                    raise ToolError(f"{self.shown}: {part} is a file or link, not a directory") from None
                raise
            keep_owner(fd, os.fstat(self.dir_fd))
            os.close(self.dir_fd)
            self.dir_fd = fd
            self.missing.pop(0)


def keep_owner(fd: int, like: os.stat_result) -> None:
    """Gives what ``fd`` names the owner of ``like`` (the file it replaces, or the directory it is
    made in) when the server runs as root: the tools' files stay the sandbox user's to change, as
    the workspace is (orchestrator/tools/sandbox.py). Without root, what the server makes is its own."""
    if os.geteuid() != 0:
        return
    info = os.fstat(fd)
    if (info.st_uid, info.st_gid) != (like.st_uid, like.st_gid):
        os.fchown(fd, like.st_uid, like.st_gid)


class Workspace:
    """The one directory the tools work in. ``locate`` refuses every way out of it: absolute
    paths, ``..`` and symbolic links that point outside, and the server's own files."""

    def __init__(
        self,
        root: Path,
        *,
        protected: Protected | Iterable[Path] = (),
        read_only: Iterable[Path] = (),
        rules: PathRules | None = None,
        sandbox: Sandbox | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self.root = root.resolve()
        self.protected = protected if isinstance(protected, Protected) else Protected.of(protected)
        # Directories whose files the tools may read but never change (the server's code).
        self.read_only = tuple(path.resolve() for path in read_only)
        self.rules = rules
        # How bash runs here (orchestrator/tools/sandbox.py); None runs it without a sandbox.
        self.sandbox = sandbox
        # The size limit (issue #24): no tool may take the workspace past it, and one over it may
        # always be brought back under (issue #49, item 6); None: no limit.
        self.max_bytes = max_bytes

    def refuse_read_only(self, relative: str, shown: str) -> None:
        """Raises a ToolError when the canonical path ``relative`` lies in the server's code."""
        if not self.read_only:
            return
        path = self.root / relative
        if any(path.is_relative_to(code) for code in self.read_only):
            raise ToolError(f"{shown}: is part of the server's own code; no tool may change it")

    async def guard(self, tool_name: str) -> CallGuard:
        """The permission rules' verdict on paths and files, for one call of ``tool_name``."""
        rules = AllowAll() if self.rules is None else await self.rules.guard(tool_name)
        return CallGuard(rules, self)

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix() or "."

    def _parts(self, path: str) -> list[str]:
        if not isinstance(path, str) or path.strip() == "":
            raise ToolError("path must be a non-empty string relative to the workspace")
        if "\x00" in path:
            raise ToolError("path contains a NUL byte")
        if path.startswith("/"):
            raise ToolError(f"{path}: absolute paths are not allowed; give a path relative to the workspace")
        return _clean(path.split("/"))

    def locate(self, path: str, *, follow_last: bool = True, must_exist: bool = False) -> Located:
        """Walks ``path`` beneath the root (see the module's docstring). A missing last component is
        allowed (a file to create), and so are missing parents (``Located.missing``) unless
        ``must_exist``."""
        pending = deque(self._parts(path))
        stack = [os.open(self.root, _DIR_FLAGS)]
        names: list[str] = []
        missing: list[str] = []
        final: str | None = None
        links = 0
        try:
            while pending:
                part = pending.popleft()
                if missing:  # below a missing directory nothing exists yet
                    if part == "..":
                        missing.pop()
                    else:
                        missing.append(part)
                    continue
                if part == "..":
                    if not names:
                        raise ToolError(f"{path}: resolves outside the workspace")
                    os.close(stack.pop())
                    names.pop()
                    continue
                if not pending and not follow_last:
                    final = part
                    break
                try:
                    info = os.stat(part, dir_fd=stack[-1], follow_symlinks=False)
                except FileNotFoundError:
                    if must_exist:
                        raise ToolError(f"{path}: no such file or directory") from None
                    missing.append(part)
                    continue
                if stat.S_ISLNK(info.st_mode):
                    links += 1
                    if links > MAX_LINKS:
                        raise ToolError(f"{path}: too many levels of symbolic links")
                    try:
                        target = os.readlink(part, dir_fd=stack[-1])
                    except OSError:  # no longer a link: look again
                        pending.appendleft(part)
                        continue
                    if target.startswith("/"):
                        inside = self._inside(target)
                        if inside is None:
                            raise ToolError(f"{path}: resolves outside the workspace")
                        while len(stack) > 1:
                            os.close(stack.pop())
                        names.clear()
                        pending.extendleft(reversed(inside))
                    else:
                        pending.extendleft(reversed(_clean(target.split("/"))))
                    continue
                if self.protected.covers(info):
                    raise refused_as_protected(path)
                if not pending:
                    final = part
                    break
                if not stat.S_ISDIR(info.st_mode):
                    shown = "/".join([*names, part])
                    raise ToolError(f"{path}: {shown} is a file, not a directory")
                try:
                    fd = os.open(part, _DIR_FLAGS, dir_fd=stack[-1])
                except OSError as exc:
                    if exc.errno not in _SWAPPED:
                        raise
                    links += 1  # swapped for a link since the stat: walk it again
                    if links > MAX_LINKS:
                        raise ToolError(f"{path}: too many levels of symbolic links") from None
                    pending.appendleft(part)
                    continue
                if self.protected.covers(os.fstat(fd)):
                    os.close(fd)
                    raise refused_as_protected(path)
                stack.append(fd)
                names.append(part)
            if missing:
                final = missing.pop()
            elif final is None and names:
                # The path names a directory: hold its parent, as for any other entry.
                final = names.pop()
                os.close(stack.pop())
            relative = "/".join([*names, *missing, *([final] if final else [])]) or "."
            located = Located(self, stack.pop(), final, relative, path, missing)
        finally:
            for fd in stack:
                os.close(fd)
        if must_exist and located.lstat() is None:
            located.close()
            raise ToolError(f"{path}: no such file or directory")
        return located

    def canonical(self, path: str) -> str | None:
        """``path`` with its links resolved, relative to the root; None when it leads out of the
        workspace or nowhere. Raises ``ProtectedPath`` for the server's own files."""
        try:
            with self.locate(path) as located:
                located.lstat()
                return located.relative
        except ProtectedPath:
            raise
        except (ToolError, OSError):
            return None

    def _inside(self, target: str) -> list[str] | None:
        parts = PurePosixPath(target).parts[1:]
        root = self.root.parts[1:]
        if tuple(parts[: len(root)]) != root:
            return None
        return _clean(list(parts[len(root) :]))

    def walk(self, base: Located, *, max_depth: int | None = None) -> Generator[Entry]:
        """Every entry beneath the directory ``base`` names, depth first in name order, without
        following links into directories and without entering the server's own files. Each
        entry's directory descriptor is valid until the next entry is asked for; only the
        directories on the current branch are held open."""
        prefix = "" if base.relative == "." else base.relative + "/"
        top = base.open_dir()
        branch: list[tuple[int, str, int, Iterator[os.DirEntry[str]]]] = []
        try:
            branch.append((top, prefix, 1, _sorted_entries(top)))
            while branch:
                fd, at, depth, entries = branch[-1]
                entry = next(entries, None)
                if entry is None:
                    os.close(fd)
                    branch.pop()
                    continue
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if self.protected.covers(info):
                    continue
                kind = stat.S_IFMT(info.st_mode)
                yield Entry(at + entry.name, fd, entry.name, kind, (info.st_dev, info.st_ino), info.st_nlink)
                if kind == stat.S_IFDIR and (max_depth is None or depth < max_depth):
                    try:
                        child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                    except OSError:
                        continue  # swapped for a link, or gone: not walked
                    if self.protected.covers(os.fstat(child)):
                        os.close(child)
                        continue
                    branch.append((child, f"{at}{entry.name}/", depth + 1, _sorted_entries(child)))
        finally:
            for fd, _, _, _ in branch:
                os.close(fd)


def _sorted_entries(fd: int) -> Iterator[os.DirEntry[str]]:
    with os.scandir(fd) as scan:
        return iter(sorted(scan, key=lambda e: e.name))


@dataclass(slots=True, frozen=True)
class Entry:
    relative: str  # relative to the workspace root
    dir_fd: int
    name: str
    kind: int  # stat.S_IFDIR, S_IFREG, S_IFLNK, ...
    identity: tuple[int, int]  # (device, inode)
    links: int  # how many names the file has

    @property
    def is_link(self) -> bool:
        return self.kind == stat.S_IFLNK


def _clean(parts: list[str]) -> list[str]:
    return [part for part in parts if part not in ("", ".")]

"""What the permission rules say about the paths of one call.

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
import os
import stat
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from orchestrator.tools.workspace import Workspace

# How many entries a call walks to find the other names of a hard-linked file (a few tenths of a second).
LINK_SCAN_MAX_ENTRIES = 200_000


class PathGuard(Protocol):
    """What the permission rules say about one path of one call, decided after links are resolved."""

    def denies(self, relative: str) -> bool: ...

    @property
    def may_deny(self) -> bool:
        """Whether a deny rule could cover any path of this call at all."""
        ...


class PathRules(Protocol):
    """Where a call's tool gets its ``PathGuard``: the rules in scope, read when the call starts."""

    async def guard(self, tool_name: str) -> PathGuard: ...


class AllowAll:
    may_deny = False

    def denies(self, relative: str) -> bool:
        return False


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

"""What the permission rules say about the paths of one call (the workspace's ``CallGuard`` applies it)."""

from __future__ import annotations

from typing import Protocol


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

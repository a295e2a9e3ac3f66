"""Limits on JSON values that every layer below the HTTP edge relies on.

orjson, the event encoder, refuses values nested more than 254 levels deep, and
events wrap what a client sent a few levels further down (a STATE_DELTA puts the
client's state three levels in). ``MAX_JSON_DEPTH`` is half the encoder's limit:
input is refused above it, and a value stored before the limit existed is cut at
it when it is read back, so no event built from it can fail to encode.

PostgreSQL's jsonb (and its text columns) cannot hold U+0000, so a NUL in input
is refused rather than stored on one database and not on the other.
"""

from __future__ import annotations

from typing import Any

MAX_JSON_DEPTH = 128
CLIPPED = "[nested too deeply; cut by the server]"

Path = tuple[str | int, ...]


# A path is kept as a linked list of (parent, key) while walking, so only containers cost an
# allocation: an 8 MiB body of small numbers walks in well under a second.
_Link = tuple[Any, str | int] | None


def _unlink(link: _Link) -> Path:
    parts: list[str | int] = []
    while link is not None:
        link, key = link
        parts.append(key)
    return tuple(reversed(parts))


_CONTAINERS = frozenset({dict, list})


def deeper_than(value: Any, limit: int = MAX_JSON_DEPTH) -> Path | None:
    """The path of the first container nested more than ``limit`` levels deep (the value
    itself, if a container, is level 1), or None. Iterative: input may be 1,024 levels deep."""
    if not isinstance(value, dict | list):
        return None
    stack: list[tuple[_Link, Any, int]] = [(None, value, 1)]
    while stack:
        link, item, depth = stack.pop()
        if depth > limit:
            return _unlink(link)
        children = item.values() if isinstance(item, dict) else item
        if _CONTAINERS.isdisjoint(map(type, children)):
            continue  # the common case of a leaf container, checked at C speed
        pairs = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in pairs:
            if isinstance(child, dict | list):
                stack.append(((link, key), child, depth + 1))
    return None


def nul_at(value: Any) -> Path | None:
    """The path of the first string (or object key) holding U+0000, or None."""
    if isinstance(value, str):
        return () if "\x00" in value else None
    if not isinstance(value, dict | list):
        return None
    stack: list[tuple[_Link, Any]] = [(None, value)]
    while stack:
        link, item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                if "\x00" in key or (isinstance(child, str) and "\x00" in child):
                    return _unlink((link, key))
                if isinstance(child, dict | list):
                    stack.append(((link, key), child))
        else:
            for index, child in enumerate(item):
                if isinstance(child, str) and "\x00" in child:
                    return _unlink((link, index))
                if isinstance(child, dict | list):
                    stack.append(((link, index), child))
    return None


def clip_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> Any:
    """``value`` with every container below level ``limit`` replaced by a short marker string."""
    if deeper_than(value, limit) is None:
        return value
    return _clip(value, limit)


def _clip(value: Any, remaining: int) -> Any:
    # Recursion is bounded by ``limit`` here, far below Python's own limit.
    if not isinstance(value, dict | list):
        return value
    if remaining <= 0:
        return CLIPPED
    if isinstance(value, dict):
        return {key: _clip(child, remaining - 1) for key, child in value.items()}
    return [_clip(child, remaining - 1) for child in value]


def dotted(path: Path) -> str:
    return ".".join(str(part) for part in path)

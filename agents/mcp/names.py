"""How an MCP server's tool is named for the model, and how a rule's tool name matches it.

A tool reaches the model as ``mcp__<server>__<tool>``. The model API accepts tool names of 1 to 64
characters out of letters, digits, ``_`` and ``-``, so:

1. every other character of the tool's own name becomes ``_``;
2. a name over 64 characters, or one another tool of the run already has, keeps its first 55
   characters and gains ``_`` and 8 hexadecimal digits of the SHA-256 of the full (unshortened)
   name, e.g. ``mcp__docs__search_every_page_of_the_handbook_for_a_wor_1a2b3c4d``.

The rule is deterministic: the same server and tool always give the same name, on every process,
so a permission rule or a remembered approval naming it keeps meaning the same tool.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from wcmatch import fnmatch as wcfnmatch

PREFIX = "mcp__"
MAX_NAME = 64
_KEEP = 55
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_GLOB_CHARS = re.compile(r"[*?\[{]")


def full_name(server: str, tool: str) -> str:
    """The unshortened name: ``mcp__<server>__<tool>`` with unsafe characters replaced."""
    return f"{PREFIX}{server}__{_UNSAFE.sub('_', tool) or '_'}"


def shortened(name: str) -> str:
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]
    return f"{name[:_KEEP]}_{digest}"


def tool_names(server: str, tools: Iterable[str], taken: Iterable[str] = ()) -> dict[str, str]:
    """The model's name of each of ``server``'s ``tools`` (in their order), none of them in ``taken``."""
    used = set(taken)
    names: dict[str, str] = {}
    for tool in tools:
        name = full_name(server, tool)
        if len(name) > MAX_NAME or name in used:
            name = shortened(name)
        while name in used:  # two tools whose names differ only in replaced characters: hash again
            name = shortened(name + "_")
        used.add(name)
        names[tool] = name
    return names


def is_mcp_name(name: str) -> bool:
    return name.startswith(PREFIX)


def is_tool_glob(pattern: str) -> bool:
    """Whether a rule's tool is a glob over tool names (``mcp__github__*``) rather than one name."""
    return bool(_GLOB_CHARS.search(pattern))


def tool_name_matches(pattern: str, name: str) -> bool:
    """Whether a rule naming ``pattern`` as its tool covers the tool called ``name``."""
    if not is_tool_glob(pattern):
        return pattern == name
    return bool(wcfnmatch.fnmatch(name, pattern, flags=wcfnmatch.BRACE | wcfnmatch.FORCEUNIX))

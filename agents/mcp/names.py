"""How an MCP server's tool is named for the model, and how a rule's tool name matches it.

A tool reaches the model as ``mcp__<server>__<tool>``. The model API accepts tool names of 1 to 64
characters out of letters, digits, ``_`` and ``-``. The name is a function of the server's and the
tool's names alone, never of which other servers or tools there are, and no two (server, tool) pairs
share one (issue #49 item 10: ``x``/``_y`` and ``x_``/``y`` were both ``mcp__x___y``, so an allow rule
for one ran the other, depending on which server was up):

1. ``mcp__<server>__<tool>`` as it is, when the tool's name needs no change, the server's name does
   not end in ``_`` (a server's name never holds ``__``, so the first ``__`` after ``mcp__`` ends the
   server's), the whole is at most 64 characters and it does not end like rule 2's names;
2. otherwise its first 55 characters (other characters of the tool's name made ``_``) with ``_`` and
   8 hexadecimal digits of a SHA-256: of that full name when only its length is the reason (as before),
   else of the server's and the tool's names as given, e.g. ``mcp__gh__search_code_1a2b3c4d`` for
   ``search.code``.

Two pairs could still meet on a name only through 8 hexadecimal digits of a digest; ``unique_names``
refuses both tools of such a pair rather than let one name mean two tools.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from wcmatch import fnmatch as wcfnmatch

PREFIX = "mcp__"
MAX_NAME = 64
_KEEP = 55
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_SAFE = re.compile(r"[A-Za-z0-9_-]+")
_DIGEST_END = re.compile(r"_[0-9a-f]{8}$")
_GLOB_CHARS = re.compile(r"[*?\[{]")


def full_name(server: str, tool: str) -> str:
    """The unshortened name: ``mcp__<server>__<tool>`` with unsafe characters replaced."""
    return f"{PREFIX}{server}__{_UNSAFE.sub('_', tool) or '_'}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def shortened(name: str) -> str:
    return f"{name[:_KEEP]}_{_digest(name)}"


def model_name(server: str, tool: str) -> str:
    """The model's name of ``server``'s ``tool`` (rules 1 and 2 above)."""
    name = full_name(server, tool)
    if not _SAFE.fullmatch(tool) or server.endswith("_") or "__" in server:
        return f"{name[:_KEEP]}_{_digest(json.dumps([server, tool]))}"  # replaced characters, or a split in doubt
    if len(name) > MAX_NAME or _DIGEST_END.search(name):
        return shortened(name)
    return name


def tool_names(server: str, tools: Iterable[str]) -> dict[str, str]:
    """The model's name of each of ``server``'s ``tools`` (in their order)."""
    return {tool: model_name(server, tool) for tool in tools}


@dataclass(slots=True, frozen=True)
class Clash:
    """A name two or more tools would have: none of them is offered."""

    name: str
    tools: tuple[tuple[str, str], ...]  # (server, tool), or ("", name) for a tool of Threadline's own

    def __str__(self) -> str:
        held = " and ".join(
            f"the tool {tool!r} of MCP server {server!r}" if server else f"Threadline's tool {tool!r}"
            for server, tool in self.tools
        )
        return f"{held} would all be named {self.name!r} for the model; none of them is offered"


def unique_names(
    listed: Iterable[tuple[str, str]], taken: Iterable[str] = ()
) -> tuple[dict[tuple[str, str], str], list[Clash]]:
    """The model's name of each (server, tool) of ``listed``, leaving out every pair whose name another
    pair, or one of ``taken`` (the run's own tools), has too; and those clashes."""
    holders: dict[str, list[tuple[str, str]]] = {name: [("", name)] for name in taken}
    for pair in dict.fromkeys(listed):
        holders.setdefault(model_name(*pair), []).append(pair)
    names = {held[0]: name for name, held in holders.items() if len(held) == 1 and held[0][0]}
    clashes = [Clash(name, tuple(held)) for name, held in holders.items() if len(held) > 1]
    return names, clashes


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

"""What a permission rule's glob sees of a tool's call, and what a yes-always remembers of it.

Each tool names its ``Targets`` (``Tool.targets``); agents/permissions.py evaluates the rules through
it and never asks which tool it is. The module's docstring there says what each kind sees:

- ``PathTarget``: the ``path`` argument, normalised, matched as a path (``*`` within a directory,
  ``**`` across them); remembered exactly.
- ``PatchTargets``: every file a unified diff names, matched as paths; remembered as the sorted set.
- ``CommandTargets``: a shell command, whole and cut at its breaks, matched as strings; a program
  with subcommands is remembered by its subcommand (``git status*``), any other command exactly.
- ``UrlTarget``: a URL, matched by host (or whole, when the glob has a scheme); remembered by host.
- ``TextTarget``: one string argument, matched as a string; remembered as the tool alone.
- ``NO_TARGETS``: the empty string, which only blank, ``*`` or ``**`` match; remembered by the exact
  arguments (or, with ``remember_tool``, as the tool alone).

A ``Targets`` knows nothing of rules or decisions: it turns arguments into strings and says whether
one glob matches one of them. Whether ANY or ALL targets must match is the rule's business.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchSet
from wcmatch import fnmatch as wcfnmatch
from wcmatch import glob as wcglob

# FORCEUNIX: a rule means the same on every platform the server runs on.
_PATH_FLAGS = wcglob.GLOBSTAR | wcglob.BRACE | wcglob.DOTGLOB | wcglob.FORCEUNIX
_COMMAND_FLAGS = wcfnmatch.BRACE | wcfnmatch.DOTMATCH | wcfnmatch.FORCEUNIX
_HOST_FLAGS = _COMMAND_FLAGS | wcfnmatch.IGNORECASE
_COMMAND_BREAKS = re.compile(r"[;&|<>()`\n]")
_DEV_NULL = "/dev/null"


class Targets(Protocol):
    """How the rules see the calls of one tool."""

    # The targets are workspace paths: the rules also see them with their links resolved, and a
    # path that reaches the server's own files is denied above every rule.
    @property
    def paths(self) -> bool: ...

    def of(self, arguments: Mapping[str, Any]) -> list[str]:
        """What a rule's glob is matched against for this call; never empty. An argument of the
        wrong type counts as empty: the tool itself refuses such a call."""
        ...

    def matches(self, pattern: str, target: str) -> bool:
        """Whether the glob ``pattern`` matches the one ``target``."""
        ...

    def remembered_as(self, tool_name: str, arguments: Mapping[str, Any]) -> str:
        """The key a yes-always of this call is remembered under (see permissions.memory_key)."""
        ...


def normalise_path(path: str) -> str:
    """A workspace path as rules see it: no ``./``, no doubled or trailing ``/``, ``..`` folded."""
    return posixpath.normpath(path) if path else ""


def glob_error(pattern: str) -> str | None:
    """Why ``pattern`` cannot be a rule's glob, or None when it can."""
    if "\x00" in pattern:
        return "The glob contains a NUL character."
    try:
        wcglob.compile(pattern, flags=_PATH_FLAGS)
        wcfnmatch.compile(pattern, flags=_COMMAND_FLAGS)
    except Exception as exc:  # wcmatch raises its PatternLimitException, which it does not export
        return f"The glob does not compile: {exc}."
    return None


def path_matches(pattern: str, target: str) -> bool:
    """A glob over a workspace path. A path also matches a glob that matches it as a directory,
    so ``secrets/**`` covers a grep of ``secrets``; a leading ``./`` in the glob is ignored."""
    while pattern.startswith("./"):
        pattern = pattern[2:]
    candidates = [target] if target in ("", ".") else [target, target + "/"]
    return any(wcglob.globmatch(candidate, pattern, flags=_PATH_FLAGS) for candidate in candidates)


def _string_matches(pattern: str, target: str) -> bool:
    return bool(wcfnmatch.fnmatch(target, pattern, flags=_COMMAND_FLAGS))


def _text(arguments: Mapping[str, Any], name: str) -> str:
    value = arguments.get(name)
    return value if isinstance(value, str) else ""


@dataclass(slots=True, frozen=True)
class PathTarget:
    """The ``path`` argument; ``default`` when it is missing (``.`` for a directory to search)."""

    default: str = ""
    paths: bool = True

    def of(self, arguments: Mapping[str, Any]) -> list[str]:
        return [normalise_path(_text(arguments, "path") or self.default)]

    def matches(self, pattern: str, target: str) -> bool:
        return path_matches(pattern, target)

    def remembered_as(self, tool_name: str, arguments: Mapping[str, Any]) -> str:
        return f"{tool_name}:{self.of(arguments)[0]}"


@dataclass(slots=True, frozen=True)
class PatchTargets:
    """Every file the ``patch`` argument's diff names: source and target, without git's ``a/`` and
    ``b/``, never ``/dev/null``."""

    paths: bool = True

    def of(self, arguments: Mapping[str, Any]) -> list[str]:
        return _patch_targets(_text(arguments, "patch")) or [""]

    def matches(self, pattern: str, target: str) -> bool:
        return path_matches(pattern, target)

    def remembered_as(self, tool_name: str, arguments: Mapping[str, Any]) -> str:
        return f"{tool_name}:{','.join(sorted(set(self.of(arguments))))}"


# Programs whose second word names what they do (``git push``, ``npm test``): a yes-always for one of
# their commands covers the same subcommand with any arguments. Any other command is remembered
# exactly, so approving ``rm -rf build`` always never approves ``rm -rf /``.
_SUBCOMMAND_PROGRAMS = frozenset(
    {"git", "npm", "pnpm", "yarn", "cargo", "go", "uv", "pip", "poetry", "docker", "kubectl", "make"}
)
_SUBCOMMAND = re.compile(r"[a-z][a-z0-9:_-]*")


@dataclass(slots=True, frozen=True)
class CommandTargets:
    """The ``command`` argument as a whole string and, when it chains, pipes, redirects or
    substitutes, each of its pieces cut at every ``; & | < > ( )``, backtick and newline."""

    paths: bool = False

    def of(self, arguments: Mapping[str, Any]) -> list[str]:
        whole = _text(arguments, "command").strip()
        if not _COMMAND_BREAKS.search(whole):
            return [whole]
        pieces = [piece.strip() for piece in _COMMAND_BREAKS.split(whole)]
        return [whole, *(piece for piece in pieces if piece)]

    def matches(self, pattern: str, target: str) -> bool:
        return _string_matches(pattern, target)

    def remembered_as(self, tool_name: str, arguments: Mapping[str, Any]) -> str:
        return f"{tool_name}:{_command_pattern(_text(arguments, 'command').strip())}"


def _command_pattern(command: str) -> str:
    words = command.split()
    if _COMMAND_BREAKS.search(command) or len(words) < 2 or words[0] not in _SUBCOMMAND_PROGRAMS:
        return command
    return f"{words[0]} {words[1]}*" if _SUBCOMMAND.fullmatch(words[1]) else command


def url_host(url: str) -> str:
    """The lower-case host of ``url`` ("" when it has none)."""
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


@dataclass(slots=True, frozen=True)
class UrlTarget:
    """The ``url`` argument, stripped."""

    paths: bool = False

    def of(self, arguments: Mapping[str, Any]) -> list[str]:
        return [_text(arguments, "url").strip()]

    def matches(self, pattern: str, target: str) -> bool:
        # A glob with a scheme is over the whole URL; any other only over the host, so that
        # ``*.example.com`` cannot match ``https://evil.net/?next=docs.example.com``.
        if "://" in pattern:
            return _string_matches(pattern, target)
        host = url_host(target)
        return bool(host) and bool(wcfnmatch.fnmatch(host, pattern, flags=_HOST_FLAGS))

    def remembered_as(self, tool_name: str, arguments: Mapping[str, Any]) -> str:
        return f"{tool_name}:{url_host(self.of(arguments)[0])}"


@dataclass(slots=True, frozen=True)
class HostTarget:
    """request_network_access's ``host`` and ``port``, as ``host`` or ``host:port``: a glob is matched
    against the host alone (case does not matter); a yes-always remembers the host and port."""

    paths: bool = False

    def of(self, arguments: Mapping[str, Any]) -> list[str]:
        return [_text(arguments, "host").strip().lower()]

    def matches(self, pattern: str, target: str) -> bool:
        return bool(target) and bool(wcfnmatch.fnmatch(target, pattern, flags=_HOST_FLAGS))

    def remembered_as(self, tool_name: str, arguments: Mapping[str, Any]) -> str:
        port = arguments.get("port")
        return f"{tool_name}:{self.of(arguments)[0]}" + (f":{port}" if isinstance(port, int) else "")


@dataclass(slots=True, frozen=True)
class TextTarget:
    """One string argument (web_search's query), stripped; a yes-always covers every call."""

    argument: str
    paths: bool = False

    def of(self, arguments: Mapping[str, Any]) -> list[str]:
        return [_text(arguments, self.argument).strip()]

    def matches(self, pattern: str, target: str) -> bool:
        return _string_matches(pattern, target)

    def remembered_as(self, tool_name: str, arguments: Mapping[str, Any]) -> str:
        return tool_name


@dataclass(slots=True, frozen=True)
class NoTargets:
    """A tool without a primary argument. ``remember_tool``: a yes-always covers every call of it
    (todo_write); otherwise only a call with the same arguments."""

    remember_tool: bool = False
    paths: bool = False

    def of(self, arguments: Mapping[str, Any]) -> list[str]:
        return [""]

    def matches(self, pattern: str, target: str) -> bool:
        return _string_matches(pattern, target)

    def remembered_as(self, tool_name: str, arguments: Mapping[str, Any]) -> str:
        if self.remember_tool:
            return tool_name
        return f"{tool_name}:{json.dumps(arguments, sort_keys=True, default=str)}"


NO_TARGETS = NoTargets()


def _patch_targets(patch: str) -> list[str]:
    try:
        sections = [(patched.source_file, patched.target_file) for patched in PatchSet(patch)]
    except UnidiffParseError:
        # The tool refuses a patch it cannot parse; its header lines still say what it meant to touch.
        sections = _header_sections(patch)
    targets: list[str] = []
    for source, target in sections:
        for name in _section_paths(source, target):
            if (path := normalise_path(name)) not in targets:
                targets.append(path)
    return targets


def _header_sections(patch: str) -> list[tuple[str, str]]:
    sections: list[tuple[str, str]] = []
    for line in patch.splitlines():
        name = line[4:].split("\t")[0].strip()
        if line.startswith("--- "):
            sections.append((name, _DEV_NULL))
        elif line.startswith("+++ "):
            sections.append((_DEV_NULL, name))
    return sections


def _section_paths(source: str, target: str) -> list[str]:
    """The files a section names, as apply_patch reads them: git's a/ and b/ prefixes dropped when
    every side that names a file carries its prefix, /dev/null skipped."""
    names = [_unquote(source) if source != _DEV_NULL else None, _unquote(target) if target != _DEV_NULL else None]
    old, new = names
    if (old is None or old.startswith("a/")) and (new is None or new.startswith("b/")):
        names = [name[2:] if name is not None else None for name in names]
    return [name for name in dict.fromkeys(names) if name]


def _unquote(name: str) -> str:
    return name[1:-1] if len(name) >= 2 and name[0] == name[-1] == '"' else name

"""The read-only tools: glob, grep, file_read. Each stays inside the workspace.

Every file is opened beneath the workspace without following a link out of it (see
orchestrator/tools/workspace.py); listings skip the server's own files and what the permission rules
deny. grep uses RE2, whose matching time grows linearly with the text and which releases the GIL
while it matches, so no pattern can stall the server (issue #11, item 5). file_read streams the
file and keeps only the lines it shows (item 6)."""

from __future__ import annotations

import asyncio
import codecs
import hashlib
import os
import stat
import time
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any, BinaryIO, Protocol

from wcmatch import glob as wcglob

from orchestrator.tools.base import Tool, ToolContext, ToolError, ToolOutput, optional_int, require_str
from orchestrator.tools.ledger import remember_hash
from orchestrator.tools.targets import PathTarget
from orchestrator.tools.workspace import CallGuard, Entry, Located, Workspace


class _Regex(Protocol):
    def search(self, text: str) -> object | None: ...


GLOB_LIMIT = 500
GREP_LIMIT = 200
GREP_TIME_LIMIT_SECONDS = 30.0  # a search stops there and says so
# Below the output shaping's 600 lines, so a default read is never cut in its middle.
READ_LIMIT_LINES = 500
MAX_LINE_CHARS = 2000
# Lines are read in pieces of at most this many bytes: a file with one enormous line costs no more.
_LINE_PIECE = 64 * 1024
_BLOCK = 1024 * 1024
_LINE_BYTES = MAX_LINE_CHARS * 4  # enough UTF-8 for the characters a line shows
_BINARY_SNIFF = 8192
_GLOB_FLAGS = wcglob.GLOBSTAR | wcglob.BRACE | wcglob.DOTGLOB | wcglob.NEGATE


def _check_pattern(pattern: str) -> int | None:
    """Refuses patterns that leave the workspace; returns how deep a match can lie (None: any depth)."""
    if PurePosixPath(pattern).is_absolute() or ".." in PurePosixPath(pattern).parts:
        raise ToolError(f"{pattern}: patterns must stay inside the workspace (no absolute paths or '..')")
    return None if "**" in pattern else pattern.count("/") + 1


def _listed(workspace: Workspace, guard: CallGuard, entry: Entry) -> tuple[str, bool] | None:
    """What a listing shows of ``entry`` (its path and whether it is a directory), or None when it
    is hidden: a link leading out of the workspace or to the server's files, a denied path."""
    if guard.denies(entry.relative):
        return None
    if not entry.is_link:
        return entry.relative, entry.kind == stat.S_IFDIR
    try:
        with workspace.locate(entry.relative, must_exist=True) as target:
            if guard.denies(target.relative):
                return None
            return entry.relative, target.is_dir()
    except (ToolError, OSError):
        return None


def _matching(context: ToolContext, guard: CallGuard, pattern: str, base: Located) -> Iterator[tuple[Entry, str, bool]]:
    """The entries beneath ``base`` whose path relative to it matches ``pattern``, in path order."""
    depth = _check_pattern(pattern)
    cut = 0 if base.relative == "." else len(base.relative) + 1
    for entry in context.workspace.walk(base, max_depth=depth):
        if not wcglob.globmatch(entry.relative[cut:], pattern, flags=_GLOB_FLAGS):
            continue
        listed = _listed(context.workspace, guard, entry)
        if listed is not None:
            yield entry, listed[0], listed[1]


def _glob(context: ToolContext, guard: CallGuard, pattern: str, raw_base: str) -> tuple[list[str], int]:
    with context.workspace.locate(raw_base, must_exist=True) as base:
        if not base.is_dir():
            raise ToolError(f"{raw_base}: not a directory")
        lines: list[str] = []
        total = 0
        for _, relative, is_dir in _matching(context, guard, pattern, base):
            total += 1
            if len(lines) < GLOB_LIMIT:
                lines.append(relative + ("/" if is_dir else ""))
        return lines, total


async def glob_tool(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    pattern = require_str(arguments, "pattern")
    assert pattern is not None
    base = require_str(arguments, "path", optional=True) or "."
    guard = await context.workspace.guard("glob")
    lines, total = await asyncio.to_thread(_glob, context, guard, pattern, base)
    if not lines:
        return ToolOutput(f"no files match {pattern}")
    if total > GLOB_LIMIT:
        lines.append(f"... {total - GLOB_LIMIT} more matches not shown; narrow the pattern")
    return ToolOutput("\n".join(lines))


def _pieces(fh: BinaryIO) -> Iterator[tuple[bytes, bool]]:
    """The file's lines as (piece, ends_line): a line longer than ``_LINE_PIECE`` comes in pieces."""
    while piece := fh.readline(_LINE_PIECE):
        yield piece, piece.endswith(b"\n")


class _Search:
    """One grep call: its regular expression, its deadline and the hits so far.

    A file is searched a block (about 1 MiB of whole lines) at a time: RE2 scans the block with
    ``^``/``$`` matching at line ends, without the GIL, and only a block that matches is looked at
    line by line. So the interpreter does almost no work per line and the server stays responsive.
    A pattern whose meaning a block could change (``\\A``, ``\\z``, inline flags) is run line by line."""

    def __init__(self, pattern: str, case_sensitive: bool, deadline: float) -> None:
        self.regex = _compile(pattern, case_sensitive)
        self.block_regex = None if _line_bound(pattern) else _compile("(?m)" + pattern, case_sensitive)
        self.deadline = deadline
        self.hits: list[str] = []
        self.timed_out = False

    def full(self) -> bool:
        return len(self.hits) > GREP_LIMIT or self.timed_out

    def file(self, shown: str, fd: int) -> None:
        with os.fdopen(fd, "rb") as fh:
            if b"\x00" in fh.peek(_BINARY_SNIFF)[:_BINARY_SNIFF]:
                return  # binary files are skipped, as grep -I does
            number = 1
            # Incremental: a block cut inside a long line may end in the middle of a character.
            decoder = codecs.getincrementaldecoder("utf-8")()
            try:
                while block := fh.read(_BLOCK) + fh.readline(_LINE_PIECE):
                    text = decoder.decode(block)
                    if time.monotonic() > self.deadline:
                        self.timed_out = True
                        return
                    if self.block_regex is not None and not self.block_regex.search(text):
                        number += text.count("\n")
                        continue
                    lines = text.split("\n")
                    last = lines.pop()  # "" when the block ends a line, else a piece of one
                    for line in [*lines, *([last] if last else [])]:
                        line = line.rstrip("\r")
                        if self.regex.search(line):
                            self.hits.append(f"{shown}:{number}:{line[:MAX_LINE_CHARS]}")
                            if self.full():
                                return
                        number += 1
                    number -= 1 if last else 0  # the piece's line goes on in the next block
            except UnicodeDecodeError:
                return  # not UTF-8 text: skipped, as grep -I does


def _line_bound(pattern: str) -> bool:
    return "\\A" in pattern or "\\z" in pattern or "(?" in pattern


def _grep(context: ToolContext, guard: CallGuard, search: _Search, raw_base: str, include: str) -> None:
    workspace = context.workspace
    with workspace.locate(raw_base, must_exist=True) as base:
        if not base.is_dir():
            fd, info = base.open_regular()
            if (refusal := guard.file_refusal(base.relative, info, "grep")) is not None:
                os.close(fd)
                raise ToolError(refusal)
            search.file(base.relative, fd)
            return
        for entry, relative, is_dir in _matching(context, guard, include, base):
            if search.full():
                return
            if is_dir:
                continue
            try:
                if entry.is_link:
                    with workspace.locate(entry.relative, must_exist=True) as target:
                        fd, info = target.open_regular()
                        reached = target.relative
                else:
                    fd = os.open(
                        entry.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=entry.dir_fd
                    )
                    info, reached = os.fstat(fd), entry.relative
                    if not stat.S_ISREG(info.st_mode):
                        os.close(fd)
                        continue
                    os.set_blocking(fd, True)
            except (ToolError, OSError):
                continue  # gone, swapped for a link, unreadable: skipped
            if guard.file_refusal(reached, info, "grep") is not None:
                os.close(fd)
                continue  # another name of a denied file: left out, as the denied file is
            search.file(relative, fd)


def _compile(pattern: str, case_sensitive: bool) -> _Regex:
    # RE2 and its C++ library weigh about 2.5 MiB in every process; imported by the first grep,
    # they weigh nothing in one that never greps (issue #27).
    import re2

    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = case_sensitive
    try:
        regex: _Regex = re2.compile(pattern, options)
    except re2.error as exc:
        message = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ToolError(
            f"pattern is not a valid regular expression: {message} (RE2 syntax: no backreferences or lookaround)"
        ) from None
    return regex


async def grep_tool(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    pattern = require_str(arguments, "pattern")
    assert pattern is not None
    case_sensitive = arguments.get("case_sensitive", True) is not False
    base = require_str(arguments, "path", optional=True) or "."
    include = require_str(arguments, "include", optional=True) or "**/*"
    guard = await context.workspace.guard("grep")
    search = _Search(pattern, case_sensitive, time.monotonic() + GREP_TIME_LIMIT_SECONDS)
    await asyncio.to_thread(_grep, context, guard, search, base, include)
    hits = search.hits
    if not hits and not search.timed_out:
        return ToolOutput(f"no matches for {pattern}")
    if len(hits) > GREP_LIMIT:
        hits = [*hits[:GREP_LIMIT], f"... more matches not shown (limit {GREP_LIMIT}); narrow the search"]
    if search.timed_out:
        hits.append(f"... the search stopped after {GREP_TIME_LIMIT_SECONDS:g} s; narrow the path or include")
    return ToolOutput("\n".join(hits))


def _read(context: ToolContext, guard: CallGuard, raw_path: str, offset: int, limit: int) -> tuple[str, int, str, str]:
    """The numbered window of lines, the file's line count, its path and the hash of its content.
    Only the window is kept: the rest of the file streams through the hash and the line count."""
    with context.workspace.locate(raw_path, must_exist=True) as target:
        if guard.denies(target.relative):
            raise ToolError(f"{target.relative}: a permission rule denies file_read this path")
        if target.is_dir():
            raise ToolError(f"{raw_path}: not a file")
        fd, info = target.open_regular()
        relative = target.relative
    if (refusal := guard.file_refusal(relative, info, "file_read")) is not None:
        os.close(fd)
        raise ToolError(refusal)
    digest = hashlib.sha256()
    window: list[str] = []
    total = 0
    with os.fdopen(fd, "rb") as fh:
        if b"\x00" in fh.peek(_BINARY_SNIFF)[:_BINARY_SNIFF]:
            raise ToolError("the file is binary; file_read shows text files only")
        line = bytearray()  # the shown part of the current line, if it is in the window
        open_line = False
        for piece, ends in _pieces(fh):
            digest.update(piece)
            if offset <= total < offset + limit and len(line) < _LINE_BYTES:
                line += piece[: _LINE_BYTES - len(line)]
            open_line = not ends
            if ends:
                if offset <= total < offset + limit:
                    window.append(_display(line))
                line.clear()
                total += 1
        if open_line:  # a last line without its newline
            if offset <= total < offset + limit:
                window.append(_display(line))
            total += 1
    width = len(str(offset + len(window)))
    numbered = [f"{offset + i + 1:>{width}}\t{text}" for i, text in enumerate(window)]
    return "\n".join(numbered), total, relative, digest.hexdigest()


def _display(line: bytearray) -> str:
    return bytes(line).decode("utf-8", errors="replace").rstrip("\r\n")[:MAX_LINE_CHARS]


async def file_read_tool(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    raw_path = require_str(arguments, "path")
    assert raw_path is not None
    offset = optional_int(arguments, "offset", 0)
    limit = optional_int(arguments, "limit", READ_LIMIT_LINES, minimum=1)
    guard = await context.workspace.guard("file_read")
    body, total, relative, digest = await asyncio.to_thread(_read, context, guard, raw_path, offset, limit)
    if total and offset >= total:
        # An empty window read as an empty file, and the model went on as if it had seen the end.
        # Not remembered as read: the model saw none of it.
        lines = "1 line" if total == 1 else f"{total} lines"
        raise ToolError(
            f"{relative}: offset {offset} is past the end of the file, which has {lines}; "
            f"the last offset that shows a line is {total - 1}"
        )
    remember_hash(context, relative, digest)  # the stale-edit check compares against what was read
    if total == 0:
        body = "(empty file)"
    elif offset + limit < total:
        body += f"\n... {total - offset - limit} more lines; read on with offset={offset + limit}"
    return ToolOutput(body, touched=((relative, "read"),))


GLOB = Tool(
    name="glob",
    description="List files in the workspace matching a glob pattern (** matches across directories).",
    input_schema={
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Glob pattern, e.g. **/*.py"},
            "path": {"type": "string", "description": "Directory to search from, relative to the workspace."},
        },
        "required": ["pattern"],
    },
    func=glob_tool,
    targets=PathTarget(default="."),
)

GREP = Tool(
    name="grep",
    description=(
        "Search file contents with a regular expression (RE2 syntax: no backreferences or lookaround); "
        "prints path:line:text for each hit."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regular expression (RE2 syntax)."},
            "path": {"type": "string", "description": "File or directory to search, relative to the workspace."},
            "include": {"type": "string", "description": "Glob of files to search, default **/*."},
            "case_sensitive": {"type": "boolean"},
        },
        "required": ["pattern"],
    },
    func=grep_tool,
    targets=PathTarget(default="."),
)

FILE_READ = Tool(
    name="file_read",
    description="Read a text file from the workspace, with line numbers.",
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the workspace."},
            "offset": {"type": "integer", "description": "Lines to skip from the start."},
            "limit": {"type": "integer", "description": "Maximum lines to return."},
        },
        "required": ["path"],
    },
    func=file_read_tool,
    targets=PathTarget(),
)

READ_ONLY_TOOLS = (GLOB, GREP, FILE_READ)

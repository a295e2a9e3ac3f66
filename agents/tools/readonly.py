"""The read-only tools: glob, grep, file_read. Each stays inside the workspace."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from wcmatch import glob as wcglob

from agents.tools.base import Tool, ToolContext, ToolError, ToolOutput, optional_int, require_str
from agents.tools.ledger import remember

GLOB_LIMIT = 500
GREP_LIMIT = 200
# Below the output shaping's 600 lines, so a default read is never cut in its middle.
READ_LIMIT_LINES = 500
MAX_LINE_CHARS = 2000
_GLOB_FLAGS = wcglob.GLOBSTAR | wcglob.BRACE | wcglob.DOTGLOB | wcglob.NEGATE


def _matching_files(context: ToolContext, pattern: str, base: Path) -> list[Path]:
    if Path(pattern).is_absolute() or ".." in Path(pattern).parts:
        raise ToolError(f"{pattern}: patterns must stay inside the workspace (no absolute paths or '..')")
    found: list[Path] = []
    for name in wcglob.iglob(pattern, flags=_GLOB_FLAGS, root_dir=str(base)):
        path = base / name
        # A symbolic link may point outside; what it points at is not the workspace's.
        if context.workspace.contains(path):
            found.append(path)
    found.sort()
    return found


async def glob_tool(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    pattern = require_str(arguments, "pattern")
    assert pattern is not None
    base = context.workspace.resolve(require_str(arguments, "path", optional=True) or ".", must_exist=True)
    paths = await asyncio.to_thread(_matching_files, context, pattern, base)
    if not paths:
        return ToolOutput(f"no files match {pattern}")
    shown = paths[:GLOB_LIMIT]
    lines = [context.workspace.relative(p) + ("/" if p.is_dir() else "") for p in shown]
    if len(paths) > GLOB_LIMIT:
        lines.append(f"... {len(paths) - GLOB_LIMIT} more matches not shown; narrow the pattern")
    return ToolOutput("\n".join(lines))


def _grep(context: ToolContext, regex: re.Pattern[str], base: Path, include: str) -> list[str]:
    hits: list[str] = []
    files = [base] if base.is_file() else _matching_files(context, include, base)
    for path in files:
        if not path.is_file():
            continue
        try:
            with path.open("r", encoding="utf-8", errors="strict") as fh:
                for number, line in enumerate(fh, 1):
                    if regex.search(line):
                        text = line.rstrip("\n")[:MAX_LINE_CHARS]
                        hits.append(f"{context.workspace.relative(path)}:{number}:{text}")
                        if len(hits) > GREP_LIMIT:
                            return hits
        except (UnicodeDecodeError, OSError):
            continue  # binary or unreadable files are skipped, as grep -I does
    return hits


async def grep_tool(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    pattern = require_str(arguments, "pattern")
    assert pattern is not None
    try:
        regex = re.compile(pattern, 0 if arguments.get("case_sensitive", True) else re.IGNORECASE)
    except re.error as exc:
        raise ToolError(f"pattern is not a valid regular expression: {exc}") from None
    base = context.workspace.resolve(require_str(arguments, "path", optional=True) or ".", must_exist=True)
    include = require_str(arguments, "include", optional=True) or "**/*"
    hits = await asyncio.to_thread(_grep, context, regex, base, include)
    if not hits:
        return ToolOutput(f"no matches for {pattern}")
    if len(hits) > GREP_LIMIT:
        hits = [*hits[:GREP_LIMIT], f"... more matches not shown (limit {GREP_LIMIT}); narrow the search"]
    return ToolOutput("\n".join(hits))


def _read(path: Path, offset: int, limit: int) -> tuple[str, int, bytes]:
    data = path.read_bytes()
    if b"\x00" in data[:8192]:
        raise ToolError("the file is binary; file_read shows text files only")
    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines()
    window = lines[offset : offset + limit]
    width = len(str(offset + len(window)))
    numbered = [f"{offset + i + 1:>{width}}\t{line[:MAX_LINE_CHARS]}" for i, line in enumerate(window)]
    return "\n".join(numbered), len(lines), data


async def file_read_tool(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    raw_path = require_str(arguments, "path")
    assert raw_path is not None
    path = context.workspace.resolve(raw_path, must_exist=True)
    if not path.is_file():
        raise ToolError(f"{raw_path}: not a file")
    offset = optional_int(arguments, "offset", 0)
    limit = optional_int(arguments, "limit", READ_LIMIT_LINES, minimum=1)
    body, total, data = await asyncio.to_thread(_read, path, offset, limit)
    relative = context.workspace.relative(path)
    remember(context, relative, data)  # the stale-edit check compares against what was read
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
)

GREP = Tool(
    name="grep",
    description="Search file contents with a regular expression; prints path:line:text for each hit.",
    input_schema={
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Python regular expression."},
            "path": {"type": "string", "description": "File or directory to search, relative to the workspace."},
            "include": {"type": "string", "description": "Glob of files to search, default **/*."},
            "case_sensitive": {"type": "boolean"},
        },
        "required": ["pattern"],
    },
    func=grep_tool,
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
)

READ_ONLY_TOOLS = (GLOB, GREP, FILE_READ)

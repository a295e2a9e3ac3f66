"""file_write and file_edit: change one text file of the workspace."""

from __future__ import annotations

import asyncio
from typing import Any

from orchestrator.tools.base import Tool, ToolContext, ToolError, ToolOutput, require_str
from orchestrator.tools.files import Change, apply_changes, decode_text, read_existing, refuse_denied, refuse_directory
from orchestrator.tools.ledger import ensure_fresh, remember
from orchestrator.tools.targets import PathTarget
from orchestrator.tools.workspace import CallGuard


def _path(arguments: dict[str, Any]) -> str:
    raw_path = require_str(arguments, "path")
    assert raw_path is not None
    return raw_path


def _write(context: ToolContext, guard: CallGuard, raw_path: str, content: str) -> tuple[str, bool]:
    """Writes ``content``; returns the file's path and whether it existed. An existing file the
    agent has read must not have changed since (one it never read may simply be overwritten)."""
    with context.workspace.locate(raw_path) as target:
        refuse_denied(guard, target, "file_write")
        refuse_directory(target)
        relative = target.relative
        existed = target.lstat() is not None
        if existed:
            ensure_fresh(context, relative, read_existing(target, guard, "file_write"), require_read=False)
        data = content.encode("utf-8")
        apply_changes([Change(target, data)])
    remember(context, relative, data)
    return relative, existed


async def file_write_tool(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    content = arguments.get("content")
    if not isinstance(content, str):
        raise ToolError("argument 'content' must be a string")
    raw_path = _path(arguments)
    guard = await context.workspace.guard("file_write")
    async with context.write_lock:
        relative, existed = await asyncio.to_thread(_write, context, guard, raw_path, content)
    size = len(content.encode("utf-8"))
    verb = "overwrote" if existed else "created"
    return ToolOutput(f"{verb} {relative} ({size} bytes)", touched=((relative, "write"),))


def _replace(text: str, old: str, new: str, replace_all: bool, relative: str) -> tuple[str, int, int]:
    """Returns the new text, the number of replacements and the line of the first one."""
    count = text.count(old)
    if count == 0 and "\r\n" in text and "\r\n" not in old and "\n" in old:
        # The model writes "\n"; a file with Windows line endings has "\r\n".
        old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        count = text.count(old)
    if count == 0:
        raise ToolError(
            f"{relative}: old_string was not found; it must match the file exactly, "
            "whitespace and indentation included (read the file again if unsure)"
        )
    if count > 1 and not replace_all:
        raise ToolError(
            f"{relative}: old_string occurs {count} times; include more surrounding lines to make it "
            "unique, or set replace_all to replace every occurrence"
        )
    line = text.count("\n", 0, text.index(old)) + 1
    return text.replace(old, new) if replace_all else text.replace(old, new, 1), count, line


def _edit(
    context: ToolContext, guard: CallGuard, raw_path: str, old: str, new: str, replace_all: bool
) -> tuple[str, int, int]:
    with context.workspace.locate(raw_path) as target:
        refuse_denied(guard, target, "file_edit")
        refuse_directory(target)
        relative = target.relative
        data = read_existing(target, guard, "file_edit")
        ensure_fresh(context, relative, data)
        text, count, line = _replace(decode_text(data, relative), old, new, replace_all, relative)
        written = text.encode("utf-8")
        apply_changes([Change(target, written)])
    remember(context, relative, written)
    return relative, count, line


async def file_edit_tool(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    old = arguments.get("old_string")
    new = arguments.get("new_string")
    replace_all = arguments.get("replace_all", False)
    if not isinstance(old, str) or old == "":
        raise ToolError("argument 'old_string' must be a non-empty string (use file_write to create a file)")
    if not isinstance(new, str):
        raise ToolError("argument 'new_string' must be a string")
    if not isinstance(replace_all, bool):
        raise ToolError("argument 'replace_all' must be true or false")
    if old == new:
        raise ToolError("old_string and new_string are the same; nothing to change")
    raw_path = _path(arguments)
    guard = await context.workspace.guard("file_edit")
    async with context.write_lock:
        relative, count, line = await asyncio.to_thread(_edit, context, guard, raw_path, old, new, replace_all)
    what = f"{count} occurrences" if count > 1 else f"1 occurrence at line {line}"
    return ToolOutput(f"edited {relative}: replaced {what}", touched=((relative, "edit"),))


FILE_WRITE = Tool(
    name="file_write",
    description=(
        "Create a text file in the workspace, or overwrite one, with the given content; missing parent "
        "directories are created. Prefer file_edit or apply_patch for changes to an existing file."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the workspace."},
            "content": {"type": "string", "description": "The complete new content of the file."},
        },
        "required": ["path", "content"],
    },
    func=file_write_tool,
    targets=PathTarget(),
    read_only=False,
    writes_files=True,
)

FILE_EDIT = Tool(
    name="file_edit",
    description=(
        "Replace an exact string in a text file. old_string must match the file exactly (whitespace "
        "included) and occur once, unless replace_all is set. Read the file with file_read first; an edit "
        "of a file changed on disk since you read it is refused."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the workspace."},
            "old_string": {"type": "string", "description": "The exact text to replace."},
            "new_string": {"type": "string", "description": "The text to put in its place."},
            "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."},
        },
        "required": ["path", "old_string", "new_string"],
    },
    func=file_edit_tool,
    targets=PathTarget(),
    read_only=False,
    writes_files=True,
)

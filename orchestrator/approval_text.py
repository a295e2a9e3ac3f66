"""What a person reads when a tool call waits for approval, and the call as data for a page.

``approval_message`` is the one line shown in the chat's prompt and in the admin's queue;
``approval_call`` is the structured call an interrupt carries (``metadata``) so a page can
render it richly: the tool, its arguments and, for edits and patches, the diff.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any, NotRequired, TypedDict

from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchSet

# A prompt is read, not scrolled: longer pieces are cut with a marker saying so.
MAX_COMMAND_CHARS = 400
MAX_LINE_CHARS = 120
MAX_LIST_ITEMS = 20


class ApprovalCall(TypedDict):
    tool: str
    arguments: dict[str, Any]
    diff: NotRequired[str]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


def _text(arguments: dict[str, Any], key: str) -> str:
    value = arguments.get(key)
    return value if isinstance(value, str) else ""


def _size(content: str) -> str:
    size = len(content.encode("utf-8"))
    lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    return f"{size} byte{'s' if size != 1 else ''}, {lines} line{'s' if lines != 1 else ''}"


def _quoted_lines(text: str, mark: str) -> list[str]:
    lines = text.splitlines() or [""]
    shown = [f"{mark} {_cut(line, MAX_LINE_CHARS)}" for line in lines[:MAX_LIST_ITEMS]]
    if len(lines) > MAX_LIST_ITEMS:
        shown.append(f"{mark} … ({len(lines) - MAX_LIST_ITEMS} more lines)")
    return shown


def _patch_files(patch: str) -> list[str] | None:
    """Each file of a unified diff as ``path (+added -removed)``; None when it does not parse."""
    try:
        files = PatchSet(patch)
    except UnidiffParseError:
        return None
    described = []
    for patched in files:
        path = patched.path
        kind = " (new)" if patched.is_added_file else " (deleted)" if patched.is_removed_file else ""
        described.append(f"{path}{kind} +{patched.added} -{patched.removed}")
    return described or None


def _todo_lines(todos: Any) -> list[str]:
    if not isinstance(todos, list):
        return ["(no list)"]
    marks = {"completed": "[x]", "in_progress": "[~]", "pending": "[ ]"}
    lines = []
    for todo in todos[:MAX_LIST_ITEMS]:
        if isinstance(todo, dict):
            mark = marks.get(str(todo.get("status")), "[ ]")
            lines.append(f"{mark} {_cut(str(todo.get('content', '')), MAX_LINE_CHARS)}")
    if len(todos) > MAX_LIST_ITEMS:
        lines.append(f"… ({len(todos) - MAX_LIST_ITEMS} more items)")
    return lines or ["(an empty list)"]


def _body(tool: str, arguments: dict[str, Any]) -> str:
    if tool == "bash":
        return f"Allow bash to run `{_cut(_text(arguments, 'command'), MAX_COMMAND_CHARS)}`?"
    if tool == "file_write":
        return f"Allow file_write to write {_text(arguments, 'path')} ({_size(_text(arguments, 'content'))})?"
    if tool == "file_edit":
        old, new = _text(arguments, "old_string"), _text(arguments, "new_string")
        every = " (every occurrence)" if arguments.get("replace_all") is True else ""
        lines = [f"Allow file_edit to change {_text(arguments, 'path')}{every}?"]
        return "\n".join(lines + _quoted_lines(old, "-") + _quoted_lines(new, "+"))
    if tool == "apply_patch":
        files = _patch_files(_text(arguments, "patch"))
        if files is None:
            return "Allow apply_patch with a patch that does not parse as a unified diff?"
        count = f"{len(files)} file{'s' if len(files) != 1 else ''}"
        return "\n".join([f"Allow apply_patch to change {count}?", *(f"  {line}" for line in files)])
    if tool == "todo_write":
        todos = arguments.get("todos")
        items = len(todos) if isinstance(todos, list) else 0
        lines = [f"Allow todo_write to set the plan ({items} item{'s' if items != 1 else ''})?"]
        return "\n".join(lines + [f"  {line}" for line in _todo_lines(todos)])
    shown = ", ".join(f"{key}={_cut(repr(value), 80)}" for key, value in list(arguments.items())[:6])
    return f"Allow {tool}({shown})?"


def approval_message(
    tool: str, arguments: dict[str, Any], reason: str = "", describe: Callable[[dict[str, Any]], str] | None = None
) -> str:
    """The call in words a person can judge, first line a question; ``reason`` is why it asks.
    ``describe``: the tool's own wording of its calls (``Tool.approval_text``), if it has one."""
    body = describe(arguments) if describe is not None else _body(tool, arguments)
    if not reason:
        return body
    first, _, rest = body.partition("\n")
    return f"{first} ({reason})" + (f"\n{rest}" if rest else "")


def approval_call(tool: str, arguments: dict[str, Any]) -> ApprovalCall:
    """The call as data: tool and arguments, and the diff of an edit or a patch."""
    call: ApprovalCall = {"tool": tool, "arguments": arguments}
    if tool == "apply_patch" and (patch := _text(arguments, "patch")):
        call["diff"] = patch
    elif tool == "file_edit":
        path = _text(arguments, "path")
        old, new = _text(arguments, "old_string"), _text(arguments, "new_string")
        diff = difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=0
        )
        call["diff"] = "".join(line if line.endswith("\n") else f"{line}\n" for line in diff)
    return call

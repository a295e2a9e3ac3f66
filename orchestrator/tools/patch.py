"""apply_patch: apply a unified diff to the workspace, all of it or none of it.

Every file section is classified (modify / create from /dev/null / delete to /dev/null) and every
hunk checked against the file's current content before anything is written. Hunks may sit at
other lines than their headers say (the nearest exact match is taken), but their context and
removed lines must match exactly: there is no fuzz."""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Literal

from unidiff.errors import UnidiffParseError
from unidiff.patch import Hunk, PatchedFile, PatchSet

from orchestrator.tools import usage
from orchestrator.tools.base import Tool, ToolContext, ToolError, ToolOutput, require_str
from orchestrator.tools.files import Change, apply_changes, decode_text, read_existing, refuse_denied, refuse_directory
from orchestrator.tools.ledger import ensure_fresh, forget, remember
from orchestrator.tools.targets import PatchTargets
from orchestrator.tools.workspace import CallGuard

DEV_NULL = "/dev/null"
Action = Literal["modify", "create", "delete"]


@dataclass(slots=True)
class TextFile:
    """A file as lines without their endings, the line ending it uses, and whether it ends with one."""

    lines: list[str]
    newline: str = "\n"
    final_newline: bool = True

    @classmethod
    def parse(cls, text: str) -> TextFile:
        if text == "":
            return cls([])
        newline = "\r\n" if text.count("\r\n") * 2 > text.count("\n") else "\n"
        lines = text.split(newline)
        final_newline = text.endswith(newline)
        if final_newline:
            lines.pop()
        return cls(lines, newline, final_newline)

    def render(self) -> str:
        if not self.lines:
            return ""
        return self.newline.join(self.lines) + (self.newline if self.final_newline else "")


@dataclass(slots=True)
class HunkLines:
    source: list[str]
    target: list[str]
    source_no_eol: bool  # "\ No newline at end of file" after the last source line
    target_no_eol: bool
    start: int  # 0-based line where the header says the source lines begin


def _strip_eol(value: str) -> str:
    if value.endswith("\r\n"):
        return value[:-2]
    return value[:-1] if value.endswith("\n") else value


def _hunk_lines(hunk: Hunk) -> HunkLines:
    source: list[str] = []
    target: list[str] = []
    source_no_eol = target_no_eol = False
    previous = ""
    for line in hunk:
        if line.is_context or line.is_removed:
            source.append(_strip_eol(line.value))
        if line.is_context or line.is_added:
            target.append(_strip_eol(line.value))
        if line.line_type == "\\":
            source_no_eol = source_no_eol or previous in (" ", "-")
            target_no_eol = target_no_eol or previous in (" ", "+")
        previous = line.line_type
    start = hunk.source_start - 1 if hunk.source_length else hunk.source_start
    return HunkLines(source, target, source_no_eol, target_no_eol, max(start, 0))


def _describe(hunk: Hunk) -> str:
    return f"@@ -{hunk.source_start},{hunk.source_length} +{hunk.target_start},{hunk.target_length} @@"


def _apply_hunks(file: TextFile, patched: PatchedFile, relative: str) -> TextFile:
    lines = list(file.lines)
    final_newline = file.final_newline
    shift = 0  # how far earlier hunks moved the lines below them
    floor = 0  # hunks apply in order and may not overlap
    for number, hunk in enumerate(patched, 1):
        parts = _hunk_lines(hunk)
        size = len(parts.source)
        expected = parts.start + shift
        if size == 0:
            at: int | None = expected if floor <= expected <= len(lines) else None
        else:
            candidates = [i for i in range(floor, len(lines) - size + 1) if lines[i : i + size] == parts.source]
            at = min(candidates, key=lambda i: (abs(i - expected), i)) if candidates else None
        if at is None or (parts.source_no_eol and at + size != len(lines)):
            found = lines[expected : expected + max(size, 1)][:5]
            raise ToolError(
                f"{relative}: hunk {number} ({_describe(hunk)}) does not apply: its context and removed lines "
                f"were not found in the file.\nexpected (first lines): {parts.source[:5]!r}\n"
                f"found at line {expected + 1}: {found!r}\n"
                "Nothing was changed. Read the file again and regenerate the patch."
            )
        if at + size == len(lines):  # this hunk reaches the end of the file
            if parts.target_no_eol:
                final_newline = False
            elif parts.source_no_eol:
                final_newline = True
        lines[at : at + size] = parts.target
        shift += len(parts.target) - size
        floor = at + len(parts.target)
    return TextFile(lines, file.newline, final_newline)


def _unquote(name: str) -> str:
    return name[1:-1] if len(name) >= 2 and name[0] == name[-1] == '"' else name


def _paths(patched: PatchedFile) -> tuple[str | None, str | None]:
    """The section's source and target paths, None for /dev/null, with git's a/ and b/ stripped
    when every side that names a file carries its prefix."""
    source = None if patched.source_file == DEV_NULL else _unquote(patched.source_file)
    target = None if patched.target_file == DEV_NULL else _unquote(patched.target_file)
    if (source is None or source.startswith("a/")) and (target is None or target.startswith("b/")):
        source = source[2:] if source is not None else None
        target = target[2:] if target is not None else None
    return source, target


@dataclass(slots=True)
class Planned:
    relative: str
    action: Action
    change: Change
    added: int
    removed: int


def _plan_file(context: ToolContext, guard: CallGuard, patched: PatchedFile, held: ExitStack) -> Planned:
    source, target = _paths(patched)
    name = target or source or "?"
    if patched.is_binary_file:
        raise ToolError(f"{name}: binary patches are not supported")
    if source is None and target is None:
        raise ToolError("a file section goes from /dev/null to /dev/null")
    if source is not None and target is not None and source != target:
        raise ToolError(f"{source} -> {target}: renames are not supported; delete the file and create the new one")
    action: Action = "create" if source is None else "delete" if target is None else "modify"
    located = held.enter_context(context.workspace.locate(name))
    relative = located.relative
    refuse_denied(guard, located, "apply_patch")
    refuse_directory(located)
    if action == "create":
        if located.lstat() is not None:
            raise ToolError(f"{relative}: the patch creates it (from /dev/null) but it already exists")
        before = TextFile([])
    else:
        data = read_existing(located, guard, "apply_patch")
        ensure_fresh(context, relative, data)
        before = TextFile.parse(decode_text(data, relative))
    after = _apply_hunks(before, patched, relative)
    if action == "delete":
        if after.lines:
            raise ToolError(f"{relative}: the patch deletes it (to /dev/null) but its hunks do not remove every line")
        change = Change(located, None)
    else:
        change = Change(located, after.render().encode("utf-8"))
    return Planned(relative, action, change, patched.added, patched.removed)


def _apply(context: ToolContext, guard: CallGuard, patch: str) -> list[Planned]:
    try:
        patch_set = PatchSet(patch)
    except UnidiffParseError as exc:
        raise ToolError(
            f"the patch is not a valid unified diff: {exc} (each @@ -start,count +start,count @@ header must "
            "count exactly the lines of its hunk; context lines start with a space)"
        ) from None
    if not patch_set:
        raise ToolError("the patch has no file sections; each file needs '--- old' and '+++ new' header lines")
    plan: list[Planned] = []
    with ExitStack() as held:  # the targets' directories stay open until the patch is written
        for patched in patch_set:  # every file is checked before any is written
            planned = _plan_file(context, guard, patched, held)
            if any(p.relative == planned.relative for p in plan):
                raise ToolError(f"{planned.relative}: appears twice in the patch; put all its hunks in one section")
            plan.append(planned)
        apply_changes([p.change for p in plan])
    for p in plan:
        if p.change.data is None:
            forget(context, p.relative)
        else:
            remember(context, p.relative, p.change.data)
    return plan


_DONE = {"modify": "modified", "create": "created", "delete": "deleted"}


async def apply_patch_tool(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    patch = require_str(arguments, "patch")
    assert patch is not None
    guard = await context.workspace.guard("apply_patch")
    async with context.write_lock:
        plan = await asyncio.to_thread(_apply, context, guard, patch)
    usage.forget(context.workspace.root)
    lines = [f"{_DONE[p.action]} {p.relative} (+{p.added} -{p.removed})" for p in plan]
    return ToolOutput("\n".join(lines), touched=tuple((p.relative, "patch") for p in plan))


APPLY_PATCH = Tool(
    name="apply_patch",
    description=(
        "Apply a unified diff (as `diff -u` or `git diff` print it) to files in the workspace; several files "
        "per patch. Use --- /dev/null to create a file and +++ /dev/null to delete one. Context and removed "
        "lines must match the files exactly and hunk headers must count their lines correctly. Files changed "
        "must have been read with file_read first. If any hunk does not apply, nothing is changed."
    ),
    input_schema={
        "type": "object",
        "properties": {"patch": {"type": "string", "description": "The unified diff."}},
        "required": ["patch"],
    },
    func=apply_patch_tool,
    targets=PatchTargets(),
    read_only=False,
)

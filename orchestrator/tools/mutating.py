"""The tools that change the workspace, or the run's state (todo_write), as opposed to READ_ONLY_TOOLS."""

from __future__ import annotations

from orchestrator.tools.patch import APPLY_PATCH
from orchestrator.tools.shell import BASH
from orchestrator.tools.todos import TODO_WRITE
from orchestrator.tools.writing import FILE_EDIT, FILE_WRITE

MUTATING_TOOLS = (FILE_WRITE, FILE_EDIT, APPLY_PATCH, BASH, TODO_WRITE)

__all__ = ["APPLY_PATCH", "BASH", "FILE_EDIT", "FILE_WRITE", "MUTATING_TOOLS", "TODO_WRITE"]

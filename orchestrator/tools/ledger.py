"""The read ledger behind the stale-edit check.

``ToolContext.reads`` maps a file (relative to the workspace) to the hash of the content the agent
last saw: file_read records what it read, and every tool that writes records what it wrote. A tool
that changes an existing file first checks that the file on disk is still what the agent last saw."""

from __future__ import annotations

import hashlib

from orchestrator.tools.base import ToolContext, ToolError


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def remember(context: ToolContext, relative: str, data: bytes) -> None:
    """Records that the agent has seen (or itself written) ``data`` as the content of ``relative``."""
    context.reads[relative] = content_hash(data)


def remember_hash(context: ToolContext, relative: str, digest: str) -> None:
    """``remember`` for a caller that hashed the content itself (with ``content_hash``'s algorithm)."""
    context.reads[relative] = digest


def forget(context: ToolContext, relative: str) -> None:
    context.reads.pop(relative, None)


def ensure_fresh(context: ToolContext, relative: str, data: bytes, *, require_read: bool = True) -> None:
    """Refuses a change to ``relative`` (whose current content is ``data``) unless the agent has
    seen exactly this content. With ``require_read=False`` a file never read passes (an overwrite)."""
    seen = context.reads.get(relative)
    if seen is None:
        if require_read:
            raise ToolError(f"{relative}: read the file with file_read before changing it")
        return
    if seen != content_hash(data):
        raise ToolError(
            f"{relative}: the file changed on disk since you last read it; "
            "read it again with file_read, then redo the change against its current content"
        )

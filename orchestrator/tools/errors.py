"""The error a tool raises for a call it refuses."""

from __future__ import annotations


class ToolError(Exception):
    """A call the tool refuses (bad arguments, a path outside the workspace); the model reads the message."""

"""What a workspace template names (``AGENT_WORKSPACE_TEMPLATE``): a repository by URL, or a local
path. Plain Python, so the settings can use it before any app is loaded."""

from __future__ import annotations


def is_git_url(template: str) -> bool:
    """Whether a workspace template names a repository by URL (``scheme://...`` or ``user@host:path``)
    rather than a local path."""
    return "://" in template or ":" in template.split("/", 1)[0]

"""Where the workspaces may lie, checked at start-up: outside each other, outside the data dir, and
apart from the server's own code."""

from __future__ import annotations

import sys
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured


def check_workspace_layout(*, data_dir: Path, workspace: Path, workspaces_root: Path, checkout: Path) -> None:
    """Raises ImproperlyConfigured naming the setting whose directory lies where it may not."""
    for inner, outer in ((workspaces_root, data_dir), (workspaces_root, workspace), (workspace, workspaces_root)):
        if inner.is_relative_to(outer):
            raise ImproperlyConfigured(
                f"AGENT_WORKSPACES_ROOT={str(workspaces_root)!r} and AGENT_WORKSPACE={str(workspace)!r} "
                f"must lie outside each other and outside the data dir {str(data_dir)!r}: {inner} is inside {outer}"
            )
    # A workspace is handed to the sandbox user when the server is root (chowned): one that holds the
    # server's checkout or virtual environment, or lies inside either, would hand over the server's own
    # code (the probe's AGENT_WORKSPACE set to the checkout chowned 478 of its files: issue #49, item 5).
    server_code = {checkout, (checkout / ".venv").resolve()}
    if sys.prefix != sys.base_prefix:  # a virtual environment, not the system's Python (/usr, /usr/local)
        server_code.add(Path(sys.prefix).resolve())
    for setting, directory in (("AGENT_WORKSPACE", workspace), ("AGENT_WORKSPACES_ROOT", workspaces_root)):
        for code in sorted(server_code):
            if code.is_relative_to(directory) or directory.is_relative_to(code):
                what = "checkout" if code == checkout else "virtual environment"
                raise ImproperlyConfigured(
                    f"{setting}={str(directory)!r} holds or lies inside the server's {what} {str(code)!r}: the "
                    "agent's tools would work in (and, run as root, hand to the sandbox user) the server's own code; "
                    "give it a directory of its own (the default AGENT_WORKSPACE is a clone of the checkout)"
                )

"""The environment a stdio MCP server starts with: its own ``env``, plus what a program needs to
run (``PATH``, ``HOME``, the user and the locale), and nothing else of Threadline's.

The MCP SDK never passes the parent's whole environment either (``get_default_environment``), but
this is Threadline's own promise, so it is spelled out here: the server process never sees
``AGUI_TOKEN``, ``DJANGO_SECRET_KEY``, model keys, database or Redis URLs, unless the operator
puts one in the server's ``env`` on purpose.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

INHERITED = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TMPDIR", "LANG", "LANGUAGE", "TZ")


def server_environment(own: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the server process's environment is: the inherited basics, then the server's own ``env``."""
    environ = os.environ if environ is None else environ
    inherited = {
        key: value
        for key, value in environ.items()
        if (key in INHERITED or key.startswith("LC_")) and not value.startswith("()")
    }
    return inherited | dict(own)

"""A server's secrets kept out of what is shown of it (issue #49 item 2): its last error, the log
lines about it and the tool results and errors its calls give the run (and so its events) carry its
``env`` and ``headers`` values, and the values ``${VAR}`` took in any of its fields, replaced by
``[redacted]``. A server's error message or stderr can carry them (a failed login that echoes its
token, a traceback that prints its environment).

A value shorter than ``MIN_SECRET`` characters is left alone: it is no secret (``1``, ``on``), and
replacing it would blank every occurrence of it in the text. A header value is also redacted word
by word (``Bearer <token>``: the token alone, when it has ``MIN_WORD`` characters, is one too).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from agents.mcp.config import _VARIABLE, ServerConfig

MIN_SECRET = 4
MIN_WORD = 8  # a header value's word redacted on its own: a token, not "Bearer"
REDACTED = "[redacted]"


def secret_values(config: ServerConfig, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """What must never be shown of ``config``: longest first, so a value that holds another goes whole."""
    environ = os.environ if environ is None else environ
    values = [value for _, value in config.env]
    for _, value in config.headers:
        values += [value, *(word for word in value.split() if len(word) >= MIN_WORD)]
    strings = [config.command, *config.args, config.cwd, config.url, *values]
    values += [environ.get(match.group(1), "") for s in strings for match in _VARIABLE.finditer(s)]
    expanded = [_expanded(value, environ) for value in values]
    found = {value for value in [*values, *expanded] if len(value) >= MIN_SECRET and not _VARIABLE.fullmatch(value)}
    return tuple(sorted(found, key=len, reverse=True))


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets`` (longest first) replaced."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _expanded(value: str, environ: Mapping[str, str]) -> str:
    return _VARIABLE.sub(lambda match: environ.get(match.group(1)) or match.group(2) or "", value)

"""The MCP servers an operator configures, in the ``.mcp.json`` shape users already write.

``{"mcpServers": {"<name>": {"command": ..., "args": [...], "env": {...}, "cwd": ..., "paths": [...]}
                  "<name>": {"type": "http", "url": ..., "headers": {...}}}}``

``type`` is ``stdio`` (the default when ``command`` is given) or ``http`` (streamable HTTP). A stdio
server runs in the sandbox that holds bash (agents/mcp/sandboxing.py), seeing of the host the system's
directories, its ``cwd`` read-only and its ``paths`` (absolute, read-only, or read-write with a
``:rw`` suffix); ``"workspace": true`` gives it the workspace too, ``"network": false`` takes its
network away. Every string of ``command``, ``args``, ``env``, ``cwd``, ``paths``, ``url`` and
``headers`` may hold ``${VAR}`` (or ``${VAR:-default}``), expanded from the Threadline process's
environment when the server starts, so secrets stay out of the file. An entry made in the admin may
name only the variables of ``MCP_ENV_ALLOWLIST`` (``variables_allowed``): whoever edits it there
would otherwise read the server's whole environment through it (issue #46, item 4). A file that does
not parse, a server with neither ``command`` nor ``url``, a field of the wrong type or a variable
that is not set raises ``McpConfigError`` naming the file, the server and the problem.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

STDIO = "stdio"
HTTP = "http"
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# A server's name becomes part of its tools' names: what the model API accepts in a tool name.
_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# An entry's fields besides its name and "type", in the order the admin's form shows them.
ENTRY_KEYS = (
    "command",
    "args",
    "env",
    "cwd",
    "paths",
    "network",
    "workspace",
    "url",
    "headers",
    "enabled",
    "description",
)
_KNOWN_KEYS = {"type", *ENTRY_KEYS}
_STDIO_ONLY = ("paths", "network", "workspace")
READ_WRITE = ":rw"
READ_ONLY = ":ro"


class McpConfigError(ImproperlyConfigured):
    """The MCP configuration cannot be used; the message names the file, the server and the problem.
    ``field`` is the entry's field at fault, if one is (the admin's form shows the error beside it)."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


@dataclass(slots=True, frozen=True)
class ServerConfig:
    """One server as configured, ``${VAR}`` not yet expanded (so it never holds a secret)."""

    name: str
    transport: str  # STDIO or HTTP
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = ""
    paths: tuple[str, ...] = ()  # as written: "/opt/x" (read-only), "/opt/x:ro" or "/var/lib/x:rw"
    network: bool = True
    workspace: bool = False  # whether the server sees the (shared) workspace, read-write
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    enabled: bool = True
    description: str = ""
    source: str = ""  # where it was configured: the file's path
    # The variables its ``${VAR}`` may name; None: any (the file's entries, written by whoever runs
    # the server). The admin's entries get MCP_ENV_ALLOWLIST.
    variables_allowed: tuple[str, ...] | None = None

    def expanded(self, environ: Mapping[str, str] | None = None) -> ExpandedServer:
        """The server with every ``${VAR}`` replaced from ``environ`` (default: this process's); a
        variable outside ``variables_allowed`` is never read (``check_variables`` refused it earlier)."""
        environ = os.environ if environ is None else environ
        if self.variables_allowed is not None:
            environ = {name: environ[name] for name in self.variables_allowed if name in environ}

        def expand(value: str) -> str:
            return expand_variables(value, environ, where=f"{self.source}: server {self.name!r}")

        return ExpandedServer(
            command=expand(self.command),
            args=[expand(arg) for arg in self.args],
            env={key: expand(value) for key, value in self.env},
            cwd=expand(self.cwd),
            paths=[expand(path) for path in self.paths],
            url=expand(self.url),
            headers={key: expand(value) for key, value in self.headers},
        )

    def variables(self) -> list[tuple[str, str]]:
        """(field, variable) for each variable the server's strings refer to without a default."""
        return [(key, match.group(1)) for key, match in self._references() if match.group(2) is None]

    def refused_variables(self) -> list[tuple[str, str]]:
        """(field, variable) for each variable the server's strings refer to, default or not, that
        ``variables_allowed`` does not list."""
        if self.variables_allowed is None:
            return []
        allowed = set(self.variables_allowed)
        return [(key, match.group(1)) for key, match in self._references() if match.group(1) not in allowed]

    def _references(self) -> list[tuple[str, re.Match[str]]]:
        strings = {
            "command": [self.command],
            "args": list(self.args),
            "cwd": [self.cwd],
            "paths": list(self.paths),
            "url": [self.url],
            "env": [v for _, v in self.env],
            "headers": [v for _, v in self.headers],
        }
        return [(key, m) for key, values in strings.items() for s in values for m in _VARIABLE.finditer(s)]


@dataclass(slots=True)
class ExpandedServer:
    """What starting the server uses: secrets included, never stored nor shown."""

    command: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    paths: list[str] = field(default_factory=list)
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)


def expand_variables(value: str, environ: Mapping[str, str], *, where: str) -> str:
    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = environ.get(name)
        if found:
            return found
        if default is not None:
            return default
        raise McpConfigError(f"{where}: ${{{name}}} is not set in the server's environment")

    return _VARIABLE.sub(replace, value)


def load_servers(path: Path, *, environ: Mapping[str, str] | None = None) -> list[ServerConfig]:
    """The servers of the ``.mcp.json`` file at ``path``, checked (see the module's docstring)."""
    where = str(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise McpConfigError(f"{where}: MCP_SERVERS names a file that does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise McpConfigError(f"{where}: cannot read it: {exc}") from None
    except json.JSONDecodeError as exc:
        raise McpConfigError(f"{where}: not valid JSON: {exc}") from None
    return parse_servers(document, source=where, environ=environ)


def parse_servers(document: Any, *, source: str, environ: Mapping[str, str] | None = None) -> list[ServerConfig]:
    if not isinstance(document, dict) or not isinstance(document.get("mcpServers"), dict):
        raise McpConfigError(f'{source}: expected an object with "mcpServers": {{"<name>": {{...}}}}')
    servers = []
    for name, entry in document["mcpServers"].items():
        server = parse_server(name, entry, source=source)
        check_variables(server, environ)
        servers.append(server)
    return servers


def check_variables(server: ServerConfig, environ: Mapping[str, str] | None = None) -> None:
    """Raises ``McpConfigError`` if ``server`` is enabled and one of its ``${VAR}`` (without a default)
    is not set in ``environ`` (default: this process's environment), and, enabled or not, if one of
    them is outside the variables it may name (an admin's entry: MCP_ENV_ALLOWLIST)."""
    environ = os.environ if environ is None else environ
    check_allowed_variables(server)
    if not server.enabled:
        return
    for key, variable in server.variables():
        if not environ.get(variable):
            raise McpConfigError(
                f"{server.source}: server {server.name!r}: ${{{variable}}} is not set in the server's environment",
                field=key,
            )


def check_allowed_variables(server: ServerConfig) -> None:
    """Raises ``McpConfigError`` naming the first variable ``server`` refers to that it may not name."""
    for key, variable in server.refused_variables():
        listed = ", ".join(server.variables_allowed or ()) or "none"
        raise McpConfigError(
            f"{server.source}: server {server.name!r}: ${{{variable}}} may not be used in an entry made here: "
            f"only the variables MCP_ENV_ALLOWLIST names are expanded in it (now: {listed})",
            field=key,
        )


def file_servers() -> list[ServerConfig]:
    """The servers of the file MCP_SERVERS names (none when it is blank)."""
    path: str = settings.MCP_SERVERS
    if not path:
        return []
    return load_servers(Path(path))


def parse_server(
    name: str, entry: Any, *, source: str, variables_allowed: tuple[str, ...] | None = None
) -> ServerConfig:
    where = f"{source}: server {name!r}"
    if not _SERVER_NAME.fullmatch(name):
        raise McpConfigError(f"{where}: a server's name is 1 to 64 letters, digits, '_' or '-'", field="name")
    if "__" in name:
        raise McpConfigError(f"{where}: a server's name may not hold '__' (it separates server and tool)", field="name")
    if not isinstance(entry, dict):
        raise McpConfigError(f"{where}: expected an object")
    unknown = sorted(set(entry) - _KNOWN_KEYS)
    if unknown:
        raise McpConfigError(f"{where}: unknown field(s) {', '.join(unknown)}")
    command, url = entry.get("command"), entry.get("url")
    kind = entry.get("type", STDIO if command is not None else HTTP if url is not None else None)
    if kind == "streamable-http" or kind == "streamableHttp":
        kind = HTTP
    if command is None and url is None:
        raise McpConfigError(f'{where}: needs either a "command" (stdio) or a "url" (http)', field="command")
    if kind not in (STDIO, HTTP):
        raise McpConfigError(f'{where}: type {kind!r} is not supported (use "stdio" or "http")', field="type")
    if kind == STDIO and not (isinstance(command, str) and command.strip()):
        raise McpConfigError(f'{where}: a stdio server needs "command", a non-empty string', field="command")
    if kind == HTTP and not (isinstance(url, str) and url.strip()):
        raise McpConfigError(f'{where}: an http server needs "url", a non-empty string', field="url")
    if kind == HTTP and not re.match(r"(https?://|\$\{)", str(url)):
        raise McpConfigError(f'{where}: "url" must be an http:// or https:// URL', field="url")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise McpConfigError(f'{where}: "args" must be a list of strings', field="args")
    env = _string_map(entry.get("env", {}), where, "env")
    headers = _string_map(entry.get("headers", {}), where, "headers")
    cwd = entry.get("cwd", "")
    if not isinstance(cwd, str):
        raise McpConfigError(f'{where}: "cwd" must be a string', field="cwd")
    given = [key for key in _STDIO_ONLY if key in entry]
    if kind == HTTP and given:
        raise McpConfigError(f'{where}: "{given[0]}" is for stdio servers (a process Threadline runs)', field=given[0])
    paths = entry.get("paths", [])
    if not isinstance(paths, list) or not all(isinstance(path, str) for path in paths):
        raise McpConfigError(f'{where}: "paths" must be a list of strings', field="paths")
    for path in paths:
        bare = path.removesuffix(READ_WRITE).removesuffix(READ_ONLY)
        if not (bare.startswith("/") or bare.startswith("${")):
            raise McpConfigError(
                f'{where}: "paths": {path!r} is not an absolute path (add ":rw" to make one writable)', field="paths"
            )
    for key in ("network", "workspace"):
        if not isinstance(entry.get(key, False), bool):
            raise McpConfigError(f'{where}: "{key}" must be true or false', field=key)
    enabled = entry.get("enabled", True)
    if not isinstance(enabled, bool):
        raise McpConfigError(f'{where}: "enabled" must be true or false', field="enabled")
    description = entry.get("description", "")
    if not isinstance(description, str):
        raise McpConfigError(f'{where}: "description" must be a string', field="description")
    return ServerConfig(
        name=name,
        transport=kind,
        command=str(command) if kind == STDIO else "",
        args=tuple(args) if kind == STDIO else (),
        env=tuple(env.items()),
        cwd=cwd,
        paths=tuple(paths),
        network=entry.get("network", True),
        workspace=entry.get("workspace", False),
        url=str(url) if kind == HTTP else "",
        headers=tuple(headers.items()),
        enabled=enabled,
        description=description,
        source=source,
        variables_allowed=variables_allowed,
    )


def _string_map(value: Any, where: str, key: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise McpConfigError(f'{where}: "{key}" must be an object of strings', field=key)
    return dict(value)

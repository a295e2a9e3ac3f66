"""The settings of the agent's tools: which are offered, how bash runs (its sandbox, its bounds, its
network), the MCP servers, the web tools. Star-imported by project/settings.py, so each is a Django
setting like the others; every environment variable read here has its row in docs/configuration.md."""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from agents.mcp.config import load_servers as load_mcp_servers
from project.env import (
    env_choice,
    env_float,
    env_host_headers,
    env_host_patterns,
    env_int,
    env_names,
    env_str,
    env_url,
)

_CHECKOUT = Path(__file__).resolve().parent.parent

# The tools that change the workspace (file_write, file_edit, apply_patch, bash, todo_write).
# "ask": offered, and a call no permission rule allows waits for a person's approval; "on":
# offered and auto-approved (an ask rule still asks, a deny rule still denies); "off": not offered.
AGENT_MUTATING_TOOLS = env_str("AGENT_MUTATING_TOOLS", "ask").lower()
if AGENT_MUTATING_TOOLS not in ("off", "ask", "on"):
    raise ImproperlyConfigured(f"AGENT_MUTATING_TOOLS={AGENT_MUTATING_TOOLS!r} must be 'off', 'ask' or 'on'")
# bash runs in a bubblewrap sandbox ("on"); without bwrap it is not offered. "off" runs it
# without one, which lets the model read anything the server's user can.
AGENT_BASH_SANDBOX = env_choice("AGENT_BASH_SANDBOX", "on", ("on", "off"))
# bash's network (issue #47). "off": none. "allowlist": the hosts of AGENT_BASH_ALLOWED_HOSTS; "on":
# every public host. Either way only through Threadline's proxy, which refuses loopback, private,
# link-local and metadata addresses (but those of AGENT_BASH_ALLOWED_PRIVATE_HOSTS) and the hosts of
# AGENT_BASH_DENIED_HOSTS; the sandbox never shares the host's network.
AGENT_BASH_NETWORK = env_choice("AGENT_BASH_NETWORK", "off", ("off", "allowlist", "on"))
AGENT_BASH_ALLOWED_HOSTS = env_host_patterns("AGENT_BASH_ALLOWED_HOSTS")
AGENT_BASH_DENIED_HOSTS = env_host_patterns("AGENT_BASH_DENIED_HOSTS")
AGENT_BASH_ALLOWED_PRIVATE_HOSTS = frozenset(
    host.strip().lower() for host in env_str("AGENT_BASH_ALLOWED_PRIVATE_HOSTS").split(",") if host.strip()
)
# Headers the proxy adds to plain-HTTP requests per host (a registry's token), kept out of the sandbox:
# a JSON object {"host[:port]": {"Header-Name": "value"}}. Not added over HTTPS (CONNECT is relayed as is).
AGENT_BASH_NETWORK_HEADERS = env_host_headers("AGENT_BASH_NETWORK_HEADERS")
AGENT_BASH_NETWORK_MAX_CONNECTIONS = env_int("AGENT_BASH_NETWORK_MAX_CONNECTIONS", 64, minimum=1)
AGENT_BASH_NETWORK_MAX_BYTES = env_int("AGENT_BASH_NETWORK_MAX_BYTES", 1 << 30, minimum=1024)
AGENT_BASH_NETWORK_CONNECT_TIMEOUT_SECONDS = env_float("AGENT_BASH_NETWORK_CONNECT_TIMEOUT_SECONDS", 10.0, minimum=0.1)
AGENT_BASH_NETWORK_IDLE_TIMEOUT_SECONDS = env_float("AGENT_BASH_NETWORK_IDLE_TIMEOUT_SECONDS", 60.0, minimum=0.1)
# Who a sandboxed command is when the server runs as root (never root itself: orchestrator/tools/sandbox.py),
# and its bounds: processes (RLIMIT_NPROC) and each process's address space (RLIMIT_AS), and, where a
# cgroup can be had ("auto"; "require": bash is not offered without one; "off": never), memory and
# processes for the sum of a call's processes (orchestrator/tools/cgroups.py, issue #49, item 4).
AGENT_SANDBOX_UID = env_int("AGENT_SANDBOX_UID", 65534, minimum=1, maximum=2**32 - 2)
AGENT_BASH_MAX_PROCESSES = env_int("AGENT_BASH_MAX_PROCESSES", 256, minimum=8, maximum=1_000_000)
AGENT_BASH_MAX_MEMORY_BYTES = env_int("AGENT_BASH_MAX_MEMORY_BYTES", 8 << 30, minimum=64 << 20)
AGENT_BASH_CGROUP = env_choice("AGENT_BASH_CGROUP", "auto", ("auto", "require", "off"))
# The size of each of a sandboxed command's /tmp, /var/tmp and /dev/shm (its home is in /tmp): memory
# while the call runs, gone when it ends.
AGENT_BASH_SCRATCH_BYTES = env_int("AGENT_BASH_SCRATCH_BYTES", 512 << 20, minimum=1 << 20, maximum=1 << 40)
# The server's environment variables bash sees besides PATH, HOME, the locale (LANG, LANGUAGE, LC_*),
# TERM and TZ: an allowlist, so a credential the server holds under any name stays out (issue #49, item 9).
_OWN_CREDENTIALS = (
    "ANTHROPIC_API_KEY",
    "AGUI_TOKEN",
    "DJANGO_SECRET_KEY",
    "DATABASE_URL",
    "REDIS_URL",
    "BRAVE_API_KEY",
    "AGENT_BASH_NETWORK_HEADERS",
)
AGENT_BASH_ENV_ALLOW = env_names("AGENT_BASH_ENV_ALLOW", refused=_OWN_CREDENTIALS)
GROUNDING_MAX_ITERATIONS = env_int("GROUNDING_MAX_ITERATIONS", 6, minimum=1)
FRONTEND_TOOL_TIMEOUT_SECONDS = env_float("FRONTEND_TOOL_TIMEOUT_SECONDS", 600.0, minimum=1.0)
# A sub-agent's own iteration cap and wall-clock timeout (the sub_agent tool; nesting stops at depth 2).
SUBAGENT_MAX_ITERATIONS = env_int("SUBAGENT_MAX_ITERATIONS", 25, minimum=1)
SUBAGENT_TIMEOUT_SECONDS = env_float("SUBAGENT_TIMEOUT_SECONDS", 900.0, minimum=1.0)
APPROVAL_TIMEOUT_SECONDS = env_float("APPROVAL_TIMEOUT_SECONDS", 600.0, minimum=1.0)
# How often each server process looks for waiting runs that are due (a deadline passed, or every
# answer given in the admin or the API) and goes on with those it claims.
WAIT_SWEEP_SECONDS = env_float("WAIT_SWEEP_SECONDS", 1.0, minimum=0.05)
QUEUED_MESSAGES_MAX = env_int("QUEUED_MESSAGES_MAX", 20, minimum=1)
TOOL_OUTPUT_MAX_BYTES = env_int("TOOL_OUTPUT_MAX_BYTES", 50_000, minimum=1000)
TOOL_OUTPUT_MAX_LINES = env_int("TOOL_OUTPUT_MAX_LINES", 600, minimum=20)

# MCP servers as tool sources (issue #26): a JSON file in the .mcp.json shape (agents/mcp/config.py).
# Unset: the .mcp.json beside manage.py, if there is one; blank or "off": none. A file that does not
# parse, or a server entry that cannot work, stops start-up naming the file, the server and the problem.
_mcp_servers = os.environ.get("MCP_SERVERS")
if _mcp_servers is None:
    MCP_SERVERS = str(_CHECKOUT / ".mcp.json") if (_CHECKOUT / ".mcp.json").is_file() else ""
elif _mcp_servers.strip().lower() in ("", "off"):
    MCP_SERVERS = ""
else:
    MCP_SERVERS = str(Path(_mcp_servers.strip()).expanduser().resolve())
if MCP_SERVERS:
    load_mcp_servers(Path(MCP_SERVERS))
# A tools/call that gets no answer in this time fails (and is cancelled on the server).
MCP_CALL_TIMEOUT_SECONDS = env_float("MCP_CALL_TIMEOUT_SECONDS", 60.0, minimum=0.1)
# Starting a server (its process or session, the handshake and the tool list) takes at most this long.
MCP_START_TIMEOUT_SECONDS = env_float("MCP_START_TIMEOUT_SECONDS", 30.0, minimum=0.1)
# A server that exits or stops answering is started again after this, doubling up to the maximum.
MCP_RESTART_BACKOFF_SECONDS = env_float("MCP_RESTART_BACKOFF_SECONDS", 1.0, minimum=0.01)
MCP_RESTART_BACKOFF_MAX_SECONDS = env_float("MCP_RESTART_BACKOFF_MAX_SECONDS", 60.0, minimum=0.01)
# The largest message a stdio MCP server may send (a call's answer over it fails, saying so).
MCP_MAX_MESSAGE_BYTES = env_int("MCP_MAX_MESSAGE_BYTES", 64 * 1024 * 1024, minimum=65536)
# stdio MCP servers run in bash's sandbox, seeing only what their entry names (issue #46, item 3); a
# server that cannot is not started, saying why. "off" runs them unconfined, as the server's user.
MCP_SANDBOX = env_choice("MCP_SANDBOX", "on", ("on", "off"))
# The variables a ``${VAR}`` in an MCP server entry made in the admin may name (issue #46, item 4):
# whoever edits an entry there would otherwise read the server's whole environment through it. The
# MCP_SERVERS file's entries, written by whoever runs the server, expand from the environment.
MCP_ENV_ALLOWLIST = env_names("MCP_ENV_ALLOWLIST", refused=_OWN_CREDENTIALS, reaches="an MCP server")

# The web tools. web_search (Brave Search) is offered only with a key; web_fetch always, and both
# ask before each call unless a permission rule allows the domain.
BRAVE_API_KEY = env_str("BRAVE_API_KEY")
BRAVE_SEARCH_URL = env_url(
    "BRAVE_SEARCH_URL", "https://api.search.brave.com/res/v1/web/search", schemes=("http", "https")
)
WEB_FETCH_MAX_BYTES = env_int("WEB_FETCH_MAX_BYTES", 2 * 1024 * 1024, minimum=1024)
WEB_FETCH_TIMEOUT_SECONDS = env_float("WEB_FETCH_TIMEOUT_SECONDS", 20.0, minimum=0.1)
WEB_FETCH_MAX_REDIRECTS = env_int("WEB_FETCH_MAX_REDIRECTS", 5, minimum=0, maximum=20)
# Hosts web_fetch may reach although they resolve to a loopback, private or link-local address
# (by default none: the agent must not be a way into this server or the network behind it).
WEB_ALLOWED_PRIVATE_HOSTS = frozenset(
    host.strip().lower() for host in env_str("WEB_ALLOWED_PRIVATE_HOSTS").split(",") if host.strip()
)

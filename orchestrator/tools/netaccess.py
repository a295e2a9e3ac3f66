"""request_network_access: the agent asks for bash to reach a host its proxy refused (issue #47).

A call always asks a person (it reaches the network: no auto-approve covers it) unless a permission
rule decides. "Yes" lets every later bash command of this thread reach the host; "yes, always" also
adds it to the agent's own list (recorded with the answer, threads/waits.py); "no" grants nothing.
The grant only widens the allow list: the deny lists still win, and loopback, private, link-local
and metadata addresses stay refused unless the operator lists the host in
AGENT_BASH_ALLOWED_PRIVATE_HOSTS."""

from __future__ import annotations

from typing import Any

from orchestrator.tools.base import Tool, ToolContext, ToolError, ToolOutput
from orchestrator.tools.egress import HostPattern, parse_host_pattern
from orchestrator.tools.targets import HostTarget

NAME = "request_network_access"
MAX_REASON_CHARS = 2000


def requested(arguments: dict[str, Any]) -> HostPattern:
    """The host (and port) a call asks for; ValueError saying what is wrong with the arguments."""
    host, port, reason = arguments.get("host"), arguments.get("port"), arguments.get("reason")
    if not isinstance(host, str) or not host.strip():
        raise ValueError("argument 'host' must be a host name or IP address, such as pypi.org")
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON_CHARS:
        raise ValueError(f"argument 'reason' must say in words (at most {MAX_REASON_CHARS} characters) why")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int)):
        raise ValueError("argument 'port' must be a number from 1 to 65535, or left out for any port")
    pattern = parse_host_pattern(host)
    if pattern.port is not None and port is not None and pattern.port != port:
        raise ValueError("give the port once, in 'port'")
    if port is not None:
        pattern = parse_host_pattern(f"[{host.strip()}]:{port}" if ":" in pattern.host else f"{host.strip()}:{port}")
    return pattern


def _check(arguments: dict[str, Any]) -> str | None:
    try:
        requested(arguments)
    except ValueError as exc:
        return f"not asked: {exc}"
    return None


def _approval_text(arguments: dict[str, Any]) -> str:
    pattern = requested(arguments)
    where = f"{pattern}" if pattern.port is not None else f"{pattern} (any port)"
    return (
        f"Let bash reach {where} through Threadline's network proxy?\n"
        f"The agent says: {str(arguments['reason']).strip()}\n"
        "Yes: for this thread. Yes, always: for every thread of this agent. No: it stays refused."
    )


async def _request(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    try:
        pattern = requested(arguments)
    except ValueError as exc:
        raise ToolError(str(exc)) from exc
    sandbox = context.workspace.sandbox
    if sandbox is None or sandbox.egress is None or context.network is None:
        raise ToolError("bash has no network on this server (AGENT_BASH_NETWORK=off): no host can be granted")
    policy = await context.network.policy(sandbox.egress)
    denied = policy.denial(pattern)
    if denied is not None:
        raise ToolError(f"the operator denies {pattern} ({denied} is on a deny list); no approval can let it through")
    await context.network.grant(pattern)
    return ToolOutput(
        f"granted: bash commands of this thread may now reach {pattern} through Threadline's proxy; run the "
        "command again. Loopback, private and metadata addresses stay refused unless the operator allows them."
    )


REQUEST_NETWORK_ACCESS = Tool(
    name=NAME,
    description=(
        "Ask the person for bash to reach a host that Threadline's network proxy refused (its 403 says so): "
        "give the host (a name such as pypi.org, or *.example.com), optionally the port, and the reason. "
        "The run waits for the answer; once granted, run the same command again."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "host": {"type": "string", "description": "The host name or IP address, e.g. files.pythonhosted.org."},
            "port": {"type": "integer", "description": "The port, when only one is needed (e.g. 443)."},
            "reason": {"type": "string", "description": "Why the task needs it, for the person who decides."},
        },
        "required": ["host", "reason"],
    },
    func=_request,
    read_only=False,
    network=True,
    targets=HostTarget(),
    approval_text=_approval_text,
    check=_check,
)

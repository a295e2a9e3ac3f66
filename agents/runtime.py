"""Builds what a run needs from settings and the Agent row: provider, tools, loop config."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings

from agents.confinement import bash_choice, server_workspace
from agents.mcp.pool import ServerStatus, current_pool, mcp_servers_ready
from agents.models import Agent
from agents.permissions import ScopedRules
from orchestrator.loop import LoopConfig
from orchestrator.providers.base import ModelProvider
from orchestrator.providers.demo import DemoProvider
from orchestrator.request import INTERACTIVE, UNATTENDED, Scenario
from orchestrator.subagents import SubAgentLimits
from orchestrator.tools.base import Tool, ToolContext, ToolRegistry
from orchestrator.tools.catalog import SERVER_TOOLS
from orchestrator.tools.mutating import BASH
from orchestrator.tools.netaccess import REQUEST_NETWORK_ACCESS
from orchestrator.tools.netguard import WebConfig
from orchestrator.tools.shaping import OutputLimits
from orchestrator.tools.web import WEB_SEARCH

log = logging.getLogger(__name__)


_PROVIDERS: dict[tuple[str, str, str, int, float, float], ModelProvider] = {}


def provider_for(agent: Agent) -> ModelProvider:
    """One provider (and so one HTTP connection pool) per key, endpoint and model."""
    api_key: str = settings.ANTHROPIC_API_KEY
    base_url: str = settings.ANTHROPIC_BASE_URL
    model: str = agent.model or settings.ANTHROPIC_MODEL
    retries: int = settings.ANTHROPIC_MAX_RETRIES
    timeout: float = settings.ANTHROPIC_TIMEOUT_SECONDS
    demo_delay: float = settings.DEMO_MODEL_DELAY_SECONDS
    key = (api_key, base_url, model, retries, timeout, demo_delay)
    provider = _PROVIDERS.get(key)
    if provider is None:
        if not api_key:
            log.warning("ANTHROPIC_API_KEY is not set: serving the OFFLINE DEMO MODEL, not Claude")
            provider = DemoProvider(delay=demo_delay)
        else:
            # Imported here: the anthropic SDK is about 65 MiB of modules, which a
            # server on the demo model never needs (issue #14, a lean process).
            from orchestrator.providers.anthropic import AnthropicProvider

            provider = AnthropicProvider(
                api_key=api_key, model=model, base_url=base_url, max_retries=retries, timeout=timeout
            )
        _PROVIDERS[key] = provider
    return provider


async def close_providers() -> None:
    """Closes the providers' HTTP clients (at shutdown, and between tests that change endpoints)."""
    providers = list(_PROVIDERS.values())
    _PROVIDERS.clear()
    for provider in providers:
        close = getattr(provider, "aclose", None)
        if close is not None:
            await close()


def tools_for(extra: Iterable[Tool] = ()) -> ToolRegistry:
    """The agent's tools: the catalogue's and ``extra`` (MCP servers' tools), with web_search only with
    a Brave key, the mutating tools unless switched off, and bash only where it can run sandboxed, or
    where AGENT_BASH_SANDBOX=off says it may run without."""
    return ToolRegistry.of(tool for tool in (*SERVER_TOOLS, *extra) if _offered(tool))


async def run_tools(agent: Agent) -> ToolRegistry:
    """``tools_for`` with the tools of the MCP servers ``agent`` gets (started on first use)."""
    pool = await mcp_servers_ready()
    return tools_for(pool.tools(agent_mcp_servers(agent), taken=(tool.name for tool in SERVER_TOOLS)))


async def mcp_servers_of(agent: Agent) -> list[ServerStatus]:
    """The MCP servers ``agent`` gets, as they are now (started on first use)."""
    pool = await mcp_servers_ready()
    return pool.statuses(agent_mcp_servers(agent), taken=(tool.name for tool in SERVER_TOOLS))


def agent_tool_names(agent: Agent) -> list[str]:
    """The names of the tools a run of ``agent`` is offered now (with the MCP servers that are up), from
    any thread; the client's own tools, declared per run, are not among them."""
    pool = current_pool()
    mcp = pool.tools(agent_mcp_servers(agent), taken=(tool.name for tool in SERVER_TOOLS)) if pool else []
    return list(tools_for(mcp).tools)


def agent_mcp_servers(agent: Agent) -> list[str] | None:
    """The names of the MCP servers ``agent`` gets: the ones it names, or None (none named) for every
    enabled one. A name it keeps of a server that is disabled, or gone from the file, gives nothing:
    never every server instead."""
    return list(agent.mcp_servers) or None


def _offered(tool: Tool) -> bool:
    if tool is WEB_SEARCH:
        return bool(settings.BRAVE_API_KEY)
    if tool.read_only:
        return True
    if settings.AGENT_MUTATING_TOOLS == "off":
        return False
    if tool is REQUEST_NETWORK_ACCESS:  # only where bash's proxy has a list a grant can add to
        choice = bash_choice()
        return choice.offered and choice.sandbox is not None and settings.AGENT_BASH_NETWORK == "allowlist"
    return tool is not BASH or bash_choice().offered


def subagent_limits() -> SubAgentLimits:
    return SubAgentLimits(
        max_iterations=settings.SUBAGENT_MAX_ITERATIONS, timeout_seconds=settings.SUBAGENT_TIMEOUT_SECONDS
    )


def web_config() -> WebConfig:
    """What web_fetch may reach and how much it reads; an attachment's ``url`` is fetched under the
    same guard (agui/attachment_urls.py)."""
    return WebConfig(
        brave_api_key=settings.BRAVE_API_KEY,
        brave_search_url=settings.BRAVE_SEARCH_URL,
        max_bytes=settings.WEB_FETCH_MAX_BYTES,
        timeout_seconds=settings.WEB_FETCH_TIMEOUT_SECONDS,
        max_redirects=settings.WEB_FETCH_MAX_REDIRECTS,
        allowed_private_hosts=settings.WEB_ALLOWED_PRIVATE_HOSTS,
    )


def tool_context(*, agent_name: str = "", thread_id: str = "", workspace: Path | None = None) -> ToolContext:
    """A fresh context per run: its read ledger and todo list are the run's own. The file tools
    drop what the permission rules of this agent and thread deny (``ScopedRules``), and work in
    ``workspace`` (the thread's, agents/workspaces.py; by default ``AGENT_WORKSPACE``)."""
    max_lines: int = settings.TOOL_OUTPUT_MAX_LINES
    keep = min(200, max_lines // 3)  # 200 head and 200 tail lines at the default 600
    limits = OutputLimits(max_bytes=settings.TOOL_OUTPUT_MAX_BYTES, max_lines=max_lines, keep_head=keep, keep_tail=keep)
    web = web_config()
    confined = server_workspace(ScopedRules(agent_name, thread_id), workspace)
    return ToolContext(
        workspace=confined, output_limits=limits, web=web, bash_env_allow=tuple(settings.AGENT_BASH_ENV_ALLOW)
    )


def loop_config(agent: Agent, provider: ModelProvider, *, grounding: str = "") -> LoopConfig:
    """``grounding`` is the session's override of the agent's grounding mode, if it has one."""
    return LoopConfig(
        model=provider.info.id,
        system_prompt=agent.system_prompt,
        max_tokens=agent.max_tokens,
        thinking_budget=agent.thinking_budget,
        max_iterations=min(agent.max_iterations, settings.AGENT_MAX_ITERATIONS),
        wall_clock_seconds=float(agent.max_run_seconds),
        context_window=context_budget(provider),
        compact_at=settings.COMPACTION_AT_SHARE,
        grounding=grounding or agent.grounding_mode,
        grounding_max_iterations=settings.GROUNDING_MAX_ITERATIONS,
        token_budget=agent.token_budget,
        stream_retries=settings.MODEL_STREAM_RETRIES,
        retry_backoff=settings.MODEL_RETRY_BACKOFF_SECONDS,
        environment=agent.environment_block,
    )


def context_budget(provider: ModelProvider) -> int:
    """The tokens a prompt may grow to before compaction (at COMPACTION_AT_SHARE of it)."""
    budget: int = settings.COMPACTION_WINDOW_TOKENS
    window = provider.info.context_window
    return min(budget, window) if budget and window else budget or window


def chat_scenario() -> Scenario:
    """A chat's scenario: with nobody to answer questions (AGUI_HUMAN_IN_THE_LOOP=off), the agent is
    not offered ask_user."""
    return INTERACTIVE if settings.AGUI_HUMAN_IN_THE_LOOP else UNATTENDED

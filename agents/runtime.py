"""Builds what a run needs from settings and the Agent row: provider, tools, loop config."""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings

from agents.loop import LoopConfig
from agents.models import Agent
from agents.providers.base import ModelProvider
from agents.providers.demo import DemoProvider
from agents.subagents import SubAgentLimits
from agents.tools.ask import ASK_USER
from agents.tools.base import ToolContext, ToolRegistry, Workspace
from agents.tools.grounding import GROUNDING_REPORT
from agents.tools.mutating import MUTATING_TOOLS
from agents.tools.readonly import READ_ONLY_TOOLS
from agents.tools.shaping import OutputLimits
from agents.tools.subagent import SUB_AGENT

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
            from agents.providers.anthropic import AnthropicProvider

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


def tools_for(agent: Agent) -> ToolRegistry:
    if settings.AGENT_MUTATING_TOOLS != "off":
        return ToolRegistry.of((*READ_ONLY_TOOLS, ASK_USER, GROUNDING_REPORT, SUB_AGENT, *MUTATING_TOOLS))
    return ToolRegistry.of((*READ_ONLY_TOOLS, ASK_USER, GROUNDING_REPORT, SUB_AGENT))


def subagent_limits() -> SubAgentLimits:
    return SubAgentLimits(
        max_iterations=settings.SUBAGENT_MAX_ITERATIONS, timeout_seconds=settings.SUBAGENT_TIMEOUT_SECONDS
    )


def tool_context() -> ToolContext:
    """A fresh context per run: its read ledger and todo list are the run's own."""
    max_lines: int = settings.TOOL_OUTPUT_MAX_LINES
    keep = min(200, max_lines // 3)  # 200 head and 200 tail lines at the default 600
    limits = OutputLimits(max_bytes=settings.TOOL_OUTPUT_MAX_BYTES, max_lines=max_lines, keep_head=keep, keep_tail=keep)
    return ToolContext(workspace=Workspace(Path(settings.AGENT_WORKSPACE)), output_limits=limits)


def loop_config(agent: Agent, provider: ModelProvider, *, grounding: str = "") -> LoopConfig:
    """``grounding`` is the session's override of the agent's grounding mode, if it has one."""
    return LoopConfig(
        model=provider.info.id,
        system_prompt=agent.system_prompt,
        max_tokens=agent.max_tokens,
        thinking_budget=agent.thinking_budget,
        max_iterations=min(agent.max_iterations, settings.AGENT_MAX_ITERATIONS),
        wall_clock_seconds=float(agent.max_run_seconds),
        context_window=settings.COMPACTION_WINDOW_TOKENS or provider.info.context_window,
        compact_at=settings.COMPACTION_AT_SHARE,
        grounding=grounding or agent.grounding_mode,
        grounding_max_iterations=settings.GROUNDING_MAX_ITERATIONS,
        token_budget=agent.token_budget,
        stream_retries=settings.MODEL_STREAM_RETRIES,
        retry_backoff=settings.MODEL_RETRY_BACKOFF_SECONDS,
    )

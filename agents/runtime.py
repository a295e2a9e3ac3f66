"""Builds what a run needs from settings and the Agent row: provider, tools, loop config."""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

from django.conf import settings

from agents.loop import LoopConfig
from agents.models import Agent
from agents.providers.anthropic import AnthropicProvider
from agents.providers.base import ModelProvider
from agents.providers.demo import DemoProvider
from agents.tools.base import ToolContext, ToolRegistry, Workspace
from agents.tools.readonly import READ_ONLY_TOOLS

log = logging.getLogger(__name__)


@lru_cache(maxsize=32)
def _provider(api_key: str, base_url: str, model: str, max_retries: int, timeout: float, demo_delay: float) -> ModelProvider:
    if not api_key:
        log.warning("ANTHROPIC_API_KEY is not set: serving the OFFLINE DEMO MODEL, not Claude")
        return DemoProvider(delay=demo_delay)
    return AnthropicProvider(api_key=api_key, model=model, base_url=base_url, max_retries=max_retries, timeout=timeout)


def provider_for(agent: Agent) -> ModelProvider:
    """One provider (and so one HTTP connection pool) per key, endpoint and model."""
    return _provider(
        settings.ANTHROPIC_API_KEY,
        settings.ANTHROPIC_BASE_URL,
        agent.model or settings.ANTHROPIC_MODEL,
        settings.ANTHROPIC_MAX_RETRIES,
        settings.ANTHROPIC_TIMEOUT_SECONDS,
        settings.DEMO_MODEL_DELAY_SECONDS,
    )


def tools_for(agent: Agent) -> ToolRegistry:
    return ToolRegistry.of(READ_ONLY_TOOLS)


def tool_context() -> ToolContext:
    return ToolContext(workspace=Workspace(Path(settings.AGENT_WORKSPACE)))


def loop_config(agent: Agent, provider: ModelProvider) -> LoopConfig:
    return LoopConfig(
        model=provider.info.id,
        system_prompt=agent.system_prompt,
        max_tokens=agent.max_tokens,
        thinking_budget=agent.thinking_budget,
        max_iterations=min(agent.max_iterations, settings.AGENT_MAX_ITERATIONS),
        stream_retries=settings.MODEL_STREAM_RETRIES,
        retry_backoff=settings.MODEL_RETRY_BACKOFF_SECONDS,
    )

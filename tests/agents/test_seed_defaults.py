"""The agents' defaults: 20 iterations and 4096 output tokens per agent, a context budget of
160,000 tokens (or the model's window, if smaller), the environment block on."""

from __future__ import annotations

from django.test import override_settings

from agents.models import Agent
from agents.runtime import context_budget, loop_config
from orchestrator.loop import LoopConfig
from orchestrator.providers.base import ModelInfo
from orchestrator.providers.demo import DemoProvider


def test_a_new_agent_has_the_seeds_limits():
    agent = Agent(name="fresh")
    assert (agent.max_iterations, agent.max_tokens, agent.environment_block) == (20, 4096, True)
    config = LoopConfig(model="m")
    assert (config.max_iterations, config.max_tokens, config.context_window) == (20, 4096, 160_000)


def test_the_context_budget_is_160k_or_the_models_window_if_smaller():
    provider = DemoProvider(delay=0)
    assert provider.info.context_window == 200_000
    assert context_budget(provider) == 160_000
    provider.info = ModelInfo(id="small", name="small", provider="test", context_window=100_000)
    assert context_budget(provider) == 100_000
    with override_settings(COMPACTION_WINDOW_TOKENS=0):
        assert context_budget(provider) == 100_000
    with override_settings(COMPACTION_WINDOW_TOKENS=50_000):
        assert context_budget(provider) == 50_000


def test_the_loop_gets_the_agents_switch_for_the_environment_block(db):
    agent = Agent.objects.create(name="quiet", environment_block=False)
    assert loop_config(agent, DemoProvider(delay=0)).environment is False
    assert loop_config(Agent.objects.create(name="chatty"), DemoProvider(delay=0)).environment is True


def test_a_chat_agent_grounds_by_prompt_unless_told_otherwise(db):
    """The prompt grounding mode is the default for agents people chat with (and for sub-agents)."""
    assert Agent(name="fresh").grounding_mode == "prompt"
    assert Agent.objects.get(name="coder").grounding_mode == "prompt"  # seeded by the migrations

"""The loop's configuration, where a run stands, and its next step, decided in one place.

``LoopConfig`` bounds a run; ``Progress`` is one run's state: the model's view of the conversation
and every counter. ``next_step`` checks every limit, in one order, and says what the loop does at an
iteration's boundary: ``Stop`` (a cancel), ``Pause`` (a limit: the checkpoint is kept, "continue"
goes on from it), ``OverBudget`` (a spend cap: the run ends in error, its work committed) or
``CallModel``; ``model_request`` is what that call asks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from orchestrator.budget import BudgetStanding, CapStanding
from orchestrator.events import PauseReason, RunListener
from orchestrator.providers.base import ModelReply, ModelRequest, TokenCount
from orchestrator.request import RunRequest
from orchestrator.toolcalls import Repeats
from orchestrator.tools.base import ToolRegistry
from orchestrator.tools.grounding import GROUNDING_REPORT, gate_allows
from orchestrator.tools.subagent import SUB_AGENT
from orchestrator.waits import Counters


@dataclass(slots=True)
class LoopConfig:
    model: str
    system_prompt: str = ""
    max_tokens: int = 4096
    thinking_budget: int = 0
    max_iterations: int = 20
    wall_clock_seconds: float = 0.0  # 0: no cap
    token_budget: int = 0  # input + output tokens per run; 0: no budget
    stream_retries: int = 2
    retry_backoff: float = 1.0
    # The same call (tool and arguments) this many times in a row is stopped as a loop.
    repeat_limit: int = 3
    # Compaction: before a call whose prompt would pass this share of the window,
    # older turns are summarised, keeping the last few turns as they are.
    context_window: int = 160_000  # the context budget: the model's window, or less
    compact_at: float = 0.75
    keep_turns: int = 4
    # Grounding: "off", "prompt" (asked for in the system prompt) or "enforced" (only
    # read-only tools until a grounding_report says understood, or this many iterations).
    grounding: str = "off"
    grounding_max_iterations: int = 6
    # Append the environment block (date, OS, workspace, git) to the system prompt of each run.
    environment: bool = False


@dataclass(slots=True, frozen=True)
class Stop:
    """A cancel was asked for: the run ends at this safe point."""


@dataclass(slots=True, frozen=True)
class Pause:
    """A limit is reached: the run stops as paused, its checkpoint kept."""

    reason: PauseReason


@dataclass(slots=True, frozen=True)
class OverBudget:
    """A spend cap is reached (orchestrator/budget.py): the run ends with ``budget_exceeded``. Not a
    pause: going on needs the cap to reset or be raised, not a "continue"."""

    cap: CapStanding


@dataclass(slots=True, frozen=True)
class CallModel:
    """Nothing stops the run: the model is called."""


NextStep = Stop | Pause | OverBudget | CallModel


@dataclass(slots=True)
class Progress:
    """Where one run stands: the model's view of the conversation and every counter, in one place."""

    turns: list[dict[str, Any]]
    system: str
    iteration: int
    tokens: int  # the one token tally: the model's calls, compaction's, the sub-agents'
    grounded: bool
    repeats: Repeats
    started: float  # time.monotonic() less the time already worked before a wait
    can_ask: bool  # a question can be put to a person: the grounding report's too, not only ask_user's
    model: str  # the model the listeners were last told of (on_model)
    counted: int = 0  # prompt tokens the model reported for the turns before ``counted_upto``
    counted_upto: int = 0

    def take_reply(self, reply: ModelReply) -> None:
        """The model's turn joins the conversation; its tokens count on the tally, and its prompt
        on the estimate compaction reads."""
        usage = reply.usage
        self.counted = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens + usage.output_tokens
        self.counted_upto = len(self.turns) + 1  # the reply is counted in its output tokens
        self.tokens += self.counted
        self.turns.append({"role": "assistant", "content": reply.content})
        self.model = reply.model or self.model

    def spend(self, usage: TokenCount) -> None:
        """What a summary or a sub-agent spent counts on the run's token tally."""
        self.tokens += usage.input_tokens + usage.output_tokens

    def counters(self) -> Counters:
        return Counters(
            iteration=self.iteration,
            tokens=self.tokens,
            elapsed=time.monotonic() - self.started,
            grounded=self.grounded,
            last_call=self.repeats.last_call,
            repeats=self.repeats.count,
        )


def next_step(
    run: Progress, config: LoopConfig, listener: RunListener, spend: BudgetStanding | None = None
) -> NextStep:
    """Every limit, checked in this order: the iteration cap, a cancel (``should_continue``), the
    wall-clock cap, the token budget, the spend caps (``spend``: where they stood when the run's
    spend was last settled)."""
    if run.iteration >= config.max_iterations:
        return Pause(PauseReason.MAX_ITERATIONS)
    if not listener.should_continue():
        return Stop()
    if config.wall_clock_seconds and time.monotonic() - run.started >= config.wall_clock_seconds:
        return Pause(PauseReason.WALL_CLOCK)
    if config.token_budget and run.tokens >= config.token_budget:
        return Pause(PauseReason.TOKEN_BUDGET)
    if spend is not None and (cap := spend.reached()) is not None:
        return OverBudget(cap)
    return CallModel()


def model_request(
    config: LoopConfig, run: Progress, request: RunRequest, tools: ToolRegistry, *, delegates: bool
) -> ModelRequest:
    """The next call's request. The tools are read each time: a client may change its tools between
    two AG-UI runs of this run. Until the agent is grounded (enforced mode) it is offered only what
    cannot change anything; ``delegates`` is False where sub-agents may not go deeper."""
    reports = config.grounding in ("prompt", "enforced")
    specs = [
        tool.spec()
        for tool in tools.tools.values()
        if request.scenario.offers(tool)
        and (reports or tool is not GROUNDING_REPORT)
        and gate_allows(tool, grounded=run.grounded)
        and (tool is not SUB_AGENT or delegates)
    ]
    return ModelRequest(
        model=config.model,
        system=run.system,
        messages=run.turns,
        tools=specs,
        max_tokens=config.max_tokens,
        thinking_budget=config.thinking_budget,
    )

"""The run loop: call the model, run the tools it asks for, repeat until it stops.

It reports everything to its listener (agents/events.py) and keeps the model's
view of the conversation in a SessionStore. It knows nothing of HTTP or AG-UI.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from agents.approvals import AllowAll, Approver
from agents.callstream import CallStream
from agents.compaction import SUMMARY_PROMPT, compacted, estimate_tokens, render_for_summary, split_point
from agents.environment import environment_block
from agents.events import (
    AssistantMessage,
    Compacted,
    GroundingReported,
    Listeners,
    Outcome,
    PauseReason,
    Phase,
    PhaseChanged,
    RunInfo,
    RunListener,
    RunPaused,
    TodosChanged,
    ToolMessage,
    ToolResult,
    Usage,
)
from agents.memory import heal_turns
from agents.providers.base import (
    ModelError,
    ModelProvider,
    ModelReply,
    ModelRequest,
    TokenCount,
)
from agents.request import RunRequest, render_prompt
from agents.subagents import (
    DEFAULT_SUBAGENT_LIMITS,
    MemorySubAgentStore,
    SubAgentLimits,
    SubAgentStores,
    run_sub_agent,
)
from agents.tools.ask import ASK_USER
from agents.tools.base import Tool, ToolContext, ToolOutput, ToolRegistry
from agents.tools.grounding import GROUNDING_REPORT, gate_allows, gate_refusal, grounding_prompt
from agents.tools.subagent import SUB_AGENT

log = logging.getLogger(__name__)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


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


class SessionStore(Protocol):
    """Where the model's view of the conversation lives between runs."""

    async def load_turns(self) -> list[dict[str, Any]]: ...

    async def commit(
        self,
        turns: list[dict[str, Any]],
        messages: list[AssistantMessage | ToolMessage],
        usage: TokenCount,
    ) -> None:
        """Saves the turns and appends the new transcript messages, atomically."""
        ...

    async def pause(self, reason: PauseReason) -> None:
        """Records why the run stopped; the turns committed so far are the checkpoint."""
        ...


class _Stopped(Exception):
    """A cancel arrived while the model was streaming."""


class AgentLoop:
    def __init__(
        self,
        *,
        provider: ModelProvider,
        tools: ToolRegistry,
        tool_context: ToolContext,
        config: LoopConfig,
        store: SessionStore,
        listener: RunListener,
        approver: Approver | None = None,
        make_id: Callable[[str], str] = new_id,
        depth: int = 0,
        task_id: str = "",
        subagent_stores: SubAgentStores = MemorySubAgentStore,
        subagent_limits: SubAgentLimits = DEFAULT_SUBAGENT_LIMITS,
    ) -> None:
        """``depth`` and ``task_id`` place a sub-agent's loop under its parent (0 and "" for a
        top-level run); ``subagent_stores`` keeps the children's runs, ``subagent_limits`` bounds them."""
        self.provider = provider
        self.tools = tools
        self.tool_context = tool_context
        self.config = config
        self.store = store
        self.listener = listener
        self.approver: Approver = approver or AllowAll()
        self.make_id = make_id
        self.depth = depth
        self.task_id = task_id
        self.subagent_stores = subagent_stores
        self.subagent_limits = subagent_limits
        self.thread_id = ""
        self._child_tokens = 0  # the children's tokens since the loop last counted them
        self._last_call = ""
        self._repeats = 0
        self._grounded = True
        self.tokens_spent = 0  # this run's tokens so far (its children's included), for their budget
        self._system = config.system_prompt
        tool_context.on_todos = self._todos_changed

    def delegable(self, tool: Tool, request: RunRequest) -> bool:
        """Whether a child of this run may be given ``tool``: what this run's scenario offers,
        and until this run is grounded (enforced mode), only what cannot change anything."""
        return request.scenario.offers(tool) and gate_allows(tool, grounded=self._grounded)

    def add_child_tokens(self, usage: TokenCount) -> None:
        """A child's tokens count on this run's token budget."""
        self._child_tokens += usage.input_tokens + usage.output_tokens
        self.tokens_spent += usage.input_tokens + usage.output_tokens

    def _todos_changed(self, todos: list[dict[str, str]]) -> None:
        self.listener.on_event(TodosChanged(tuple(dict(item) for item in todos)))

    async def run(self, request: RunRequest, *, run_id: str, thread_id: str) -> Outcome:
        """Runs to the end; ``on_finished`` is called exactly once, whatever happens.
        The request's own listeners hear the run beside the loop's."""
        if request.listeners:
            self.listener = Listeners(self.listener, *request.listeners)
        listener = self.listener
        self.thread_id = thread_id
        outcome = Outcome.ERROR
        try:
            listener.on_start(RunInfo(run_id=run_id, thread_id=thread_id, model=self.config.model))
            listener.on_model(self.config.model)
            outcome = await self._run(request)
        except asyncio.CancelledError:
            outcome = Outcome.CANCELLED
            raise
        except ModelError as exc:
            listener.on_error(exc, exc.message)
            outcome = Outcome.ERROR
        except Exception as exc:
            log.exception("run %s failed", run_id)
            listener.on_error(exc, f"internal error: {type(exc).__name__}")
            outcome = Outcome.ERROR
        finally:
            listener.on_finished(outcome)
        return outcome

    async def _run(self, request: RunRequest) -> Outcome:
        config = self.config
        turns: list[dict[str, Any]] = []
        if request.scenario.conversation_memory:
            turns, _closed = heal_turns(await self.store.load_turns())
        turns.append({"role": "user", "content": request.user_content()})
        turns, _ = heal_turns(turns)
        await self.store.commit(turns, [], TokenCount())
        self._system = render_prompt(config.system_prompt, request.prompt_variables)
        grounding = config.grounding in ("prompt", "enforced")
        self._system += grounding_prompt(
            config.grounding, max_iterations=config.grounding_max_iterations, tools=self.tools
        )
        self._system += await environment_block(self.tool_context.workspace.root) if config.environment else ""
        self._set_grounded(config.grounding != "enforced")
        started = time.monotonic()
        tokens = 0
        counted = 0  # prompt tokens the model reported for the turns before ``counted_upto``
        counted_upto = 0
        for iteration in range(config.max_iterations):
            if not self._grounded and iteration >= config.grounding_max_iterations:
                self._set_grounded(True)  # the gate opens anyway: grounding must not stall the run
            # Read each time: a client may change its tools between two AG-UI runs of this run.
            # Until the agent is grounded (enforced mode) it is offered only what cannot change anything.
            specs = [
                tool.spec()
                for tool in self.tools.tools.values()
                if request.scenario.offers(tool)
                and (grounding or tool is not GROUNDING_REPORT)
                and gate_allows(tool, grounded=self._grounded)
                and (tool is not SUB_AGENT or self.depth < self.subagent_limits.max_depth)
            ]
            # The iteration boundary is the safe point: everything so far is committed.
            if not self.listener.should_continue():
                return Outcome.CANCELLED
            if config.wall_clock_seconds and time.monotonic() - started >= config.wall_clock_seconds:
                return await self._pause(PauseReason.WALL_CLOCK)
            if config.token_budget and tokens >= config.token_budget:
                return await self._pause(PauseReason.TOKEN_BUDGET)
            prompt = counted + estimate_tokens(turns[counted_upto:])
            if prompt >= config.compact_at * config.context_window:
                compact = await self._compact(turns)
                if compact is not None:
                    turns, summary_usage = compact
                    tokens += summary_usage.input_tokens + summary_usage.output_tokens
                    await self.store.commit(turns, [], summary_usage)
                    counted, counted_upto = 0, 0
            try:
                reply, messages = await self._call_model(turns, specs)
            except _Stopped:
                return Outcome.CANCELLED
            usage = reply.usage
            counted = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens + usage.output_tokens
            counted_upto = len(turns) + 1  # the reply is counted in its output tokens
            tokens += counted
            turns.append({"role": "assistant", "content": reply.content})
            calls = [b for b in reply.content if b.get("type") == "tool_use"]
            if not calls:
                await self.store.commit(turns, list(messages), usage)
                return Outcome.SUCCESS
            # The calls are committed before they run: a process that dies mid-tool
            # leaves them open, and the next use of the session closes them.
            await self.store.commit(turns, list(messages), usage)
            results, tool_messages = await self._run_tools(calls, request)
            tokens, self._child_tokens = tokens + self._child_tokens, 0
            turns.append({"role": "user", "content": results})
            await self.store.commit(turns, list(tool_messages), TokenCount())
        return await self._pause(PauseReason.MAX_ITERATIONS)

    async def _compact(self, turns: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], TokenCount] | None:
        """Summarises the turns before the kept tail; None when there is nothing to compact or it failed."""
        split = split_point(turns, self.config.keep_turns)
        if split is None:
            return None
        emit = self.listener.on_event
        emit(PhaseChanged(Phase.COMPACTING, True))
        began = time.monotonic()
        request = ModelRequest(
            model=self.config.model,
            system=SUMMARY_PROMPT,
            messages=[{"role": "user", "content": render_for_summary(turns[:split])}],
            tools=[],
            max_tokens=min(self.config.max_tokens, 4096),
        )
        reply: ModelReply | None = None
        try:
            async with contextlib.aclosing(self.provider.stream(request)) as stream:
                async for item in stream:
                    if type(item) is ModelReply:
                        reply = item
        except ModelError as exc:
            log.warning("compaction failed (%s); the run goes on uncompacted", exc.message)
        finally:
            emit(PhaseChanged(Phase.COMPACTING, False))
        summary = "".join(b["text"] for b in reply.content if b.get("type") == "text") if reply else ""
        if not summary.strip() or reply is None:
            return None
        self.tokens_spent += reply.usage.input_tokens + reply.usage.output_tokens
        emit(Compacted(dropped_turns=split, duration_seconds=time.monotonic() - began))
        return compacted(summary, turns[split:]), reply.usage

    async def _pause(self, reason: PauseReason) -> Outcome:
        # A step of its own, so a client that shows steps shows the pause as well.
        self.listener.on_event(PhaseChanged(Phase.PAUSED, True))
        self.listener.on_event(RunPaused(reason))
        self.listener.on_event(PhaseChanged(Phase.PAUSED, False))
        await self.store.pause(reason)
        return Outcome.PAUSED

    async def _call_model(
        self, turns: list[dict[str, Any]], specs: list[dict[str, Any]]
    ) -> tuple[ModelReply, list[AssistantMessage]]:
        config = self.config
        request = ModelRequest(
            model=config.model,
            system=self._system,
            messages=turns,
            tools=specs,
            max_tokens=config.max_tokens,
            thinking_budget=config.thinking_budget,
        )
        emit = self.listener.on_event
        emit(PhaseChanged(Phase.PLANNING, True))
        attempt = 0
        began = time.monotonic()
        while True:
            call = CallStream(emit, self.make_id)
            reply: ModelReply | None = None
            should_continue = self.listener.should_continue
            try:
                async with contextlib.aclosing(self.provider.stream(request)) as stream:
                    async for item in stream:
                        if type(item) is ModelReply:
                            reply = item
                        else:
                            call.handle(item)  # type: ignore[arg-type]
                        # A cancel stops the model mid-reply: nothing of it is committed.
                        if not should_continue():
                            raise _Stopped
                if reply is None:
                    raise ModelError("the model returned no reply", retryable=True, code="early_end")
            except ModelError as exc:
                if exc.retryable and not call.emitted and attempt < config.stream_retries:
                    delay = config.retry_backoff * (2**attempt)
                    attempt += 1
                    log.warning("model call failed (%s); retry %d in %.1fs", exc.code, attempt, delay)
                    await asyncio.sleep(delay)
                    continue
                raise
            messages = call.finish(reply)
            emit(PhaseChanged(Phase.PLANNING, False))
            usage = reply.usage
            self.tokens_spent += (
                usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens + usage.output_tokens
            )
            self.listener.on_usage(
                Usage(
                    model=reply.model or config.model,
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    cache_read_tokens=usage.cache_read_tokens,
                    cache_write_tokens=usage.cache_write_tokens,
                    duration_seconds=time.monotonic() - began,
                )
            )
            for message in messages:
                self.listener.on_message(message)
            return reply, messages

    async def _ask_user(self, tool_call_id: str, arguments: dict[str, Any]) -> ToolOutput:
        question = arguments.get("question")
        if not isinstance(question, str) or not question.strip():
            return ToolOutput("argument 'question' must be a non-empty string", True)
        answer = await self.approver.ask(tool_call_id, question.strip())
        if answer.approved:
            return ToolOutput(answer.text or "(the user replied with nothing)")
        if answer.timed_out:
            return ToolOutput("the user did not answer in time; go on without it or stop and say why", True)
        return ToolOutput(f"the user did not answer: {answer.reason or 'declined'}", True)

    async def _grounding_report(self, tool_call_id: str, arguments: dict[str, Any]) -> ToolOutput:
        understood = arguments.get("understood")
        if not isinstance(understood, bool):
            return ToolOutput("argument 'understood' must be true or false", True)
        report = {
            "understood": understood,
            "relevantFiles": [f for f in arguments.get("relevant_files") or [] if isinstance(f, str)],
            "evidence": str(arguments.get("evidence") or ""),
        }
        if not understood and str(arguments.get("missing_info") or "").strip():
            report["missingInfo"] = str(arguments["missing_info"]).strip()
        question = arguments.get("question")
        if understood:
            self._set_grounded(True)
        elif isinstance(question, str) and question.strip():
            report["question"] = question.strip()
        self.listener.on_event(GroundingReported(report, self._grounded))
        if understood:
            return ToolOutput("grounding recorded; you may now change the workspace")
        if "question" in report:
            return await self._ask_user(tool_call_id, {"question": report["question"]})
        return ToolOutput("noted: keep investigating until you understand the task, then report again")

    def _set_grounded(self, grounded: bool) -> None:
        """Closes or opens the grounding gate; the time it is closed is the ``grounding`` phase."""
        if grounded != self._grounded:
            self.listener.on_event(PhaseChanged(Phase.GROUNDING, not grounded))
        self._grounded = grounded

    def _is_repeat(self, call: dict[str, Any]) -> bool:
        key = call["name"] + "\x00" + json.dumps(call.get("input"), sort_keys=True)
        if key == self._last_call:
            self._repeats += 1
        else:
            self._last_call, self._repeats = key, 1
        return self._repeats >= self.config.repeat_limit

    async def _run_tools(
        self, calls: list[dict[str, Any]], request: RunRequest
    ) -> tuple[list[dict[str, Any]], list[ToolMessage]]:
        emit = self.listener.on_event
        emit(PhaseChanged(Phase.EXECUTING, True))
        results: dict[str, ToolOutput] = {}
        messages: dict[str, ToolMessage] = {}

        looping = {call["id"] for call in calls if self._is_repeat(call)}

        async def run_one(call: dict[str, Any]) -> None:
            began = time.monotonic()
            arguments = call.get("input")
            client_message_id = ""
            if call["id"] in looping:
                output = ToolOutput(
                    f"stopped: this is the same {call['name']} call with the same arguments "
                    f"{self.config.repeat_limit} times in a row, which looks like a loop. "
                    "Its result would not change; try something different or explain what is blocking you.",
                    True,
                )
            elif not isinstance(arguments, dict):
                output = ToolOutput("tool arguments must be a JSON object", True)
            elif (tool := self.tools.get(call["name"])) is None or not request.scenario.offers(tool):
                output = ToolOutput(f"unknown tool {call['name']!r}", True)
            elif tool.frontend:
                answer = await self.approver.run_on_client(call["id"], tool.name, arguments)
                output = (
                    ToolOutput(answer.text)
                    if answer.approved
                    else ToolOutput(
                        "the client did not run this tool in time" if answer.timed_out else answer.reason, True
                    )
                )
                client_message_id = answer.message_id
            elif tool is ASK_USER:
                output = await self._ask_user(call["id"], arguments)
            elif tool is GROUNDING_REPORT:
                output = await self._grounding_report(call["id"], arguments)
            elif not gate_allows(tool, grounded=self._grounded):
                output = gate_refusal(tool)
            elif not (answer := await self.approver.decide(tool, call["id"], arguments)).approved:
                output = ToolOutput(answer.refusal(tool.name), True)
            elif tool is SUB_AGENT:
                output = await run_sub_agent(self, tool_call_id=call["id"], arguments=arguments, request=request)
            else:
                output = await self.tools.call(call["name"], arguments, self.tool_context)
            message_id = client_message_id or self.make_id("tool")
            results[call["id"]] = output
            messages[call["id"]] = ToolMessage(message_id, call["id"], output.content)
            emit(
                ToolResult(
                    call["id"],
                    call["name"],
                    output.content,
                    output.is_error,
                    message_id,
                    output.touched,
                    time.monotonic() - began,
                    from_client=bool(client_message_id),
                )
            )

        await asyncio.gather(*(run_one(call) for call in calls))
        emit(PhaseChanged(Phase.EXECUTING, False))
        for message in messages.values():
            self.listener.on_message(message)
        blocks = [
            {
                "type": "tool_result",
                "tool_use_id": call["id"],
                "content": results[call["id"]].content,
                **({"is_error": True} if results[call["id"]].is_error else {}),
            }
            for call in calls
        ]
        return blocks, list(messages.values())

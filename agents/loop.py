"""The run loop: call the model, run the tools it asks for, repeat until it stops.

It reports everything to its listener (agents/events.py) and keeps the model's
view of the conversation in a SessionStore. It knows nothing of HTTP or AG-UI.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from agents.approvals import AllowAll, Answer, Approver, Ask
from agents.callstream import CallStream
from agents.compaction import SUMMARY_PROMPT, compacted, estimate_tokens, render_for_summary, split_point
from agents.dispatch import (
    ApprovedCall,
    ClientCall,
    Delegate,
    GroundingReport,
    Question,
    Refused,
    WorkspaceCall,
    approved_call,
    classify,
)
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
    ToolProgress,
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
from agents.queued import Inbox, join_queued
from agents.request import RunRequest, render_prompt
from agents.subagents import (
    DEFAULT_SUBAGENT_LIMITS,
    ChildSpec,
    Delegated,
    MemorySubAgentStore,
    Parent,
    SubAgentLimits,
    SubAgentStores,
    resume_sub_agent,
    run_sub_agent,
)
from agents.tools.ask import ASK_USER
from agents.tools.base import Tool, ToolContext, ToolOutput, ToolRegistry
from agents.tools.grounding import GROUNDING_REPORT, gate_allows, grounding_prompt
from agents.tools.subagent import SUB_AGENT
from agents.waits import Checkpoint, ChildCheckpoint, Counters, DoneCall, OpenCall, Resumption, WaitKind

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


@dataclass(slots=True)
class _Batch:
    """What running one turn's calls gave: their results, or (``waiting``) the checkpoint to wait
    on; ``messages`` are the calls that ended in this pass, to be stored either way."""

    messages: list[ToolMessage]
    results: list[dict[str, Any]]
    waiting: Checkpoint | None = None


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
        inbox: Inbox | None = None,
    ) -> None:
        """``depth`` and ``task_id`` place a sub-agent's loop under its parent (0 and "" for a
        top-level run); ``subagent_stores`` keeps the children's runs, ``subagent_limits`` bounds them.
        ``inbox`` holds the messages sent while the run is in flight (none for a sub-agent)."""
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
        self.inbox = inbox
        self.thread_id = ""
        self._child_tokens = 0  # the children's tokens since the loop last counted them
        self._last_call = ""
        self._repeats = 0
        self._grounded = True
        self._can_ask = True
        self.tokens_spent = 0  # this run's tokens so far (its children's included), for their budget
        self._model = config.model  # the model the listeners were last told of (on_model)
        self._system = config.system_prompt
        # Set when the run ended as waiting: what it goes on from once answered.
        self.waiting: Checkpoint | None = None
        tool_context.on_todos = self._todos_changed
        tool_context.on_progress = self._tool_progress

    def delegable(self, tool: Tool, request: RunRequest) -> bool:
        """Whether a child of this run may be given ``tool``: what this run's scenario offers,
        and until this run is grounded (enforced mode), only what cannot change anything."""
        return request.scenario.offers(tool) and gate_allows(tool, grounded=self._grounded)

    def add_child_tokens(self, usage: TokenCount) -> None:
        """A child's tokens count on this run's token budget."""
        self._child_tokens += usage.input_tokens + usage.output_tokens
        self.tokens_spent += usage.input_tokens + usage.output_tokens

    def as_parent(self, request: RunRequest) -> Parent:
        """What a sub-agent this run delegates to now sees of it (agents/subagents.py)."""
        budget = self.config.token_budget
        return Parent(
            listener=self.listener,
            tools=self.tools,
            delegable=frozenset(name for name, tool in self.tools.tools.items() if self.delegable(tool, request)),
            limits=self.subagent_limits,
            stores=self.subagent_stores,
            depth=self.depth,
            task_id=self.task_id,
            thread_id=self.thread_id,
            model=self.config.model,
            request=request,
            make_id=self.make_id,
            budget_spent=bool(budget) and self.tokens_spent >= budget,
        )

    def new_child(self, spec: ChildSpec) -> AgentLoop:
        """A sub-agent's loop: this run's model, approver and workspace (with a context of its own),
        the child's tools, conversation and prompt, and what this run's token budget has left."""
        budget = self.config.token_budget
        config = dataclasses.replace(
            self.config,
            system_prompt=spec.system_prompt,
            max_iterations=spec.max_iterations,
            wall_clock_seconds=0.0,  # the sub-agent's timeout bounds it
            # Bounded by what its parent has left (seeds/003, SetMaxContextTokens); 0: the parent has no budget.
            token_budget=budget - self.tokens_spent if budget else 0,
            grounding="prompt",  # advisory: the parent has scoped the task, the child still reads first
        )
        context = self.tool_context
        return AgentLoop(
            provider=self.provider,
            tools=spec.tools,
            tool_context=ToolContext(
                workspace=context.workspace,
                output_limits=context.output_limits,
                write_lock=context.write_lock,
                web=context.web,
            ),
            config=config,
            store=spec.store,
            listener=spec.listener,
            approver=self.approver,
            make_id=self.make_id,
            depth=spec.depth,
            task_id=spec.task_id,
            subagent_stores=self.subagent_stores,
            subagent_limits=self.subagent_limits,
        )

    def _todos_changed(self, todos: list[dict[str, str]]) -> None:
        self.listener.on_event(TodosChanged(tuple(dict(item) for item in todos)))

    def _tool_progress(self, event: ToolProgress) -> None:
        self.listener.on_event(event)

    async def run(
        self, request: RunRequest, *, run_id: str, thread_id: str, resume: Resumption | None = None
    ) -> Outcome:
        """Runs to the end, or until a call needs an answer (``Outcome.WAITING``, with ``waiting``
        set); ``on_finished`` is called exactly once, whatever happens. With ``resume`` the run goes
        on from a checkpoint and its answers, then takes the request's message, if it has one.
        The request's own listeners hear the run beside the loop's."""
        if request.listeners:
            self.listener = Listeners(self.listener, *request.listeners)
        listener = self.listener
        self.thread_id = thread_id
        outcome = Outcome.ERROR
        try:
            listener.on_start(
                RunInfo(
                    run_id=run_id,
                    thread_id=thread_id,
                    model=self.config.model,
                    user_id=request.user_id,
                    parent_request_id=request.parent_request_id,
                    description=request.description,
                )
            )
            self._model = self.config.model
            listener.on_model(self._model)
            outcome = await self._run(request, resume)
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
            # The context's callback is this loop's own method: a reference cycle that held the run's
            # listeners, and through them its stream and frames, until the next full collection.
            self.tool_context.on_todos = None
            self.tool_context.on_progress = None
        return outcome

    async def _run(self, request: RunRequest, resume: Resumption | None) -> Outcome:
        config = self.config
        turns: list[dict[str, Any]] = []
        if resume is not None or request.scenario.conversation_memory:
            turns = await self.store.load_turns()
        if resume is None:
            turns, _closed = heal_turns(turns)
            counters = Counters(grounded=config.grounding != "enforced")
        else:
            counters = resume.checkpoint.counters
        self.tokens_spent = counters.tokens
        self._last_call, self._repeats = counters.last_call, counters.repeats
        # Whether a question can be put to a person: the grounding report's too, not only ask_user's.
        self._can_ask = self.approver.can_wait and request.scenario.offers(ASK_USER)
        self._system = render_prompt(config.system_prompt, request.prompt_variables)
        grounding = config.grounding in ("prompt", "enforced")
        self._system += grounding_prompt(
            config.grounding, max_iterations=config.grounding_max_iterations, tools=self.tools
        )
        workspace = self.tool_context.workspace
        self._system += await environment_block(workspace.root, sandbox=workspace.sandbox) if config.environment else ""
        self._set_grounded(counters.grounded)
        started = time.monotonic() - counters.elapsed
        tokens = counters.tokens
        first = counters.iteration

        def checkpoint_of(batch: Checkpoint, iteration: int) -> Checkpoint:
            batch.counters = Counters(
                iteration=iteration,
                tokens=tokens,
                elapsed=time.monotonic() - started,
                grounded=self._grounded,
                last_call=self._last_call,
                repeats=self._repeats,
            )
            return batch

        def goes_on() -> bool:
            """Whether the next iteration will call the model (the checks at its top)."""
            if not self.listener.should_continue():
                return False
            if config.wall_clock_seconds and time.monotonic() - started >= config.wall_clock_seconds:
                return False
            return not (config.token_budget and tokens >= config.token_budget)

        if resume is not None:
            # The model's last turn asked for the calls the checkpoint holds: finish them first.
            calls = [b for b in turns[-1]["content"] if b.get("type") == "tool_use"]
            batch = await self._run_tools(calls, request, resume)
            tokens, self._child_tokens = tokens + self._child_tokens, 0
            if batch.waiting is not None:
                return await self._wait(turns, batch.messages, checkpoint_of(batch.waiting, first))
            turns.append({"role": "user", "content": batch.results})
            await self.store.commit(turns, list(batch.messages), TokenCount())
            first += 1
        if resume is None or request.has_message():
            turns.append({"role": "user", "content": request.user_content()})
            turns, _ = heal_turns(turns)
            await self.store.commit(turns, [], TokenCount())
        # Messages queued behind the one that started the run (or sent while it waited) join it now.
        if goes_on():
            await self._read_inbox(turns)
        counted = 0  # prompt tokens the model reported for the turns before ``counted_upto``
        counted_upto = 0
        for iteration in range(first, config.max_iterations):
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
            batch = await self._run_tools(calls, request, None)
            tokens, self._child_tokens = tokens + self._child_tokens, 0
            if batch.waiting is not None:
                return await self._wait(turns, batch.messages, checkpoint_of(batch.waiting, iteration))
            turns.append({"role": "user", "content": batch.results})
            await self.store.commit(turns, list(batch.messages), TokenCount())
            # Only when the run goes on to answer it; else the message starts the next run.
            if iteration + 1 < config.max_iterations and goes_on():
                await self._read_inbox(turns)
        return await self._pause(PauseReason.MAX_ITERATIONS)

    async def _read_inbox(self, turns: list[dict[str, Any]]) -> None:
        """The tool boundary: messages sent while the run was in flight join its last user turn,
        after the results, before the next model call (seeds/004, FireOrQueue)."""
        if self.inbox is None:
            return
        queued = await self.inbox.take(turns)
        if not queued:
            return
        for message in queued:
            if not message.announced:
                self.listener.on_message_queued(message.request_id, message.display)
        turns[-1] = join_queued(turns[-1], queued)
        self.listener.on_queued_message_read([message.request_id for message in queued])

    async def _wait(self, turns: list[dict[str, Any]], finished: list[ToolMessage], checkpoint: Checkpoint) -> Outcome:
        """Ends the run until its open calls are answered; the calls that finished are stored now."""
        await self.store.commit(turns, list(finished), TokenCount())
        self.waiting = checkpoint
        return Outcome.WAITING

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
            if reply.model and reply.model != self._model:
                self._model = reply.model
                self.listener.on_model(reply.model)
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
                    task_id=self.task_id,
                )
            )
            for message in messages:
                self.listener.on_message(message)
            return reply, messages

    def _question(self, arguments: dict[str, Any]) -> str | ToolOutput:
        question = arguments.get("question")
        if not isinstance(question, str) or not question.strip():
            return ToolOutput("argument 'question' must be a non-empty string", True)
        if not self.approver.can_wait:
            return ToolOutput("nobody is there to answer questions in this run", True)
        return question.strip()

    def _grounding_report(self, arguments: dict[str, Any]) -> str | ToolOutput:
        """Records the report; a question in it (not understood) is put to the user."""
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
        elif isinstance(question, str) and question.strip() and not self._can_ask:
            # Nobody answers questions in this run (AGUI_HUMAN_IN_THE_LOOP=off, a sub-agent): the
            # question is recorded in the report and the model is told to go on without it.
            report["missingInfo"] = report.get("missingInfo") or question.strip()
            self.listener.on_event(GroundingReported(report, self._grounded))
            return ToolOutput(
                "noted, but nobody can answer questions in this run: keep investigating with the tools you "
                "have, then report again; if the answer cannot be found, say what is missing in your final reply"
            )
        elif isinstance(question, str) and question.strip():
            report["question"] = question.strip()
        self.listener.on_event(GroundingReported(report, self._grounded))
        if understood:
            return ToolOutput("grounding recorded; you may now change the workspace")
        if "question" in report:
            return self._question({"question": report["question"]})
        return ToolOutput("noted: keep investigating until you understand the task, then report again")

    @staticmethod
    def _answered(call: OpenCall, answer: Answer) -> ToolOutput:
        """A question's or a client tool's answer, as the model reads it."""
        if call.kind is WaitKind.CLIENT:
            if answer.approved and answer.error:
                # The client ran it and it failed: the model must not read that as a success.
                return ToolOutput(answer.error, True)
            if answer.approved:
                return ToolOutput(answer.text)
            if answer.timed_out:
                return ToolOutput("the client did not run this tool in time", True)
            if answer.superseded:
                return ToolOutput("not run: the user wrote a new message instead", True)
            return ToolOutput(answer.reason or "the client did not run this tool", True)
        if answer.approved:
            return ToolOutput(answer.text or "(the user replied with nothing)")
        if answer.timed_out:
            return ToolOutput("the user did not answer in time; go on without it or stop and say why", True)
        if answer.superseded:
            return ToolOutput("the user did not answer: they wrote a new message instead", True)
        return ToolOutput(f"the user did not answer: {answer.reason or 'declined'}", True)

    def _deadline(self, seconds: float) -> str:
        at = datetime.now(UTC) + timedelta(seconds=seconds)
        return at.isoformat().replace("+00:00", "Z")

    def _set_grounded(self, grounded: bool) -> None:
        """Closes or opens the grounding gate; the time it is closed is the ``grounding`` phase."""
        if grounded != self._grounded:
            self.listener.on_event(PhaseChanged(Phase.GROUNDING, not grounded))
        self._grounded = grounded

    def _is_repeat(self, call: dict[str, Any]) -> bool:
        key = call["name"] + "\n" + json.dumps(call.get("input"), sort_keys=True)
        if key == self._last_call:
            self._repeats += 1
        else:
            self._last_call, self._repeats = key, 1
        return self._repeats >= self.config.repeat_limit

    async def _run_tools(self, calls: list[dict[str, Any]], request: RunRequest, resume: Resumption | None) -> _Batch:
        """Runs the model's calls, in parallel. A call that needs an answer is left open; when any
        is, the result is the checkpoint to wait on (the others have run and are in it). With
        ``resume`` the batch was started before: calls with results keep them, open calls take
        their answers."""
        emit = self.listener.on_event
        emit(PhaseChanged(Phase.EXECUTING, True))
        results: dict[str, ToolOutput] = {}
        messages: dict[str, ToolMessage] = {}
        waiting = Checkpoint()
        earlier = resume.checkpoint if resume is not None else None
        open_before = {call.call_id: call for call in earlier.open} if earlier is not None else {}

        looping = set() if earlier is not None else {call["id"] for call in calls if self._is_repeat(call)}

        def open_call(call: dict[str, Any], kind: WaitKind, answer_id: str, **details: Any) -> None:
            waiting.open.append(
                OpenCall(call["id"], call["name"], kind, answer_id, arguments=call.get("input") or {}, **details)
            )

        def delegated(call: dict[str, Any], child: Delegated) -> ToolOutput | None:
            """A sub_agent call's output, or None when its child waits (the call waits with it)."""
            self.add_child_tokens(child.spent)
            if isinstance(child.output, ChildCheckpoint):
                open_call(call, WaitKind.CHILD, child.output.task_id, child=child.output)
                return None
            return child.output

        async def run_approved(call: dict[str, Any], step: ApprovedCall) -> ToolOutput | None:
            match step:
                case Delegate(arguments=arguments):
                    parent = self.as_parent(request)
                    child = await run_sub_agent(parent, self.new_child, tool_call_id=call["id"], arguments=arguments)
                    return delegated(call, child)
                case WorkspaceCall(tool=tool, arguments=arguments):
                    return await self.tools.call(tool.name, arguments, self.tool_context, call["id"])

        async def decide_and_run(call: dict[str, Any], step: ApprovedCall) -> ToolOutput | None:
            tool = step.tool
            decision = await self.approver.decide(tool, call["id"], step.arguments)
            if isinstance(decision, Ask):
                if not self.approver.can_wait:
                    return ToolOutput(f"not run: nobody is there to approve this {tool.name} call", True)
                open_call(
                    call,
                    WaitKind.APPROVAL,
                    self.make_id("approval"),
                    message=decision.message,
                    reason=decision.reason,
                    expires_at=self._deadline(self.approver.approval_seconds),
                )
                return None
            if not decision.approved:
                return ToolOutput(decision.refusal(tool.name), True)
            return await run_approved(call, step)

        async def answer(call: dict[str, Any], before: OpenCall) -> tuple[ToolOutput | None, Answer | None]:
            """An open call of the checkpoint, with its answer: the output, or None (waits again), and
            the client's own answer when the client ran the call (its message is the transcript's)."""
            assert resume is not None
            arguments = call.get("input") or {}
            if before.kind is WaitKind.CHILD:
                assert before.child is not None
                parent = self.as_parent(request)
                child = await resume_sub_agent(parent, self.new_child, before.child, resume.answers)
                return delegated(call, child), None
            given = resume.answers.get(before.answer_id) or Answer(approved=False, timed_out=True)
            if before.kind is not WaitKind.APPROVAL:
                by_client = before.kind is WaitKind.CLIENT and bool(given.message_id)
                return self._answered(before, given), given if by_client else None
            tool = self.tools.get(call["name"])
            if not given.approved or tool is None:
                return ToolOutput(given.refusal(call["name"]), True), None
            return await run_approved(call, approved_call(tool, arguments)), None

        def question(call: dict[str, Any], asked: str | ToolOutput) -> ToolOutput | None:
            """Puts ``asked`` to the person (the call waits for the reply), or returns why it cannot be."""
            if isinstance(asked, ToolOutput):
                return asked
            seconds = self.approver.approval_seconds
            open_call(
                call, WaitKind.QUESTION, self.make_id("question"), message=asked, expires_at=self._deadline(seconds)
            )
            return None

        async def dispatch(call: dict[str, Any]) -> ToolOutput | None:
            """Runs a call of the model's turn: its output, or None when it waits for an answer."""
            step = classify(
                call,
                tools=self.tools,
                scenario=request.scenario,
                grounded=self._grounded,
                looping=call["id"] in looping,
                repeat_limit=self.config.repeat_limit,
            )
            match step:
                case Refused(output=output):
                    return output
                case ClientCall():
                    if not self.approver.can_wait:
                        return ToolOutput("no client is there to run it", True)
                    seconds = self.approver.client_tool_seconds
                    open_call(call, WaitKind.CLIENT, call["id"], expires_at=self._deadline(seconds))
                    return None
                case Question(arguments=arguments):
                    return question(call, self._question(arguments))
                case GroundingReport(arguments=arguments):
                    return question(call, self._grounding_report(arguments))
                case Delegate() | WorkspaceCall():
                    return await decide_and_run(call, step)

        async def run_one(call: dict[str, Any]) -> None:
            began = time.monotonic()
            client: Answer | None = None
            output: ToolOutput | None
            if earlier is not None and call["id"] in earlier.done:
                waiting.done[call["id"]] = earlier.done[call["id"]]
                return  # reported and stored before the run waited
            if call["id"] in open_before:
                output, client = await answer(call, open_before[call["id"]])
            else:
                output = await dispatch(call)
            if output is None:
                return  # waits for an answer
            message_id = client.message_id if client is not None else self.make_id("tool")
            results[call["id"]] = output
            if client is not None and client.error:
                # The transcript keeps the client's message as it was sent, its error beside its content.
                messages[call["id"]] = ToolMessage(message_id, call["id"], client.text, client.error)
            else:
                messages[call["id"]] = ToolMessage(message_id, call["id"], output.content)
            waiting.done[call["id"]] = DoneCall(output.content, output.is_error, message_id, list(output.images))
            emit(
                ToolResult(
                    call["id"],
                    call["name"],
                    output.content,
                    output.is_error,
                    message_id,
                    output.touched,
                    time.monotonic() - began,
                    from_client=client is not None,
                )
            )

        await asyncio.gather(*(run_one(call) for call in calls))
        emit(PhaseChanged(Phase.EXECUTING, False))
        for message in messages.values():
            self.listener.on_message(message)
        if waiting.open:
            # Keep the calls in the order the model made them.
            order = {call["id"]: i for i, call in enumerate(calls)}
            waiting.open.sort(key=lambda call: order[call.call_id])
            return _Batch(list(messages.values()), [], waiting)
        blocks = [
            {
                "type": "tool_result",
                "tool_use_id": call["id"],
                "content": waiting.done[call["id"]].model_content(),
                **({"is_error": True} if waiting.done[call["id"]].is_error else {}),
            }
            for call in calls
        ]
        return _Batch(list(messages.values()), blocks)

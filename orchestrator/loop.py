"""The run loop: call the model, run the tools it asks for, repeat until it stops.

One turn reads straight down in ``AgentLoop._run``: the run is prepared, then each iteration
matches three small values, each decided in one place: the next step (``Stop``, ``Pause`` or
``CallModel``: every limit is checked in ``next_step``, orchestrator/steps.py), the model's turn (``Final`` or
``ToolCalls``, orchestrator/modelcall.py) and the turn's tool calls (``Ran`` or ``Waiting``,
orchestrator/toolcalls.py). A run that needs an answer returns ``Waiting`` with its checkpoint
(orchestrator/waits.py): whoever holds it goes on, in any process. The loop reports everything to its
listener (orchestrator/events.py), keeps the model's view of the conversation in a SessionStore, and
knows nothing of HTTP or AG-UI.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.approvals import AllowAll, Approver
from orchestrator.budget import BudgetExceeded, BudgetStanding, SpendGate
from orchestrator.compaction import compact_if_due
from orchestrator.environment import environment_block
from orchestrator.events import (
    Listeners,
    Outcome,
    PauseReason,
    Phase,
    PhaseChanged,
    RunInfo,
    RunListener,
    RunPaused,
    TodosChanged,
    ToolProgress,
)
from orchestrator.memory import heal_turns
from orchestrator.modelcall import Final, Stopped, ToolCalls, call_model
from orchestrator.providers.base import ModelError, ModelProvider, TokenCount
from orchestrator.queued import Inbox, read_inbox
from orchestrator.request import RunRequest, render_prompt
from orchestrator.steprecords import StepRecords
from orchestrator.steps import CallModel, LoopConfig, OverBudget, Pause, Progress, Stop, model_request, next_step
from orchestrator.stores import SessionStore
from orchestrator.subagents import (
    DEFAULT_SUBAGENT_LIMITS,
    ChildSpec,
    Delegation,
    MemorySubAgentStore,
    SubAgentLimits,
    SubAgentStores,
)
from orchestrator.takeover import Takeover, calls_in_flight
from orchestrator.toolcalls import Ran, Repeats, Turn, run_tool_calls
from orchestrator.tools.ask import ASK_USER
from orchestrator.tools.base import ToolContext, ToolRegistry
from orchestrator.tools.grounding import grounding_prompt
from orchestrator.waits import Counters, Resumption, Waiting

log = logging.getLogger(__name__)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass(slots=True, frozen=True)
class ChildLoops:
    """Makes a sub-agent's loop: the delegating run's model, approver and workspace (with a context
    of its own), the child's tools, conversation and prompt, and what the run's budget has left."""

    provider: ModelProvider
    config: LoopConfig
    context: ToolContext
    approver: Approver
    make_id: Callable[[str], str]
    stores: SubAgentStores
    limits: SubAgentLimits
    token_budget: int  # what the delegating run has left; 0: it has no budget
    spend: SpendGate | None = None  # the delegating run's: a child's calls count on the same caps

    def __call__(self, spec: ChildSpec) -> AgentLoop:
        config = dataclasses.replace(
            self.config,
            system_prompt=spec.system_prompt,
            max_iterations=spec.max_iterations,
            wall_clock_seconds=0.0,  # the sub-agent's timeout bounds it
            # A child is bounded by what its parent has left, so a tree of runs never spends more
            # than the top-level run's budget.
            token_budget=self.token_budget,
            grounding="prompt",  # advisory: the parent has scoped the task, the child still reads first
        )
        context = self.context
        return AgentLoop(
            provider=self.provider,
            tools=spec.tools,
            tool_context=ToolContext(
                workspace=context.workspace,
                output_limits=context.output_limits,
                write_lock=context.write_lock,
                web=context.web,
                cancelled=context.cancelled,
                bash_env_allow=context.bash_env_allow,
                network=context.network,
            ),
            config=config,
            store=spec.store,
            listener=spec.listener,
            approver=self.approver,
            make_id=self.make_id,
            depth=spec.depth,
            task_id=spec.task_id,
            subagent_stores=self.stores,
            subagent_limits=self.limits,
            spend=self.spend,
        )


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
        spend: SpendGate | None = None,
    ) -> None:
        """``depth`` and ``task_id`` place a sub-agent's loop under its parent (0 and "" for a
        top-level run); ``subagent_stores`` keeps the children's runs, ``subagent_limits`` bounds them.
        ``inbox`` holds the messages sent while the run is in flight (none for a sub-agent).
        ``spend`` settles what the run spent at each step and says where its spend caps stand
        (orchestrator/budget.py); None: nothing caps it."""
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
        self.spend = spend
        self.thread_id = ""
        self.steps = StepRecords(store, tool_context.reads, kept=not depth)
        # Asked at each step boundary of a top-level run: True when its process drains and the run
        # stops there, to go on in another (the host's, runhost/drain.py); None: never.
        self.hand_over: Callable[[], bool] | None = None
        tool_context.on_todos = self._todos_changed
        tool_context.on_progress = self._tool_progress

    def _todos_changed(self, todos: list[dict[str, str]]) -> None:
        self.listener.on_event(TodosChanged(tuple(dict(item) for item in todos)))

    def _tool_progress(self, event: ToolProgress) -> None:
        self.listener.on_event(event)

    async def run(
        self,
        request: RunRequest,
        *,
        run_id: str,
        thread_id: str,
        resume: Resumption | None = None,
        takeover: Takeover | None = None,
    ) -> Outcome | Waiting:
        """Runs to the end and returns the outcome, or ``Waiting`` with the checkpoint to go on from
        when a call needs an answer; ``on_finished`` is called exactly once, whatever happens
        (``Outcome.WAITING`` for a run that waits). With ``resume`` the run goes on from a checkpoint
        and its answers, then takes the request's message, if it has one. With ``takeover`` it goes
        on from the last step a dead process checkpointed (orchestrator/takeover.py). The request's
        own listeners hear the run beside the loop's."""
        if request.listeners:
            self.listener = Listeners(self.listener, *request.listeners)
        listener = self.listener
        self.thread_id = thread_id
        ended: Outcome | Waiting = Outcome.ERROR
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
            listener.on_model(self.config.model)
            ended = await self._run(request, resume, takeover)
            if ended is not Outcome.ERROR:
                # The last call's spend, and what is left, before the run's end is told.
                await self._settle_spend()
        except Stopped:
            ended = Outcome.CANCELLED
        except asyncio.CancelledError:
            ended = Outcome.CANCELLED
            raise
        except ModelError as exc:
            listener.on_error(exc, exc.message)
            ended = Outcome.ERROR
        except Exception as exc:
            log.exception("run %s failed", run_id)
            listener.on_error(exc, f"internal error: {type(exc).__name__}")
            ended = Outcome.ERROR
        finally:
            listener.on_finished(Outcome.WAITING if isinstance(ended, Waiting) else ended)
            # The context's callback is this loop's own method: a reference cycle that held the run's
            # listeners, and through them its stream and frames, until the next full collection.
            self.tool_context.on_todos = None
            self.tool_context.on_progress = None
        return ended

    async def _run(
        self, request: RunRequest, resume: Resumption | None, takeover: Takeover | None
    ) -> Outcome | Waiting:
        config = self.config
        if takeover is not None and takeover.user_turn is not None:
            # Taken over before its first step was committed: it starts over, with its user's turn.
            request, takeover = dataclasses.replace(request, content=takeover.user_turn), None
        run = await self._prepare(request, resume or (Resumption(takeover.checkpoint, {}) if takeover else None))
        if takeover is not None:
            calls = calls_in_flight(run.turns)
            if not calls and run.turns and run.turns[-1]["role"] == "assistant":
                return Outcome.SUCCESS  # its final answer was committed: it ended as its process died
            if calls:
                given = await self.steps.interrupted(
                    calls, run, takeover.checkpoint, tools=self.tools, make_id=self.make_id, listener=self.listener
                )
                match await self._tool_calls(calls, request, run, given):
                    case Waiting() as waiting:
                        return await self._wait(run, waiting)
                    case Ran() as ran:
                        await self._answer_calls(run, ran)
        elif resume is not None:
            # The model's last turn asked for the calls the checkpoint holds: finish them first.
            calls = [b for b in run.turns[-1]["content"] if b.get("type") == "tool_use"]
            match await self._tool_calls(calls, request, run, resume):
                case Waiting() as waiting:
                    return await self._wait(run, waiting)
                case Ran() as ran:
                    await self._answer_calls(run, ran)
        if takeover is None and (resume is None or request.has_message()):
            run.turns.append({"role": "user", "content": request.user_content()})
            run.turns, _ = heal_turns(run.turns)
            await self.steps.commit(run)
        # Messages queued behind the one that started the run (or sent while it waited) join it now.
        if isinstance(next_step(run, config, self.listener), CallModel):
            await read_inbox(self.inbox, run.turns, self.listener)
        while True:
            if not run.grounded and run.iteration >= config.grounding_max_iterations:
                run.grounded = True  # the gate opens anyway: grounding must not stall the run
                self.listener.on_event(PhaseChanged(Phase.GROUNDING, False))
            # The iteration boundary is the safe point: everything so far is committed.
            if self.hand_over is not None and self.hand_over():
                return Outcome.HANDED_OVER
            match next_step(run, config, self.listener, await self._settle_spend()):
                case Stop():
                    return Outcome.CANCELLED
                case Pause(reason=reason):
                    return await self._pause(reason)
                case OverBudget(cap=cap):
                    # An error, not a pause: the run cannot go on until the cap resets or is raised.
                    exceeded = BudgetExceeded(cap)
                    self.listener.on_error(exceeded, exceeded.message)
                    return Outcome.ERROR
                case CallModel():
                    compaction = await compact_if_due(
                        self.provider, run, config, listener=self.listener, task_id=self.task_id
                    )
                    if compaction is not None:
                        await self.steps.commit(run, usage=compaction.usage)
            model_turn = await call_model(
                self.provider,
                model_request(config, run, request, self.tools, delegates=self.depth < self.subagent_limits.max_depth),
                listener=self.listener,
                make_id=self.make_id,
                told_model=run.model,
                retries=config.stream_retries,
                backoff=config.retry_backoff,
                task_id=self.task_id,
            )
            run.take_reply(model_turn.reply)
            # The calls are committed before they run, with the step: a process that dies mid-tool
            # leaves them open, and whoever takes the run over decides what becomes of them.
            await self.steps.commit(run, list(model_turn.messages), model_turn.reply.usage)
            match model_turn:
                case Final():
                    return Outcome.SUCCESS
                case ToolCalls(calls=calls):
                    run.repeats, looping = run.repeats.after(calls, config.repeat_limit)
            match await self._tool_calls(calls, request, run, None, looping=looping):
                case Waiting() as waiting:
                    return await self._wait(run, waiting)
                case Ran() as ran:
                    await self._answer_calls(run, ran)
            # Only when the run goes on to answer it; else the message starts the next run.
            if isinstance(next_step(run, config, self.listener), CallModel):
                await read_inbox(self.inbox, run.turns, self.listener)

    async def _settle_spend(self) -> BudgetStanding | None:
        """What the run spent so far is recorded, and where its caps stand is told (the state shows
        what is left); None when nothing caps the run."""
        if self.spend is None:
            return None
        standing = await self.spend.settle()
        self.listener.on_event(standing)
        return standing

    async def _prepare(self, request: RunRequest, resume: Resumption | None) -> Progress:
        """The conversation so far (healed, for a fresh run), the counters the run goes on with,
        and the system prompt."""
        config = self.config
        turns: list[dict[str, Any]] = []
        if resume is not None or request.scenario.conversation_memory:
            turns = await self.store.load_turns()
        if resume is None:
            turns, _closed = heal_turns(turns)
            counters = Counters(grounded=config.grounding != "enforced")
        else:
            counters = resume.checkpoint.counters
            self.tool_context.reads.update(resume.checkpoint.reads)
        system = render_prompt(config.system_prompt, request.prompt_variables)
        system += grounding_prompt(config.grounding, max_iterations=config.grounding_max_iterations, tools=self.tools)
        workspace = self.tool_context.workspace
        system += await environment_block(workspace.root, sandbox=workspace.sandbox) if config.environment else ""
        if not counters.grounded:
            self.listener.on_event(PhaseChanged(Phase.GROUNDING, True))
        return Progress(
            turns=turns,
            system=system,
            iteration=counters.iteration,
            tokens=counters.tokens,
            grounded=counters.grounded,
            repeats=Repeats(counters.last_call, counters.repeats),
            started=time.monotonic() - counters.elapsed,
            can_ask=self.approver.can_wait and request.scenario.offers(ASK_USER),
            model=config.model,
        )

    async def _tool_calls(
        self,
        calls: list[dict[str, Any]],
        request: RunRequest,
        run: Progress,
        resume: Resumption | None,
        *,
        looping: frozenset[str] = frozenset(),
    ) -> Ran | Waiting:
        """Runs the turn's calls (orchestrator/toolcalls.py) with the run as it stands, and takes back
        what they changed: the grounding gate, and the tokens sub-agents spent."""
        config = self.config
        budget = config.token_budget
        delegation = Delegation(
            listener=self.listener,
            tools=self.tools,
            delegable=frozenset(),  # set per call, from the gate as it is for that call
            limits=self.subagent_limits,
            stores=self.subagent_stores,
            depth=self.depth,
            task_id=self.task_id,
            thread_id=self.thread_id,
            model=config.model,
            request=request,
            make_id=self.make_id,
            budget_spent=bool(budget) and run.tokens >= budget,
            spawn=ChildLoops(
                provider=self.provider,
                config=config,
                context=self.tool_context,
                approver=self.approver,
                make_id=self.make_id,
                stores=self.subagent_stores,
                limits=self.subagent_limits,
                token_budget=budget - run.tokens if budget else 0,
                spend=self.spend,
            ),
        )
        turn = Turn(
            results=self.steps.results(run, resume.checkpoint.done if resume is not None else {}),
            tools=self.tools,
            context=self.tool_context,
            approver=self.approver,
            listener=self.listener,
            scenario=request.scenario,
            make_id=self.make_id,
            grounded=run.grounded,
            can_ask=run.can_ask,
            looping=looping,
            repeat_limit=config.repeat_limit,
            delegation=delegation,
        )
        ran = await run_tool_calls(calls, turn=turn, resume=resume)
        run.spend(ran.spent)
        run.grounded = ran.grounded
        return ran

    async def _answer_calls(self, run: Progress, ran: Ran) -> None:
        """Every call has its result: they answer the model's turn in the next user turn, and the
        iteration is over. The results' messages were stored as each call ended (orchestrator/steprecords.py)."""
        run.turns.append({"role": "user", "content": ran.results})
        run.iteration += 1
        await self.steps.commit(run, ledger=True)

    async def _wait(self, run: Progress, waiting: Waiting) -> Waiting:
        """Ends the run until its open calls are answered; the calls that finished were stored as
        each ended (orchestrator/steprecords.py), and the ledger is stored now."""
        await self.store.commit(run.turns, [], TokenCount(), reads=self.tool_context.reads)
        checkpoint = dataclasses.replace(
            waiting.checkpoint, counters=run.counters(), reads=dict(self.tool_context.reads)
        )
        return Waiting(checkpoint)

    async def _pause(self, reason: PauseReason) -> Outcome:
        # A step of its own, so a client that shows steps shows the pause as well.
        self.listener.on_event(PhaseChanged(Phase.PAUSED, True))
        self.listener.on_event(RunPaused(reason))
        self.listener.on_event(PhaseChanged(Phase.PAUSED, False))
        await self.store.pause(reason)
        return Outcome.PAUSED


# LoopConfig is orchestrator/steps.py's; callers that build a loop take it from here.
__all__ = ["AgentLoop", "ChildLoops", "LoopConfig", "new_id"]

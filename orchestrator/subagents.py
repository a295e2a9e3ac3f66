"""Sub-agents: a run delegates a focused task to a child run (the ``sub_agent`` tool).

The child is another AgentLoop over the same model, with its own conversation,
its own tools (a subset of the parent's), its own iteration cap and a timeout.
It shares the parent's approver (each of its calls is decided like the
parent's) and its cancel (the parent's ``should_continue``). Its stream reaches
the parent's listeners as SubAgentActivity, its tokens as the parent's usage;
only its summary goes back to the parent's model. Nesting stops at a depth of two, and a child's
request names the request of the run that delegated it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.childlistener import ChildListener
from orchestrator.events import (
    AssistantMessage,
    Outcome,
    PauseReason,
    RunListener,
    SubAgentFinished,
    SubAgentResumed,
    SubAgentStarted,
    SubAgentStatus,
    ToolMessage,
)
from orchestrator.providers.base import TokenCount
from orchestrator.request import DELEGATION, RunRequest
from orchestrator.stores import SessionStore
from orchestrator.tools.base import ToolKind, ToolOutput, ToolRegistry
from orchestrator.verdict import REPORT_INSTRUCTION
from orchestrator.waits import Checkpoint, ChildCheckpoint, Resumption, Waiting

log = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    "You are a sub-agent: another agent delegated one focused task to you. Work on it with your tools, "
    "in the workspace you share with it. You cannot ask anyone questions; decide for yourself, and say "
    "what you assumed. Stop as soon as the task is done. Your last message is all the delegating agent "
    "will see: make it a concise summary of what you found or did, the files you changed, and anything "
    "left undone or uncertain."
)

# Never offered to a child: it has nobody to ask, and the thread's plan and grounding are the parent's.
_NEVER_DELEGATED = frozenset({"ask_user", "todo_write", "grounding_report"})


@dataclass(slots=True, frozen=True)
class SubAgentLimits:
    max_depth: int = 2  # the top-level run is depth 0; its children 1; theirs 2
    max_iterations: int = 25
    timeout_seconds: float = 15 * 60


DEFAULT_SUBAGENT_LIMITS = SubAgentLimits()


@dataclass(slots=True, frozen=True)
class SubAgentParams:
    task: str
    context: str = ""
    system_prompt: str = ""
    allowed_tools: tuple[str, ...] = ()
    role: str = ""


@dataclass(slots=True)
class SubAgentResult:
    status: SubAgentStatus
    summary: str
    conclusion: str
    error: str = ""
    # {id, name, arguments, isError, ended}, and for a nested sub_agent call its child's as ``calls``
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    iterations: int = 0
    usage: TokenCount = field(default_factory=TokenCount)
    changed_files: tuple[str, ...] = ()  # what it (or a child of its) wrote, edited or patched
    skipped_tools: tuple[str, ...] = ()  # names in allowed_tools it could not be given


class SubAgentStore(SessionStore, Protocol):
    """Where a child's run is kept: its conversation (a SessionStore, whose read ledger it ignores:
    a child's lives in its own context, and in its checkpoint while it waits) and its record."""

    turns: list[dict[str, Any]]  # its conversation so far (kept in a checkpoint when it waits)

    async def begin(self) -> None: ...
    async def end(self, result: SubAgentResult) -> None: ...


SubAgentStores = Callable[[SubAgentStarted, SubAgentParams], SubAgentStore]


@dataclass(slots=True, frozen=True)
class ChildSpec:
    """A child run as its parent's sub_agent call shapes it; the delegation's ``spawn`` makes the
    loop, with the parent's model, approver and workspace and what the parent's budget has left."""

    tools: ToolRegistry
    store: SubAgentStore
    listener: RunListener
    system_prompt: str
    max_iterations: int
    depth: int
    task_id: str


class ChildRun(Protocol):
    """The child's loop, as its parent drives it: it returns its outcome, or what it waits on."""

    async def run(
        self, request: RunRequest, *, run_id: str, thread_id: str, resume: Resumption | None = None
    ) -> Outcome | Waiting: ...


ChildFactory = Callable[[ChildSpec], ChildRun]


@dataclass(slots=True, frozen=True)
class Delegation:
    """What a sub_agent call of one turn may start, as the delegating run was when the turn began:
    nothing of it calls back into that run."""

    listener: RunListener  # hears the child's activity, usage and end
    tools: ToolRegistry  # the parent's tools
    delegable: frozenset[str]  # the names of those it may hand on now (its scenario, its grounding gate)
    limits: SubAgentLimits
    stores: SubAgentStores
    depth: int
    task_id: str  # "" for a top-level run
    thread_id: str
    model: str
    request: RunRequest
    make_id: Callable[[str], str]
    budget_spent: bool  # its token budget is spent: no child may start
    spawn: ChildFactory  # makes the child's loop (orchestrator/loop.py, ChildLoops)


@dataclass(slots=True)
class Delegated:
    """What a sub_agent call gives its parent: what the parent's model reads, or the child's
    checkpoint when it waits, and the tokens the child spent, which count on the parent's."""

    output: ToolOutput | ChildCheckpoint
    spent: TokenCount = field(default_factory=TokenCount)


class MemorySubAgentStore:
    """A child's conversation kept in memory only (the default where nothing persists)."""

    def __init__(self, started: SubAgentStarted, params: SubAgentParams) -> None:
        self.turns: list[dict[str, Any]] = []
        self.result: SubAgentResult | None = None

    async def load_turns(self) -> list[dict[str, Any]]:
        return list(self.turns)

    async def commit(
        self,
        turns: list[dict[str, Any]],
        messages: list[AssistantMessage | ToolMessage],
        usage: TokenCount,
        *,
        reads: dict[str, str] | None = None,
        step: Checkpoint | None = None,
    ) -> None:
        self.turns = turns

    async def pause(self, reason: PauseReason) -> None:
        pass

    async def begin(self) -> None:
        pass

    async def end(self, result: SubAgentResult) -> None:
        self.result = result


def refusal(code: str, message: str, **details: Any) -> ToolOutput:
    """A structured error the parent's model can read and recover from."""
    return ToolOutput(json.dumps({"error": code, "message": message, **details}, ensure_ascii=False), True)


def parse_params(arguments: dict[str, Any]) -> SubAgentParams | ToolOutput:
    task = arguments.get("task")
    if not isinstance(task, str) or not task.strip():
        return refusal("invalid_arguments", "argument 'task' must be a non-empty string")
    texts: dict[str, str] = {}
    for name in ("context", "system_prompt", "role"):
        value = arguments.get(name)
        if value is not None and not isinstance(value, str):
            return refusal("invalid_arguments", f"argument {name!r} must be a string")
        texts[name] = (value or "").strip()
    allowed = arguments.get("allowed_tools")
    if allowed is None:
        allowed = []
    if not isinstance(allowed, list) or not all(isinstance(name, str) for name in allowed):
        return refusal("invalid_arguments", "argument 'allowed_tools' must be a list of tool names")
    return SubAgentParams(
        task=task.strip(),
        context=texts["context"],
        system_prompt=texts["system_prompt"],
        allowed_tools=tuple(dict.fromkeys(allowed)),
        role=texts["role"][:100] or "sub-agent",
    )


def child_registry(
    parent: ToolRegistry, allowed: tuple[str, ...], *, delegable: frozenset[str]
) -> tuple[ToolRegistry, tuple[str, ...]]:
    """The child's tools and the names of ``allowed`` it cannot have: those of the parent it asked
    for (all it may have when none are named), only those ``delegable`` (the parent's scenario and
    grounding gate), never the client's own tools. A name it cannot have is skipped, not refused
    (the model does not know the registry's exact contents); the
    summary line names it. (A child at the depth cap keeps ``sub_agent`` but is not offered it: a
    call anyway gets the structured refusal.)"""
    available = {
        name: tool
        for name, tool in parent.tools.items()
        if tool.kind is not ToolKind.CLIENT and name not in _NEVER_DELEGATED and name in delegable
    }
    if not allowed:
        return ToolRegistry(available), ()
    skipped = tuple(name for name in allowed if name not in available)
    return ToolRegistry({name: available[name] for name in allowed if name in available}), skipped


def _result(
    child: ChildListener,
    limits: SubAgentLimits,
    *,
    timed_out: bool,
    cancelled: bool,
    skipped: tuple[str, ...] = (),
) -> SubAgentResult:
    calls = list(child.tool_calls.values())
    failed = sum(1 for call in calls if call["isError"])
    counts = (
        f"{child.iterations} model call(s), {len(calls)} tool call(s), {failed} failed, "
        f"{len(child.changed)} file(s) changed"
    )
    if skipped:
        counts += f"; not given (unknown or not allowed): {', '.join(skipped)}"
    if timed_out:
        status, conclusion = SubAgentStatus.STOPPED, f"timed out after {limits.timeout_seconds:g} s ({counts})"
        error = conclusion
    elif cancelled or child.outcome is Outcome.CANCELLED:
        status, conclusion, error = SubAgentStatus.CANCELLED, f"cancelled with its parent ({counts})", "cancelled"
    elif child.outcome is Outcome.PAUSED:
        status = SubAgentStatus.STOPPED
        if child.pause_reason is PauseReason.TOKEN_BUDGET:
            conclusion = f"stopped: its parent's token budget ran out ({counts})"
        else:
            conclusion = f"stopped at its iteration cap of {limits.max_iterations} ({counts})"
        error = conclusion
    elif child.outcome is Outcome.SUCCESS:
        status, conclusion, error = SubAgentStatus.SUCCEEDED, f"completed ({counts})", ""
    else:
        status, conclusion = SubAgentStatus.FAILED, f"failed ({counts})"
        error = child.error or "the sub-agent failed"
    return SubAgentResult(
        status=status,
        summary=child.last_text,
        conclusion=conclusion,
        error=error,
        tool_calls=calls,
        iterations=child.iterations,
        usage=child.usage,
        changed_files=tuple(child.changed),
        skipped_tools=skipped,
    )


def _output(task_id: str, role: str, result: SubAgentResult) -> ToolOutput:
    """Only the summary goes back to the parent's model, with one line saying how the child ended."""
    footer = f"[sub-agent {task_id} ({role}): {result.conclusion}]"
    if result.error and result.status is not SubAgentStatus.SUCCEEDED:
        footer += f"\n[error: {result.error}]"
    body = result.summary or "(the sub-agent wrote no summary)"
    return ToolOutput(f"{body}\n\n{footer}", result.status is not SubAgentStatus.SUCCEEDED)


async def run_sub_agent(parent: Delegation, *, tool_call_id: str, arguments: dict[str, Any]) -> Delegated:
    """Runs one child to its end and returns what its parent's model is told, or the child's
    checkpoint when it waits for an answer."""
    limits = parent.limits
    depth = parent.depth + 1
    if depth > limits.max_depth:
        return Delegated(
            refusal(
                "max_depth",
                f"sub-agents may be nested at most {limits.max_depth} deep; do this task yourself",
                depth=depth,
                maxDepth=limits.max_depth,
            )
        )
    params = parse_params(arguments)
    if isinstance(params, ToolOutput):
        return Delegated(params)
    tools, skipped = child_registry(parent.tools, params.allowed_tools, delegable=parent.delegable)
    if parent.budget_spent:
        return Delegated(refusal("token_budget", "this run's token budget is spent; finish the task or stop here"))
    task_id = parent.make_id("sub")
    started = SubAgentStarted(
        task_id=task_id,
        parent_task_id=parent.task_id,
        tool_call_id=tool_call_id,
        role=params.role,
        prompt=params.task,
        model=parent.model,
        depth=depth,
    )
    store = parent.stores(started, params)
    await store.begin()
    parent.listener.on_subagent(started)
    listener = ChildListener(parent.listener, task_id)
    return await _drive(parent, started, params, tools, store, listener, resume=None, skipped=skipped)


async def resume_sub_agent(parent: Delegation, waited: ChildCheckpoint, answers: dict[str, Any]) -> Delegated:
    """A child that waited goes on from its checkpoint with the answers (by answer id)."""
    params = SubAgentParams(**{**waited.params, "allowed_tools": tuple(waited.params.get("allowed_tools", ()))})
    started = waited.subagent_started()
    tools = ToolRegistry({name: tool for name in waited.allowed_tools if (tool := parent.tools.get(name))})
    store = parent.stores(started, params)
    store.turns = list(waited.turns)
    earlier = waited.checkpoint
    parent.listener.on_subagent(SubAgentResumed(started, (*earlier.done, *(c.call_id for c in earlier.open))))
    listener = ChildListener(parent.listener, started.task_id, waited)
    resume = Resumption(waited.checkpoint, answers)
    return await _drive(parent, started, params, tools, store, listener, resume=resume)


async def _drive(
    parent: Delegation,
    started: SubAgentStarted,
    params: SubAgentParams,
    tools: ToolRegistry,
    store: SubAgentStore,
    child_listener: ChildListener,
    *,
    resume: Resumption | None,
    skipped: tuple[str, ...] = (),
) -> Delegated:
    limits = parent.limits
    task_id = started.task_id
    child = parent.spawn(
        ChildSpec(
            tools=tools,
            store=store,
            listener=child_listener,
            system_prompt=(params.system_prompt or DEFAULT_SYSTEM_PROMPT) + REPORT_INSTRUCTION,
            max_iterations=limits.max_iterations,
            depth=started.depth,
            task_id=task_id,
        )
    )
    request = parent.request
    text = params.task if not params.context else f"{params.task}\n\n<context>\n{params.context}\n</context>"
    child_request = RunRequest(
        request_id=task_id,
        text=text if resume is None else "",
        scenario=DELEGATION,
        parent_request_id=request.request_id,
        description=params.role,
        user_id=request.user_id,
    )
    timed_out = False
    ended: Outcome | Waiting = Outcome.ERROR
    try:
        ended = await asyncio.wait_for(
            child.run(child_request, run_id=task_id, thread_id=parent.thread_id, resume=resume),
            timeout=limits.timeout_seconds,
        )
    except TimeoutError:
        timed_out = True
    except asyncio.CancelledError:
        cancelled = _result(child_listener, limits, timed_out=False, cancelled=True, skipped=skipped)
        await _end(parent.listener, store, child_listener, cancelled)
        raise
    spent = _since(child_listener.usage, child_listener.usage_before)
    if isinstance(ended, Waiting) and not timed_out:
        usage = child_listener.usage
        checkpoint = ChildCheckpoint(
            **dataclasses.asdict(started),
            params={**dataclasses.asdict(params), "allowed_tools": list(params.allowed_tools)},
            allowed_tools=list(tools.tools),
            turns=await store.load_turns(),
            checkpoint=ended.checkpoint,
            iterations=child_listener.iterations,
            last_text=child_listener.last_text,
            tool_calls=list(child_listener.tool_calls.values()),
            usage=dataclasses.asdict(usage),
        )
        return Delegated(checkpoint, spent)
    result = _result(child_listener, limits, timed_out=timed_out, cancelled=False, skipped=skipped)
    await _end(parent.listener, store, child_listener, result)
    return Delegated(_output(task_id, params.role, result), spent)


async def _end(listener: RunListener, store: SubAgentStore, child: ChildListener, result: SubAgentResult) -> None:
    listener.on_subagent(
        SubAgentFinished(
            child.task_id, result.status, result.summary, result.conclusion, result.error, tuple(result.tool_calls)
        )
    )
    try:
        await store.end(result)
    except Exception:
        log.exception("could not record the end of sub-agent %s", child.task_id)


def _since(now: TokenCount, before: TokenCount) -> TokenCount:
    return TokenCount(
        input_tokens=now.input_tokens - before.input_tokens,
        output_tokens=now.output_tokens - before.output_tokens,
        cache_read_tokens=now.cache_read_tokens - before.cache_read_tokens,
        cache_write_tokens=now.cache_write_tokens - before.cache_write_tokens,
    )

"""One turn's tool calls: run in parallel, each decided in one place, the batch returned as a value.

``run_tool_calls`` takes the calls of the model's turn and a frozen ``Turn`` (what the run was when
the turn began) and returns ``Ran`` (every call has its result) or ``Waiting`` (some call needs an
answer: the checkpoint to go on from). It reports each result to the turn's listener; it keeps no
state and calls nothing back in the loop: what changed (the grounding gate, the tokens sub-agents
spent) comes back in the value.

The grounding gate between parallel calls: the calls are classified in the order the model made
them, and a grounding report that says ``understood`` opens the gate for the calls after it in the
same turn, not for those before it (they are refused by the gate and the model may call them again).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.approvals import Answer, Approver, Ask
from orchestrator.dispatch import (
    ApprovedCall,
    CallStep,
    ClientCall,
    Delegate,
    GroundingReport,
    Question,
    Refused,
    WorkspaceCall,
    approved_call,
    classify,
)
from orchestrator.events import GroundingReported, Phase, PhaseChanged, RunListener, ToolMessage, ToolResult
from orchestrator.providers.base import TokenCount
from orchestrator.questions import (
    answered,
    deadline,
    grounding_report,
    input_reply,
    question_of,
    unanswered_input,
)
from orchestrator.request import Scenario
from orchestrator.subagents import Delegated, Delegation, resume_sub_agent, run_sub_agent
from orchestrator.tools.base import ToolContext, ToolOutput, ToolRegistry
from orchestrator.tools.grounding import gate_allows
from orchestrator.tools.inputs import MAX_ROUNDS, CallInputs, InputRequest
from orchestrator.waits import Checkpoint, ChildCheckpoint, DoneCall, OpenCall, Resumption, Waiting, WaitKind


class CallResults(Protocol):
    """Where each call's result is stored as the call ends, before it is reported (the loop's
    store, with the run's checkpoint: orchestrator/takeover.py)."""

    async def stored(self, call_id: str, done: DoneCall, message: ToolMessage) -> None: ...


@dataclass(slots=True, frozen=True)
class Turn:
    """What one turn's calls run with, as the run was when the turn began."""

    results: CallResults
    tools: ToolRegistry
    context: ToolContext
    approver: Approver
    listener: RunListener
    scenario: Scenario
    make_id: Callable[[str], str]
    grounded: bool  # the grounding gate is open
    can_ask: bool  # a question (ask_user's, a grounding report's) can be put to a person
    looping: frozenset[str]  # the calls that repeat the ones before them too often (Repeats.after)
    repeat_limit: int
    delegation: Delegation  # what a sub_agent call starts; its ``delegable`` is set per call


@dataclass(slots=True, frozen=True)
class Repeats:
    """The repeat detector: the last call (tool and arguments) and how many times in a row it came."""

    last_call: str = ""
    count: int = 0

    def after(self, calls: list[dict[str, Any]], limit: int) -> tuple[Repeats, frozenset[str]]:
        """The detector once ``calls`` are made, and those of them made ``limit`` times in a row."""
        last, count = self.last_call, self.count
        looping: set[str] = set()
        for call in calls:
            key = call["name"] + "\n" + json.dumps(call.get("input"), sort_keys=True)
            last, count = (last, count + 1) if key == last else (key, 1)
            if count >= limit:
                looping.add(call["id"])
        return Repeats(last, count), frozenset(looping)


@dataclass(slots=True, frozen=True)
class Ran:
    """Every call has its result: ``results`` is the user turn's content that answers them."""

    results: list[dict[str, Any]]
    messages: tuple[ToolMessage, ...] = ()  # the calls that ended in this pass (stored as each ended)
    spent: TokenCount = field(default_factory=TokenCount)  # what sub-agents spent
    grounded: bool = True


@dataclass(slots=True)
class _Pass:
    """What the calls of one pass leave, filled in as they end."""

    turn: Turn
    resume: Resumption | None
    waiting: Checkpoint = field(default_factory=Checkpoint)
    messages: dict[str, ToolMessage] = field(default_factory=dict)
    spent: list[TokenCount] = field(default_factory=list)

    def open(self, call: dict[str, Any], kind: WaitKind, answer_id: str, **details: Any) -> None:
        self.waiting.open.append(
            OpenCall(call["id"], call["name"], kind, answer_id, arguments=call.get("input") or {}, **details)
        )

    def asked(self, call: dict[str, Any], output: ToolOutput) -> ToolOutput | None:
        """A call's output, or None when its tool needs the person first (the call waits for the
        answer, then is made again with it: orchestrator/tools/inputs.py)."""
        request = output.needs_input
        if request is None:
            return output
        if not self.turn.approver.can_wait:
            return ToolOutput(
                f"not completed: the MCP server {request.server!r} asked a question mid-call "
                f"({request.message[:200]!r}) and nobody is there to answer it in this run",
                True,
            )
        if len(request.given) >= MAX_ROUNDS:
            return ToolOutput(
                f"not completed: the MCP server {request.server!r} asked more than {MAX_ROUNDS} questions in one call",
                True,
            )
        seconds = self.turn.approver.approval_seconds
        self.open(
            call,
            WaitKind.INPUT,
            self.turn.make_id("elicitation"),
            message=request.message,
            expires_at=deadline(seconds),
            input=request.to_json(),
        )
        return None

    def delegated(self, call: dict[str, Any], child: Delegated) -> ToolOutput | None:
        """A sub_agent call's output, or None when its child waits (the call waits with it)."""
        self.spent.append(child.spent)
        if isinstance(child.output, ChildCheckpoint):
            self.open(call, WaitKind.CHILD, child.output.task_id, child=child.output)
            return None
        return child.output


async def run_tool_calls(calls: list[dict[str, Any]], *, turn: Turn, resume: Resumption | None) -> Ran | Waiting:
    """Runs the model's calls, in parallel. A call that needs an answer is left open; when any is,
    the result is the checkpoint to wait on (the others have run and are in it). With ``resume``
    the batch was started before: calls with results keep them, open calls take their answers."""
    emit = turn.listener.on_event
    emit(PhaseChanged(Phase.EXECUTING, True))
    done = _Pass(turn, resume)
    earlier = resume.checkpoint if resume is not None else Checkpoint()
    answered_before = {*earlier.done, *(c.call_id for c in earlier.open)}
    grounded = turn.grounded
    steps: dict[str, tuple[CallStep, bool]] = {}  # a new call's step, and the gate as it was for it
    for call in calls:
        if call["id"] in answered_before:
            continue
        step = classify(
            call,
            tools=turn.tools,
            scenario=turn.scenario,
            grounded=grounded,
            looping=call["id"] in turn.looping,
            repeat_limit=turn.repeat_limit,
        )
        if isinstance(step, GroundingReport):
            reported = grounding_report(step.arguments, can_ask=turn.can_ask)
            if reported.opens_gate and not grounded:
                grounded = True
                emit(PhaseChanged(Phase.GROUNDING, False))
            if reported.report is not None:
                emit(GroundingReported(reported.report, grounded))
            reply = reported.reply
            step = Question({"question": reply}) if isinstance(reply, str) else Refused(reply)
        steps[call["id"]] = (step, grounded)
    await asyncio.gather(*(_run_one(call, steps.get(call["id"]), done) for call in calls))
    emit(PhaseChanged(Phase.EXECUTING, False))
    messages = tuple(done.messages.values())
    for message in messages:
        turn.listener.on_message(message)
    spent = _sum(done.spent)
    checkpoint = done.waiting
    if checkpoint.open:
        # Keep the calls in the order the model made them.
        order = {call["id"]: i for i, call in enumerate(calls)}
        checkpoint.open.sort(key=lambda call: order[call.call_id])
        return Waiting(checkpoint, messages, spent, grounded)
    results = [
        {
            "type": "tool_result",
            "tool_use_id": call["id"],
            "content": checkpoint.done[call["id"]].model_content(),
            **({"is_error": True} if checkpoint.done[call["id"]].is_error else {}),
        }
        for call in calls
    ]
    return Ran(results, messages, spent, grounded)


async def _run_one(call: dict[str, Any], step: tuple[CallStep, bool] | None, done: _Pass) -> None:
    turn, earlier = done.turn, done.resume.checkpoint if done.resume is not None else None
    began = time.monotonic()
    client: Answer | None = None
    output: ToolOutput | None
    if earlier is not None and call["id"] in earlier.done:
        done.waiting.done[call["id"]] = earlier.done[call["id"]]
        return  # reported and stored before the run waited
    open_before = {c.call_id: c for c in earlier.open} if earlier is not None else {}
    if call["id"] in open_before:
        output, client = await _answer(call, open_before[call["id"]], done)
    else:
        assert step is not None
        output = await _dispatch(call, *step, done)
    if output is None:
        return  # waits for an answer
    message_id = client.message_id if client is not None else turn.make_id("tool")
    if client is not None and client.error:
        # The transcript keeps the client's message as it was sent, its error beside its content.
        message = ToolMessage(message_id, call["id"], client.text, client.error)
    else:
        message = ToolMessage(message_id, call["id"], output.content)
    result = DoneCall(output.content, output.is_error, message_id, list(output.images))
    # Stored before it is reported: a client never sees a result that a takeover would not know of.
    await turn.results.stored(call["id"], result, message)
    done.messages[call["id"]] = message
    done.waiting.done[call["id"]] = result
    turn.listener.on_event(
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


async def _dispatch(call: dict[str, Any], step: CallStep, grounded: bool, done: _Pass) -> ToolOutput | None:
    """Runs a call of the model's turn: its output, or None when it waits for an answer.
    ``grounded``: the gate as it was for this call."""
    turn = done.turn
    approver = turn.approver
    match step:
        case Refused(output=output):
            return output
        case ClientCall():
            if not approver.can_wait:
                return ToolOutput("no client is there to run it", True)
            done.open(call, WaitKind.CLIENT, call["id"], expires_at=deadline(approver.client_tool_seconds))
            return None
        case Question(arguments=arguments):
            asked = question_of(arguments, can_wait=approver.can_wait)
            if isinstance(asked, ToolOutput):
                return asked
            answer_id = turn.make_id("question")
            done.open(call, WaitKind.QUESTION, answer_id, message=asked, expires_at=deadline(approver.approval_seconds))
            return None
        case GroundingReport():
            raise AssertionError("a grounding report is read before the calls run")
        case Delegate() | WorkspaceCall():
            decision = await approver.decide(step.tool, call["id"], step.arguments)
            if isinstance(decision, Ask):
                if not approver.can_wait:
                    return ToolOutput(f"not run: nobody is there to approve this {step.tool.name} call", True)
                done.open(
                    call,
                    WaitKind.APPROVAL,
                    turn.make_id("approval"),
                    message=decision.message,
                    reason=decision.reason,
                    expires_at=deadline(approver.approval_seconds),
                )
                return None
            if not decision.approved:
                return ToolOutput(decision.refusal(step.tool.name), True)
            return await _run_approved(call, step, done, grounded)


async def _answer(call: dict[str, Any], before: OpenCall, done: _Pass) -> tuple[ToolOutput | None, Answer | None]:
    """An open call of the checkpoint, with its answer: the output, or None (waits again), and the
    client's own answer when the client ran the call (its message is the transcript's)."""
    assert done.resume is not None
    answers = done.resume.answers
    if before.kind is WaitKind.CHILD:
        assert before.child is not None
        child = await resume_sub_agent(_delegation(done.turn, done.turn.grounded), before.child, answers)
        return done.delegated(call, child), None
    given = answers.get(before.answer_id) or Answer(approved=False, timed_out=True)
    if before.kind is WaitKind.INPUT:
        return await _answer_input(call, before, given, done), None
    if before.kind is not WaitKind.APPROVAL:
        by_client = before.kind is WaitKind.CLIENT and bool(given.message_id)
        return answered(before, given), given if by_client else None
    tool = done.turn.tools.get(call["name"])
    if not given.approved or tool is None:
        return ToolOutput(given.refusal(call["name"]), True), None
    return await _run_approved(call, approved_call(tool, call.get("input") or {}), done, done.turn.grounded), None


async def _answer_input(call: dict[str, Any], before: OpenCall, given: Answer, done: _Pass) -> ToolOutput | None:
    """A tool's question answered: the call is made again with every answer so far (accepted,
    declined or cancelled alike: the server reads which). Unanswered, it is not made again."""
    request = InputRequest.from_json(before.input)
    reply = input_reply(given)
    if reply is None:
        return ToolOutput(unanswered_input(request, given), True)
    tool = done.turn.tools.get(call["name"])
    if tool is None:
        return ToolOutput(f"not completed: the tool {call['name']!r} is no longer offered", True)
    action, content = reply
    inputs = CallInputs((*request.given, request.answered(action, content)), request.state)
    done.turn.context.inputs[call["id"]] = inputs
    try:
        return await _run_approved(call, approved_call(tool, call.get("input") or {}), done, done.turn.grounded)
    finally:
        done.turn.context.inputs.pop(call["id"], None)


async def _run_approved(call: dict[str, Any], step: ApprovedCall, done: _Pass, grounded: bool) -> ToolOutput | None:
    turn = done.turn
    match step:
        case Delegate(arguments=arguments):
            child = await run_sub_agent(_delegation(turn, grounded), tool_call_id=call["id"], arguments=arguments)
            return done.delegated(call, child)
        case WorkspaceCall(tool=tool, arguments=arguments):
            return done.asked(call, await turn.tools.call(tool.name, arguments, turn.context, call["id"]))


def _delegation(turn: Turn, grounded: bool) -> Delegation:
    """The turn's delegation with what a child may be given now: what the run's scenario offers,
    and until the run is grounded (enforced mode), only what cannot change anything."""
    delegable = frozenset(
        name
        for name, tool in turn.tools.tools.items()
        if turn.scenario.offers(tool) and gate_allows(tool, grounded=grounded)
    )
    return dataclasses.replace(turn.delegation, delegable=delegable)


def _sum(counts: list[TokenCount]) -> TokenCount:
    return TokenCount(
        input_tokens=sum(c.input_tokens for c in counts),
        output_tokens=sum(c.output_tokens for c in counts),
        cache_read_tokens=sum(c.cache_read_tokens for c in counts),
        cache_write_tokens=sum(c.cache_write_tokens for c in counts),
    )

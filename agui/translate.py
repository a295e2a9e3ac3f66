"""Agent run events → AG-UI events, kept well formed for the clients that enforce the order.

The translator is a RunListener. It tracks what is open (text messages, tool
calls, reasoning spans, steps; vocabulary/agui.py OpenParts) so that whatever
ends the run, open parts are closed before the one terminal event (the clients
refuse RUN_FINISHED while anything is open, and anything after RUN_ERROR). Every
event is made by vocabulary/agui.py's constructors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agui.state import ThreadState
from orchestrator.budget import BudgetStanding
from orchestrator.events import (
    BaseListener,
    Compacted,
    GroundingReported,
    Outcome,
    Phase,
    PhaseChanged,
    ReasoningDelta,
    ReasoningEnded,
    ReasoningStarted,
    RunEvent,
    RunInfo,
    RunPaused,
    SubAgentActivity,
    SubAgentEvent,
    SubAgentFinished,
    SubAgentResumed,
    SubAgentStarted,
    SubAgentStatus,
    TextDelta,
    TextEnded,
    TextStarted,
    TodosChanged,
    ToolCallArgs,
    ToolCallEnded,
    ToolCallStarted,
    ToolProgress,
    ToolResult,
    Usage,
)
from orchestrator.verdict import conclusion_of
from vocabulary import agui as ev

Publish = Callable[[dict[str, Any]], None]


def run_finished(thread_id: str, run_id: str, *, v1: bool) -> dict[str, Any]:
    """A run's RUN_FINISHED when it succeeded: a 1.0 client is told so in its outcome."""
    return ev.run_finished(thread_id, run_id, {"type": "success"} if v1 else None)


class AguiTranslator(BaseListener):
    def __init__(
        self,
        publish: Publish,
        *,
        thread_id: str,
        run_id: str,
        v1: bool,
        state: ThreadState,
    ) -> None:
        self.publish = publish
        self.thread_id = thread_id
        self.run_id = run_id
        self.v1 = v1
        self.state = state
        self.started = False
        self.finished = False
        self.open = ev.OpenParts()
        self.error_message = ""
        self.error_code = ""
        self.pause_reason = ""
        # The sub-agents at work, by id: each child's stream is translated by a translator of
        # its own, which tags its events with the child's subagentRunId (1.0 clients only).
        self.children: dict[str, _ChildScope] = {}

    # -- run boundaries -------------------------------------------------

    def start(self, *, announced: bool = False) -> None:
        """RUN_STARTED (unless ``announced``: already sent) then STATE_SNAPSHOT, before the loop."""
        if self.started:
            return
        self.started = True
        if not announced:
            self.publish(ev.run_started(self.thread_id, self.run_id, v1=self.v1))
        self.publish(ev.state_snapshot(self.state.document))

    def suspend(self, outcome: dict[str, Any], messages: list[dict[str, Any]]) -> None:
        """Ends this AG-UI run while the agent run waits (for a person, or a client's tool): what
        is open is closed (a sub-agent at work as suspended), the snapshots go first, then
        RUN_FINISHED with ``outcome``."""
        interrupt_ids = [i["id"] for i in outcome.get("interrupts", ())] if outcome else []
        for scope in self.children.values():
            scope.suspend(interrupt_ids)
        self.children.clear()
        if interrupt_ids:
            # The run now waits for a person: the waiting_approval step, closed with the rest
            # right below, since no step may stay open past RUN_FINISHED.
            self._phase(PhaseChanged(Phase.WAITING_APPROVAL, True))
        self.close_open()
        self.publish(ev.messages_snapshot(messages))
        self.publish(ev.state_snapshot(self.state.document))
        self.publish(ev.run_finished(self.thread_id, self.run_id, outcome))

    def on_start(self, run: RunInfo) -> None:
        self.start()

    def on_error(self, error: BaseException, message: str) -> None:
        self.error_message = message
        self.error_code = getattr(error, "code", "") or type(error).__name__

    def on_finished(self, outcome: Outcome) -> None:
        if self.finished:
            return
        self.finished = True
        if outcome in (Outcome.WAITING, Outcome.HANDED_OVER):
            # ``suspend`` ends a waiting AG-UI run, once the transcript is read; a run handed over
            # ends in the process that goes on with it, which closes what is left open.
            return
        self.start()
        for scope in self.children.values():
            scope.close()
        self.children.clear()
        self.close_open()
        publish = self.publish
        if outcome is Outcome.ERROR:
            publish(ev.run_error(self.error_message or "the run failed", self.error_code or "error"))
            return
        if outcome is Outcome.CANCELLED and self.v1:
            publish(ev.run_finished(self.thread_id, self.run_id, {"type": "cancelled"}))
            return
        if outcome in (Outcome.PAUSED, Outcome.CANCELLED, Outcome.INTERRUPTED):
            reason = self.pause_reason or outcome.value
            publish(ev.custom(f"threadline.{outcome.value}", {"reason": reason}))
        publish(run_finished(self.thread_id, self.run_id, v1=self.v1))

    def close_open(self) -> None:
        """Closes whatever this stream left open (before a terminal event, or a sub-agent's end)."""
        for event in self.open.close():
            self.publish(event)

    # -- the stream -----------------------------------------------------

    def on_event(self, event: RunEvent) -> None:
        _HANDLERS[type(event)](self, event)

    # The per-token events are published as they come; the events that open or close a part go
    # through ``open``, which keeps what is open.

    def _text_delta(self, event: TextDelta) -> None:
        self.publish(ev.text_message_content(event.message_id, event.delta))

    def _tool_args(self, event: ToolCallArgs) -> None:
        self.publish(ev.tool_call_args(event.tool_call_id, event.delta))

    def _reasoning_delta(self, event: ReasoningDelta) -> None:
        self.publish(ev.reasoning_message_content(event.reasoning_id, event.delta))

    def _text_started(self, event: TextStarted) -> None:
        self.publish(self.open.see(ev.text_message_start(event.message_id)))

    def _text_ended(self, event: TextEnded) -> None:
        if event.message_id in self.open.texts:
            self.publish(self.open.see(ev.text_message_end(event.message_id)))

    def _tool_started(self, event: ToolCallStarted) -> None:
        if event.tool_call_id in self.open.tools or event.tool_call_id in self.open.closed_tools:
            return  # a toolCallId is never reused
        self.publish(self.open.see(ev.tool_call_start(event.tool_call_id, event.name, event.message_id)))

    def _tool_ended(self, event: ToolCallEnded) -> None:
        if event.tool_call_id in self.open.tools:
            self.publish(self.open.see(ev.tool_call_end(event.tool_call_id)))

    def _tool_result(self, event: ToolResult) -> None:
        if event.from_client:
            return  # the client ran it and already holds its result as a tool message
        if event.tool_call_id not in self.open.closed_tools:
            # A result for a call the stream never opened (or never closed)
            # opens and closes it first: a bare result aborts the clients.
            self._tool_started(ToolCallStarted(event.tool_call_id, event.name, event.message_id))
            self._tool_ended(ToolCallEnded(event.tool_call_id))
        self.publish(ev.tool_call_result(event.message_id, event.tool_call_id, event.content))
        if event.touched:
            self._state_delta(self.state.file_ops(event.touched))

    def _tool_progress(self, event: ToolProgress) -> None:
        value: dict[str, Any] = {
            "toolCallId": event.tool_call_id,
            "toolCallName": event.name,
            "progress": event.progress,
        }
        if event.total is not None:
            value["total"] = event.total
        if event.message:
            value["message"] = event.message
        self.publish(ev.custom(ev.TOOL_PROGRESS, value))

    def _reasoning_started(self, event: ReasoningStarted) -> None:
        self.publish(self.open.see(ev.reasoning_start(event.reasoning_id)))
        self.publish(ev.reasoning_message_start(event.reasoning_id))

    def _reasoning_ended(self, event: ReasoningEnded) -> None:
        if event.reasoning_id in self.open.reasoning:
            self.publish(ev.reasoning_message_end(event.reasoning_id))
            self.publish(self.open.see(ev.reasoning_end(event.reasoning_id)))

    def _phase(self, event: PhaseChanged) -> None:
        name = event.phase.value
        if event.started:
            if name not in self.open.steps:
                self.publish(self.open.see(ev.step_started(name)))
        elif name in self.open.steps:
            self.publish(self.open.see(ev.step_finished(name)))

    def _ignored(self, event: RunEvent) -> None:
        pass

    def _grounding(self, event: GroundingReported) -> None:
        self._state_delta(self.state.grounding_ops(event.report, event.gate_open))

    def _todos(self, event: TodosChanged) -> None:
        self._state_delta(self.state.todo_ops(event.todos))

    def _budget(self, event: BudgetStanding) -> None:
        self._state_delta(self.state.budget_ops(event))

    def _paused(self, event: RunPaused) -> None:
        self.pause_reason = event.reason.value

    # -- sub-agents -----------------------------------------------------

    def on_subagent(self, event: SubAgentEvent) -> None:
        if type(event) is SubAgentActivity:
            scope = self.children.get(event.task_id)
            if scope is not None:
                scope.translator.on_event(event.event)
        elif type(event) is SubAgentStarted:
            scope = _ChildScope(self, event)
            self.children[event.task_id] = scope
            self._state_delta(self.state.subagent_added_ops(board_entry(event)))
            scope.announce()
        elif type(event) is SubAgentResumed:
            # A child that waited goes on: announced again, already on the board.
            scope = _ChildScope(self, event.started)
            scope.translator.open.closed_tools.update(event.call_ids)
            self.children[event.started.task_id] = scope
            scope.announce()
        elif type(event) is SubAgentFinished:
            scope = self.children.pop(event.task_id, None)
            if scope is not None:
                scope.finish(event)
            changes = {
                "status": event.status.value,
                "summary": event.summary,
                "conclusion": conclusion_of(event.status.value, event.summary),
                "error": event.error,
            }
            self._state_delta(self.state.subagent_changed_ops(event.task_id, changes))

    # -- messages that join the run ------------------------------------

    def on_message_queued(self, request_id: str, display: str) -> None:
        if not self.finished:
            self.publish(ev.custom(ev.MESSAGE_QUEUED, {"requestId": request_id, "display": display}))

    def on_queued_message_read(self, request_ids: list[str]) -> None:
        # The join point: a request that queued one of these follows the run from here.
        self.publish(ev.custom(ev.QUEUED_MESSAGES_READ, {"requestIds": request_ids}))

    # -- per model call -------------------------------------------------

    def on_usage(self, usage: Usage) -> None:
        self._state_delta(self.state.usage_ops(usage))

    def _state_delta(self, ops: list[dict[str, Any]]) -> None:
        if ops:
            self.publish(ev.state_delta(ops))


# The translator's method for each kind of run event. Kept on the class, not as bound methods on each
# translator: bound methods stored on their own instance made every translator a reference cycle,
# which held its run's stream and all its frames (about 340 KiB a 2,000-token run) until the next
# full collection rather than freeing them when the run ended.
_HANDLERS: dict[type, Callable[[AguiTranslator, Any], None]] = {
    TextDelta: AguiTranslator._text_delta,
    ToolCallArgs: AguiTranslator._tool_args,
    ReasoningDelta: AguiTranslator._reasoning_delta,
    TextStarted: AguiTranslator._text_started,
    TextEnded: AguiTranslator._text_ended,
    ToolCallStarted: AguiTranslator._tool_started,
    ToolCallEnded: AguiTranslator._tool_ended,
    ToolResult: AguiTranslator._tool_result,
    ToolProgress: AguiTranslator._tool_progress,
    ReasoningStarted: AguiTranslator._reasoning_started,
    ReasoningEnded: AguiTranslator._reasoning_ended,
    PhaseChanged: AguiTranslator._phase,
    RunPaused: AguiTranslator._paused,
    TodosChanged: AguiTranslator._todos,
    GroundingReported: AguiTranslator._grounding,
    BudgetStanding: AguiTranslator._budget,
    Compacted: AguiTranslator._ignored,  # the compacting step already shows it; its figures go to /metrics
}


def board_entry(event: SubAgentStarted) -> dict[str, Any]:
    """A task's entry on the state document's ``subAgents`` board."""
    entry: dict[str, Any] = {
        "id": event.task_id,
        "role": event.role,
        "status": "running",
        "prompt": event.prompt,
        "model": event.model,
        "depth": event.depth,
        "toolCallId": event.tool_call_id,
        "summary": "",
        "conclusion": "",
        "error": "",
    }
    if event.parent_task_id:
        entry["parentId"] = event.parent_task_id
    return entry


class _ChildScope:
    """One sub-agent's stream within its parent's AG-UI run.

    A 1.0 client gets SUBAGENT_STARTED, the child's events tagged with its
    ``subagentRunId`` (after ``type``, where the protocol's models put it) and
    SUBAGENT_FINISHED or SUBAGENT_ERROR. A 0.x client knows none of these, so
    it gets only what the child changes in the state document (its files, and
    the board, which the parent's translator keeps). The parent's ``publish``
    and ``v1`` are read at each event: both change when the agent run goes on
    in another AG-UI run.
    """

    def __init__(self, parent: AguiTranslator, started: SubAgentStarted) -> None:
        self.parent = parent
        self.started = started
        self.translator = AguiTranslator(
            self._publish, thread_id=parent.thread_id, run_id=parent.run_id, v1=True, state=parent.state
        )
        self.translator.started = True  # the parent's run is the one that started

    def _publish(self, event: dict[str, Any]) -> None:
        if event["type"] == ev.STATE_DELTA:
            self.parent.publish(event)  # the document is the thread's, whoever changed it
        elif self.parent.v1:
            self.parent.publish(ev.in_subagent(event, self.started.task_id))

    def announce(self) -> None:
        if not self.parent.v1:
            return
        started = self.started
        self.parent.publish(
            ev.subagent_started(
                started.task_id, started.role, started.prompt[:500], started.parent_task_id, started.tool_call_id
            )
        )

    def finish(self, finished: SubAgentFinished) -> None:
        self.translator.close_open()
        if not self.parent.v1:
            return
        if finished.status is SubAgentStatus.SUCCEEDED:
            self.parent.publish(ev.subagent_finished(finished.task_id, {"type": "success"}, finished.summary))
        else:
            message = finished.error or finished.conclusion
            self.parent.publish(ev.subagent_error(finished.task_id, message, finished.status.value))

    def suspend(self, interrupt_ids: list[str]) -> None:
        """The parent's AG-UI run ends while this child waits (on an approval of its own, or
        beside one): it is closed there as suspended and announced again in the next run."""
        self.translator.close_open()
        if self.parent.v1:
            outcome: dict[str, Any] = {"type": "suspended"}
            if interrupt_ids:
                outcome["interruptIds"] = interrupt_ids
            self.parent.publish(ev.subagent_finished(self.started.task_id, outcome))

    def close(self) -> None:
        """The parent's run ends with this child still open (an error, a cancel): it ends with it."""
        self.translator.close_open()
        if self.parent.v1:
            message = "the run ended before this sub-agent finished"
            self.parent.publish(ev.subagent_error(self.started.task_id, message, "closed"))

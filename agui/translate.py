"""Agent run events → AG-UI events, kept well formed for the clients that enforce the order.

The translator is a RunListener. It tracks what is open (text messages, tool
calls, reasoning spans, steps) so that whatever ends the run, open parts are
closed before the one terminal event (DESIGN.md §3, ordering rules). Events are
plain dicts with camelCase keys in the models' field order, optional keys
omitted, so encoding them gives the frames the ag-ui-protocol models would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.events import (
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
from agents.verdict import conclusion_of
from agui.state import ThreadState

Publish = Callable[[dict[str, Any]], None]


# CUSTOM events of a message sent while the run was in flight: it was queued, and (a tool boundary
# later) the run read it. ``requestId``/``requestIds`` are the runIds of the requests that sent them.
MESSAGE_QUEUED = "threadline.message_queued"
QUEUED_MESSAGES_READ = "threadline.queued_messages_read"
# How far a tool call in flight is (an MCP server's progress notification), between its
# TOOL_CALL_END and its TOOL_CALL_RESULT.
TOOL_PROGRESS = "threadline.tool_progress"


def run_started(thread_id: str, run_id: str, *, v1: bool) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id}
    if v1:
        event["protocolVersion"] = "1.0"
    return event


def run_finished(thread_id: str, run_id: str, *, v1: bool) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id}
    if v1:
        event["outcome"] = {"type": "success"}
    return event


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
        self.open_texts: dict[str, None] = {}
        self.open_tools: dict[str, None] = {}
        self.closed_tools: set[str] = set()
        self.open_reasoning: dict[str, None] = {}
        self.open_steps: dict[str, None] = {}
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
            self.publish(run_started(self.thread_id, self.run_id, v1=self.v1))
        self.publish({"type": "STATE_SNAPSHOT", "snapshot": self.state.document})

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
        self._close_open()
        self.publish({"type": "MESSAGES_SNAPSHOT", "messages": messages})
        self.publish({"type": "STATE_SNAPSHOT", "snapshot": self.state.document})
        finished: dict[str, Any] = {"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.run_id}
        if outcome:
            finished["outcome"] = outcome
        self.publish(finished)

    def on_start(self, run: RunInfo) -> None:
        self.start()

    def on_error(self, error: BaseException, message: str) -> None:
        self.error_message = message
        self.error_code = getattr(error, "code", "") or type(error).__name__

    def on_finished(self, outcome: Outcome) -> None:
        if self.finished:
            return
        self.finished = True
        if outcome is Outcome.WAITING:
            return  # ``suspend`` ends the AG-UI run, once the transcript is read
        self.start()
        for scope in self.children.values():
            scope.close()
        self.children.clear()
        self._close_open()
        publish = self.publish
        if outcome is Outcome.ERROR:
            publish(
                {
                    "type": "RUN_ERROR",
                    "message": self.error_message or "the run failed",
                    "code": self.error_code or "error",
                }
            )
            return
        if outcome is Outcome.CANCELLED and self.v1:
            publish(
                {
                    "type": "RUN_FINISHED",
                    "threadId": self.thread_id,
                    "runId": self.run_id,
                    "outcome": {"type": "cancelled"},
                }
            )
            return
        if outcome in (Outcome.PAUSED, Outcome.CANCELLED, Outcome.INTERRUPTED):
            reason = self.pause_reason or outcome.value
            publish({"type": "CUSTOM", "name": f"threadline.{outcome.value}", "value": {"reason": reason}})
        publish(run_finished(self.thread_id, self.run_id, v1=self.v1))

    def _close_open(self) -> None:
        publish = self.publish
        for message_id in list(self.open_texts):
            publish({"type": "TEXT_MESSAGE_END", "messageId": message_id})
        self.open_texts.clear()
        for tool_call_id in list(self.open_tools):
            publish({"type": "TOOL_CALL_END", "toolCallId": tool_call_id})
        self.open_tools.clear()
        for reasoning_id in list(self.open_reasoning):
            publish({"type": "REASONING_MESSAGE_END", "messageId": reasoning_id})
            publish({"type": "REASONING_END", "messageId": reasoning_id})
        self.open_reasoning.clear()
        for step in reversed(list(self.open_steps)):
            publish({"type": "STEP_FINISHED", "stepName": step})
        self.open_steps.clear()

    # -- the stream -----------------------------------------------------

    def on_event(self, event: RunEvent) -> None:
        _HANDLERS[type(event)](self, event)

    def _text_delta(self, event: TextDelta) -> None:
        self.publish({"type": "TEXT_MESSAGE_CONTENT", "messageId": event.message_id, "delta": event.delta})

    def _tool_args(self, event: ToolCallArgs) -> None:
        self.publish({"type": "TOOL_CALL_ARGS", "toolCallId": event.tool_call_id, "delta": event.delta})

    def _reasoning_delta(self, event: ReasoningDelta) -> None:
        self.publish({"type": "REASONING_MESSAGE_CONTENT", "messageId": event.reasoning_id, "delta": event.delta})

    def _text_started(self, event: TextStarted) -> None:
        self.open_texts[event.message_id] = None
        self.publish({"type": "TEXT_MESSAGE_START", "messageId": event.message_id, "role": "assistant"})

    def _text_ended(self, event: TextEnded) -> None:
        if self.open_texts.pop(event.message_id, 0) is None:
            self.publish({"type": "TEXT_MESSAGE_END", "messageId": event.message_id})

    def _tool_started(self, event: ToolCallStarted) -> None:
        if event.tool_call_id in self.open_tools or event.tool_call_id in self.closed_tools:
            return  # a toolCallId is never reused
        self.open_tools[event.tool_call_id] = None
        self.publish(
            {
                "type": "TOOL_CALL_START",
                "toolCallId": event.tool_call_id,
                "toolCallName": event.name,
                "parentMessageId": event.message_id,
            }
        )

    def _tool_ended(self, event: ToolCallEnded) -> None:
        if self.open_tools.pop(event.tool_call_id, 0) is None:
            self.closed_tools.add(event.tool_call_id)
            self.publish({"type": "TOOL_CALL_END", "toolCallId": event.tool_call_id})

    def _tool_result(self, event: ToolResult) -> None:
        if event.from_client:
            return  # the client ran it and already holds its result as a tool message
        if event.tool_call_id not in self.closed_tools:
            # A result for a call the stream never opened (or never closed)
            # opens and closes it first: a bare result aborts the clients.
            self._tool_started(ToolCallStarted(event.tool_call_id, event.name, event.message_id))
            self._tool_ended(ToolCallEnded(event.tool_call_id))
        self.publish(
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": event.message_id,
                "toolCallId": event.tool_call_id,
                "content": event.content,
                "role": "tool",
            }
        )
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
        self.publish({"type": "CUSTOM", "name": TOOL_PROGRESS, "value": value})

    def _reasoning_started(self, event: ReasoningStarted) -> None:
        self.open_reasoning[event.reasoning_id] = None
        self.publish({"type": "REASONING_START", "messageId": event.reasoning_id})
        self.publish({"type": "REASONING_MESSAGE_START", "messageId": event.reasoning_id, "role": "reasoning"})

    def _reasoning_ended(self, event: ReasoningEnded) -> None:
        if self.open_reasoning.pop(event.reasoning_id, 0) is None:
            self.publish({"type": "REASONING_MESSAGE_END", "messageId": event.reasoning_id})
            self.publish({"type": "REASONING_END", "messageId": event.reasoning_id})

    def _phase(self, event: PhaseChanged) -> None:
        name = event.phase.value
        if event.started:
            if name not in self.open_steps:
                self.open_steps[name] = None
                self.publish({"type": "STEP_STARTED", "stepName": name})
        elif self.open_steps.pop(name, 0) is None:
            self.publish({"type": "STEP_FINISHED", "stepName": name})

    def _ignored(self, event: RunEvent) -> None:
        pass

    def _grounding(self, event: GroundingReported) -> None:
        self._state_delta(self.state.grounding_ops(event.report, event.gate_open))

    def _todos(self, event: TodosChanged) -> None:
        self._state_delta(self.state.todo_ops(event.todos))

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
            scope.translator.closed_tools.update(event.call_ids)
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

    # -- messages that join the run (seeds/004, FireOrQueue) ---------------

    def on_message_queued(self, request_id: str, display: str) -> None:
        if not self.finished:
            value = {"requestId": request_id, "display": display}
            self.publish({"type": "CUSTOM", "name": MESSAGE_QUEUED, "value": value})

    def on_queued_message_read(self, request_ids: list[str]) -> None:
        # The join point: a request that queued one of these follows the run from here.
        self.publish({"type": "CUSTOM", "name": QUEUED_MESSAGES_READ, "value": {"requestIds": request_ids}})

    # -- per model call -------------------------------------------------

    def on_usage(self, usage: Usage) -> None:
        self._state_delta(self.state.usage_ops(usage))

    def _state_delta(self, ops: list[dict[str, Any]]) -> None:
        if ops:
            self.publish({"type": "STATE_DELTA", "delta": ops})


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
        if event["type"] == "STATE_DELTA":
            self.parent.publish(event)  # the document is the thread's, whoever changed it
        elif self.parent.v1:
            kind, rest = event["type"], {k: v for k, v in event.items() if k != "type"}
            self.parent.publish({"type": kind, "subagentRunId": self.started.task_id, **rest})

    def announce(self) -> None:
        if not self.parent.v1:
            return
        started = self.started
        event: dict[str, Any] = {
            "type": "SUBAGENT_STARTED",
            "subagentRunId": started.task_id,
            "name": started.role,
            "description": started.prompt[:500],
        }
        if started.parent_task_id:
            event["parentSubagentRunId"] = started.parent_task_id
        event["parentToolCallId"] = started.tool_call_id
        self.parent.publish(event)

    def finish(self, finished: SubAgentFinished) -> None:
        self.translator._close_open()
        if not self.parent.v1:
            return
        if finished.status is SubAgentStatus.SUCCEEDED:
            self.parent.publish(
                {
                    "type": "SUBAGENT_FINISHED",
                    "subagentRunId": finished.task_id,
                    "result": finished.summary,
                    "outcome": {"type": "success"},
                }
            )
        else:
            self.parent.publish(
                {
                    "type": "SUBAGENT_ERROR",
                    "subagentRunId": finished.task_id,
                    "message": finished.error or finished.conclusion,
                    "code": finished.status.value,
                }
            )

    def suspend(self, interrupt_ids: list[str]) -> None:
        """The parent's AG-UI run ends while this child waits (on an approval of its own, or
        beside one): it is closed there as suspended and announced again in the next run."""
        self.translator._close_open()
        if self.parent.v1:
            outcome: dict[str, Any] = {"type": "suspended"}
            if interrupt_ids:
                outcome["interruptIds"] = interrupt_ids
            self.parent.publish(
                {"type": "SUBAGENT_FINISHED", "subagentRunId": self.started.task_id, "outcome": outcome}
            )

    def close(self) -> None:
        """The parent's run ends with this child still open (an error, a cancel): it ends with it."""
        self.translator._close_open()
        if self.parent.v1:
            self.parent.publish(
                {
                    "type": "SUBAGENT_ERROR",
                    "subagentRunId": self.started.task_id,
                    "message": "the run ended before this sub-agent finished",
                    "code": "closed",
                }
            )

"""What a sub-agent's run reports, as its parent hears it.

The child's events reach the parent's listeners as its sub-agent's activity and its tokens as the
parent's usage; the listener keeps, meanwhile, what the child's result is made of (its last text,
its tool calls, the files it changed, how it ended). orchestrator/subagents.py drives the child and reads
the result from it.
"""

from __future__ import annotations

from typing import Any

from orchestrator.events import (
    AssistantMessage,
    BaseListener,
    Outcome,
    PauseReason,
    Phase,
    PhaseChanged,
    RunEvent,
    RunListener,
    RunPaused,
    SubAgentActivity,
    SubAgentEvent,
    SubAgentFinished,
    SubAgentStarted,
    ToolMessage,
    ToolResult,
    Usage,
)
from orchestrator.providers.base import TokenCount
from orchestrator.waits import ChildCheckpoint


class ChildListener(BaseListener):
    """What the child reports, passed to the parent as its sub-agent's, and what the result is made of."""

    def __init__(self, parent: RunListener, task_id: str, waited: ChildCheckpoint | None = None) -> None:
        """``waited``: the child goes on from a checkpoint, with what it had done before."""
        self.parent = parent
        self.task_id = task_id
        self.outcome = Outcome.ERROR
        self.error = ""
        self.last_text = waited.last_text if waited else ""
        self.tool_calls: dict[str, dict[str, Any]] = {c["id"]: c for c in waited.tool_calls} if waited else {}
        self.iterations = waited.iterations if waited else 0
        self.usage = TokenCount(**waited.usage) if waited else TokenCount()
        self.usage_before = self.usage  # what the parent already counted
        self.changed: dict[str, None] = {}  # paths, in the order first changed
        self.pause_reason: PauseReason | None = None
        self._children_calls: dict[str, str] = {}  # a child's task id -> this run's sub_agent call

    def _note_changes(self, event: ToolResult) -> None:
        for path, action in event.touched:
            if action != "read":
                self.changed[path] = None

    def on_event(self, event: RunEvent) -> None:
        if type(event) is ToolResult:
            self._note_changes(event)
            if event.tool_call_id in self.tool_calls:
                self.tool_calls[event.tool_call_id]["isError"] = event.is_error
                self.tool_calls[event.tool_call_id]["ended"] = True
        elif type(event) is RunPaused:
            self.pause_reason = event.reason
        elif type(event) is PhaseChanged and event.phase is Phase.PLANNING and event.started:
            self.iterations += 1  # its own model calls (a grandchild's usage also passes through here)
        self.parent.on_subagent(SubAgentActivity(self.task_id, event))

    def on_message(self, message: AssistantMessage | ToolMessage) -> None:
        if isinstance(message, AssistantMessage):
            if message.content.strip():
                self.last_text = message.content.strip()
            for call_id, name, arguments in message.tool_calls:
                self.tool_calls[call_id] = {
                    "id": call_id,
                    "name": name,
                    "arguments": arguments,
                    "isError": False,
                    "ended": False,  # True once its result came; False: the child stopped mid-call
                }

    def on_usage(self, usage: Usage) -> None:
        self.usage = TokenCount(
            input_tokens=self.usage.input_tokens + usage.input_tokens,
            output_tokens=self.usage.output_tokens + usage.output_tokens,
            cache_read_tokens=self.usage.cache_read_tokens + usage.cache_read_tokens,
            cache_write_tokens=self.usage.cache_write_tokens + usage.cache_write_tokens,
        )
        self.parent.on_usage(usage)  # the child's tokens count on the parent's

    def on_subagent(self, event: SubAgentEvent) -> None:
        # A grandchild: what it changed is this child's work too, and its calls are kept under the
        # sub_agent call that started it.
        kind = type(event)
        if kind is SubAgentActivity:
            assert isinstance(event, SubAgentActivity)
            if type(event.event) is ToolResult:
                self._note_changes(event.event)
        elif kind is SubAgentStarted:
            assert isinstance(event, SubAgentStarted)
            if event.parent_task_id == self.task_id:
                self._children_calls[event.task_id] = event.tool_call_id
        elif kind is SubAgentFinished:
            assert isinstance(event, SubAgentFinished)
            call = self.tool_calls.get(self._children_calls.get(event.task_id, ""))
            if call is not None:
                call["calls"] = list(event.tool_calls)
        self.parent.on_subagent(event)  # it names its own parent

    def on_error(self, error: BaseException, message: str) -> None:
        self.error = message

    def on_finished(self, outcome: Outcome) -> None:
        self.outcome = outcome

    def should_continue(self) -> bool:
        return self.parent.should_continue()  # cancelling the parent cancels the child

"""The orchestrator's own run events and the listener contract.

``agents/`` reports what a run does through these typed values; surfaces (the
AG-UI adapter, tests, logs) translate them. Nothing here knows of HTTP or AG-UI.
Deltas carry only the new text, never the text so far, so a long reply costs
O(n) to observe.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from orchestrator.budget import BudgetStanding


class Phase(StrEnum):
    PLANNING = "planning"
    GROUNDING = "grounding"
    EXECUTING = "executing"
    WAITING_APPROVAL = "waiting_approval"
    COMPACTING = "compacting"
    PAUSED = "paused"
    DONE = "done"
    ERROR = "error"


class Outcome(StrEnum):
    SUCCESS = "success"
    ERROR = "error"
    CANCELLED = "cancelled"
    PAUSED = "paused"
    INTERRUPTED = "interrupted"
    # A call needs an answer (a person's, or the client's): the run goes on once it has it.
    WAITING = "waiting"
    # Its process drains (a deploy): it stopped at a step boundary, and another process goes on
    # with it from there, in the same run (nothing is published for it: the run has not ended).
    HANDED_OVER = "handed_over"


@dataclass(slots=True, frozen=True)
class PhaseChanged:
    phase: Phase
    started: bool  # False when the phase ends


@dataclass(slots=True, frozen=True)
class TextStarted:
    message_id: str


# The three per-token events are not frozen: a frozen dataclass's __init__ sets each field through
# object.__setattr__, which made building one cost twice as much (bench/stream.py --profile py-spy).
# Nothing changes them once made.
@dataclass(slots=True)
class TextDelta:
    message_id: str
    delta: str


@dataclass(slots=True, frozen=True)
class TextEnded:
    message_id: str


@dataclass(slots=True, frozen=True)
class ReasoningStarted:
    reasoning_id: str


@dataclass(slots=True)
class ReasoningDelta:
    reasoning_id: str
    delta: str


@dataclass(slots=True, frozen=True)
class ReasoningEnded:
    reasoning_id: str


@dataclass(slots=True, frozen=True)
class ToolCallStarted:
    tool_call_id: str
    name: str
    message_id: str  # the assistant message the call belongs to


@dataclass(slots=True)
class ToolCallArgs:
    tool_call_id: str
    delta: str


@dataclass(slots=True, frozen=True)
class ToolCallEnded:
    tool_call_id: str


@dataclass(slots=True, frozen=True)
class ToolResult:
    tool_call_id: str
    name: str
    content: str
    is_error: bool
    message_id: str
    touched: tuple[tuple[str, str], ...] = ()  # (path, action) pairs the tool read or changed
    duration_seconds: float = 0.0
    from_client: bool = False  # the client ran it and already has the result


@dataclass(slots=True, frozen=True)
class ToolProgress:
    """A tool in flight said how far it is (an MCP server's progress notification)."""

    tool_call_id: str
    name: str
    progress: float
    total: float | None = None
    message: str = ""


@dataclass(slots=True, frozen=True)
class TodosChanged:
    """The run's todo list as todo_write left it (items with id, content, status)."""

    todos: tuple[dict[str, str], ...]


@dataclass(slots=True, frozen=True)
class GroundingReported:
    """The agent's last grounding report, and whether the grounding gate is now open."""

    report: dict[str, Any]
    gate_open: bool


@dataclass(slots=True, frozen=True)
class Compacted:
    """Older turns were summarised: how many turns the summary replaced, and how long it took."""

    dropped_turns: int
    duration_seconds: float


class PauseReason(StrEnum):
    MAX_ITERATIONS = "max_iterations"
    WALL_CLOCK = "wall_clock"
    TOKEN_BUDGET = "token_budget"


@dataclass(slots=True, frozen=True)
class RunPaused:
    """A limit stopped the run; the session keeps its turns, and "continue" goes on from them."""

    reason: PauseReason


COMPACTION = "compaction"  # Usage.purpose of a summary call (orchestrator/compaction.py)


@dataclass(slots=True, frozen=True)
class Usage:
    """The tokens of one model call, and how long the call took."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    duration_seconds: float = 0.0
    # The sub-agent whose call it was ("" for the run's own): its context is not the run's.
    task_id: str = ""
    # What the call was for: "turn" (the model's turn) or "compaction" (summarising older turns). A
    # compaction's tokens are spent like any other's, but its prompt is not the run's context.
    purpose: str = "turn"


@dataclass(slots=True, frozen=True)
class AssistantMessage:
    """The assistant message a model call produced, complete, in transcript shape."""

    message_id: str
    content: str
    tool_calls: tuple[tuple[str, str, str], ...]  # (id, name, arguments JSON)


@dataclass(slots=True, frozen=True)
class ToolMessage:
    message_id: str
    tool_call_id: str
    content: str
    error: str = ""  # a client's tool that failed: its error, kept beside what it sent as content


@dataclass(slots=True, frozen=True)
class SubAgentStarted:
    """A run delegated a task to a child run (the ``sub_agent`` tool)."""

    task_id: str  # the child's id (AG-UI's subagentRunId)
    parent_task_id: str  # "" when the parent is the top-level run
    tool_call_id: str  # the parent's sub_agent call
    role: str
    prompt: str
    model: str
    depth: int


@dataclass(slots=True, frozen=True)
class SubAgentActivity:
    """Something a child run streamed (text, a tool call, a step): ``event`` as the child reported it."""

    task_id: str
    event: RunEvent


class SubAgentStatus(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    STOPPED = "stopped"  # a limit (its iteration cap, its timeout) stopped it


@dataclass(slots=True, frozen=True)
class SubAgentFinished:
    task_id: str
    status: SubAgentStatus
    summary: str  # what the parent's model is given back
    conclusion: str  # how it ended, in one line
    error: str = ""
    # The calls it made, as SubAgentResult.tool_calls keeps them, so a parent sub-agent can keep them
    # under its own sub_agent call (the record is recursive).
    tool_calls: tuple[dict[str, Any], ...] = ()


@dataclass(slots=True, frozen=True)
class SubAgentResumed:
    """A child that waited for an answer goes on (in whichever process took the answer)."""

    started: SubAgentStarted
    call_ids: tuple[str, ...] = ()  # its calls that were announced before it waited


SubAgentEvent = SubAgentStarted | SubAgentActivity | SubAgentFinished | SubAgentResumed


@dataclass(slots=True)
class RunInfo:
    """What ``on_start`` tells a listener of the run: whose request it is, and for a delegated run
    which request delegated it and what for."""

    run_id: str
    thread_id: str
    model: str
    user_id: str = ""  # the thread's owner, when a user's own token started it
    parent_request_id: str = ""  # a sub-agent's: the run that delegated to it
    description: str = ""  # a sub-agent's: what it is for, one line


RunEvent = (
    PhaseChanged
    | TextStarted
    | TextDelta
    | TextEnded
    | ReasoningStarted
    | ReasoningDelta
    | ReasoningEnded
    | ToolCallStarted
    | ToolCallArgs
    | ToolCallEnded
    | ToolResult
    | ToolProgress
    | RunPaused
    | TodosChanged
    | GroundingReported
    | Compacted
    | BudgetStanding
)


class RunListener(Protocol):
    """What a run reports. ``on_finished`` is called exactly once, whatever ended the run.

    ``on_event`` carries the stream (phases, text, reasoning, tool calls); the
    other hooks carry what happens at most once per model call or run.
    ``on_subagent`` reports what the runs this one delegated to are doing (only
    the parent's listeners hear it); a child's model calls also reach ``on_usage``,
    since its tokens count on the parent's.
    ``should_continue`` is polled between iterations; False ends the run as cancelled.
    ``on_model`` names the model the run talks to: once when it starts (the one it asks for), and
    again whenever the model that answers is another (an alias the API resolves to a dated id, a
    deployment that serves another model than was asked for), so a listener that shows or records
    the model shows the one really answering.

    A listener hears either ``on_start`` (it was there when the run started) or ``on_subscribe``
    (it joined a run already in flight through ``Listeners.subscribe``: a message queued on a
    busy thread, a surface that follows the run), then the run's events from that point on and,
    either way, ``on_finished`` exactly once.
    """

    def on_start(self, run: RunInfo) -> None: ...
    def on_subscribe(self) -> None: ...
    def on_model(self, model: str) -> None: ...
    def on_event(self, event: RunEvent) -> None: ...
    def on_message(self, message: AssistantMessage | ToolMessage) -> None: ...
    def on_usage(self, usage: Usage) -> None: ...
    def on_subagent(self, event: SubAgentEvent) -> None: ...
    def on_message_queued(self, request_id: str, display: str) -> None: ...
    def on_queued_message_read(self, request_ids: list[str]) -> None: ...
    def on_error(self, error: BaseException, message: str) -> None: ...
    def on_finished(self, outcome: Outcome) -> None: ...
    def should_continue(self) -> bool: ...


class Listeners:
    """Several listeners as one: each hears everything, in order; the run goes on while all agree.
    More may join while the run is in flight (``subscribe``)."""

    def __init__(self, *listeners: RunListener) -> None:
        self._finished: Outcome | None = None
        self._set(listeners)

    def _set(self, listeners: tuple[RunListener, ...]) -> None:
        # Replaced, never changed in place: a listener joining during a fan-out hears the next event.
        self.listeners: tuple[RunListener, ...] = listeners
        # The two calls made per streamed token go only to the listeners that do something with
        # them, not to BaseListener's no-ops: the fan-out was a tenth of a token's path.
        self._hearing = tuple(each for each in listeners if not _inherits(each, "on_event"))
        self._asking = tuple(each for each in listeners if not _inherits(each, "should_continue"))

    def subscribe(self, listener: RunListener) -> None:
        """Joins ``listener`` to the run in flight: ``on_subscribe`` now, the events from here on,
        and ``on_finished`` once (at once, when the run has already finished)."""
        listener.on_subscribe()
        if self._finished is not None:
            listener.on_finished(self._finished)
            return
        self._set((*self.listeners, listener))

    def on_start(self, run: RunInfo) -> None:
        for listener in self.listeners:
            listener.on_start(run)

    def on_subscribe(self) -> None:
        for listener in self.listeners:
            listener.on_subscribe()

    def on_model(self, model: str) -> None:
        for listener in self.listeners:
            listener.on_model(model)

    def on_event(self, event: RunEvent) -> None:
        for listener in self._hearing:
            listener.on_event(event)

    def on_message(self, message: AssistantMessage | ToolMessage) -> None:
        for listener in self.listeners:
            listener.on_message(message)

    def on_usage(self, usage: Usage) -> None:
        for listener in self.listeners:
            listener.on_usage(usage)

    def on_subagent(self, event: SubAgentEvent) -> None:
        for listener in self.listeners:
            listener.on_subagent(event)

    def on_message_queued(self, request_id: str, display: str) -> None:
        for listener in self.listeners:
            listener.on_message_queued(request_id, display)

    def on_queued_message_read(self, request_ids: list[str]) -> None:
        for listener in self.listeners:
            listener.on_queued_message_read(request_ids)

    def on_error(self, error: BaseException, message: str) -> None:
        for listener in self.listeners:
            listener.on_error(error, message)

    def on_finished(self, outcome: Outcome) -> None:
        self._finished = outcome
        for listener in self.listeners:
            listener.on_finished(outcome)

    def should_continue(self) -> bool:
        # A loop, not all() over a generator: this is asked after every streamed token.
        for listener in self._asking:  # noqa: SIM110
            if not listener.should_continue():
                return False
        return True


class BaseListener:
    """A listener that ignores everything; subclass and override what you need."""

    def on_start(self, run: RunInfo) -> None:
        pass

    def on_subscribe(self) -> None:
        pass

    def on_model(self, model: str) -> None:
        pass

    def on_event(self, event: RunEvent) -> None:
        pass

    def on_message(self, message: AssistantMessage | ToolMessage) -> None:
        pass

    def on_usage(self, usage: Usage) -> None:
        pass

    def on_subagent(self, event: SubAgentEvent) -> None:
        pass

    def on_message_queued(self, request_id: str, display: str) -> None:
        pass

    def on_queued_message_read(self, request_ids: list[str]) -> None:
        pass

    def on_error(self, error: BaseException, message: str) -> None:
        pass

    def on_finished(self, outcome: Outcome) -> None:
        pass

    def should_continue(self) -> bool:
        return True


def _inherits(listener: RunListener, method: str) -> bool:
    """Whether ``listener``'s ``method`` is BaseListener's own (which does nothing)."""
    return isinstance(listener, BaseListener) and getattr(type(listener), method) is getattr(BaseListener, method)

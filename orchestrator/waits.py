"""A run that waits is data, not a coroutine.

When a tool call needs an answer (a person's approval, the reply to a
question, the result of a tool the client runs, or a sub-agent waiting on one
of these), the loop returns ``Waiting``, which holds a ``Checkpoint``:
the calls of the model's last turn that already have results, the calls still
open and what each waits for, and the loop's counters. Whoever holds the
checkpoint and the answers can go on from it, in any process, after any restart
(openai-agents' ``NextStepInterruption`` is the model). The checkpoint is plain
JSON so it can be stored as it is.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from orchestrator.approvals import Answer
from orchestrator.events import SubAgentStarted, ToolMessage
from orchestrator.providers.base import TokenCount


class WaitKind(StrEnum):
    APPROVAL = "approval"  # a person allows or refuses the call
    QUESTION = "question"  # a person replies (ask_user, a grounding question)
    CLIENT = "client"  # the client runs one of its own tools and sends the result
    CHILD = "child"  # a sub-agent waits on one of these itself
    INPUT = "input"  # a tool asks the person mid-call (an MCP server's elicitation)


@dataclass(slots=True)
class DoneCall:
    """A call of the batch that already has its result (reported and stored when it ended)."""

    content: str
    is_error: bool
    message_id: str
    images: list[dict[str, Any]] = field(default_factory=list)  # image blocks the model sees (MCP tools)

    def model_content(self) -> str | list[dict[str, Any]]:
        """The tool_result's content as the model reads it: the text, and the images after it."""
        if not self.images:
            return self.content
        return [{"type": "text", "text": self.content}, *self.images]


@dataclass(slots=True)
class OpenCall:
    call_id: str
    name: str
    kind: WaitKind
    # What answers it: the interrupt id (approvals and questions) or the call id (client tools).
    answer_id: str
    message: str = ""  # what the person is asked
    reason: str = ""  # why the policy asks
    expires_at: str = ""  # ISO 8601, UTC
    arguments: dict[str, Any] = field(default_factory=dict)
    child: ChildCheckpoint | None = None
    input: dict[str, Any] = field(default_factory=dict)  # an InputRequest as JSON (WaitKind.INPUT)


@dataclass(slots=True)
class Counters:
    """The loop's own state across a wait: limits count the whole agent run, not one segment."""

    iteration: int = 0
    tokens: int = 0
    elapsed: float = 0.0  # seconds spent working, not waiting
    grounded: bool = True
    last_call: str = ""
    repeats: int = 0


@dataclass(slots=True)
class Checkpoint:
    done: dict[str, DoneCall] = field(default_factory=dict)
    open: list[OpenCall] = field(default_factory=list)
    counters: Counters = field(default_factory=Counters)
    # The read ledger (orchestrator/tools/ledger.py) as the wait found it: what the agent read before an
    # approval counts after it, on whichever process goes on (issue #42).
    reads: dict[str, str] = field(default_factory=dict)

    def answers_needed(self) -> list[OpenCall]:
        """Every open call a person or the client must answer, sub-agents' included."""
        needed: list[OpenCall] = []
        for call in self.open:
            if call.child is not None:
                needed.extend(call.child.checkpoint.answers_needed())
            else:
                needed.append(call)
        return needed

    def owners(self) -> dict[str, str]:
        """The sub-agent each open call nested in a child belongs to, by answer id."""
        owners: dict[str, str] = {}
        for call in self.open:
            if call.child is not None:
                nested = call.child.checkpoint
                owners.update({c.answer_id: call.child.task_id for c in nested.answers_needed()})
                owners.update(nested.owners())
        return owners

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Checkpoint:
        return Checkpoint(
            done={call_id: DoneCall(**done) for call_id, done in data.get("done", {}).items()},
            open=[_open_call(call) for call in data.get("open", [])],
            counters=Counters(**data.get("counters", {})),
            reads={str(path): str(digest) for path, digest in data.get("reads", {}).items()},
        )


@dataclass(slots=True)
class ChildCheckpoint:
    """A sub-agent that waits: who it is (SubAgentStarted's fields, by the same names), its
    conversation so far, and its own checkpoint."""

    task_id: str
    parent_task_id: str
    tool_call_id: str
    role: str
    prompt: str
    model: str
    depth: int
    params: dict[str, Any]  # SubAgentParams as JSON
    allowed_tools: list[str]  # the tools it was given
    turns: list[dict[str, Any]]
    checkpoint: Checkpoint
    # What its result is made of so far (orchestrator/subagents.py _ChildListener).
    iterations: int = 0
    last_text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)

    def subagent_started(self) -> SubAgentStarted:
        """Who the child is, as it was announced (the checkpoint holds SubAgentStarted's fields)."""
        return SubAgentStarted(
            self.task_id, self.parent_task_id, self.tool_call_id, self.role, self.prompt, self.model, self.depth
        )


def _open_call(data: dict[str, Any]) -> OpenCall:
    child = data.get("child")
    return OpenCall(
        call_id=data["call_id"],
        name=data["name"],
        kind=WaitKind(data["kind"]),
        answer_id=data["answer_id"],
        message=data.get("message", ""),
        reason=data.get("reason", ""),
        expires_at=data.get("expires_at", ""),
        arguments=data.get("arguments", {}),
        child=None if child is None else _child(child),
        input=data.get("input") or {},
    )


def _child(data: dict[str, Any]) -> ChildCheckpoint:
    fields = {k: v for k, v in data.items() if k != "checkpoint"}
    return ChildCheckpoint(**fields, checkpoint=Checkpoint.from_json(data["checkpoint"]))


@dataclass(slots=True)
class Resumption:
    """What a loop goes on from: its checkpoint and the answers, by ``OpenCall.answer_id``."""

    checkpoint: Checkpoint
    answers: dict[str, Answer]


@dataclass(slots=True, frozen=True)
class Waiting:
    """A run, or one turn's tool calls, ended on calls that need answers; ``checkpoint`` is what it
    goes on from once they are answered. From a turn's calls (orchestrator/toolcalls.py) it also carries
    the calls that ended in this pass (stored at once), the tokens its sub-agents spent, and
    whether the grounding gate is open after it; the loop folds those into the checkpoint's counters."""

    checkpoint: Checkpoint
    messages: tuple[ToolMessage, ...] = ()
    spent: TokenCount = field(default_factory=TokenCount)
    grounded: bool = True

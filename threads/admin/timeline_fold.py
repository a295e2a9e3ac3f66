"""A run's event log folded into the entries of its timeline page, for the admin (the reads that
feed it are in timeline_reads.py).

The log holds one row per streamed delta, so a run of a few messages is
thousands of rows. The timeline folds them back into what happened: each text
and reasoning message assembled from its deltas, each tool call with its
arguments, its result and the approval it waited for, errors marked, and the
bookkeeping between them (phases, state deltas, snapshots) folded into one quiet
line. Every piece of text is capped, so a huge argument or result cannot make
the page unreadable.

A run that waited for an answer goes on in another Run row (its child, see
threads/waits.py), so the timeline of a run covers that run and the runs that
continued it, each a segment: the answer's effect is on the same page as the question.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson

from threads.admin.liveness import Liveness
from threads.models import Approval, Run, SubAgentTask
from vocabulary import agui as ev

TEXT_CAP = 20_000  # characters of one message, argument list or result kept for the page
QUIET_ITEMS_CAP = 12  # distinct items one folded bookkeeping line names


class Kind(StrEnum):
    SEGMENT = "segment"  # the start of one Run row of the timeline
    TEXT = "text"
    REASONING = "reasoning"
    TOOL = "tool"
    APPROVAL = "approval"  # an approval of the run whose call is not in this timeline
    QUIET = "quiet"  # phases, state deltas, snapshots, run start: folded together
    CUSTOM = "custom"
    SUBAGENT = "subagent"
    FINISHED = "finished"
    ERROR = "error"
    OTHER = "other"


class Capped:
    """Text assembled from pieces, keeping at most ``limit`` characters and counting the rest."""

    __slots__ = ("_kept", "kept", "limit", "total")

    def __init__(self, limit: int = TEXT_CAP, text: str = "") -> None:
        self.limit = limit
        self._kept: list[str] = []
        self.kept = 0
        self.total = 0
        if text:
            self.add(text)

    def add(self, piece: str) -> None:
        self.total += len(piece)
        if self.kept < self.limit:
            piece = piece[: self.limit - self.kept]
            self._kept.append(piece)
            self.kept += len(piece)

    @property
    def text(self) -> str:
        return "".join(self._kept)

    @property
    def dropped(self) -> int:
        return self.total - self.kept

    def __str__(self) -> str:
        return self.text


@dataclass(slots=True, frozen=True)
class Segment:
    run: Run
    continued: bool  # a later Run row took over (the waiting run was answered)

    @property
    def status(self) -> str:
        return "continued" if self.continued else self.run.status


@dataclass(slots=True)
class Entry:
    """One line of the timeline. ``seq`` is the event it starts at, ``last_seq`` the last folded in."""

    kind: Kind
    seq: int
    run: Run
    title: str = ""
    role: str = ""
    body: Capped | None = None  # the message, the tool call's arguments, the error message
    result: Capped | None = None  # a tool call's result
    result_seq: int | None = None
    result_run: Run | None = None  # the run the result came in: a later one when the call waited
    last_seq: int = 0
    events: int = 1
    ended: bool = False  # the message or tool call was closed by its END event
    is_error: bool = False
    warning: bool = False
    call_id: str = ""
    approval: Approval | None = None
    subagent_id: str = ""  # the child run the event belongs to (subagentRunId), if any
    subagent_task: SubAgentTask | None = None  # the task a sub_agent call started
    items: list[str] = field(default_factory=list)  # a quiet line's distinct items, in order
    detail: str = ""  # pretty JSON for the entries that have no better form
    segment: Segment | None = None  # a segment header's run and how it ended

    @property
    def arguments(self) -> str:
        """The call's arguments, indented when they are a whole JSON document."""
        if self.body is None:
            return ""
        if self.body.dropped:
            return self.body.text
        try:
            return json.dumps(json.loads(self.body.text), indent=2, ensure_ascii=False)
        except ValueError:
            return self.body.text


@dataclass(slots=True)
class Timeline:
    run: Run
    previous: Run | None  # the run this one continues, if it is itself a continuation
    segments: list[Segment]
    entries: list[Entry]
    event_count: int  # in the log
    events_read: int  # into the entries: fewer than event_count past the cap
    liveness: Liveness

    @property
    def live(self) -> bool:
        return self.liveness.live


# Events that are bookkeeping for the client: folded into one quiet line when they follow each other.
_SUBAGENT_TITLES = {ev.SUBAGENT_STARTED: "started", ev.SUBAGENT_FINISHED: "finished", ev.SUBAGENT_ERROR: "error"}
_QUIET = {ev.RUN_STARTED, ev.STEP_STARTED, ev.STEP_FINISHED, ev.STATE_SNAPSHOT, ev.STATE_DELTA, ev.MESSAGES_SNAPSHOT}
# Events whose payload the timeline does not need (snapshots can be megabytes).
_UNREAD = {ev.STATE_SNAPSHOT, ev.MESSAGES_SNAPSHOT, ev.REASONING_START, ev.REASONING_END, ev.STEP_FINISHED}
_WARNING_CUSTOM = {"threadline.paused", "threadline.cancelled", "threadline.interrupted"}


class TimelineFold:
    """Folds the events of a timeline's segments, in order, into its entries."""

    def __init__(
        self,
        *,
        segments: list[Segment],
        approvals: dict[str, Approval],
        tasks: dict[str, SubAgentTask],
        failed_calls: set[str],
    ) -> None:
        self.entries: list[Entry] = []
        self.runs = {s.run.pk: s.run for s in segments}
        self.segments = {s.run.pk: s for s in segments}
        self.approvals = approvals
        self.tasks = tasks
        self.failed_calls = failed_calls
        self.texts: dict[str, Entry] = {}
        self.reasoning: dict[str, Entry] = {}
        self.tools: dict[str, Entry] = {}
        self.quiet: Entry | None = None
        self.run_pk: uuid.UUID = segments[0].run.pk  # the segment being read
        self.started: set[uuid.UUID] = set()

    def read(self, events: Iterable[tuple[int, int, str, str]]) -> int:
        count = 0
        order = list(self.runs)
        segment = -1
        for index, seq, kind, payload in events:
            count += 1
            if index != segment:
                segment = index
                self._segment(order[index], seq)
            data: dict[str, Any] = {} if kind in _UNREAD else orjson.loads(payload)
            if kind in _QUIET:
                self._quiet(seq, kind, data, len(payload))
                continue
            self.quiet = None
            handler = _HANDLERS.get(kind)
            if handler is None:
                self._other(seq, kind, data)
            else:
                handler(self, seq, data)
        for run_pk in self.runs:  # a run that has logged nothing yet still gets its header
            if run_pk not in self.started:
                self._segment(run_pk, 0)
        return count

    def attach_orphan_approvals(self, approvals: list[Approval]) -> None:
        """Approvals whose tool call is not in these runs' logs get an entry of their own."""
        for approval in approvals:
            if approval.tool_call_id in self.tools:
                continue
            self.entries.append(
                Entry(
                    Kind.APPROVAL,
                    seq=0,
                    run=self.runs[approval.run_id],
                    title=approval.tool,
                    approval=approval,
                    call_id=approval.tool_call_id,
                    warning=approval.decision != Approval.Decision.APPROVED,
                )
            )

    # -- helpers --------------------------------------------------------

    def _segment(self, run_pk: uuid.UUID, seq: int) -> None:
        self.run_pk = run_pk
        self.started.add(run_pk)
        self.quiet = None
        self.entries.append(
            Entry(Kind.SEGMENT, seq=seq, run=self.runs[run_pk], events=0, segment=self.segments[run_pk])
        )

    def _add(self, entry: Entry, data: dict[str, Any]) -> Entry:
        entry.last_seq = entry.seq
        entry.subagent_id = str(data.get("subagentRunId", ""))
        self.entries.append(entry)
        return entry

    def _run(self) -> Run:
        return self.runs[self.run_pk]

    def _quiet(self, seq: int, kind: str, data: dict[str, Any], size: int) -> None:
        if self.quiet is None:
            self.quiet = self._add(Entry(Kind.QUIET, seq=seq, run=self._run(), events=0), data)
        quiet = self.quiet
        quiet.events += 1
        quiet.last_seq = seq
        if kind == ev.RUN_STARTED:
            item = "run started"
        elif kind == ev.STEP_STARTED:
            item = f"phase {data.get('stepName', '?')}"
        elif kind == ev.STEP_FINISHED:
            return
        elif kind == ev.STATE_DELTA:
            paths = sorted({str(op.get("path", "")) for op in data.get("delta", []) if isinstance(op, dict)})
            item = "state " + ", ".join(paths)
        elif kind == ev.STATE_SNAPSHOT:
            item = f"state snapshot ({size:,} bytes)"
        else:
            item = f"messages snapshot ({size:,} bytes)"
        if item not in quiet.items:
            if len(quiet.items) < QUIET_ITEMS_CAP:
                quiet.items.append(item)
            elif quiet.items[-1] != "…":
                quiet.items.append("…")

    def _grow(self, entry: Entry, seq: int) -> None:
        entry.events += 1
        entry.last_seq = seq

    def _message(self, opened: dict[str, Entry], kind: Kind, role: str, seq: int, data: dict[str, Any]) -> Entry:
        """The text or reasoning message ``data`` names, opened by its first event of any kind."""
        message_id = str(data.get("messageId", ""))
        entry = opened.get(message_id)
        if entry is None:
            entry = self._add(Entry(kind, seq=seq, run=self._run(), role=role, body=Capped()), data)
            opened[message_id] = entry
        elif entry.last_seq != seq:
            self._grow(entry, seq)
        return entry

    def _message_end(self, opened: dict[str, Entry], seq: int, data: dict[str, Any]) -> None:
        if (entry := opened.get(str(data.get("messageId", "")))) is not None:
            self._grow(entry, seq)
            entry.ended = True

    def _text_start(self, seq: int, data: dict[str, Any]) -> None:
        self._message(self.texts, Kind.TEXT, str(data.get("role") or "assistant"), seq, data)

    def _text_content(self, seq: int, data: dict[str, Any]) -> None:
        body = self._message(self.texts, Kind.TEXT, str(data.get("role") or "assistant"), seq, data).body
        assert body is not None
        body.add(str(data.get("delta", "")))

    def _text_end(self, seq: int, data: dict[str, Any]) -> None:
        self._message_end(self.texts, seq, data)

    def _reasoning_start(self, seq: int, data: dict[str, Any]) -> None:
        self._message(self.reasoning, Kind.REASONING, "reasoning", seq, data)

    def _reasoning_content(self, seq: int, data: dict[str, Any]) -> None:
        body = self._message(self.reasoning, Kind.REASONING, "reasoning", seq, data).body
        assert body is not None
        body.add(str(data.get("delta", "")))

    def _reasoning_end(self, seq: int, data: dict[str, Any]) -> None:
        self._message_end(self.reasoning, seq, data)

    def _tool(self, seq: int, data: dict[str, Any], name: str = "") -> Entry:
        call_id = str(data.get("toolCallId", ""))
        entry = self.tools.get(call_id)
        if entry is None:
            approval = self.approvals.get(call_id)
            entry = Entry(
                Kind.TOOL,
                seq=seq,
                run=self._run(),
                title=name or str(data.get("toolCallName") or "") or (approval.tool if approval else "tool call"),
                body=Capped(),
                call_id=call_id,
                approval=approval,
                subagent_task=self.tasks.get(call_id),
            )
            if approval is not None and approval.decision in (Approval.Decision.DENIED, Approval.Decision.TIMEOUT):
                entry.warning = True
            self.tools[call_id] = self._add(entry, data)
        else:
            self._grow(entry, seq)
        return entry

    def _tool_start(self, seq: int, data: dict[str, Any]) -> None:
        self._tool(seq, data)

    def _tool_args(self, seq: int, data: dict[str, Any]) -> None:
        entry = self._tool(seq, data)
        assert entry.body is not None
        entry.body.add(str(data.get("delta", "")))

    def _tool_end(self, seq: int, data: dict[str, Any]) -> None:
        self._tool(seq, data).ended = True

    def _tool_result(self, seq: int, data: dict[str, Any]) -> None:
        entry = self._tool(seq, data)
        content = data.get("content", "")
        if not isinstance(content, str):  # 1.0 allows a list of parts
            content = json.dumps(content, indent=2, ensure_ascii=False)
        entry.result = Capped(text=content)
        entry.result_seq = seq
        entry.result_run = self._run()
        entry.ended = True
        entry.is_error = entry.call_id in self.failed_calls

    def _span(self, seq: int, data: dict[str, Any]) -> None:
        """REASONING_START and _END frame the reasoning messages, which carry the text."""

    def _finished(self, seq: int, data: dict[str, Any]) -> None:
        outcome = data.get("outcome") or {}
        kind = outcome.get("type", "success") if isinstance(outcome, dict) else "success"
        entry = self._add(Entry(Kind.FINISHED, seq=seq, run=self._run(), title=str(kind)), data)
        if kind == "interrupt":
            entry.warning = True
            for interrupt in outcome.get("interrupts", []):
                entry.items.append(f"{interrupt.get('reason', '?')}: {interrupt.get('message', '')}"[:500])
        elif kind == "cancelled":
            entry.warning = True
        if pending := outcome.get("pendingToolCallIds") if isinstance(outcome, dict) else None:
            entry.items.append("waiting for the client's tools: " + ", ".join(map(str, pending)))

    def _error(self, seq: int, data: dict[str, Any]) -> None:
        code = data.get("code")
        title = f"run error ({code})" if code else "run error"
        self._add(
            Entry(Kind.ERROR, seq=seq, run=self._run(), title=title, body=Capped(text=str(data.get("message", "")))),
            data,
        ).is_error = True

    def _custom(self, seq: int, data: dict[str, Any]) -> None:
        name = str(data.get("name", ""))
        entry = self._add(Entry(Kind.CUSTOM, seq=seq, run=self._run(), title=name), data)
        entry.warning = name in _WARNING_CUSTOM
        entry.detail = _pretty(data.get("value"))

    def _subagent(self, seq: int, data: dict[str, Any]) -> None:
        kind = str(data.get("type", ""))
        title = _SUBAGENT_TITLES.get(kind, kind.lower())
        entry = self._add(Entry(Kind.SUBAGENT, seq=seq, run=self._run(), title=f"sub-agent {title}"), data)
        entry.is_error = kind == ev.SUBAGENT_ERROR
        entry.detail = _pretty({k: v for k, v in data.items() if k not in ("type", "subagentRunId")})

    def _other(self, seq: int, kind: str, data: dict[str, Any]) -> None:
        entry = self._add(Entry(Kind.OTHER, seq=seq, run=self._run(), title=kind), data)
        entry.detail = _pretty({k: v for k, v in data.items() if k != "type"})


def _pretty(value: Any) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return text if len(text) <= TEXT_CAP else f"{text[:TEXT_CAP]}\n… ({len(text) - TEXT_CAP:,} more characters)"


_HANDLERS: dict[str, Callable[[TimelineFold, int, dict[str, Any]], object]] = {
    ev.TEXT_MESSAGE_START: TimelineFold._text_start,
    ev.TEXT_MESSAGE_CONTENT: TimelineFold._text_content,
    ev.TEXT_MESSAGE_CHUNK: TimelineFold._text_content,
    ev.TEXT_MESSAGE_END: TimelineFold._text_end,
    ev.REASONING_MESSAGE_START: TimelineFold._reasoning_start,
    ev.REASONING_MESSAGE_CONTENT: TimelineFold._reasoning_content,
    ev.REASONING_MESSAGE_CHUNK: TimelineFold._reasoning_content,
    ev.REASONING_MESSAGE_END: TimelineFold._reasoning_end,
    ev.REASONING_START: TimelineFold._span,
    ev.REASONING_END: TimelineFold._span,
    ev.TOOL_CALL_START: TimelineFold._tool_start,
    ev.TOOL_CALL_ARGS: TimelineFold._tool_args,
    ev.TOOL_CALL_CHUNK: TimelineFold._tool_args,
    ev.TOOL_CALL_END: TimelineFold._tool_end,
    ev.TOOL_CALL_RESULT: TimelineFold._tool_result,
    ev.RUN_FINISHED: TimelineFold._finished,
    ev.RUN_ERROR: TimelineFold._error,
    ev.CUSTOM: TimelineFold._custom,
    ev.SUBAGENT_STARTED: TimelineFold._subagent,
    ev.SUBAGENT_FINISHED: TimelineFold._subagent,
    ev.SUBAGENT_ERROR: TimelineFold._subagent,
}

"""A run's event log read as a timeline, for the admin.

The log holds one row per streamed delta, so a run of a few messages is
thousands of rows. The timeline folds them back into what happened: each text
and reasoning message assembled from its deltas, each tool call with its
arguments, its result and the approval it waited for, errors marked, and the
bookkeeping between them (phases, state deltas, snapshots) folded into one quiet
line. Every piece of text is capped, so a huge argument or result cannot make
the page unreadable.

A run that waited for an answer goes on in another Run row (its child, see
agui/segments.py), so the timeline of a run covers that run and the runs that
continued it: the answer's effect is on the same page as the question.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson
from django.db.models import Case, IntegerField, QuerySet, Value, When

from threads.models import Approval, Run, RunEvent, Session, SubAgentTask
from threads.services.runs import OPEN_STATUSES

TEXT_CAP = 20_000  # characters of one message, argument list or result kept for the page
# Events read for one page: about 1.5 s of work. A longer log shows its beginning and says so;
# the REST API pages through all of it.
EVENT_SCAN_CAP = 100_000
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


@dataclass(slots=True, frozen=True)
class Liveness:
    live: bool
    version: str  # changes whenever what the page shows would change


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


def run_segments(*, run: Run) -> list[Segment]:
    """The run and the Run rows that continued it, in order (one query, whatever their number)."""
    later = Run.objects.filter(thread_id=run.thread_id, parent__isnull=False, started_at__gte=run.started_at)
    child_of: dict[Any, Run] = {}
    for candidate in later.order_by("-started_at"):
        child_of[candidate.parent_id] = candidate  # the earliest child wins
    chain = [run]
    while (child := child_of.get(chain[-1].pk)) is not None and len(chain) <= len(child_of):
        chain.append(child)
    return [Segment(r, continued=i < len(chain) - 1) for i, r in enumerate(chain)]


def _version(segments: list[Segment], event_count: int, answered: int) -> Liveness:
    tail = segments[-1].run
    fingerprint = "|".join([*(f"{s.run.pk}:{s.status}" for s in segments), str(event_count), str(answered)])
    return Liveness(
        live=tail.status in OPEN_STATUSES,
        version=hashlib.sha1(fingerprint.encode(), usedforsecurity=False).hexdigest()[:16],
    )


def run_liveness(*, run: Run) -> Liveness:
    """What the timeline's live refresh polls: three small queries."""
    segments = run_segments(run=run)
    ids = [s.run.pk for s in segments]
    event_count = RunEvent.objects.filter(run_id__in=ids).count()
    answered = Approval.objects.filter(run_id__in=ids).exclude(decision=Approval.Decision.PENDING).count()
    return _version(segments, event_count, answered)


def run_timeline(*, run: Run, event_cap: int = EVENT_SCAN_CAP) -> Timeline:
    """The timeline of ``run`` and of the runs that continued it, from at most ``event_cap`` events,
    built in a fixed number of queries."""
    segments = run_segments(run=run)
    ids = [s.run.pk for s in segments]
    approvals = list(Approval.objects.filter(run_id__in=ids).order_by("requested_at"))
    tasks = {t.tool_call_id: t for t in SubAgentTask.objects.filter(run_id__in=ids)}
    builder = _Builder(
        segments=segments,
        approvals={a.tool_call_id: a for a in approvals},
        tasks=tasks,
        failed_calls=_failed_tool_calls(run),
    )
    events_read = builder.read(_events(ids, event_cap))
    event_count = events_read if events_read < event_cap else RunEvent.objects.filter(run_id__in=ids).count()
    builder.attach_orphan_approvals(approvals)
    answered = sum(1 for a in approvals if a.decision != Approval.Decision.PENDING)
    return Timeline(
        run=run,
        previous=run.parent,
        segments=segments,
        entries=builder.entries,
        event_count=event_count,
        events_read=events_read,
        liveness=_version(segments, event_count, answered),
    )


def _events(run_ids: list[Any], cap: int) -> Iterator[tuple[int, int, str, str]]:
    """(segment index, seq, type, payload) in timeline order. The index rather than the run's key:
    converting a UUID per row costs more than the rest of the reading."""
    events: QuerySet[RunEvent] = RunEvent.objects.filter(run_id__in=run_ids)
    if len(run_ids) > 1:
        segment = Case(*(When(run_id=pk, then=i) for i, pk in enumerate(run_ids)), output_field=IntegerField())
        events = events.annotate(segment=segment).order_by("segment", "seq")
    else:
        events = events.annotate(segment=Value(0, output_field=IntegerField())).order_by("seq")
    return events.values_list("segment", "seq", "type", "payload")[:cap].iterator(chunk_size=2000)


def _failed_tool_calls(run: Run) -> set[str]:
    """The tool calls whose result was an error. AG-UI's TOOL_CALL_RESULT has no error flag, so
    the log cannot tell; the session's turns (the model's view) keep ``is_error``. Turns that
    compaction summarised are gone, and their calls are shown without the mark."""
    turns = Session.objects.filter(thread_id=run.thread_id).values_list("turns", flat=True).first() or []
    failed: set[str] = set()
    for turn in turns:
        content = turn.get("content") if isinstance(turn, dict) else None
        if not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("is_error"):
                failed.add(str(block.get("tool_use_id", "")))
    return failed


# Events that are bookkeeping for the client: folded into one quiet line when they follow each other.
_QUIET = {"RUN_STARTED", "STEP_STARTED", "STEP_FINISHED", "STATE_SNAPSHOT", "STATE_DELTA", "MESSAGES_SNAPSHOT"}
# Events whose payload the timeline does not need (snapshots can be megabytes).
_UNREAD = {"STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "REASONING_START", "REASONING_END", "STEP_FINISHED"}
_WARNING_CUSTOM = {"threadline.paused", "threadline.cancelled", "threadline.interrupted"}


class _Builder:
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
        self.run_pk: Any = None
        self.started: set[Any] = set()

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

    def _segment(self, run_pk: Any, seq: int) -> None:
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
        if kind == "RUN_STARTED":
            item = "run started"
        elif kind == "STEP_STARTED":
            item = f"phase {data.get('stepName', '?')}"
        elif kind == "STEP_FINISHED":
            return
        elif kind == "STATE_DELTA":
            paths = sorted({str(op.get("path", "")) for op in data.get("delta", []) if isinstance(op, dict)})
            item = "state " + ", ".join(paths)
        elif kind == "STATE_SNAPSHOT":
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

    def _text_start(self, seq: int, data: dict[str, Any]) -> Entry:
        message_id = str(data.get("messageId", ""))
        entry = self.texts.get(message_id)
        if entry is None:
            role = str(data.get("role") or "assistant")
            entry = self._add(Entry(Kind.TEXT, seq=seq, run=self._run(), role=role, body=Capped()), data)
            self.texts[message_id] = entry
        else:
            self._grow(entry, seq)
        return entry

    def _text_content(self, seq: int, data: dict[str, Any]) -> None:
        entry = self.texts.get(str(data.get("messageId", ""))) or self._text_start(seq, data)
        if entry.last_seq != seq:
            self._grow(entry, seq)
        assert entry.body is not None
        entry.body.add(str(data.get("delta", "")))

    def _text_end(self, seq: int, data: dict[str, Any]) -> None:
        if (entry := self.texts.get(str(data.get("messageId", "")))) is not None:
            self._grow(entry, seq)
            entry.ended = True

    def _reasoning_start(self, seq: int, data: dict[str, Any]) -> Entry:
        message_id = str(data.get("messageId", ""))
        entry = self.reasoning.get(message_id)
        if entry is None:
            entry = self._add(Entry(Kind.REASONING, seq=seq, run=self._run(), role="reasoning", body=Capped()), data)
            self.reasoning[message_id] = entry
        else:
            self._grow(entry, seq)
        return entry

    def _reasoning_content(self, seq: int, data: dict[str, Any]) -> None:
        entry = self.reasoning.get(str(data.get("messageId", ""))) or self._reasoning_start(seq, data)
        if entry.last_seq != seq:
            self._grow(entry, seq)
        assert entry.body is not None
        entry.body.add(str(data.get("delta", "")))

    def _reasoning_end(self, seq: int, data: dict[str, Any]) -> None:
        if (entry := self.reasoning.get(str(data.get("messageId", "")))) is not None:
            self._grow(entry, seq)
            entry.ended = True

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
        title = kind.removeprefix("SUBAGENT_").lower()
        entry = self._add(Entry(Kind.SUBAGENT, seq=seq, run=self._run(), title=f"sub-agent {title}"), data)
        entry.is_error = kind == "SUBAGENT_ERROR"
        entry.detail = _pretty({k: v for k, v in data.items() if k not in ("type", "subagentRunId")})

    def _other(self, seq: int, kind: str, data: dict[str, Any]) -> None:
        entry = self._add(Entry(Kind.OTHER, seq=seq, run=self._run(), title=kind), data)
        entry.detail = _pretty({k: v for k, v in data.items() if k != "type"})


def _pretty(value: Any) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return text if len(text) <= TEXT_CAP else f"{text[:TEXT_CAP]}\n… ({len(text) - TEXT_CAP:,} more characters)"


_HANDLERS: dict[str, Callable[[_Builder, int, dict[str, Any]], object]] = {
    "TEXT_MESSAGE_START": _Builder._text_start,
    "TEXT_MESSAGE_CONTENT": _Builder._text_content,
    "TEXT_MESSAGE_CHUNK": _Builder._text_content,
    "TEXT_MESSAGE_END": _Builder._text_end,
    "REASONING_MESSAGE_START": _Builder._reasoning_start,
    "REASONING_MESSAGE_CONTENT": _Builder._reasoning_content,
    "REASONING_MESSAGE_CHUNK": _Builder._reasoning_content,
    "REASONING_MESSAGE_END": _Builder._reasoning_end,
    "REASONING_START": _Builder._span,
    "REASONING_END": _Builder._span,
    "TOOL_CALL_START": _Builder._tool_start,
    "TOOL_CALL_ARGS": _Builder._tool_args,
    "TOOL_CALL_CHUNK": _Builder._tool_args,
    "TOOL_CALL_END": _Builder._tool_end,
    "TOOL_CALL_RESULT": _Builder._tool_result,
    "RUN_FINISHED": _Builder._finished,
    "RUN_ERROR": _Builder._error,
    "CUSTOM": _Builder._custom,
    "SUBAGENT_STARTED": _Builder._subagent,
    "SUBAGENT_FINISHED": _Builder._subagent,
    "SUBAGENT_ERROR": _Builder._subagent,
}

"""The sub-agent board of a thread, for the admin: each delegated task with its children under it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from threads.admin.liveness import Liveness
from threads.models import Run, SubAgentTask, Thread
from threads.services.runs import OPEN_STATUSES


@dataclass(slots=True, frozen=True)
class BoardRow:
    task: SubAgentTask
    level: int  # 0: delegated by the thread's run; 1: by a sub-agent; ...

    @property
    def tool_call_count(self) -> int:
        return len(self.task.tool_calls) if isinstance(self.task.tool_calls, list) else 0

    @property
    def failed_tool_calls(self) -> int:
        calls = self.task.tool_calls if isinstance(self.task.tool_calls, list) else []
        return sum(1 for call in calls if isinstance(call, dict) and call.get("isError"))

    @property
    def tokens(self) -> int:
        return self.task.input_tokens + self.task.output_tokens

    @property
    def duration(self) -> str:
        if self.task.finished_at is None:
            return ""
        seconds = (self.task.finished_at - self.task.started_at).total_seconds()
        return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"

    @property
    def indent_em(self) -> int:
        return self.level * 2


@dataclass(slots=True)
class Board:
    thread: Thread
    rows: list[BoardRow]
    counts: dict[str, int]  # tasks per status
    liveness: Liveness

    @property
    def live(self) -> bool:
        return self.liveness.live


def _as_tree(tasks: list[SubAgentTask]) -> list[BoardRow]:
    """Depth first, each task followed by the tasks it delegated, siblings in start order."""
    ids = {t.pk for t in tasks}
    children: dict[Any, list[SubAgentTask]] = {}
    for task in tasks:
        parent = task.parent_task_id if task.parent_task_id in ids else None
        children.setdefault(parent, []).append(task)
    rows: list[BoardRow] = []
    stack = [(task, 0) for task in reversed(children.get(None, []))]
    while stack:
        task, level = stack.pop()
        rows.append(BoardRow(task, level))
        stack.extend((child, level + 1) for child in reversed(children.get(task.pk, [])))
    return rows


def _thread_has_live_run(thread: Thread) -> bool:
    return Run.objects.filter(thread=thread, status__in=OPEN_STATUSES).exists()


def _liveness(thread: Thread, fingerprints: list[tuple[Any, ...]]) -> Liveness:
    running = any(f[1] == SubAgentTask.Status.RUNNING for f in fingerprints)
    live = running or _thread_has_live_run(thread)
    return Liveness.of(live=live, fingerprint=repr((live, fingerprints)))


_FINGERPRINT = ("id", "status", "iterations", "input_tokens", "output_tokens", "finished_at")


def _fingerprint(task: SubAgentTask) -> tuple[Any, ...]:
    return tuple(getattr(task, name) for name in _FINGERPRINT)


def thread_board(*, thread: Thread) -> Board:
    """Two queries: the thread's tasks, and whether a run of the thread is live."""
    tasks = list(SubAgentTask.objects.filter(thread=thread).order_by("started_at", "id"))
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task.status] = counts.get(task.status, 0) + 1
    return Board(thread, _as_tree(tasks), counts, _liveness(thread, [_fingerprint(t) for t in tasks]))


def board_liveness(*, thread: Thread) -> Liveness:
    """What the board's live refresh polls: the tasks' small columns and the runs' status."""
    rows = SubAgentTask.objects.filter(thread=thread).order_by("started_at", "id").values_list(*_FINGERPRINT)
    return _liveness(thread, [tuple(row) for row in rows])

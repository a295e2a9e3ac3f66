"""Reads of the runs' workspaces: where a thread's lies, what it holds, which are idle."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db.models import Max, QuerySet
from django.utils import timezone

from agents.workspaces import Place, place_of
from orchestrator.tools import usage
from threads.models import Run, Thread, Workspace

# The largest primary key a database integer holds; SQLite raises on a larger lookup rather than finding nothing.
_MAX_INT_KEY = 2**63 - 1


def workspace_place(thread: Thread) -> Place:
    return place_of(owner_id=thread.owner_id, thread_pk=thread.pk, agui_thread_id=thread.agui_thread_id)


@dataclass(slots=True, frozen=True)
class WorkspaceInfo:
    """A thread's workspace as the admin and the API show it."""

    path: str  # relative to AGENT_WORKSPACES_ROOT; "" for the shared AGENT_WORKSPACE
    bytes: int | None  # None until a run has made it
    created_at: datetime | None


def workspace_info(thread: Thread) -> WorkspaceInfo:
    """Where the thread works, how much it holds and when it was made (a walk of the directory:
    for one thread's page, not for lists)."""
    place = workspace_place(thread)
    size = usage.walk_bytes(place.path) if place.path.is_dir() else None
    row = None if place.shared else Workspace.objects.filter(key=place.key).first()
    return WorkspaceInfo(place.key, size, row.created_at if row else None)


@dataclass(slots=True, frozen=True)
class IdleWorkspace:
    key: str
    path: Path
    last_active: datetime | None  # None: no thread works there any more


def workspaces_idle(*, idle_days: float) -> list[IdleWorkspace]:
    """Workspaces under the root whose threads have all been idle ``idle_days`` (or that no thread
    works in any more), and none of whose threads has a run running or waiting."""
    cutoff = timezone.now() - timedelta(days=idle_days)
    root = Path(settings.AGENT_WORKSPACES_ROOT)
    idle: list[IdleWorkspace] = []
    for kind in ("users", "threads"):
        folder = root / kind
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.name.startswith(".") or not path.is_dir() or path.is_symlink():
                continue
            threads = _threads_of(kind, path.name)
            if threads is None:
                continue
            if Run.objects.filter(thread__in=threads, status__in=(Run.Status.RUNNING, Run.Status.WAITING)).exists():
                continue
            last = threads.aggregate(last=Max("updated_at"))["last"]
            if last is None or last < cutoff:
                idle.append(IdleWorkspace(f"{kind}/{path.name}", path, last))
    return idle


def _threads_of(kind: str, name: str) -> QuerySet[Thread] | None:
    """The threads that work in ``<kind>/<name>``; None for a name this server never makes."""
    if kind == "users":
        return Thread.objects.filter(owner_id=int(name)) if name.isdigit() else None
    try:
        return Thread.objects.filter(pk=uuid.UUID(hex=name))
    except ValueError:
        return None

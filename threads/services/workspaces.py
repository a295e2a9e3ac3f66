"""The workspaces of threads (agents/workspaces.py says where each lies): made before a run works
in one, shown with the thread, removed with a thread of its own, pruned when idle."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Max, QuerySet
from django.utils import timezone

from agents.tools import usage
from agents.workspaces import Place, place_of, prepare
from threads.dbthread import on_db_thread
from threads.models import Run, Thread, Workspace


def workspace_place(thread: Thread) -> Place:
    return place_of(owner_id=thread.owner_id, thread_pk=thread.pk, agui_thread_id=thread.agui_thread_id)


async def workspace_open(thread: Thread) -> Path:
    """The thread's workspace, made first if it is new (on a worker thread; the loop never waits
    on the disk). Any process may open it: the directory under the shared root is the workspace."""
    place = workspace_place(thread)
    await asyncio.to_thread(prepare, place)
    if not place.shared:
        await on_db_thread(_record, key=place.key)
    return place.path


def _record(*, key: str) -> None:
    # A workspace made before its row (by a process that died in between) gets one now.
    Workspace.objects.get_or_create(key=key)


def thread_delete(*, thread: Thread) -> None:
    """Deletes the thread; in ``thread`` mode its workspace goes with it (an owner's or the shared
    workspace stays: other threads work there)."""
    place = workspace_place(thread)
    with transaction.atomic():
        thread.delete()
        if settings.AGENT_WORKSPACE_MODE == "thread" and not place.shared:
            Workspace.objects.filter(key=place.key).delete()
            transaction.on_commit(lambda: shutil.rmtree(place.path, ignore_errors=True))


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


def workspaces_prune(*, idle_days: float) -> list[IdleWorkspace]:
    """Removes the idle workspaces (``workspaces_idle``) and their rows; returns what it removed."""
    removed = workspaces_idle(idle_days=idle_days)
    for workspace in removed:
        shutil.rmtree(workspace.path, ignore_errors=True)
        Workspace.objects.filter(key=workspace.key).delete()
    return removed

"""The workspaces of threads (agents/workspaces.py says where each lies): made before a run works
in one, removed with a thread of its own, pruned when idle. Their reads are in threads/selectors.py."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Collection
from pathlib import Path

from django.conf import settings
from django.db import transaction

from agents.workspaces import prepare
from threads.dbthread import on_db_thread
from threads.models import Attachment, Thread, Workspace
from threads.workspace_reads import IdleWorkspace, workspace_place, workspaces_idle


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


def thread_delete(*, thread: Thread, attachment_ids: Collection[uuid.UUID] = ()) -> None:
    """Deletes the thread, and the owner's uploaded files its messages name (``attachment_ids``);
    in ``thread`` mode its workspace goes with it (an owner's or the shared workspace stays: other
    threads work there)."""
    place = workspace_place(thread)
    with transaction.atomic():
        if attachment_ids:
            Attachment.objects.filter(pk__in=attachment_ids, owner_id=thread.owner_id).delete()
        thread.delete()
        if settings.AGENT_WORKSPACE_MODE == "thread" and not place.shared:
            Workspace.objects.filter(key=place.key).delete()
            transaction.on_commit(lambda: shutil.rmtree(place.path, ignore_errors=True))


def workspaces_prune(*, idle_days: float) -> list[IdleWorkspace]:
    """Removes the idle workspaces (``workspaces_idle``) and their rows; returns what it removed."""
    removed = workspaces_idle(idle_days=idle_days)
    for workspace in removed:
        shutil.rmtree(workspace.path, ignore_errors=True)
        Workspace.objects.filter(key=workspace.key).delete()
    return removed

"""A thread as its owner keeps it: its name and whether it is archived. Deleting one is
threads/services/workspaces.py's ``thread_delete`` (its workspace may go with it)."""

from __future__ import annotations

from threads.models import Message, Thread
from threads.services.transcript import message_preview


def thread_rename(*, thread: Thread, name: str) -> Thread:
    """Names the thread; a blank name gives it back its default, its first user message shortened.
    Its activity time is left as it was: a thread list is ordered by what was said in it."""
    name = " ".join(name.split())
    if not name:
        first = Message.objects.filter(thread=thread, role="user").order_by("position").values_list("body", flat=True)
        name = message_preview(first[0]) if first else ""
    thread.title = name
    thread.full_clean(validate_unique=False, validate_constraints=False)
    Thread.objects.filter(pk=thread.pk).update(title=name)
    return thread


def thread_archive(*, thread: Thread, archived: bool) -> Thread:
    """Archives the thread (out of its owner's list) or brings it back; nothing else changes."""
    thread.archived = archived
    Thread.objects.filter(pk=thread.pk).update(archived=archived)
    return thread

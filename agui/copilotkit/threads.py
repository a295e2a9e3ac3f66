"""CopilotKit's thread routes, as ``useThreads`` reads them (``@copilotkit/core`` 1.74's thread
store, ``dist/index.mjs`` ``createThreadStore``; the shapes are ``ThreadRecord`` in its
``index.d.mts`` and ``@copilotkit/runtime`` 1.75's ``handlers/intelligence/threads.mjs``).

A caller reaches their own threads; another user's is a 404, as one that does not exist, so ids do
not leak. The shared AGUI_TOKEN is one user: its list is the threads nobody owns, and it reaches
every thread, as on the AG-UI routes.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson
from django.core import signing
from django.http import HttpRequest, HttpResponseBase, JsonResponse

from agui.body import request_body
from agui.decode import InputError, check_path_ids
from agui.http import Caller, agui_endpoint, error_response
from agui.state import STATE_CACHE
from runhost.host import HOST
from runhost.requests import ThreadStatus
from threads import selectors
from threads.dbthread import on_db_thread
from threads.models import Thread
from threads.services.attachments import attachments_named
from threads.services.threads import thread_archive as archive
from threads.services.threads import thread_rename
from threads.services.workspaces import thread_delete

LIST_LIMIT_DEFAULT = 50
LIST_LIMIT_MAX = 200
NAME_MAX = Thread._meta.get_field("title").max_length or 200
# The organisation CopilotKit's ThreadRecord names: one server, one organisation.
ORGANIZATION = "threadline"
_CURSOR_SALT = "threadline.copilotkit.threads"


# A page's Delete may come as the reply it shows ends, while the run still records itself: a run
# that ends within this time is waited for rather than refused.
DELETE_WAITS_SECONDS = 2.0


async def _stops_running(thread_id: str, *, within: float) -> bool:
    """Whether no run works on the thread, now or before ``within`` seconds have passed."""
    deadline = time.monotonic() + within
    while await HOST.thread_status(thread_id) is ThreadStatus.RUNNING:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def _iso(moment: datetime | None) -> str | None:
    """A time as CopilotKit sorts thread times, comparing strings: UTC, milliseconds, ``Z``."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def thread_record(thread: Thread) -> dict[str, Any]:
    """The thread as CopilotKit's ThreadRecord."""
    record: dict[str, Any] = {
        "id": thread.agui_thread_id,
        "organizationId": ORGANIZATION,
        "agentId": thread.agent.name,
        "createdById": str(thread.owner_id) if thread.owner_id is not None else "",
        "name": thread.title or None,
        "archived": thread.archived,
        "createdAt": _iso(thread.created_at),
        "updatedAt": _iso(thread.updated_at),
    }
    last_run_at = getattr(thread, "last_run_at", None)
    if last_run_at is not None:
        record["lastRunAt"] = _iso(last_run_at)
    return record


def _cursor(caller: Caller, thread: Thread) -> str:
    """Where the next page starts, signed, and for this caller only."""
    return signing.dumps([caller.user_id, thread.updated_at.isoformat(), thread.pk.hex], salt=_CURSOR_SALT)


def _after(caller: Caller, cursor: str) -> tuple[datetime, uuid.UUID] | None:
    """The position a cursor of ours names, or None for one we did not make for this caller."""
    try:
        user_id, updated, pk = signing.loads(cursor, salt=_CURSOR_SALT)
        if user_id != caller.user_id:
            return None
        return datetime.fromisoformat(updated), uuid.UUID(hex=pk)
    except (signing.BadSignature, ValueError, TypeError):
        return None


@agui_endpoint("GET", "GET this URL for your threads")
async def thread_list(request: HttpRequest, caller: Caller) -> HttpResponseBase:
    """GET /copilotkit/threads?agentId=&limit=&cursor=&includeArchived=: the caller's threads,
    newest activity first, ``{"threads": [...], "nextCursor": "..." | null}``."""
    query = request.GET
    raw_limit = query.get("limit") or str(LIST_LIMIT_DEFAULT)
    if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= LIST_LIMIT_MAX:
        return error_response(400, "invalid_input", f"limit must be a whole number from 1 to {LIST_LIMIT_MAX}", "limit")
    include_archived = query.get("includeArchived", "false")
    if include_archived not in ("true", "false"):
        return error_response(400, "invalid_input", "includeArchived must be true or false", "includeArchived")
    after = None
    if cursor := query.get("cursor"):
        after = _after(caller, cursor)
        if after is None:
            return error_response(400, "invalid_cursor", "the cursor is not one this server gave you", "cursor")
    page = await on_db_thread(
        selectors.thread_page,
        owner_id=caller.user_id,
        agent=query.get("agentId") or None,
        include_archived=include_archived == "true",
        after=after,
        limit=int(raw_limit),
    )
    next_cursor = _cursor(caller, page.threads[-1]) if page.more else None
    return JsonResponse({"threads": [thread_record(t) for t in page.threads], "nextCursor": next_cursor})


async def _own_thread(caller: Caller, thread_id: str) -> Thread | HttpResponseBase:
    try:
        check_path_ids(thread_id, None)
    except InputError as exc:
        return error_response(400, "invalid_input", exc.message, exc.field)
    thread = await on_db_thread(selectors.thread_get, agui_thread_id=thread_id)
    if thread is None or not caller.reaches(thread.owner_id):
        return error_response(404, "unknown_thread", "no such thread")
    return thread


def _mutation_body(request: HttpRequest, thread: Thread) -> dict[str, Any] | HttpResponseBase:
    """The JSON object a mutation sends (CopilotKit sends ``agentId`` with each: a thread of
    another agent is not this one), or the 4xx to send."""
    body = request_body(request)
    if isinstance(body, HttpResponseBase):
        return body
    try:
        parsed = orjson.loads(body) if body.strip() else {}
    except orjson.JSONDecodeError:
        return error_response(400, "invalid_input", "the body is not valid JSON")
    if not isinstance(parsed, dict):
        return error_response(400, "invalid_input", "the body must be a JSON object")
    agent_id = parsed.get("agentId")
    if agent_id is not None and agent_id != thread.agent.name:
        return error_response(404, "unknown_thread", "no such thread")
    return parsed


@agui_endpoint(("PATCH", "DELETE"), "PATCH this URL to rename or (un)archive the thread, DELETE it to delete it")
async def thread_update(request: HttpRequest, caller: Caller, thread_id: str) -> HttpResponseBase:
    """PATCH /copilotkit/threads/<id> ``{"name"?, "archived"?}``: the thread, renamed or
    (un)archived, as a ThreadRecord. DELETE: the thread and everything of it (its runs, their
    events and approvals, its messages; its workspace in ``thread`` mode), ``{"threadId",
    "deleted": true}``; refused (409) while a run works on it, once DELETE_WAITS_SECONDS have passed."""
    thread = await _own_thread(caller, thread_id)
    if isinstance(thread, HttpResponseBase):
        return thread
    body = _mutation_body(request, thread)
    if isinstance(body, HttpResponseBase):
        return body
    if request.method == "DELETE":
        if not await _stops_running(thread_id, within=DELETE_WAITS_SECONDS):
            return error_response(409, "thread_busy", "a run is working on the thread: stop it first")
        transcript = await on_db_thread(selectors.thread_transcript, thread=thread)
        await on_db_thread(thread_delete, thread=thread, attachment_ids=attachments_named(transcript))
        STATE_CACHE.forget(thread_id)
        return JsonResponse({"threadId": thread_id, "deleted": True})
    name, archived = body.get("name"), body.get("archived")
    if name is not None and (not isinstance(name, str) or len(name) > NAME_MAX):
        return error_response(400, "invalid_input", f"name must be a string of at most {NAME_MAX} characters", "name")
    if archived is not None and not isinstance(archived, bool):
        return error_response(400, "invalid_input", "archived must be true or false", "archived")
    if "name" in body:
        thread = await on_db_thread(thread_rename, thread=thread, name=name or "")
    if archived is not None:
        thread = await on_db_thread(archive, thread=thread, archived=archived)
    return JsonResponse(thread_record(thread))


@agui_endpoint("POST", "POST to this URL to archive the thread")
async def thread_archive(request: HttpRequest, caller: Caller, thread_id: str) -> HttpResponseBase:
    """POST /copilotkit/threads/<id>/archive: ``{"threadId", "archived": true}``. Unarchiving is
    a PATCH with ``{"archived": false}``, as CopilotKit sends it."""
    thread = await _own_thread(caller, thread_id)
    if isinstance(thread, HttpResponseBase):
        return thread
    body = _mutation_body(request, thread)
    if isinstance(body, HttpResponseBase):
        return body
    await on_db_thread(archive, thread=thread, archived=True)
    return JsonResponse({"threadId": thread_id, "archived": True})


def _runtime_message(body: dict[str, Any]) -> dict[str, Any]:
    """A stored AG-UI message in the shape the runtime's thread messages route gives
    (handlers/intelligence/threads.mjs): tool calls as ``{id, name, args}``."""
    role = body.get("role")
    message: dict[str, Any] = {"id": body.get("id"), "role": role}
    if role == "tool":
        message.update(content=body.get("content"), toolCallId=body.get("toolCallId"))
        return message
    if body.get("content") is not None:
        message["content"] = body["content"]
    if role == "assistant" and body.get("toolCalls"):
        calls = [(call.get("id"), call.get("function") or {}) for call in body["toolCalls"]]
        message["toolCalls"] = [{"id": id_, "name": fn.get("name"), "args": fn.get("arguments")} for id_, fn in calls]
    return message


@agui_endpoint("GET", "GET this URL for the thread's messages")
async def thread_messages(request: HttpRequest, caller: Caller, thread_id: str) -> HttpResponseBase:
    """GET /copilotkit/threads/<id>/messages: ``{"messages": [...]}``, the transcript in order."""
    thread = await _own_thread(caller, thread_id)
    if isinstance(thread, HttpResponseBase):
        return thread
    transcript = await on_db_thread(selectors.thread_transcript, thread=thread)
    return JsonResponse({"messages": [_runtime_message(body) for body in transcript]})


@agui_endpoint("GET", "GET this URL for the thread's events")
async def thread_events(request: HttpRequest, caller: Caller, thread_id: str) -> HttpResponseBase:
    """GET /copilotkit/threads/<id>/events: ``{"events": [...]}``, every run's AG-UI events, run
    after run (a pruned run's are gone: EVENT_LOG_RETENTION_DAYS)."""
    thread = await _own_thread(caller, thread_id)
    if isinstance(thread, HttpResponseBase):
        return thread
    events = await on_db_thread(selectors.thread_events, thread=thread)
    return JsonResponse({"events": [event.data for event in events]})


@agui_endpoint("GET", "GET this URL for the thread's state")
async def thread_state(request: HttpRequest, caller: Caller, thread_id: str) -> HttpResponseBase:
    """GET /copilotkit/threads/<id>/state: ``{"state": {...}}``, the thread's state document
    (null before its first run)."""
    thread = await _own_thread(caller, thread_id)
    if isinstance(thread, HttpResponseBase):
        return thread
    state = STATE_CACHE.get(thread_id, thread.state)
    return JsonResponse({"state": state or None})

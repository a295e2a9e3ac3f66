"""Runs detached from the request that started them.

A run is an asyncio task owned by this process and registered here by thread;
the SSE response that started it is only a subscriber of its RunStream, so a
client that goes away does not stop it, and a reattach can follow it.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections

from agents.events import AssistantMessage, Outcome, ToolMessage
from agents.loop import AgentLoop
from agents.models import Agent
from agents.providers.base import TokenCount
from agents.request import Image, RunRequest
from agents.runtime import close_providers, loop_config, provider_for, tool_context, tools_for
from agui.decode import DecodedInput
from agui.relay import RunRelay, shared_layer
from agui.state import STATE_CACHE, ThreadState
from agui.stream import RunStream
from agui.translate import AguiTranslator
from threads.eventlog import EventLogWriter
from threads.models import Run
from threads.services import OpenedThread, run_finish, session_commit

log = logging.getLogger(__name__)

_STATUS = {
    Outcome.SUCCESS: Run.Status.SUCCEEDED,
    Outcome.ERROR: Run.Status.FAILED,
    Outcome.CANCELLED: Run.Status.CANCELLED,
    Outcome.PAUSED: Run.Status.PAUSED,
    Outcome.INTERRUPTED: Run.Status.INTERRUPTED,
}


@dataclass(slots=True)
class LiveRun:
    run_pk: Any
    agui_run_id: str
    agui_thread_id: str
    stream: RunStream
    task: asyncio.Task[None] | None = None
    cancel_requested: bool = False


@dataclass(slots=True)
class RunRegistry:
    """The runs this process owns, by thread (one active run per thread)."""

    by_thread: dict[str, LiveRun] = field(default_factory=dict)
    # Runs whose terminal event is out but whose log is still being written:
    # no longer busy (the client may send its next message at once) but still
    # followable by a reattach and not to be mistaken for abandoned runs.
    finishing: dict[Any, LiveRun] = field(default_factory=dict)

    def live_for_thread(self, agui_thread_id: str) -> LiveRun | None:
        return self.by_thread.get(agui_thread_id)

    def live_by_pk(self, run_pk: Any) -> LiveRun | None:
        for live in self.by_thread.values():
            if live.run_pk == run_pk:
                return live
        return self.finishing.get(run_pk)

    def live_run_pks(self) -> set[Any]:
        return {r.run_pk for r in self.by_thread.values()} | set(self.finishing)

    def release(self, live: LiveRun) -> None:
        if self.by_thread.get(live.agui_thread_id) is live:
            del self.by_thread[live.agui_thread_id]
        self.finishing[live.run_pk] = live

    async def shutdown(self, grace: float) -> None:
        tasks = [r.task for r in [*self.by_thread.values(), *self.finishing.values()] if r.task]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
        await close_providers()
        # Runs do their database work on asgiref's shared thread; close its connection.
        await sync_to_async(connections.close_all, thread_sensitive=True)()

    async def drain(self) -> None:
        """Waits for every run to finish and be recorded (used at shutdown and by tests)."""
        tasks = [r.task for r in [*self.by_thread.values(), *self.finishing.values()] if r.task]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


REGISTRY = RunRegistry()


class DbSessionStore:
    def __init__(self, *, session_id: Any, run_pk: Any, turns: list[dict[str, Any]]) -> None:
        self.session_id = session_id
        self.run_pk = run_pk
        self.turns = turns

    async def load_turns(self) -> list[dict[str, Any]]:
        return list(self.turns)

    async def commit(
        self, turns: list[dict[str, Any]], messages: list[AssistantMessage | ToolMessage], usage: TokenCount
    ) -> None:
        await sync_to_async(session_commit)(
            session_id=self.session_id, run_id=self.run_pk, turns=turns, messages=messages, usage=usage
        )


def context_block(decoded: DecodedInput) -> str:
    entries = decoded.model.context or []
    if not entries:
        return ""
    lines = [f"- {entry.description}: {entry.value}" for entry in entries]
    return "<context>\n" + "\n".join(lines) + "\n</context>\n\n"


def build_request(decoded: DecodedInput, message: dict[str, Any], request_id: str) -> RunRequest:
    """The user's message as the model will see it: context first, then text, images, documents."""
    model_message = next(m for m in decoded.model.messages if m.id == message["id"])
    content = model_message.content  # type: ignore[union-attr]
    texts: list[str] = []
    images: list[Image] = []
    extra: list[dict[str, Any]] = []
    if isinstance(content, str):
        texts.append(content)
    else:
        for part in content:
            if part.type == "text":
                texts.append(part.text)
                continue
            source = part.source
            if part.type == "image" and source.type == "data":
                images.append(Image(media_type=source.mime_type, data=source.value))
            elif part.type == "image" and source.type == "url":
                images.append(Image(media_type=source.mime_type or "", url=source.value))
            elif part.type == "document" and source.type == "data":
                extra.append(
                    {
                        "type": "document",
                        "source": {"type": "base64", "media_type": source.mime_type, "data": source.value},
                    }
                )
            elif part.type == "document" and source.type == "url":
                extra.append({"type": "document", "source": {"type": "url", "url": source.value}})
            else:
                kind = getattr(source, "mime_type", None) or "unknown type"
                texts.append(f"[{part.type} attachment ({kind}) not readable by this model]")
    return RunRequest(
        request_id=request_id,
        text=context_block(decoded) + "\n".join(texts),
        images=images,
        extra_content=extra,
        conversation_id=decoded.model.thread_id,
    )


def start_run(*, agent: Agent, decoded: DecodedInput, opened: OpenedThread, message: dict[str, Any]) -> LiveRun:
    """Starts the run's task; RUN_STARTED and STATE_SNAPSHOT are on the stream when this returns."""
    assert opened.run is not None
    inp = decoded.model
    provider = provider_for(agent)
    layer = shared_layer()
    log_writer = EventLogWriter(
        opened.run.pk,
        flush_seconds=settings.EVENT_LOG_FLUSH_SECONDS,
        batch=settings.EVENT_LOG_BATCH,
        after_write=RunRelay(layer, opened.run.pk).send if layer is not None else None,
    )
    stream = RunStream(log_writer)
    live = LiveRun(run_pk=opened.run.pk, agui_run_id=inp.run_id, agui_thread_id=inp.thread_id, stream=stream)
    state = ThreadState.for_run(
        STATE_CACHE.get(inp.thread_id, opened.thread.state),
        thread_id=inp.thread_id,
        title=opened.thread.title,
        session_id=str(opened.session.pk),
        agent=agent.name,
        model=provider.info,
        client_state=inp.state,
    )
    translator = AguiTranslator(
        stream.publish,
        thread_id=inp.thread_id,
        run_id=inp.run_id,
        v1=decoded.speaks_v1,
        state=state,
        should_continue=lambda: not live.cancel_requested,
    )
    STATE_CACHE.put(inp.thread_id, state.document)
    translator.start()
    loop = AgentLoop(
        provider=provider,
        tools=tools_for(agent),
        tool_context=tool_context(),
        config=loop_config(agent, provider),
        store=DbSessionStore(session_id=opened.session.pk, run_pk=opened.run.pk, turns=opened.session.turns),
        listener=translator,
    )
    request = build_request(decoded, message, request_id=inp.run_id)
    REGISTRY.by_thread[inp.thread_id] = live
    # A fresh context: the run outlives the request, so it must not inherit the
    # request's thread-sensitive executor (asgiref would keep a thread and a
    # database connection alive for it after the request ends).
    live.task = asyncio.get_running_loop().create_task(
        _execute(live, loop, request, translator), name=f"run-{inp.run_id}", context=contextvars.Context()
    )
    return live


async def _execute(live: LiveRun, loop: AgentLoop, request: RunRequest, translator: AguiTranslator) -> None:
    outcome = Outcome.ERROR
    try:
        outcome = await loop.run(request, run_id=live.agui_run_id, thread_id=live.agui_thread_id)
    except asyncio.CancelledError:
        outcome = Outcome.CANCELLED
    finally:
        live.stream.close()
        REGISTRY.release(live)
        try:
            if live.stream.log is not None:
                await live.stream.log.close()
            await sync_to_async(run_finish)(
                run_id=live.run_pk,
                status=_STATUS[outcome],
                outcome=outcome.value,
                error=translator.error_message,
                event_count=live.stream.last_seq,
                state=translator.state.document,
            )
        except Exception:
            log.exception("could not record the end of run %s", live.agui_run_id)
        finally:
            REGISTRY.finishing.pop(live.run_pk, None)

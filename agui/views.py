"""The AG-UI endpoints. Views translate HTTP; runs, state and persistence live elsewhere."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ag_ui.core import ResumeEntry, UserMessage
from django.conf import settings
from django.db.models.signals import post_delete, post_save
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from agents.models import Agent
from agents.refreshed import Refreshed
from agents.runtime import mcp_servers_of, provider_for
from agui.attachment_urls import Fetched, attachments_fetch, sources_rename
from agui.attachments import AttachmentRefused, attachments_refusal, uploads_named, uploads_refusal
from agui.body import request_body
from agui.decode import DecodedInput, InputError, check_path_ids, decode_run_input
from agui.frontend import client_tool_results, declared_tools
from agui.http import Caller, SseResponse, agui_endpoint, draining_response, error_response, token_error
from agui.interrupts import decided_of
from agui.prompt import build_request, no_message_request
from agui.relay import PRUNED, follow_stored_run
from agui.runs import AguiRun
from agui.state import model_entry
from runhost.host import HOST
from runhost.requests import Answers, Start, ThreadStatus
from threads import selectors
from threads.dbthread import on_db_thread
from threads.elicitations import ElicitationInvalid, elicitations_asked, is_elicitation
from threads.services.attachments import attachment_path, attachment_store
from threads.services.runs import RunNotCancellable
from threads.waits import Decided

log = logging.getLogger(__name__)


def _user_message(decoded: DecodedInput, message_id: str) -> UserMessage:
    found = next(m for m in decoded.model.messages if m.id == message_id)
    assert isinstance(found, UserMessage)
    return found


async def _fetched_stored(
    request: HttpRequest, caller: Caller, message: dict[str, Any], fetched: list[Fetched]
) -> dict[str, tuple[str, bytes]]:
    """Stores the files fetched for the message as the caller's uploads and points the message at
    them; what the model is sent for each address."""
    renamed: dict[str, tuple[str, str]] = {}
    for file in fetched:
        stored = await on_db_thread(
            attachment_store, owner_id=caller.user_id, media_type=file.media_type, data=file.data
        )
        renamed[file.url] = (request.build_absolute_uri(attachment_path(stored.pk)), file.media_type)
    sources_rename(message, renamed)
    return {file.url: (file.media_type, file.data) for file in fetched}


def _new_user_message(decoded: DecodedInput) -> dict[str, Any] | None:
    messages = decoded.raw["messages"]
    if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "user":
        return messages[-1]
    return None


class EnabledAgents:
    """The enabled agents, as last read (agents/refreshed.py), so neither the path to a run's first
    byte nor /agui/info waits on the database thread (under thousands of streams, a hop there waited
    for the event loop's turn and the thread's share of the GIL: /agui/info's p99 was 150 ms with it
    and 30 ms without, bench/stream.py --streams). A name not in the set is looked up at once (a new
    agent is found immediately); the set is re-read after ``ttl`` seconds, and at once in this process
    when an agent is saved or deleted here. The run itself re-reads its agent, so a disabled agent
    ends the stream with RUN_ERROR at worst while another process's set is stale."""

    def __init__(self, ttl: float = 2.0) -> None:
        self._set = Refreshed(_enabled_agents, ttl=ttl, name="the enabled agents")

    def forget(self, *_args: Any, **_kwargs: Any) -> None:
        self._set.forget()

    async def exists(self, name: str) -> bool:
        _agents, names = await self._set.current()
        if name in names:
            return True
        _agents, names = await self._set.read_again()
        return name in names

    async def all(self) -> list[Agent]:
        agents, _names = await self._set.current()
        return agents

    async def keep_fresh(self) -> None:
        await self._set.keep_fresh()

    @property
    def as_last_read(self) -> frozenset[str] | None:
        """The names as last read, asking for no read (None before the first)."""
        held = self._set.value
        return held[1] if held is not None else None


async def _enabled_agents() -> tuple[list[Agent], frozenset[str]]:
    agents = await on_db_thread(selectors.agents_enabled)
    return agents, frozenset(agent.name for agent in agents)


ENABLED_AGENTS = EnabledAgents()
post_save.connect(ENABLED_AGENTS.forget, sender=Agent, dispatch_uid="agui-enabled-agents-saved")
post_delete.connect(ENABLED_AGENTS.forget, sender=Agent, dispatch_uid="agui-enabled-agents-deleted")


async def reaches_thread(caller: Caller, agui_thread_id: str) -> bool:
    """Whether the caller may use the thread (run, hydrate, resume): the shared token always; a
    user's token only on their own threads or a new one (a race is refused by run_open)."""
    if caller.user_id is None:
        return True
    return await on_db_thread(selectors.thread_reachable, agui_thread_id=agui_thread_id, user_id=caller.user_id)


async def run_input_of(request: HttpRequest, caller: Caller, agent_name: str) -> DecodedInput | HttpResponseBase:
    """The request's RunAgentInput, for an enabled agent and a thread the caller reaches; else the
    4xx to answer. Another user's thread looks like no thread at all, so ids do not leak."""
    body = request_body(request)
    if isinstance(body, HttpResponseBase):
        return body
    try:
        decoded = decode_run_input(body, owner_id=caller.user_id)
    except InputError as exc:
        return error_response(400, "invalid_input", exc.message, exc.field)
    if not await ENABLED_AGENTS.exists(agent_name):
        return error_response(404, "unknown_agent", f"no agent named {agent_name!r}")
    if not await reaches_thread(caller, decoded.model.thread_id):
        return error_response(404, "unknown_thread", "no such thread")
    return decoded


async def decisions_of(resume: list[ResumeEntry], agui_thread_id: str) -> dict[str, Decided] | HttpResponse:
    """The resume entries as answers to record, or a 400 naming the field of an MCP server's
    question whose answer does not fit it (threads/elicitations.py)."""
    asked = [entry.interrupt_id for entry in resume if is_elicitation(entry.interrupt_id)]
    questions = await on_db_thread(elicitations_asked, ids=asked, agui_thread_id=agui_thread_id) if asked else {}
    try:
        return {
            entry.interrupt_id: decided_of(entry, questions.get(entry.interrupt_id), field=f"resume[{i}].payload")
            for i, entry in enumerate(resume)
        }
    except ElicitationInvalid as exc:
        return error_response(400, "invalid_input", exc.message, exc.field)


@agui_endpoint("POST", "POST a RunAgentInput to this URL")
async def run(request: HttpRequest, caller: Caller, agent_name: str) -> HttpResponseBase:
    """POST /agui/<agent>: run the agent on a RunAgentInput, or hydrate when nothing new was said."""
    decoded = await run_input_of(request, caller, agent_name)
    if isinstance(decoded, HttpResponseBase):
        return decoded  # nothing is written
    inp = decoded.model
    message = _new_user_message(decoded)
    results = client_tool_results(decoded)
    if HOST.draining and (message is not None or inp.resume or results):
        return draining_response()  # a new run, or one going on: nothing stored; a hydrate is served
    uploaded: dict[str, tuple[str, bytes]] = {}
    if message is not None:
        user_message = _user_message(decoded, message["id"])
        if refused := attachments_refusal(user_message):
            return error_response(refused.status, refused.code, refused.message, refused.field)
        if named := uploads_named(user_message):
            found = await on_db_thread(selectors.attachments_of, ids=set(named.values()), owner_id=caller.user_id)
            if refused := uploads_refusal(user_message, found):
                return error_response(refused.status, refused.code, refused.message, refused.field)
            uploaded = {url: (found[pk].media_type, bytes(found[pk].data)) for url, pk in named.items()}
        fetched = await attachments_fetch(user_message)
        if isinstance(fetched, AttachmentRefused):
            return error_response(fetched.status, fetched.code, fetched.message, fetched.field)
        if fetched:
            uploaded.update(await _fetched_stored(request, caller, message, fetched))
    surface = AguiRun(thread_id=inp.thread_id, run_id=inp.run_id, v1=decoded.speaks_v1, client_state=inp.state)
    decisions = await decisions_of(inp.resume or [], inp.thread_id)
    if isinstance(decisions, HttpResponseBase):
        return decisions  # an elicitation's answer that does not fit its question: nothing is written
    if (inp.resume or results) and await HOST.thread_status(inp.thread_id) is ThreadStatus.WAITING:
        # The request answers what the thread's run waits for; the run goes on in its stream.
        answers = Answers(
            agent_name=agent_name,
            agui_thread_id=inp.thread_id,
            agui_run_id=inp.run_id,
            protocol_version=inp.protocol_version or "",
            decisions=decisions,
            client_results=results,
            answered_by="agui-client",
            request=no_message_request(decoded),
            client_tools=declared_tools(decoded),
        )
        HOST.answer(answers, surface)
    else:
        # A new message (which supersedes any open question, or joins the run in flight on a busy
        # thread: runhost/host.py), or a hydrate when there is none.
        asked = (
            build_request(decoded, message, request_id=inp.run_id, uploaded=uploaded)
            if message is not None
            else no_message_request(decoded)
        )
        start = Start(
            agent_name=agent_name,
            agui_thread_id=inp.thread_id,
            agui_run_id=inp.run_id,
            protocol_version=inp.protocol_version or "",
            message=message,
            request=asked,
            client_tools=declared_tools(decoded),
            owner_id=caller.user_id,
        )
        HOST.start(start, surface)
    return SseResponse(surface.stream.follow(0, settings.AGUI_HEARTBEAT_SECONDS))


def _after(request: HttpRequest) -> int | HttpResponse:
    raw = request.headers.get("Last-Event-ID") or request.GET.get("after") or "0"
    try:
        after = int(raw)
    except ValueError:
        return error_response(400, "invalid_input", "Last-Event-ID / after must be an event sequence number", "after")
    if after < 0:
        return error_response(400, "invalid_input", "after must not be negative", "after")
    return after


def _path_ids_error(thread_id: str, run_id: str | None) -> HttpResponse | None:
    try:
        check_path_ids(thread_id, run_id)
    except InputError as exc:
        return error_response(400, "invalid_input", exc.message, exc.field)
    return None


# How long a request naming a run waits for its row. A run's RUN_STARTED is sent before the run is
# stored (the first byte waits on no database work), so a client may cancel or reattach, through
# another process, a run whose row is a moment away.
RUN_STORED_SECONDS = 2.0


async def _stored_run(*, agui_run_id: str, agui_thread_id: str) -> Any:
    """The run, once stored; None when it is not within RUN_STORED_SECONDS (looked for about seven times)."""
    loop = asyncio.get_running_loop()
    deadline, pause = loop.time() + RUN_STORED_SECONDS, 0.05
    while True:
        run = await on_db_thread(selectors.run_get, agui_run_id=agui_run_id, agui_thread_id=agui_thread_id)
        if run is not None or loop.time() >= deadline:
            return run
        # Doubling: a name that never comes costs a handful of reads, not forty.
        await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
        pause *= 2


@agui_endpoint("GET", "GET this URL to follow a run")
async def reattach(
    request: HttpRequest, caller: Caller, agent_name: str, thread_id: str, run_id: str | None = None
) -> HttpResponseBase:
    """GET: the events of a run after Last-Event-ID (or ?after=), then the live rest of it."""
    if refused := _path_ids_error(thread_id, run_id):
        return refused
    after = _after(request)
    if isinstance(after, HttpResponseBase):
        return after
    agent = await on_db_thread(selectors.agent_get, name=agent_name)
    if agent is None:
        return error_response(404, "unknown_agent", f"no agent named {agent_name!r}")
    if run_id is None:
        thread = await on_db_thread(selectors.thread_get, agui_thread_id=thread_id)
        run = await on_db_thread(selectors.thread_latest_run, thread=thread) if thread else None
    else:
        run = await _stored_run(agui_run_id=run_id, agui_thread_id=thread_id)
    if run is None or run.thread.agent_id != agent.pk or not caller.reaches(run.thread.owner_id):
        return error_response(404, "unknown_run", "no such run on this thread")
    if run.events_pruned_at is not None:
        return error_response(410, "event_log_pruned", PRUNED["message"])
    stream = HOST.registry.stream_of(run.pk)
    if stream is not None and after >= stream.continues_after:
        return SseResponse(stream.follow(after, settings.AGUI_HEARTBEAT_SECONDS))
    return SseResponse(follow_stored_run(run, after))


@agui_endpoint("GET", "GET this URL for the agents served here")
async def info(request: HttpRequest, caller: Caller) -> HttpResponseBase:
    """GET /agui/info: the agents served here and what the server supports. No secrets."""
    agents = await ENABLED_AGENTS.all()
    base = request.build_absolute_uri(settings.AGUI_PATH + "/")
    servers = {agent.name: await mcp_servers_of(agent) for agent in agents}
    payload = {
        "protocol": "ag-ui",
        "version": "1.0",
        "path": settings.AGUI_PATH,
        "server": "threadline",
        "protocolVersions": ["1.0", "0.x"],
        "agents": [
            {
                "name": agent.name,
                "description": agent.description,
                "url": f"{base}{agent.name}",
                "model": model_entry(provider_for(agent).info),
                # Transport, tool count and whether each is up: never its command, URL, headers or env.
                "mcpServers": [
                    {"name": s.name, "transport": s.transport, "toolCount": s.tool_count, "up": s.state == "up"}
                    for s in servers[agent.name]
                ],
            }
            for agent in agents
        ],
        "capabilities": {
            "streaming": True,
            "frontendTools": settings.AGUI_FRONTEND_TOOLS,
            "humanInTheLoop": settings.AGUI_HUMAN_IN_THE_LOOP,
            "sharedState": True,
            "interrupts": True,
            "reasoning": True,
            "subAgents": True,
            "reattach": True,
            "hydrate": True,
        },
    }
    return JsonResponse(payload, json_dumps_params={"indent": None})


@agui_endpoint("POST", "POST to this URL to cancel the run")
async def cancel(
    request: HttpRequest, caller: Caller, agent_name: str, thread_id: str, run_id: str
) -> HttpResponseBase:
    """POST: stop the run at its next safe point. It ends with RUN_FINISHED (outcome cancelled
    for 1.0 clients; a threadline.cancelled event before it for 0.x clients)."""
    if refused := _path_ids_error(thread_id, run_id):
        return refused
    run = await _stored_run(agui_run_id=run_id, agui_thread_id=thread_id)
    if (
        run is None
        or not await ENABLED_AGENTS.exists(agent_name)
        or run.thread.agent.name != agent_name
        or not caller.reaches(run.thread.owner_id)
    ):
        return error_response(404, "unknown_run", "no such run on this thread")
    try:
        await HOST.cancel(run)
    except RunNotCancellable as exc:
        return error_response(409, "run_ended", str(exc))
    return JsonResponse({"status": "cancelling", "runId": run_id}, status=202)


def metrics(request: HttpRequest) -> HttpResponseBase:
    """GET /metrics: run metrics in the Prometheus text format, behind the AG-UI token."""
    if denied := token_error(request):
        return denied
    return HttpResponse(generate_latest(), content_type=CONTENT_TYPE_LATEST)

"""CopilotKit's runtime routes for agents: info, connect and stop (the run is agui/views.py's).

Each answers what ``@copilotkit/runtime`` 1.75's handler of the same route answers
(``dist/v2/runtime/handlers/``), so ``@copilotkit/core`` 1.74 reads it as it reads that runtime.
"""

from __future__ import annotations

from typing import Any

import orjson
from django.conf import settings
from django.http import HttpRequest, HttpResponseBase, JsonResponse

from agui.body import request_body
from agui.copilotkit.connect import connect_stream
from agui.decode import InputError, check_path_ids
from agui.frontend import declared_tools
from agui.http import Caller, SseResponse, agui_endpoint, error_response
from agui.prompt import no_message_request
from agui.runs import AguiRun
from agui.views import ENABLED_AGENTS, run_input_of
from runhost.host import HOST
from runhost.requests import Start
from threads import selectors
from threads.dbthread import on_db_thread
from threads.services.runs import RunNotCancellable
from vocabulary import agui as ev

# What the runtime's /info says of a runtime with a thread store and no CopilotKit Intelligence
# (get-runtime-info.mjs resolveThreadEndpointInfo): list and inspect are the REST thread routes,
# mutations are rename, archive and delete. No realtime channel: the list is read again, not pushed.
THREAD_ENDPOINTS = {"list": True, "inspect": True, "mutations": True, "realtimeMetadata": False}


@agui_endpoint("GET", "GET this URL for the runtime's agents")
async def info(request: HttpRequest, caller: Caller) -> HttpResponseBase:
    """GET /copilotkit/info: the runtime information CopilotKit reads first. ``mode: "sse"`` (the
    agents stream over HTTP; no Intelligence websocket), the enabled agents keyed by name, and
    ``threadEndpoints``. No license status: Threadline serves routes and checks no license."""
    agents = await ENABLED_AGENTS.all()
    payload = {
        "version": "threadline",
        "server": "threadline",
        "mode": "sse",
        "agents": {
            agent.name: {
                "name": agent.name,
                "description": agent.description,
                "className": "ThreadlineAgent",
                "capabilities": _capabilities(),
            }
            for agent in agents
        },
        "audioFileTranscriptionEnabled": False,
        "threadEndpoints": THREAD_ENDPOINTS,
        "suggestions": False,
        "a2uiEnabled": False,
        "openGenerativeUIEnabled": False,
        "telemetryDisabled": True,
    }
    return JsonResponse(payload)


def _capabilities() -> dict[str, Any]:
    """What each agent does, in AG-UI 1.0's AgentCapabilities shape."""
    return {
        "tools": {"supported": True, "clientProvided": settings.AGUI_FRONTEND_TOOLS},
        "state": {"snapshots": True, "deltas": True},
        "reasoning": {"supported": True, "streaming": True},
        "humanInTheLoop": {"supported": settings.AGUI_HUMAN_IN_THE_LOOP, "interrupts": True},
        "multiAgent": {"supported": True, "subAgents": True},
    }


@agui_endpoint("POST", "POST a RunAgentInput to this URL to open the thread")
async def connect(request: HttpRequest, caller: Caller, agent_name: str) -> HttpResponseBase:
    """POST /copilotkit/agent/<agent>/connect: the thread as it stands (MESSAGES_SNAPSHOT,
    STATE_SNAPSHOT, and a pending approval or question as the interrupt outcome), then the run
    still going on it, joined live. Never runs the agent, whatever the body's messages say: a
    page opening a thread sends its own copy of them."""
    decoded = await run_input_of(request, caller, agent_name)
    if isinstance(decoded, HttpResponseBase):
        return decoded
    inp = decoded.model
    surface = AguiRun(thread_id=inp.thread_id, run_id=inp.run_id, v1=decoded.speaks_v1, client_state=inp.state)
    start = Start(
        agent_name=agent_name,
        agui_thread_id=inp.thread_id,
        agui_run_id=inp.run_id,
        protocol_version=inp.protocol_version or "",
        message=None,
        request=no_message_request(decoded),
        client_tools=declared_tools(decoded),
        owner_id=caller.user_id,
    )
    HOST.start(start, surface)
    return SseResponse(connect_stream(surface, thread_id=inp.thread_id, agent_name=agent_name))


@agui_endpoint("POST", "POST to this URL to stop the thread's run")
async def stop(request: HttpRequest, caller: Caller, agent_name: str, thread_id: str) -> HttpResponseBase:
    """POST /copilotkit/agent/<agent>/stop/<threadId>, body ``{}`` or ``{"runId": ...}``: the
    thread's open run stops at its next safe point (a waiting one at once), wherever it runs, as
    the AG-UI cancel stops it. Answers as the runtime's handle-stop does: ``{"stopped": true,
    ...}``, or ``{"stopped": false, "message": ...}`` when nothing runs (or not that run)."""
    try:
        check_path_ids(thread_id, None)
    except InputError as exc:
        return error_response(400, "invalid_input", exc.message, exc.field)
    body = request_body(request)
    if isinstance(body, HttpResponseBase):
        return body
    run_id = _stop_run_id(body)
    if isinstance(run_id, HttpResponseBase):
        return run_id
    if not await ENABLED_AGENTS.exists(agent_name):
        return error_response(404, "unknown_agent", f"no agent named {agent_name!r}")
    thread = await on_db_thread(selectors.thread_get, agui_thread_id=thread_id)
    if thread is None or thread.agent.name != agent_name or not caller.reaches(thread.owner_id):
        return error_response(404, "unknown_thread", "no such thread")
    open_run = await on_db_thread(selectors.thread_open_run, agui_thread_id=thread_id)
    run = await on_db_thread(selectors.run_by_pk, run_pk=open_run.pk) if open_run is not None else None
    # A run that goes on after an answer is the same run to the client: `<runId>-continued`.
    if run is None or (run_id is not None and run.agui_run_id not in (run_id, f"{run_id}-continued")):
        what = f"Run '{run_id}' is not the active run" if run_id else "No active run"
        return JsonResponse({"stopped": False, "message": f"{what} for thread '{thread_id}'."})
    try:
        await HOST.cancel(run)
    except RunNotCancellable:
        return JsonResponse({"stopped": False, "message": f"No active run for thread '{thread_id}'."})
    # What the runtime answers (handle-stop.mjs), whose client shows it as the run's end.
    return JsonResponse({"stopped": True, "interrupt": ev.run_error("Run stopped by user", "STOPPED")})


def _stop_run_id(body: bytes) -> str | HttpResponseBase | None:
    """The runId a stop is narrowed to (None: the thread's open run), or the 400, as handle-stop
    reads the body: empty, ``{}``, or ``{"runId": "<non-empty>"}`` and nothing else."""
    if not body.strip():
        return None
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return error_response(400, "invalid_input", "the body is not valid JSON")
    if not isinstance(parsed, dict) or set(parsed) - {"runId"}:
        return error_response(400, "invalid_input", 'a stop takes {} or {"runId": "..."}')
    run_id = parsed.get("runId")
    if run_id is None and "runId" not in parsed:
        return None
    if not isinstance(run_id, str) or not run_id.strip():
        return error_response(400, "invalid_input", "runId must be a non-empty string", "runId")
    return run_id

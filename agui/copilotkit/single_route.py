"""CopilotKit's single-route form: every call a ``POST`` to the runtime's URL itself with a method
envelope ``{"method", "params", "body"}`` (``@copilotkit/runtime`` 1.75, fetch-handler.mjs
``resolveSingleRoute``). ``@copilotkit/core`` uses it when an app sets ``useSingleEndpoint`` on its
provider (by default it asks ``GET /info`` first and uses the routes); a proxy that forwards one path
only needs it too.

Each envelope is answered by the route it names, as if it had been sent there: the same view, with
the same caller, checks (method, token or session, CSRF) and body limit. ``info`` also says the
resources are reachable through ``resource/request`` (``singleRoute``), which is how core reaches
the thread routes in this form.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
from django.http import HttpRequest, HttpResponseBase, JsonResponse, QueryDict
from django.urls import Resolver404, resolve

from agui import views as agui_views
from agui.body import request_body
from agui.copilotkit import views
from agui.http import Caller, agui_endpoint, error_response

_RESOURCES = ("copilotkit-threads", "copilotkit-thread", "copilotkit-thread-")


def _as_sent_to(request: HttpRequest, *, method: str, body: Any, path: str | None = None) -> HttpRequest:
    """The envelope's call as a request of its own: its method, its body as JSON, and for a
    resource its path and query; the headers, cookies and scope are the envelope's."""
    data = b"" if body is None else orjson.dumps(body)
    inner = copy.copy(request)
    path, _, query = (path or request.path).partition("?")
    inner.method = method
    inner.path = inner.path_info = path
    inner.META = {**request.META, "REQUEST_METHOD": method, "QUERY_STRING": query, "CONTENT_LENGTH": str(len(data))}
    inner.GET = QueryDict(query)
    inner._body = data  # what HttpRequest.body reads
    vars(inner).pop("headers", None)  # a cached property over META
    return inner


@agui_endpoint("POST", "POST a method envelope {method, params, body} to this URL")
async def single_route(request: HttpRequest, caller: Caller) -> HttpResponseBase:
    """POST <COPILOTKIT_PATH>: the envelope's method answered by its route. An envelope that is not
    JSON, or lacks a string ``method`` or a parameter its method needs, is 400; an unknown method or
    resource 404."""
    raw = request_body(request)
    if isinstance(raw, HttpResponseBase):
        return raw
    try:
        call = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return error_response(400, "invalid_input", "the body is not JSON: send {method, params, body}")
    if not isinstance(call, dict) or not isinstance(call.get("method"), str):
        return error_response(400, "invalid_input", "the envelope needs a string method", "method")
    params = call.get("params") or {}
    if not isinstance(params, dict):
        return error_response(400, "invalid_input", "params must be an object", "params")
    needed = {"agent/run": ("agentId",), "agent/connect": ("agentId",), "agent/stop": ("agentId", "threadId")}
    needed["resource/request"] = ("path", "httpMethod")
    method, body = call["method"], call.get("body")
    for name in needed.get(method, ()):
        if not isinstance(params.get(name), str) or not params[name]:
            return error_response(400, "invalid_input", f"{method} needs params.{name}, a string", f"params.{name}")
    if method == "info":
        answer = await views.info(_as_sent_to(request, method="GET", body=None))
        if not isinstance(answer, JsonResponse):
            return answer
        info = orjson.loads(answer.content)
        info["singleRoute"] = {"resourceOperations": True, "threadEndpoints": views.THREAD_ENDPOINTS}
        return JsonResponse(info)
    if method == "agent/run":
        return await agui_views.run(_as_sent_to(request, method="POST", body=body), params["agentId"])
    if method == "agent/connect":
        return await views.connect(_as_sent_to(request, method="POST", body=body), params["agentId"])
    if method == "agent/stop":
        stopped = _as_sent_to(request, method="POST", body={} if body is None else body)
        return await views.stop(stopped, params["agentId"], params["threadId"])
    if method == "resource/request":
        return await _resource(request, params["path"], params["httpMethod"].upper(), body)
    return error_response(404, "unknown_method", f"no method {method!r} here")


async def _resource(request: HttpRequest, path: str, http_method: str, body: Any) -> HttpResponseBase:
    """A thread route (``/threads...``, relative to the runtime's URL) called through the envelope."""
    if not path.startswith("/threads"):
        return error_response(404, "not_found", f"no resource {path!r} here")
    full = f"{request.path.rstrip('/')}{path}"
    try:
        match = resolve(full.partition("?")[0], urlconf="agui.root_urls")
    except Resolver404:
        return error_response(404, "not_found", f"no resource {path!r} here")
    if not (match.url_name or "").startswith(_RESOURCES):
        return error_response(404, "not_found", f"no resource {path!r} here")
    response: HttpResponseBase = await match.func(
        _as_sent_to(request, method=http_method, body=body, path=full), *match.args, **match.kwargs
    )
    return response

"""HTTP plumbing of the AG-UI routes: who is calling (the token check), JSON errors, SSE responses."""

from __future__ import annotations

import functools
import hmac
from collections.abc import AsyncGenerator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse, StreamingHttpResponse, parse_cookie
from django.middleware.csrf import CsrfViewMiddleware

from runhost.registry import Followed
from threads.dbthread import on_db_thread
from threads.selectors import api_token_user_id, session_user_id

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def error_response(status: int, code: str, message: str, field: str | None = None) -> JsonResponse:
    error: dict[str, Any] = {"code": code, "message": message}
    if field:
        error["field"] = field
    response = JsonResponse({"error": error}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="agui"'
    return response


# Retry-After of a run refused while the process drains: another process (or its replacement) takes it.
DRAINING_RETRY_AFTER = 1


def draining_response() -> JsonResponse:
    """A new run asked of a process that drains (SIGTERM: runhost/drain.py): nothing is stored; the
    same request sent again reaches another process (behind a load balancer) or its replacement."""
    response = error_response(
        503, "draining", "this server process is stopping (a deploy or a restart): send the same request again"
    )
    response["Retry-After"] = str(DRAINING_RETRY_AFTER)
    return response


@dataclass(slots=True, frozen=True)
class Caller:
    """Who sent an AG-UI request. ``user_id`` None: the shared AGUI_TOKEN, the single-user (or
    operator's) key, which reaches every thread. Otherwise a user, by their own API token or their
    Django session (``signed_in``): the threads that user starts are theirs, and nobody else's can
    be reached."""

    user_id: int | None
    signed_in: bool = False

    def reaches(self, owner_id: int | None) -> bool:
        return self.user_id is None or owner_id == self.user_id


_SHARED = Caller(user_id=None)


def _presented_token(request: HttpRequest) -> str | JsonResponse:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() not in ("bearer", "token") or not token.strip():
        return error_response(
            401, "unauthorized", "send the AG-UI token or your API token as 'Authorization: Bearer <token>'"
        )
    return token.strip()


def _is_shared_token(token: str) -> bool:
    return hmac.compare_digest(token.encode(), settings.AGUI_TOKEN.encode())


def _session_key(request_cookies: str) -> str:
    return parse_cookie(request_cookies).get(settings.SESSION_COOKIE_NAME, "")


async def authenticate(request: HttpRequest) -> Caller | JsonResponse:
    """The caller of an AG-UI route, or the 401 to send. Accepts the shared AGUI_TOKEN and a user's
    API (DRF) token, each as ``Bearer`` or ``Token``, and without an Authorization header the
    Django session of a signed-in user (a page this server serves). The shared token costs no
    database query. An Authorization header, when sent, decides alone: a wrong token is a 401
    even beside a good session."""
    if not request.headers.get("Authorization") and (key := request.COOKIES.get(settings.SESSION_COOKIE_NAME, "")):
        user_id = await on_db_thread(session_user_id, session_key=key)
        if user_id is not None:
            return Caller(user_id=user_id, signed_in=True)
    token = _presented_token(request)
    if isinstance(token, JsonResponse):
        return token
    if _is_shared_token(token):
        return _SHARED
    user_id = await on_db_thread(api_token_user_id, key=token)
    if user_id is None:
        return error_response(
            401, "unauthorized", "the token is wrong: it is neither the AG-UI token nor an active user's API token"
        )
    return Caller(user_id=user_id)


def token_error(request: HttpRequest) -> JsonResponse | None:
    """None when the request carries the shared AG-UI token (the operator's, for /metrics), else the 401."""
    token = _presented_token(request)
    if isinstance(token, JsonResponse):
        return token
    if not _is_shared_token(token):
        return error_response(401, "unauthorized", "the AG-UI token is wrong")
    return None


# The sender of the shared AG-UI token, and of a user's token or session, as the body ledger
# (agui/inflight.py) counts them: a user is one sender whichever way they authenticate.
SHARED_SENDER = "shared"


def user_sender(user_id: int) -> str:
    return f"user:{user_id}"


async def token_sender(authorization: str, cookies: str = "") -> str | None:
    """Who an Authorization header value names, when it carries a token this server takes (the
    shared one, or an active user's API token), or without one the signed-in user whose session
    the cookies carry: decided before a byte of the body is read (agui/body.py). None: nobody the
    server takes."""
    if not authorization and (key := _session_key(cookies)):
        session_user = await on_db_thread(session_user_id, session_key=key)
        return None if session_user is None else user_sender(session_user)
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() not in ("bearer", "token") or not token:
        return None
    if _is_shared_token(token):
        return SHARED_SENDER
    user_id = await on_db_thread(api_token_user_id, key=token)
    return None if user_id is None else user_sender(user_id)


async def token_admits(authorization: str, cookies: str = "") -> bool:
    """Whether the request carries a token this server takes, or a signed-in user's session."""
    return await token_sender(authorization, cookies) is not None


class _JsonCsrf(CsrfViewMiddleware):
    """Django's own CSRF check (the token in the X-CSRFToken header against the csrftoken cookie,
    the Origin and Referer checks, CSRF_TRUSTED_ORIGINS), refusing with this API's JSON error."""

    def _reject(self, request: HttpRequest, reason: str) -> HttpResponse:
        return error_response(
            403, "csrf_failed", f"CSRF check failed ({reason}): send the csrftoken cookie's value as X-CSRFToken"
        )


_CSRF = _JsonCsrf(lambda request: HttpResponse())


def csrf_refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the request passes Django's CSRF check, else the 403 to send. Safe methods pass."""
    return _CSRF.process_view(request, lambda request: HttpResponse(), (), {})


type AguiView = Callable[..., Coroutine[Any, Any, HttpResponseBase]]


def agui_endpoint(
    method: str | tuple[str, ...], hint: str
) -> Callable[[AguiView], Callable[..., Coroutine[Any, Any, HttpResponseBase]]]:
    """The checks every AG-UI view makes first, in this order: the method (405, with ``hint`` to
    say what to send instead), then the caller (401), then for a caller signed in by a session
    cookie Django's CSRF check on anything but a GET (403): a cookie goes with any page's request,
    a token only with the requests of whoever holds it. The view gets the ``Caller``."""
    methods = (method,) if isinstance(method, str) else method

    def decorate(view: AguiView) -> Callable[..., Coroutine[Any, Any, HttpResponseBase]]:
        @functools.wraps(view)
        async def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if request.method not in methods:
                return error_response(405, "method_not_allowed", hint)
            caller = await authenticate(request)
            if not isinstance(caller, Caller):
                return caller
            if caller.signed_in and (refused := csrf_refusal(request)):
                return refused
            return await view(request, caller, *args, **kwargs)

        return checked

    return decorate


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    """The AG-UI handler's 404: a JSON error, like every other error on these routes."""
    return error_response(404, "not_found", "no such AG-UI path")


class SseResponse(StreamingHttpResponse):
    """An SSE stream whose chunks are bytes ready for the wire: the AG-UI handler sends them as
    they come (agui/asgi.py)."""

    def __init__(self, chunks: AsyncGenerator[bytes, None] | Followed) -> None:
        super().__init__(chunks, content_type="text/event-stream; charset=utf-8")
        self.chunks = chunks
        for name, value in SSE_HEADERS.items():
            self[name] = value

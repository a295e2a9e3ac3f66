"""HTTP plumbing of the AG-UI routes: the token check, JSON errors, SSE responses."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def error_response(status: int, code: str, message: str, field: str | None = None) -> JsonResponse:
    error: dict[str, Any] = {"code": code, "message": message}
    if field:
        error["field"] = field
    response = JsonResponse({"error": error}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="agui"'
    return response


def token_matches(authorization: str) -> bool:
    """Whether an Authorization header value carries the AG-UI bearer token."""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return False
    return hmac.compare_digest(token.strip().encode(), settings.AGUI_TOKEN.encode())


def token_error(request: HttpRequest) -> JsonResponse | None:
    """None when the request carries the AG-UI bearer token, else the 401 to send."""
    header = request.headers.get("Authorization", "")
    if token_matches(header):
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return error_response(401, "unauthorized", "send the AG-UI token as 'Authorization: Bearer <token>'")
    return error_response(401, "unauthorized", "the AG-UI token is wrong")


def sse_response(chunks: AsyncIterator[bytes]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(chunks, content_type="text/event-stream; charset=utf-8")
    for name, value in SSE_HEADERS.items():
        response[name] = value
    return response

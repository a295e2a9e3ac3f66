"""REST errors as {"error": {"code", "message", "field"?}}, like the AG-UI routes'."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response
from rest_framework.views import exception_handler


def json_errors(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = exception_handler(exc, context)
    if response is None:
        return None
    detail = response.data
    if isinstance(detail, dict) and "detail" not in detail:
        field, messages = next(iter(detail.items()))
        message = messages[0] if isinstance(messages, list) else messages
        body = {"code": "invalid_input", "message": f"{field}: {message}", "field": field}
    else:
        message = detail.get("detail") if isinstance(detail, dict) else detail
        code = getattr(message, "code", "error")
        body = {"code": str(code), "message": str(message)}
    response.data = {"error": body}
    return response

"""REST errors as {"error": {"code", "message", "field"?}}, like the AG-UI routes', and their schema."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
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


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django's 404 handler: a path under /api/ that matches no route gets the API's JSON error."""
    if request.path.startswith("/api/"):
        return JsonResponse({"error": {"code": "not_found", "message": "no such API path"}}, status=404)
    return defaults.page_not_found(request, exception or Exception("not found"))


class ErrorBody(serializers.Serializer[dict[str, Any]]):
    code = serializers.CharField(help_text="A stable machine-readable code, e.g. not_found, invalid_input.")
    message = serializers.CharField(help_text="What was wrong, for a person.")
    field = serializers.CharField(required=False, help_text="The parameter or body field that was wrong.")


class ErrorOutput(serializers.Serializer[dict[str, Any]]):
    error = ErrorBody()


_MEANINGS = {
    400: "A query parameter or body field is invalid; `field` names it.",
    401: "No token, or an unknown one.",
    403: "You may read it but not change it: that needs its thread's owner or the change permission.",
    404: "No such object, or not one of yours; for a list, a page past the last.",
    409: "The approval was already answered.",
    410: "The run's event log was removed (code `event_log_pruned`); the run and its messages remain.",
    503: "The database stayed contended and nothing was written (code `retry`): send the request again.",
}


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    """The documented error responses of an operation (401 is added to every one)."""
    return {status: OpenApiResponse(ErrorOutput, description=_MEANINGS[status]) for status in (401, *statuses)}

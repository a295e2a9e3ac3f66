"""Page-number pagination for every REST list, strict about its parameters.

DRF's own class answers a malformed ``page`` with a 404 and ignores a malformed
``page_size``; here both are a 400 that names the parameter, like any other bad
query value, and the schema states the bounds the view enforces.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from django.core.paginator import Paginator
from django.db.models import QuerySet
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.views import APIView

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


def _bounded_int(request: Request, name: str, default: int, maximum: int | None = None) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    # isascii: str.isdigit() also accepts digits int() refuses ("²"). A number too long to be a
    # page or a size stands for "very large": past the last page, over the largest size.
    if not (raw.isascii() and raw.isdigit()):
        value = 0
    else:
        digits = raw.lstrip("0")
        value = int(digits or "0") if len(digits) <= 18 else sys.maxsize
    if value < 1 or (maximum is not None and value > maximum):
        bounds = f"from 1 to {maximum}" if maximum is not None else "of 1 or more"
        raise ValidationError({name: f"must be a whole number {bounds}, not {raw[:40]!r}"})
    return value


class Pagination(PageNumberPagination):
    page_size = DEFAULT_PAGE_SIZE
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE

    def get_page_size(self, request: Request) -> int:
        return _bounded_int(request, "page_size", DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)

    def paginate_queryset(
        self, queryset: QuerySet[Any] | Sequence[Any], request: Request, view: APIView | None = None
    ) -> list[Any]:
        self.request = request
        number = _bounded_int(request, "page", 1)
        paginator = Paginator(queryset, self.get_page_size(request))
        if number > paginator.num_pages:
            raise NotFound(f"page {number} is past the last page ({paginator.num_pages})")
        self.page = paginator.page(number)
        return list(self.page)

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        return [
            {
                "name": "page",
                "required": False,
                "in": "query",
                "description": "A page number, from 1.",
                "schema": {"type": "integer", "minimum": 1},
            },
            {
                "name": "page_size",
                "required": False,
                "in": "query",
                "description": f"Results per page (default {DEFAULT_PAGE_SIZE}).",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE},
            },
        ]

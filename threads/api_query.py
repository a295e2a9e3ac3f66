"""The base views of the REST API (ApiView, ListView): query parameters are validated strictly.

Each view names its filter serializer; a value it rejects, or a parameter it
does not know (a typo such as ``updatedSince`` would otherwise be ignored and
return everything), is a 400 that names the parameter. Authentication runs
first, so an anonymous caller gets a 401 whatever the query.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.core.validators import RegexValidator
from django.db.models import Model
from rest_framework import generics, serializers
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

_M = TypeVar("_M", bound=Model)

PAGE_PARAMS = ("page", "page_size")


def text_filter(*, max_length: int, help_text: str) -> serializers.CharField:
    """A free-text query parameter; blank means no filter. A NUL is refused (PostgreSQL would refuse the
    query), and the schema says so with a pattern."""
    return serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=max_length,
        help_text=help_text,
        validators=[RegexValidator(r"^[^\x00]*$", "must not contain a NUL character")],
    )


class ApiView(APIView):
    """The base of every REST view: token authentication and IsAuthenticated (the settings' defaults),
    then the query parameters against ``query_filter``."""

    query_filter: type[serializers.Serializer[Any]] | None = None

    def known_params(self) -> set[str]:
        return set(self.query_filter().fields) if self.query_filter else set()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # No row's id holds a NUL, and PostgreSQL refuses one in a query rather than finding nothing.
        if any("\x00" in str(value) for value in kwargs.values()):
            raise NotFound("no such API path")
        known = self.known_params()
        unknown = sorted(set(request.query_params) - known)
        if unknown:
            expected = ", ".join(sorted(known)) or "none"
            raise ValidationError({unknown[0][:60]: f"unknown query parameter (known: {expected})"})

    def query(self) -> dict[str, Any]:
        """The validated filter values; an empty value is a value (``?after=`` is a 400, not ``after=0``)."""
        if self.query_filter is None:
            return {}
        # A plain dict rather than the QueryDict: DRF treats "" in form-like input as absent.
        filters = self.query_filter(data=self.request.query_params.dict())
        filters.is_valid(raise_exception=True)
        return dict(filters.validated_data)


class ListView(ApiView, generics.ListAPIView[_M]):
    """A paginated list (threads.api_pagination.Pagination, the default)."""

    def known_params(self) -> set[str]:
        return super().known_params() | set(PAGE_PARAMS)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """DRF's ``list``, but the response holds the rows' JSON alone, not the page's rows.

        A serializer and its fields point at each other, and DRF's view and request too; the page's
        model instances, held by the serializer and the paginator, stayed in those reference cycles
        after the response had gone out, until the cyclic collector came (about 600 objects for a
        page of /api/threads/; with 500 replies streaming, collector passes of 30 to 80 ms that
        stopped the event loop: bench/stream.py --operators, issue #27 item 5)."""
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        # What ListSerializer(page).data does, with a serializer that is never given the page (DRF
        # keeps what a serializer is made with, in its child too).
        serializer = self.get_serializer()
        response = self.get_paginated_response([serializer.to_representation(row) for row in page or ()])
        if self.paginator is not None:
            self.paginator.page = None  # type: ignore[attr-defined]
        return response

"""The rows of an admin list, written as Django writes them, with each column worked out once a page.

Django's ``items_for_result`` (django.contrib.admin.templatetags.admin_list) finds out anew for
every cell what its column is: it looks the name up as a model field (a FieldDoesNotExist raised
and caught for every column that is a method of the admin), asks for the empty value's display,
and formats the cell through ``format_html``. For the thread list's 100 rows of ten columns that
was 60% of the page's time, and the page is what an operator opens while replies stream (issue
#27 item 5: the operators' bench times it under 500 streams). Here the columns are looked up once
per page and each cell only reads its value and escapes it; the HTML is Django's, byte for byte
(tests/threads/test_admin_rows.py compares the two on every list of the app).

A list these rows do not cover is left to Django: a popup, editable rows, a column that is a plain
callable, a property or a lookup through relations, or an auto-created field.

``AppList`` is the ModelAdmin the app's admins build on: this template, and a page that
leaves no rows behind it.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.templatetags.admin_list import ResultList, items_for_result
from django.contrib.admin.templatetags.admin_urls import add_preserved_filters
from django.contrib.admin.utils import display_for_field, display_for_value
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import FieldDoesNotExist, ObjectDoesNotExist
from django.db import models
from django.db.models.constants import LOOKUP_SEP
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch
from django.utils import dateformat, timezone
from django.utils.formats import get_format
from django.utils.html import conditional_escape
from django.utils.safestring import SafeString

from threads.admin.display import ListCheckboxes, checkbox, checkbox_label


@dataclass(slots=True, frozen=True)
class _Column:
    name: str
    field: models.Field[Any, Any] | None  # a model field of the row, or
    method: Callable[[Any], Any] | None  # a method of the admin, given the row
    kind: str  # "checkbox" (ListCheckboxes), "datetime" (a DateTimeField shown as Django shows it), or ""
    classes: list[str]
    empty: str
    link: bool
    tag: str  # "th" for the first column that links to the row, else "td"


def list_rows(cl: ChangeList) -> Iterator[ResultList]:
    """What Django's ``results(cl)`` yields for each row of the page: a ResultList whose items,
    written one after another, are the row's cells (here one item, the cells joined)."""
    columns = None if cl.formset or cl.is_popup else _columns(cl)
    if columns is None:
        for result in cl.result_list:
            yield ResultList(None, items_for_result(cl, result, None))
        return
    page = _Page(
        context={"preserved_filters": cl.preserved_filters, "opts": cl.opts},
        grouped=settings.USE_THOUSAND_SEPARATOR,
        datetime_format=get_format("DATETIME_FORMAT"),
        checkbox_label=checkbox_label(),
        change_url=_change_urls(cl),
    )
    for result in cl.result_list:
        # The row's cells as one string: the template writes a row's cells one after another with
        # nothing between them, the same bytes; a value each cost it a loop turn and an escape's
        # check, and one per row took the thread list's CPU from 25.3 to 23.7 ms (100 rows).
        yield ResultList(None, [_row(cl, columns, result, page)])


@dataclass(slots=True, frozen=True)
class _Page:
    """What every row of a page shares, looked up once: each was a lookup of the active language
    or a reverse() for every row (issue #27 item 5)."""

    context: dict[str, Any]  # for add_preserved_filters
    grouped: bool  # USE_THOUSAND_SEPARATOR: integers are not written as str() makes them
    datetime_format: str  # formats.localize's for a datetime, in the active language
    checkbox_label: str
    change_url: Callable[[Any], str]  # ChangeList.url_for_result


# The pk a URL is reversed with once a page, its place then filled with each row's (the change URL
# here, the thread list's own links in threads/admin/__init__.py).
SHAPE_PK = uuid.UUID("5e1f5e1f-0000-4000-8000-00000000face")


def _change_urls(cl: ChangeList) -> Callable[[Any], str]:
    """``cl.url_for_result``; for a model keyed by a UUID, which neither admin.utils.quote nor
    reverse() changes, the URL is reversed once a page and each row's pk put in its place."""
    if type(cl).url_for_result is not ChangeList.url_for_result or not isinstance(cl.model._meta.pk, models.UUIDField):
        return cl.url_for_result
    pk_attname = cl.pk_attname
    before, found, after = cl.url_for_result(cast(Any, _Shape(pk_attname))).partition(str(SHAPE_PK))
    if not found:
        return cl.url_for_result

    def change_url(result: Any) -> str:
        pk = getattr(result, pk_attname)
        return f"{before}{pk}{after}" if type(pk) is uuid.UUID else cl.url_for_result(result)

    return change_url


class _Shape:
    def __init__(self, pk_attname: str) -> None:
        setattr(self, pk_attname, SHAPE_PK)


def _columns(cl: ChangeList) -> list[_Column] | None:
    model_admin = cl.model_admin
    default_empty = model_admin.get_empty_value_display()
    columns = []
    first = True
    for name in cl.list_display:
        if not isinstance(name, str) or LOOKUP_SEP in name:
            return None
        field = _model_field(cl.model._meta, name)
        method = None
        if field is None:
            if name == "__str__" or not hasattr(model_admin, name):
                return None
            method = getattr(model_admin, name)
        elif field.auto_created:
            return None
        classes = ["action-checkbox"] if method is not None and name == "action_checkbox" else [f"field-{name}"]
        if field is not None and isinstance(field, (models.DateField, models.TimeField, models.ForeignKey)):
            classes.append("nowrap")
        link = _links(cl, name, first)
        kind = ""
        if name == "action_checkbox" and getattr(type(model_admin), name, None) is ListCheckboxes.action_checkbox:
            kind = "checkbox"  # not an admin's own action_checkbox
        elif type(field) is models.DateTimeField and not field.flatchoices:
            kind = "datetime"
        columns.append(
            _Column(
                name=name,
                field=field,
                method=method,
                kind=kind,
                classes=classes,
                empty=getattr(method, "empty_value_display", default_empty),
                link=link,
                tag="th" if link and first else "td",
            )
        )
        first = first and not link
    return columns


def _model_field(opts: Any, name: str) -> models.Field[Any, Any] | None:
    """The field ``lookup_field`` would read for ``name``, or None where it calls something instead."""
    try:
        field = opts.get_field(name)
    except FieldDoesNotExist:
        return None
    if field.is_relation and ((field.many_to_one and not field.related_model) or field.one_to_many):
        return None
    if field.is_relation and not field.many_to_many and getattr(field, "attname", None) == name:
        return None  # "<fk>_id": Django reads it as an attribute, not the field
    return field  # type: ignore[no-any-return]


def _links(cl: ChangeList, name: str, first: bool) -> bool:
    if cl.list_display_links is None:
        return False
    if first and not cl.list_display_links:
        return True
    return name in cl.list_display_links


def _row(cl: ChangeList, columns: list[_Column], result: Any, page: _Page) -> SafeString:
    """The row's cells, written one after another."""
    cells = []
    for column in columns:
        classes = column.classes
        shown: Any
        try:
            if column.kind == "checkbox":
                shown = checkbox(result, page.checkbox_label)  # what action_checkbox returns
            elif column.kind == "datetime" and type(value := getattr(result, column.name)) is datetime.datetime:
                # display_for_field's formats.localize(timezone.template_localtime(value)), its format looked up once
                local = timezone.template_localtime(value)  # type: ignore[attr-defined]
                shown = dateformat.format(local, page.datetime_format)
            elif column.method is not None:
                value = column.method(result)
                if type(value) is int and not page.grouped:
                    shown = str(value)  # what display_for_value makes of it, without looking up three formats
                else:
                    shown = display_for_value(value, column.empty, getattr(column.method, "boolean", False))
                if isinstance(value, (datetime.date, datetime.time)):
                    classes = [*classes, "nowrap"]
            else:
                field = column.field
                assert field is not None
                value = getattr(result, column.name)
                if isinstance(field.remote_field, models.ManyToOneRel):
                    shown = column.empty if value is None else value
                else:
                    shown = display_for_field(value, field, column.empty, avoid_link=column.link)
        except ObjectDoesNotExist:
            shown = column.empty
        content: str = conditional_escape(shown)
        if column.link:
            try:
                url = page.change_url(result)
            except NoReverseMatch:
                pass
            else:
                url = add_preserved_filters(page.context, url)
                content = f'<a href="{conditional_escape(url)}">{content}</a>'
        cells.append(f'<{column.tag} class="{" ".join(classes)}">{content}</{column.tag}>')
    return SafeString("".join(cells))


class AppList(admin.ModelAdmin):
    """The ModelAdmin of the threads app's models, for their lists: written by ``list_rows``
    (templates/admin/threads/change_list.html), and their rows let go of once the page is written.

    The template is named outright: Django otherwise tries admin/threads/<model>/change_list.html
    first, and the TemplateDoesNotExist it catches holds the request's frames, and through them the
    response and the page's rows, in a reference cycle. The template engine's context makes another
    cycle (each of its dicts points back at it), which holds the ChangeList. Such cycles wait for
    the cyclic collector: about 1,100 objects a page of the thread list, and with 500 replies
    streaming, collector passes of 30 to 80 ms that stopped the event loop (bench/stream.py
    --operators, issue #27 item 5). Once the page is rendered, the ChangeList keeps no rows."""

    change_list_template = "admin/threads/change_list.html"
    # Columns the list neither shows nor needs, of its model and of the models it selects with it:
    # a thread's state document, a session's turns, a run's checkpoint, which can run to megabytes.
    list_deferred: tuple[str, ...] = ()

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return _DeferringChangeList

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        response = super().changelist_view(request, extra_context)
        if isinstance(response, TemplateResponse):
            response.add_post_render_callback(_rows_let_go)
        return response


class _DeferringChangeList(ChangeList):
    """A ChangeList whose rows leave out the admin's ``list_deferred``."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> models.QuerySet[Any]:
        queryset = super().get_queryset(request, exclude_parameters)
        deferred = getattr(self.model_admin, "list_deferred", ())
        return queryset.defer(*deferred) if deferred else queryset


def _rows_let_go(response: TemplateResponse) -> None:
    cl = (response.context_data or {}).get("cl")
    if isinstance(cl, ChangeList):
        empty = cl.root_queryset.none()
        cl.result_list = empty
        cl.queryset = empty
        cl.root_queryset = empty

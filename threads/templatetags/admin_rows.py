"""``{% result_list_by_column cl %}``: Django's ``{% result_list cl %}`` with the rows written by
threads/admin/rows.py, which works each column out once a page rather than once a cell."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.templatetags.admin_list import result_headers, result_hidden_fields
from django.contrib.admin.templatetags.base import InclusionAdminNode
from django.contrib.admin.views.main import ChangeList
from django.template import Library
from django.template.base import Parser, Token

from threads.admin.rows import list_rows

register = Library()


def _result_list(cl: ChangeList) -> dict[str, Any]:
    # What django.contrib.admin.templatetags.admin_list.result_list gives its template.
    headers = list(result_headers(cl))
    return {
        "cl": cl,
        "result_hidden_fields": list(result_hidden_fields(cl)),
        "result_headers": headers,
        "num_sorted_fields": sum(1 for header in headers if header["sortable"] and header["sorted"]),
        "results": list(list_rows(cl)),
    }


@register.tag(name="result_list_by_column")
def result_list_by_column(parser: Parser, token: Token) -> InclusionAdminNode:
    return InclusionAdminNode(
        "result_list_by_column",
        parser,
        token,
        func=_result_list,
        template_name="change_list_results.html",
        takes_context=False,
    )

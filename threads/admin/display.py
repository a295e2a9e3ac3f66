"""How the admin shows transcript messages and JSON documents (readable, and capped), and its lists' checkboxes."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.admin import helpers
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext

MESSAGE_TEXT_CAP = 4_000  # characters of one message's text shown in the thread's transcript
JSON_CAP = 50_000


def capped(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    return f"{text[:cap]}\n… ({len(text) - cap:,} more characters)"


def pretty_json(value: Any, cap: int = JSON_CAP) -> SafeString:
    return format_html('<pre class="tl-pre">{}</pre>', capped(json.dumps(value, indent=2, ensure_ascii=False), cap))


def _content_text(content: Any) -> str:
    """A message's content as text: a string as it is, parts as their text or a placeholder."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return json.dumps(content, ensure_ascii=False)
    pieces: list[str] = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text":
            pieces.append(str(part.get("text", "")))
        elif isinstance(part, dict):
            pieces.append(f"[{part.get('type', 'part')}]")
        else:
            pieces.append(str(part))
    return "\n".join(pieces)


def message_html(body: Any) -> SafeString:
    """An AG-UI message (user, assistant, tool, ...) as its text and the tool calls it makes."""
    if not isinstance(body, dict):
        return pretty_json(body)
    text = capped(_content_text(body.get("content")), MESSAGE_TEXT_CAP)
    parts: list[SafeString] = []
    if body.get("role") == "tool":
        parts.append(format_html('<div class="tl-meta">result of <code>{}</code></div>', body.get("toolCallId", "?")))
    if text:
        parts.append(format_html('<div class="tl-text">{}</div>', text))
    calls = body.get("toolCalls") or []
    if calls:
        parts.append(
            format_html_join(
                "",
                '<div class="tl-call">→ <strong>{}</strong> <code>{}</code> <span class="tl-meta">{}</span></div>',
                (
                    (
                        call.get("function", {}).get("name", "?"),
                        capped(str(call.get("function", {}).get("arguments", "")), 500),
                        call.get("id", ""),
                    )
                    for call in calls
                    if isinstance(call, dict)
                ),
            )
        )
    if not parts:
        parts.append(format_html('<span class="tl-meta">{}</span>', "(empty)"))
    return format_html_join("", "{}", ((p,) for p in parts))


class ListCheckboxes:
    """A ModelAdmin mixin: each row's action checkbox written as Django writes it, without rendering
    a form widget through the template engine for every row. That was a third of the thread list's
    time (100 rows), and the list is what an operator opens while replies stream."""

    def action_checkbox(self, obj: Any) -> SafeString:
        return checkbox(obj, checkbox_label())


def checkbox_label() -> str:
    """The checkbox's label in the active language, ``{}`` standing for the row (threads/admin/rows.py
    looks it up once a page)."""
    return gettext("Select this object for an action - {}")


def checkbox(obj: Any, label: str) -> SafeString:
    return format_html(
        '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
        helpers.ACTION_CHECKBOX_NAME,
        str(obj.pk),
        format_html(label, str(obj)),
    )


_KINDS = {"crash": "taken over (its process died)", "handover": "handed over (its process drained)"}


def takeovers_html(history: list[dict[str, Any]]) -> SafeString:
    """A run's takeovers and hand-overs (Run.takeover_history), oldest first: when, what, from which
    process to which, after how many model turns."""
    if not history:
        return format_html("{}", "none")
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (
                entry.get("takenAt") or entry.get("at", ""),
                _KINDS.get(str(entry.get("kind")), str(entry.get("kind", ""))),
                entry.get("from", ""),
                entry.get("by", "(not yet taken)"),
                entry.get("step", ""),
            )
            for entry in history
        ),
    )
    head = "<tr><th>when</th><th>what</th><th>from process</th><th>to process</th><th>after model turns</th></tr>"
    return format_html('<table class="tl-takeovers">{}{}</table>', SafeString(head), rows)

"""An MCP server's question (elicitation) answered in the admin: on its page, a form of the three
actions and the content, checked against the server's schema as the API and the chat check it."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.utils.html import format_html
from django.utils.safestring import SafeString

from orchestrator.tools.inputs import ACTIONS
from threads.elicitations import ElicitationInvalid, ElicitationReply, elicitation_check
from threads.models import Approval

FIELDS = ("answer_action", "answer_content")


class ElicitationAnswerForm(forms.ModelForm):
    answer_action = forms.ChoiceField(
        label="Answer", choices=[(a, a) for a in ACTIONS], help_text="accept sends the content below to the server."
    )
    answer_content = forms.CharField(
        label="Content (JSON)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 6, "cols": 60}),
        help_text="The form's fields as a JSON object, matching the schema shown above (accept only).",
    )

    class Meta:
        model = Approval
        fields: list[str] = []

    def clean(self) -> dict[str, Any] | None:
        cleaned = super().clean() or {}
        raw = (cleaned.get("answer_content") or "").strip()
        try:
            content = json.loads(raw) if raw else None
        except ValueError as exc:
            self.add_error("answer_content", f"not JSON: {exc}")
            return cleaned
        try:
            reply = elicitation_check(
                self.instance.elicitation or {}, cleaned.get("answer_action", ""), content, field="content"
            )
        except ElicitationInvalid as exc:
            self.add_error("answer_content", f"{exc.field}: {exc.message}")
            return cleaned
        cleaned["reply"] = reply
        return cleaned

    @property
    def reply(self) -> ElicitationReply:
        reply = self.cleaned_data["reply"]
        assert isinstance(reply, ElicitationReply)
        return reply


def asked_by(approval: Approval) -> SafeString:
    """What the queue's "call" column shows of an MCP server's question."""
    asked = approval.elicitation or {}
    where = f"MCP server {asked.get('server')} asks, during its tool {asked.get('tool')}:"
    if asked.get("mode") == "url":
        return format_html(
            '<div style="white-space: pre-wrap">{}\n{}\nOpens a page on <strong>{}</strong>: {}</div>',
            where,
            approval.message,
            asked.get("domain"),
            asked.get("url"),
        )
    fields = ", ".join(sorted((asked.get("schema") or {}).get("properties", {})))
    return format_html(
        '<div style="white-space: pre-wrap">{}\n{}\nFields: {}</div>', where, approval.message, fields or "none"
    )

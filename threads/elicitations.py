"""An MCP server's question mid-call (an elicitation, issue #46): its answer checked and recorded.

The answer is one of the spec's three actions: ``accept`` (with content matching the server's
schema in form mode; nothing in URL mode, where it says the person went to the page), ``decline``
or ``cancel``. The AG-UI ``resume``, the REST API and the admin all answer through here, so an
answer whose content does not match is refused the same way everywhere, naming the field, before
anything is written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from orchestrator.tools.inputs import ACTIONS, FORM

ID_PREFIX = "elicitation_"


def elicitation_shown(request: dict[str, Any]) -> dict[str, Any]:
    """What an elicitation's row keeps of it: what the person is shown and what checks the answer
    (not the answers given before it nor the server's opaque state: those stay in the checkpoint)."""
    return {key: request.get(key) for key in ("server", "tool", "mode", "message", "schema", "url", "domain")}


class ElicitationInvalid(Exception):
    """The answer does not fit the question: ``field`` names what is wrong."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(slots=True, frozen=True)
class ElicitationReply:
    action: str
    content: dict[str, Any] | None

    def recorded(self) -> str:
        """As it is kept in the Approval row's ``reason`` and read back by the run."""
        return json.dumps({"action": self.action, "content": self.content}, ensure_ascii=False)


def is_elicitation(interrupt_id: str) -> bool:
    return interrupt_id.startswith(ID_PREFIX)


def reply_of(payload: Any, *, cancelled: bool, schema: dict[str, Any]) -> tuple[str, Any]:
    """An AG-UI resume entry's payload read as ``(action, content)``: ``status: "cancelled"`` is
    cancel; ``{"action": "decline"|"cancel"}`` says so; ``{"action": "accept", "content": {...}}``
    and a bare object (the form's values, as a form renderer sends them) accept. An ``action`` key
    is read as the envelope only when the form itself has no field of that name."""
    if cancelled:
        return "cancel", None
    envelope = isinstance(payload, dict) and "action" in payload and "action" not in schema.get("properties", {})
    if envelope:
        return str(payload.get("action")), payload.get("content")
    return "accept", payload


def elicitation_check(elicitation: dict[str, Any], action: str, content: Any, *, field: str) -> ElicitationReply:
    """The answer ``(action, content)`` to ``elicitation`` (an Approval row's ``elicitation``),
    checked; raises ElicitationInvalid naming the field (under ``field``) that is wrong."""
    if action not in ACTIONS:
        raise ElicitationInvalid(f"{field}.action", f"action must be one of {', '.join(ACTIONS)}, not {action!r}")
    if action != "accept" or elicitation.get("mode", FORM) != FORM:
        return ElicitationReply(action, None)
    if not isinstance(content, dict):
        raise ElicitationInvalid(field, "an accepted answer's content must be an object of the form's fields")
    schema = elicitation.get("schema") or {"type": "object"}
    try:
        validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
        errors = sorted(validator.iter_errors(content), key=lambda e: list(e.absolute_path))
    except SchemaError:
        errors = []  # the server's schema is not one: nothing to check the answer against
    if errors:
        error = errors[0]
        path = [str(part) for part in error.absolute_path]
        if not path and error.validator == "required":
            missing = next((name for name in schema.get("required", []) if name not in content), "")
            path = [missing] if missing else []
        if not path and error.validator == "additionalProperties":
            path = sorted(set(content) - set(schema.get("properties", {})))[:1]
        named = ".".join([field, *path])
        raise ElicitationInvalid(named, f"{'.'.join(path) or 'the answer'}: {error.message}")
    return ElicitationReply(action, content)


def elicitations_asked(*, ids: list[str], agui_thread_id: str) -> dict[str, dict[str, Any]]:
    """The questions of these interrupt ids on the thread, by id (a selector: reads only)."""
    from threads.models import Approval

    rows = Approval.objects.filter(pk__in=ids, run__thread__agui_thread_id=agui_thread_id, elicitation__isnull=False)
    return {pk: dict(elicitation or {}) for pk, elicitation in rows.values_list("pk", "elicitation")}

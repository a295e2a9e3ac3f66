"""Decoding and validating RunAgentInput bodies, with errors that name the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from ag_ui.core import RunAgentInput
from pydantic import ValidationError


class InputError(Exception):
    """A request body the server will not run; ``field`` names what is wrong."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(slots=True)
class DecodedInput:
    model: RunAgentInput
    raw: dict[str, Any]  # the body as sent, so stored messages keep their original shape
    # The user whose API token sent it (their thread, their run); None for the shared AGUI_TOKEN.
    owner_id: int | None = None

    @property
    def speaks_v1(self) -> bool:
        """1.0 events only for a client that said which protocol it speaks (DESIGN.md §3)."""
        return self.model.protocol_version is not None


def _binary_to_part(part: dict[str, Any]) -> dict[str, Any]:
    """Maps the legacy 0.x ``binary`` user-content part onto its 1.0 equivalent.

    The 1.0 Python model rejects ``binary``, but 0.x clients still send it.
    """
    mime = part.get("mimeType")
    if not isinstance(mime, str) or not mime:
        raise InputError("a binary content part needs a mimeType", "mimeType")
    if isinstance(part.get("data"), str):
        source: dict[str, Any] = {"type": "data", "value": part["data"], "mimeType": mime}
    elif isinstance(part.get("url"), str):
        source = {"type": "url", "value": part["url"], "mimeType": mime}
    elif isinstance(part.get("id"), str):
        source = {"type": "file", "value": part["id"], "mimeType": mime}
    else:
        raise InputError("a binary content part needs one of data, url or id", "data")
    kind = mime.split("/", 1)[0]
    part_type = kind if kind in ("image", "audio", "video") else "document"
    return {"type": part_type, "source": source}


def _normalise_messages(messages: list[Any]) -> list[Any]:
    result: list[Any] = []
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "binary" for p in content):
            try:
                parts = [
                    _binary_to_part(p) if isinstance(p, dict) and p.get("type") == "binary" else p for p in content
                ]
            except InputError as exc:
                raise InputError(exc.message, f"messages.{index}.content.{exc.field}") from None
            message = {**message, "content": parts}
        result.append(message)
    return result


def _field_path(loc: tuple[int | str, ...]) -> str:
    # pydantic puts the union member's tag in the location (messages.0.user.content);
    # a person wants the path in the body, so tags of the message union are dropped.
    tags = {"user", "assistant", "system", "developer", "tool", "activity", "reasoning"}
    parts: list[str] = []
    for i, item in enumerate(loc):
        if isinstance(item, str) and i >= 2 and loc[0] == "messages" and item in tags and i == 2:
            continue
        if isinstance(item, str) and ("[" in item or item.startswith("function-")):
            continue
        parts.append(str(item))
    return ".".join(parts)


_CAMEL = {"thread_id": "threadId", "run_id": "runId", "tool_call_id": "toolCallId"}


def decode_run_input(body: bytes, *, owner_id: int | None = None) -> DecodedInput:
    """Parses and validates a RunAgentInput sent by ``owner_id`` (see DecodedInput); raises
    InputError naming the first bad field."""
    if not body:
        raise InputError("the request body is empty; expected a RunAgentInput JSON object")
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"the body is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise InputError("the body must be a JSON object (a RunAgentInput)")
    for name in ("threadId", "runId", "messages"):
        if name not in raw:
            raise InputError(f"{name} is required", name)
    for name in ("threadId", "runId"):
        if not isinstance(raw[name], str) or not raw[name].strip():
            raise InputError(f"{name} must be a non-empty string", name)
        if len(raw[name]) > 200:
            raise InputError(f"{name} is longer than 200 characters", name)
    if not isinstance(raw["messages"], list):
        raise InputError("messages must be an array of messages", "messages")
    candidate = {**raw, "messages": _normalise_messages(raw["messages"])}
    try:
        model = RunAgentInput.model_validate(candidate)
    except ValidationError as exc:
        error = exc.errors()[0]
        path = _field_path(tuple(error["loc"]))
        for snake, camel in _CAMEL.items():
            path = path.replace(snake, camel)
        raise InputError(f"{path}: {error['msg']}", path) from None
    ids = [m.id for m in model.messages]
    if len(set(ids)) != len(ids):
        raise InputError("messages: two messages share an id", "messages")
    return DecodedInput(model=model, raw=raw, owner_id=owner_id)

"""Decoding and validating RunAgentInput bodies, with errors that name the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from ag_ui.core import RunAgentInput
from pydantic import ValidationError

from threads.jsonlimits import MAX_JSON_DEPTH, Path, deeper_than, dotted, nul_at
from threads.models import Run

MAX_ID_LENGTH = 200
# The run (and a queued message) stores the version the client speaks in a column this wide:
# PostgreSQL refuses a longer value with an error the stream could only report as ``internal``.
MAX_PROTOCOL_VERSION_LENGTH: int = Run._meta.get_field("protocol_version").max_length or 0


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
        """1.0 events only for a client that said which protocol it speaks;
        a request without protocolVersion is a 0.x client, which refuses them."""
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


def _field_of_depth(path: Path) -> str:
    """The field a person would look at: ``state``, ``messages.3.content``, ``resume.0.payload``."""
    if path and path[0] in ("messages", "tools", "context", "resume"):
        return dotted(path[:3])
    return dotted(path[:1])


def _check_depth_and_nul(raw: dict[str, Any]) -> None:
    if (deep := deeper_than(raw, MAX_JSON_DEPTH)) is not None:
        field = _field_of_depth(deep)
        raise InputError(f"{field} is nested more than {MAX_JSON_DEPTH} levels deep", field)
    if (nul := nul_at(raw)) is not None:
        field = dotted(nul)[:300]
        raise InputError(f"{field} contains a NUL character (\\u0000), which the server does not store", field)


def _check_id(value: Any, field: str, *, path_segment: bool = False) -> None:
    """Ids are stored (200 characters at most) and shown; thread and run ids are also path
    segments of the reattach and cancel routes, so they may not hold a '/'."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{field} must be a non-empty string", field)
    if len(value) > MAX_ID_LENGTH:
        raise InputError(f"{field} is longer than {MAX_ID_LENGTH} characters", field)
    if not value.isprintable() or value != value.strip():
        raise InputError(f"{field} may hold only printable characters, with no space at either end", field)
    if path_segment and "/" in value:
        raise InputError(f"{field} may not contain '/'", field)


def check_path_ids(thread_id: str, run_id: str | None = None) -> None:
    """The ids in a reattach or cancel URL, under the rules of the body's ids."""
    _check_id(thread_id, "threadId", path_segment=True)
    if run_id is not None:
        _check_id(run_id, "runId", path_segment=True)


def _check_ids(raw: dict[str, Any]) -> None:
    """Every id the body carries (run after the model's validation, so the types are right)."""
    _check_id(raw["threadId"], "threadId", path_segment=True)
    _check_id(raw["runId"], "runId", path_segment=True)
    if raw.get("parentRunId") is not None:
        _check_id(raw["parentRunId"], "parentRunId", path_segment=True)
    for index, message in enumerate(raw["messages"]):
        _check_id(message.get("id"), f"messages.{index}.id")
        if "toolCallId" in message:
            _check_id(message["toolCallId"], f"messages.{index}.toolCallId")
        for call_index, call in enumerate(message.get("toolCalls") or []):
            _check_id(call.get("id"), f"messages.{index}.toolCalls.{call_index}.id")
            _check_arguments(call.get("function"), f"messages.{index}.toolCalls.{call_index}.function.arguments")
    for index, entry in enumerate(raw.get("resume") or []):
        _check_id(entry.get("interruptId"), f"resume.{index}.interruptId")


def _check_protocol_version(version: str | None) -> None:
    if version is not None and len(version) > MAX_PROTOCOL_VERSION_LENGTH:
        raise InputError(
            f"protocolVersion is longer than {MAX_PROTOCOL_VERSION_LENGTH} characters (this server speaks 1.0)",
            "protocolVersion",
        )


def _check_arguments(function: Any, field: str) -> None:
    """A tool call's arguments are JSON in a string; whoever parses them (the model's API, a page
    replaying the transcript) meets the encoder's limit, so they obey the depth limit too."""
    arguments = function.get("arguments") if isinstance(function, dict) else None
    if not isinstance(arguments, str) or not arguments.lstrip().startswith(("{", "[")):
        return
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError as exc:
        if "depth" not in str(exc):
            return  # not JSON: the model is told so, as with any malformed arguments
        parsed = None
    if parsed is None or deeper_than(parsed, MAX_JSON_DEPTH) is not None:
        raise InputError(f"{field} is nested more than {MAX_JSON_DEPTH} levels deep", field)


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
        _check_id(raw[name], name, path_segment=True)
    if not isinstance(raw["messages"], list):
        raise InputError("messages must be an array of messages", "messages")
    _check_depth_and_nul(raw)
    candidate = {**raw, "messages": _normalise_messages(raw["messages"])}
    try:
        model = RunAgentInput.model_validate(candidate)
    except ValidationError as exc:
        error = exc.errors()[0]
        path = _field_path(tuple(error["loc"]))
        for snake, camel in _CAMEL.items():
            path = path.replace(snake, camel)
        raise InputError(f"{path}: {error['msg']}", path) from None
    _check_ids(raw)
    _check_protocol_version(model.protocol_version)
    ids = [m.id for m in model.messages]
    if len(set(ids)) != len(ids):
        raise InputError("messages: two messages share an id", "messages")
    return DecodedInput(model=model, raw=raw, owner_id=owner_id)

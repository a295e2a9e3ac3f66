"""Messages that join a run in flight.

A user message sent while a run works on its thread is stored at once; the run
reads it at its next tool boundary, after the calls' results and before the
next model call, so it never lands inside a turn. ``join_queued`` is the one
place that decides how it is put into the conversation; the store applies the
same function when it saves the turns, so what the model sees and what is
stored agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from orchestrator.events import RunListener


@dataclass(slots=True, frozen=True)
class Queued:
    """A message read into the run: who sent it, a line that names it, and what the model reads."""

    request_id: str  # the runId of the request that carried it
    display: str  # a preview for listeners, not the body
    content: str | list[dict[str, Any]]
    announced: bool = False  # the run's listeners already heard on_message_queued for it


def _blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def join_queued(turn: dict[str, Any], queued: list[Queued]) -> dict[str, Any]:
    """The user turn ``turn`` (a call's results, or the run's first message) with the queued
    messages after what it holds: results stay first, as the model's API requires."""
    assert turn["role"] == "user", "queued messages join a user turn"
    blocks = _blocks(turn["content"])
    for message in queued:
        blocks.extend(_blocks(message.content))
    return {**turn, "content": blocks}


class Inbox(Protocol):
    """Where messages queued on the run's thread wait for it."""

    async def take(self, turns: list[dict[str, Any]]) -> list[Queued]:
        """Takes every message queued so far. In one transaction it joins them to the last
        turn (``join_queued``), saves those turns and appends the messages to the transcript;
        it returns them in the order they were sent, or [] when there are none."""
        ...


async def read_inbox(inbox: Inbox | None, turns: list[dict[str, Any]], listener: RunListener) -> None:
    """The tool boundary: messages sent while the run was in flight join its last user turn, after
    the results, before the next model call, so they never land inside a turn."""
    if inbox is None:
        return
    queued = await inbox.take(turns)
    if not queued:
        return
    for message in queued:
        if not message.announced:
            listener.on_message_queued(message.request_id, message.display)
    turns[-1] = join_queued(turns[-1], queued)
    listener.on_queued_message_read([message.request_id for message in queued])

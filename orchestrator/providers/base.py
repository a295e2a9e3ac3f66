"""The contract between the loop and a model provider.

A provider streams one model call as ``StreamEvent`` values (or lists of them) and ends with a
``ModelReply`` holding the complete assistant turn (Anthropic content-block
shape, which is what the session stores). A provider may report tool calls only
in the reply, without streaming them; the loop reconstructs what the stream
omitted.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

BlockKind = Literal["text", "thinking", "redacted_thinking", "tool_use"]


@dataclass(slots=True, frozen=True)
class ModelRequest:
    model: str
    system: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_tokens: int
    thinking_budget: int = 0
    # Whether the conversation is marked for the prompt cache (orchestrator/providers/caching.py):
    # not for a one-off request nothing will ever extend (a compaction's summary).
    cache_conversation: bool = True


@dataclass(slots=True, frozen=True)
class BlockStart:
    index: int
    kind: BlockKind
    tool_use_id: str = ""
    tool_name: str = ""


# A block's streamed pieces are kept in a list and joined into one string whenever the list
# grows past this: a one-token piece costs a 50-byte str and a list slot, so a 200,000-token
# reply held 12 MiB of them until it ended (bench/stream.py --growth).
JOIN_PIECES_PAST = 4096


# Not frozen, like the run's per-token events (orchestrator/events.py): one is made per streamed token.
@dataclass(slots=True)
class BlockDelta:
    index: int
    text: str  # text, thinking, or a fragment of a tool call's JSON arguments


@dataclass(slots=True, frozen=True)
class BlockStop:
    index: int


@dataclass(slots=True)
class TokenCount:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(slots=True)
class ModelReply:
    content: list[dict[str, Any]]
    stop_reason: str | None
    usage: TokenCount = field(default_factory=TokenCount)
    model: str = ""


StreamEvent = BlockStart | BlockDelta | BlockStop


class ModelError(Exception):
    """A model call that failed. ``retryable`` says whether the same call may be tried again."""

    def __init__(self, message: str, *, retryable: bool, code: str = "model_error") -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.code = code


@dataclass(slots=True, frozen=True)
class ModelInfo:
    id: str
    name: str
    provider: str
    context_window: int
    offline_demo: bool = False


class ModelProvider(Protocol):
    info: ModelInfo

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent | list[StreamEvent] | ModelReply, None]:
        """Streams one model call. The last item is the ModelReply; raises ModelError on failure.
        What arrived together (one network read) may come as a list, in order: the loop takes its
        events one by one, without a generator step for each."""
        ...


def context_window_for(model: str) -> int:
    """The context window of a Claude model, in tokens (every current model has 200k)."""
    return 200_000

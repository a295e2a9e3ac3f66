"""The Anthropic provider: streaming Messages with tools, thinking and prompt caching.

Three stream failures the SDK neither retries nor always raises for (DESIGN.md §4):
an ``error`` event inside a 200 stream (APIStatusError with status 200), a stream
that ends without ``message_stop`` (nothing raised, stop_reason None) and a
dropped connection (httpx2.RemoteProtocolError). Each becomes a ModelError the
loop can retry while nothing of the reply has been shown.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx2

from agents.providers.base import (
    BlockDelta,
    BlockStart,
    BlockStop,
    ModelError,
    ModelInfo,
    ModelReply,
    ModelRequest,
    StreamEvent,
    TokenCount,
    context_window_for,
)

_RETRYABLE_TYPES = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}


class AnthropicProvider:
    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        base_url: str = "",
        max_retries: int = 2,
        timeout: float = 600.0,
    ) -> None:
        self.client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url or None, max_retries=max_retries, timeout=timeout
        )
        self.info = ModelInfo(id=model, name=model, provider="anthropic", context_window=context_window_for(model))

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": request.messages,
        }
        if request.system:
            # Cached: the system prompt and tool definitions are the stable prefix of every call.
            params["system"] = [{"type": "text", "text": request.system, "cache_control": {"type": "ephemeral"}}]
        if request.tools:
            tools = [dict(tool) for tool in request.tools]
            tools[-1]["cache_control"] = {"type": "ephemeral"}
            params["tools"] = tools
        if request.thinking_budget:
            params["thinking"] = {"type": "enabled", "budget_tokens": request.thinking_budget}
            params["max_tokens"] = max(request.max_tokens, request.thinking_budget + 1024)
        return params

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent | ModelReply]:
        try:
            async for item in self._stream(request):
                yield item
        except anthropic.APIStatusError as exc:
            error_type = exc.type or ""
            retryable = exc.status_code == 200 and error_type in _RETRYABLE_TYPES
            if exc.status_code in (408, 409, 429) or exc.status_code >= 500:
                retryable = True  # already retried by the SDK; the loop may try again later
            raise ModelError(
                f"model API error {exc.status_code} {error_type}: {exc.api_message or exc.message}".strip(),
                retryable=retryable,
                code=error_type or f"http_{exc.status_code}",
            ) from exc
        except anthropic.APIConnectionError as exc:
            raise ModelError(f"connection to the model API failed: {exc}", retryable=True, code="connection") from exc
        except httpx2.TransportError as exc:
            raise ModelError(
                f"connection to the model API dropped mid-stream: {type(exc).__name__}",
                retryable=True,
                code="connection",
            ) from exc

    async def _stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent | ModelReply]:
        blocks: dict[int, dict[str, Any]] = {}
        partial_json: dict[int, list[str]] = {}
        # Deltas are gathered and joined once per block: += on a long string is quadratic.
        chunks: dict[int, list[str]] = {}
        usage = TokenCount()
        stop_reason: str | None = None
        model = request.model
        stopped = False
        stream = await self.client.messages.create(**self._params(request), stream=True)
        async with stream:
            async for event in stream:
                kind = event.type
                if kind == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta":
                        chunks[event.index].append(delta.text)
                        yield BlockDelta(event.index, delta.text)
                    elif delta.type == "input_json_delta":
                        partial_json[event.index].append(delta.partial_json)
                        if delta.partial_json:
                            yield BlockDelta(event.index, delta.partial_json)
                    elif delta.type == "thinking_delta":
                        chunks[event.index].append(delta.thinking)
                        yield BlockDelta(event.index, delta.thinking)
                    elif delta.type == "signature_delta":
                        block = blocks[event.index]
                        block["signature"] = block.get("signature", "") + delta.signature
                elif kind == "content_block_start":
                    cb = event.content_block
                    chunks[event.index] = []
                    if cb.type == "text":
                        blocks[event.index] = {"type": "text", "text": cb.text}
                        yield BlockStart(event.index, "text")
                        if cb.text:
                            yield BlockDelta(event.index, cb.text)
                    elif cb.type == "thinking":
                        blocks[event.index] = {"type": "thinking", "thinking": cb.thinking, "signature": cb.signature}
                        yield BlockStart(event.index, "thinking")
                    elif cb.type == "redacted_thinking":
                        blocks[event.index] = {"type": "redacted_thinking", "data": cb.data}
                        yield BlockStart(event.index, "redacted_thinking")
                    elif cb.type == "tool_use":
                        blocks[event.index] = {"type": "tool_use", "id": cb.id, "name": cb.name, "input": cb.input}
                        partial_json[event.index] = []
                        yield BlockStart(event.index, "tool_use", tool_use_id=cb.id, tool_name=cb.name)
                    else:
                        blocks[event.index] = cb.model_dump(exclude_none=True)
                elif kind == "content_block_stop":
                    block = blocks[event.index]
                    if block["type"] == "text":
                        block["text"] += "".join(chunks[event.index])
                    elif block["type"] == "thinking":
                        block["thinking"] += "".join(chunks[event.index])
                    elif block["type"] == "tool_use":
                        text = "".join(partial_json[event.index])
                        if text:
                            try:
                                block["input"] = json.loads(text)
                            except json.JSONDecodeError as exc:
                                raise ModelError(
                                    f"the model sent malformed tool arguments: {exc}", retryable=True
                                ) from None
                        elif block["input"]:
                            # Arguments given whole at the start and never streamed.
                            yield BlockDelta(event.index, json.dumps(block["input"]))
                    yield BlockStop(event.index)
                elif kind == "message_start":
                    message = event.message
                    model = message.model or model
                    u = message.usage
                    usage.input_tokens = u.input_tokens or 0
                    usage.cache_read_tokens = u.cache_read_input_tokens or 0
                    usage.cache_write_tokens = u.cache_creation_input_tokens or 0
                    usage.output_tokens = u.output_tokens or 0
                elif kind == "message_delta":
                    stop_reason = event.delta.stop_reason
                    if event.usage.output_tokens is not None:
                        usage.output_tokens = event.usage.output_tokens
                    if event.usage.input_tokens:
                        usage.input_tokens = event.usage.input_tokens
                    if event.usage.cache_read_input_tokens:
                        usage.cache_read_tokens = event.usage.cache_read_input_tokens
                    if event.usage.cache_creation_input_tokens:
                        usage.cache_write_tokens = event.usage.cache_creation_input_tokens
                elif kind == "message_stop":
                    stopped = True
        if not stopped:
            raise ModelError("the model's stream ended before message_stop", retryable=True, code="early_end")
        content = [blocks[i] for i in sorted(blocks)]
        yield ModelReply(content=content, stop_reason=stop_reason, usage=usage, model=model)

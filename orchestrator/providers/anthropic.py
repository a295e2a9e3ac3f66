"""The Anthropic provider: streaming Messages with tools, thinking and prompt caching.

Three stream failures the SDK neither retries nor always raises for:
an ``error`` event inside a 200 stream, a stream that ends without
``message_stop`` (the SDK raises nothing) and a dropped connection
(httpx2.RemoteProtocolError, raised as APIConnectionError by newer SDK
releases). Each becomes a ModelError the loop can retry while
nothing of the reply has been shown. HTTP errors before the stream (429, 5xx,
529) are retried by the SDK itself.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import anthropic
import httpx2
import orjson

from orchestrator.providers.base import (
    JOIN_PIECES_PAST,
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
from orchestrator.providers.caching import mark_conversation
from orchestrator.providers.http1 import model_http_client
from orchestrator.providers.sse import SSESplitter

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
            api_key=api_key,
            base_url=base_url or None,
            max_retries=max_retries,
            timeout=timeout,
            http_client=model_http_client(anthropic.DefaultAsyncHttpxClient()),
        )
        self.info = ModelInfo(id=model, name=model, provider="anthropic", context_window=context_window_for(model))

    async def aclose(self) -> None:
        """Closes the HTTP client and its connections."""
        await self.client.close()

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": mark_conversation(request.messages) if request.cache_conversation else request.messages,
        }
        if request.system:
            # Cached: the system prompt and tool definitions are the stable prefix of every call; the
            # conversation's own two breakpoints make four, the API's limit.
            params["system"] = [{"type": "text", "text": request.system, "cache_control": {"type": "ephemeral"}}]
        if request.tools:
            tools = [dict(tool) for tool in request.tools]
            tools[-1]["cache_control"] = {"type": "ephemeral"}
            params["tools"] = tools
        if request.thinking_budget:
            params["thinking"] = {"type": "enabled", "budget_tokens": request.thinking_budget}
            params["max_tokens"] = max(request.max_tokens, request.thinking_budget + 1024)
        return params

    async def stream(self, request: ModelRequest) -> AsyncGenerator[list[StreamEvent] | ModelReply, None]:
        # The SDK builds the request, authenticates and retries HTTP failures;
        # the SSE framing is split by orchestrator/providers/sse.py (the SDK's decoder
        # was a third of the loop's time per token) and the events are read as
        # plain JSON (the SDK's typed event per token costs about 17 µs). One
        # generator, errors translated in it: each level of async generator
        # costs every token a step.
        try:
            blocks: dict[int, dict[str, Any]] = {}
            # Deltas are gathered and joined (once per block, and as they pile up): += on a long
            # string is quadratic.
            chunks: dict[int, list[str]] = {}
            usage = TokenCount()
            stop_reason: str | None = None
            model = request.model
            stopped = False
            params = self._params(request)
            splitter = SSESplitter()
            async with self.client.messages.with_streaming_response.create(**params, stream=True) as response:
                async for read in response.http_response.aiter_bytes():
                    batch = splitter.feed(read)
                    # What one read brought is handed over as one list: a generator step per token
                    # was a tenth of the SDK path's time per token (bench/stream.py --profile).
                    items: list[StreamEvent] = []
                    for kind, data in batch:
                        if kind == b"content_block_delta":
                            event = orjson.loads(data)
                            index = event["index"]
                            delta = event["delta"]
                            delta_type = delta["type"]
                            if delta_type == "text_delta":
                                text = delta["text"]
                            elif delta_type == "input_json_delta":
                                text = delta["partial_json"]
                            elif delta_type == "thinking_delta":
                                text = delta["thinking"]
                            elif delta_type == "signature_delta":
                                block = blocks[index]
                                block["signature"] = block.get("signature", "") + delta["signature"]
                                continue
                            else:
                                continue  # citations and future delta kinds carry no streamed text
                            pieces = chunks[index]
                            pieces.append(text)
                            if len(pieces) > JOIN_PIECES_PAST:
                                pieces[:] = ["".join(pieces)]
                            if text:
                                items.append(BlockDelta(index, text))
                        elif kind == b"content_block_start":
                            event = orjson.loads(data)
                            index = event["index"]
                            block = event["content_block"]
                            blocks[index] = block
                            chunks[index] = []
                            block_type = block["type"]
                            if block_type == "text":
                                items.append(BlockStart(index, "text"))
                                if block.get("text"):
                                    items.append(BlockDelta(index, block["text"]))
                            elif block_type in ("thinking", "redacted_thinking"):
                                items.append(BlockStart(index, block_type))
                            elif block_type == "tool_use":
                                items.append(
                                    BlockStart(index, "tool_use", tool_use_id=block["id"], tool_name=block["name"])
                                )
                        elif kind == b"content_block_stop":
                            index = orjson.loads(data)["index"]
                            block = blocks[index]
                            joined = "".join(chunks[index])
                            if block["type"] == "text":
                                block["text"] = block.get("text", "") + joined
                            elif block["type"] == "thinking":
                                block["thinking"] = block.get("thinking", "") + joined
                            elif block["type"] == "tool_use":
                                if joined:
                                    try:
                                        block["input"] = orjson.loads(joined)
                                    except orjson.JSONDecodeError as exc:
                                        if items:
                                            yield items  # what came before the failure was streamed
                                        raise ModelError(
                                            f"the model sent malformed tool arguments: {exc}", retryable=True
                                        ) from None
                                elif block.get("input"):
                                    # Arguments given whole at the start and never streamed.
                                    items.append(BlockDelta(index, orjson.dumps(block["input"]).decode()))
                            items.append(BlockStop(index))
                        elif kind == b"message_start":
                            message = orjson.loads(data)["message"]
                            model = message.get("model") or model
                            _add_usage(usage, message.get("usage") or {})
                        elif kind == b"message_delta":
                            event = orjson.loads(data)
                            stop_reason = event["delta"].get("stop_reason")
                            _add_usage(usage, event.get("usage") or {})
                        elif kind == b"message_stop":
                            stopped = True
                        elif kind == b"error":
                            error = orjson.loads(data).get("error") or {}
                            error_type = str(error.get("type") or "error")
                            if items:
                                yield items  # what came before the error was streamed
                            raise ModelError(
                                f"model API error in stream: {error_type}: {error.get('message', '')}".strip(),
                                retryable=error_type in _RETRYABLE_TYPES,
                                code=error_type,
                            )
                    if items:
                        yield items
            if not stopped:
                raise ModelError("the model's stream ended before message_stop", retryable=True, code="early_end")
            content = [blocks[i] for i in sorted(blocks)]
            yield ModelReply(content=content, stop_reason=stop_reason, usage=usage, model=model)
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


def _add_usage(usage: TokenCount, reported: dict[str, Any]) -> None:
    """Usage from message_start, then cumulative figures from message_delta: later values win."""
    if reported.get("input_tokens"):
        usage.input_tokens = reported["input_tokens"]
    if reported.get("output_tokens") is not None:
        usage.output_tokens = reported["output_tokens"]
    if reported.get("cache_read_input_tokens"):
        usage.cache_read_tokens = reported["cache_read_input_tokens"]
    if reported.get("cache_creation_input_tokens"):
        usage.cache_write_tokens = reported["cache_creation_input_tokens"]

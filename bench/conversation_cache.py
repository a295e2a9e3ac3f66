"""What caching the conversation saves (issue #48): a 20-call run, its prompts' cached share, its cost.

Usage: .venv/bin/python bench/conversation_cache.py [--calls 20] [--model claude-sonnet-4-5]

A real run of the loop (orchestrator/loop.py) with the real tools and the real ``anthropic`` SDK,
against the loopback fake of the Messages API (tests/fakes/anthropic_api/), which records every
request as the SDK sent it: the model reads one file of the workspace a call, 19 times, then answers.

The fake has no cache, so what a real one would give is computed from the recorded requests, as
the API documents its prompt cache:
- a request is its tool definitions, then its system blocks, then its messages' blocks, in order;
  a block's tokens are estimated as a quarter of the characters of its JSON (breakpoints left out);
- each block carrying ``cache_control`` is a breakpoint: the prefix up to it is written to the
  cache (when it is at least the model's minimum, 1,024 tokens) unless it is there already;
- a request reads the longest cached prefix ending at one of its breakpoints, or at one of the
  20 blocks before each breakpoint (the API's lookback); what lies between that point and its
  last breakpoint is a cache write, what follows the last breakpoint plain input.
The same requests are also priced with the conversation's breakpoints taken out (the system
prompt and the tools only, as Threadline marked them before #48): the run without conversation
caching. Prices are orchestrator/pricing.py's, the output tokens each reply's estimate.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from orchestrator.events import BaseListener, PauseReason, Usage  # noqa: E402
from orchestrator.loop import AgentLoop, LoopConfig  # noqa: E402
from orchestrator.pricing import cost_of  # noqa: E402
from orchestrator.providers.anthropic import AnthropicProvider  # noqa: E402
from orchestrator.providers.base import TokenCount  # noqa: E402
from orchestrator.request import RunRequest  # noqa: E402
from orchestrator.tools.base import ToolContext, ToolRegistry, Workspace  # noqa: E402
from orchestrator.tools.readonly import READ_ONLY_TOOLS  # noqa: E402
from tests.fakes.anthropic_api import FakeAnthropic, text_turn, tool_turn  # noqa: E402

MIN_CACHEABLE = 1024
LOOKBACK = 20
SYSTEM_PROMPT = (
    "You are a careful coding assistant working in a repository with tools. Read before you change; "
    "explain what you found. "
) * 40


class MemoryStore:
    """The conversation kept in memory (the loop's SessionStore without a database)."""

    def __init__(self) -> None:
        self.turns: list[dict[str, Any]] = []

    async def load_turns(self) -> list[dict[str, Any]]:
        return list(self.turns)

    async def commit(
        self, turns: list[dict[str, Any]], messages: list[Any], usage: TokenCount, *, reads: Any = None
    ) -> None:
        self.turns = list(turns)

    async def pause(self, reason: PauseReason) -> None:
        pass


def write_modules(root: str, count: int) -> None:
    for n in range(count):
        # About 2,400 tokens a file: a module of a small project.
        body = "".join(f"def handler_{n}_{i}(request):\n    return respond(request, {i})\n\n" for i in range(120))
        Path(root, f"module_{n}.py").write_text(body)


async def record_run(calls: int, model: str) -> list[dict[str, Any]]:
    """The request bodies of a run of ``calls`` model calls (calls - 1 file reads, then an answer)."""
    with tempfile.TemporaryDirectory() as root:
        write_modules(root, calls - 1)
        script = [tool_turn("file_read", {"path": f"module_{n}.py"}) for n in range(calls - 1)]
        script.append(text_turn(["Every module answers through respond()."]))
        with FakeAnthropic(script) as fake:
            provider = AnthropicProvider(api_key="sk-bench", model=model, base_url=fake.base_url, max_retries=0)
            loop = AgentLoop(
                provider=provider,
                tools=ToolRegistry.of(READ_ONLY_TOOLS),
                tool_context=ToolContext(Workspace(Path(root))),
                config=LoopConfig(model=model, system_prompt=SYSTEM_PROMPT, max_iterations=calls, stream_retries=0),
                store=MemoryStore(),
                listener=BaseListener(),
            )
            try:
                await loop.run(
                    RunRequest(request_id="r-bench", text="How do the modules answer?"),
                    run_id="r-bench",
                    thread_id="t-bench",
                )
            finally:
                await provider.aclose()
            return [request.body for request in fake.requests]


def _blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's blocks in the cache's order: tools, system, then each message's content."""
    blocks = [dict(tool) for tool in body.get("tools", [])]
    blocks += [dict(block) for block in body.get("system", [])]
    for message in body["messages"]:
        content = message["content"]
        items = [{"type": "text", "text": content}] if isinstance(content, str) else content
        blocks += [{"role": message["role"], **block} for block in items]
    return blocks


def _unmarked(block: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in block.items() if key != "cache_control"}


@dataclass(slots=True)
class Call:
    prompt: int
    read: int
    written: int
    fresh: int


def simulate(bodies: list[dict[str, Any]], *, conversation: bool) -> list[Call]:
    """What a prompt cache would have read and written for each request (see the module's docstring);
    ``conversation=False`` drops the breakpoints in the messages first."""
    cache: set[str] = set()
    calls: list[Call] = []
    for body in bodies:
        blocks = _blocks(body)
        marked = [i for i, block in enumerate(blocks) if "cache_control" in block]
        if not conversation:
            marked = [i for i in marked if "role" not in blocks[i]]
        sizes = [len(json.dumps(_unmarked(block))) // 4 for block in blocks]
        keys: list[str] = []
        digest = hashlib.sha256()
        for block in blocks:
            digest.update(json.dumps(_unmarked(block), sort_keys=True).encode())
            keys.append(digest.copy().hexdigest())
        ends = [sum(sizes[: i + 1]) for i in range(len(blocks))]
        read_to = -1
        for mark in marked:
            for i in range(mark, max(-1, mark - LOOKBACK - 1), -1):
                if keys[i] in cache:
                    read_to = max(read_to, i)
                    break
        last = marked[-1] if marked else -1
        read = ends[read_to] if read_to >= 0 else 0
        written = 0
        for mark in marked:
            if ends[mark] >= MIN_CACHEABLE:
                cache.add(keys[mark])
        if last > read_to and ends[last] >= MIN_CACHEABLE:
            written = ends[last] - read
        prompt = ends[-1]
        calls.append(Call(prompt=prompt, read=read, written=written, fresh=prompt - read - written))
    return calls


def cost(calls: list[Call], outputs: list[int], model: str) -> float:
    return sum(
        cost_of(
            Usage(
                model, input_tokens=c.fresh, output_tokens=out, cache_read_tokens=c.read, cache_write_tokens=c.written
            )
        )
        for c, out in zip(calls, outputs, strict=True)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--model", default="claude-sonnet-4-5")
    args = parser.parse_args()
    bodies = asyncio.run(record_run(args.calls, args.model))
    # Each reply is the next request's assistant turn; the last reply is the answer's few tokens.
    outputs = [len(json.dumps(body["messages"][-2]["content"])) // 4 for body in bodies[1:]] + [12]
    cached = simulate(bodies, conversation=True)
    plain = simulate(bodies, conversation=False)
    print(f"{len(bodies)} model calls, {args.model}; tokens estimated at four characters a token")
    print(
        f"{'call':>4} {'prompt':>8} {'cached prefix':>14} {'share':>6} {'written':>8} {'fresh':>6}"
        f"   {'share without':>13}"
    )
    for n, (c, p) in enumerate(zip(cached, plain, strict=True), 1):
        print(
            f"{n:>4} {c.prompt:>8} {c.read:>14} {c.read / c.prompt:>6.0%} {c.written:>8} {c.fresh:>6}"
            f"   {p.read / p.prompt:>13.0%}"
        )
    with_caching, without = cost(cached, outputs, args.model), cost(plain, outputs, args.model)
    total = sum(c.prompt for c in cached)
    print(
        f"prompt tokens in all: {total}; read from the cache: {sum(c.read for c in cached)} with conversation "
        f"caching, {sum(p.read for p in plain)} without"
    )
    print(
        f"cost of the run: ${with_caching:.4f} with conversation caching, ${without:.4f} without "
        f"({1 - with_caching / without:.0%} less)"
    )


if __name__ == "__main__":
    main()

"""Generated RunAgentInput bodies, good and bad, and a runner that fires them at a server and
counts what matters: answers >= 500, SSE streams that end without RUN_FINISHED/RUN_ERROR, and
threads left busy afterwards. Used by tests/agui/test_fuzz_input.py and bench/reliability.py."""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
from hypothesis import strategies as st

from tests.sse import parse_frames

TERMINAL = ("RUN_FINISHED", "RUN_ERROR")
THREAD_POOL = [f"t-fuzz-{i}" for i in range(12)]
# Words that make the demo model ask for an approval or delegate: a thread waiting for a person is
# not "busy" by mistake, so the fuzz keeps to runs that end by themselves.
_TRIGGERS = re.compile(r"plan|todo|delegate|sub-?agent", re.I)


def deep_list(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


def deep_dict(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = {"k": value}
    return value


_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
deep_values = st.builds(
    lambda n, as_list: deep_list(n) if as_list else deep_dict(n), st.integers(100, 600), st.booleans()
)
nul_text = st.text(max_size=10).map(lambda s: s + "\x00" + s)
odd_values = st.one_of(json_values, deep_values, nul_text, st.just({"k\x00": 1}))


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any], *, odds: int = 6) -> st.SearchStrategy[Any]:
    """``good`` about ``odds`` times out of ``odds + 1``: most bodies should get far enough to run.
    (``one_of`` with a strategy repeated does not weight it: hypothesis draws each branch alike.)"""
    return st.integers(0, odds).flatmap(lambda i: bad if i == odds else good)


chat_text = st.text(max_size=40).filter(lambda s: not _TRIGGERS.search(s)) | st.sampled_from(["hi", "what is this?"])

good_ids = st.uuids().map(str) | st.from_regex(r"[A-Za-z0-9_-]{1,24}", fullmatch=True)
bad_ids = st.one_of(
    st.integers(10, 100).map(lambda n: "i" * (190 + n)),  # long
    nul_text,
    st.sampled_from(["", " ", "a\nb", "a/b", "\u0007x", " lead", "x" * 201]),
    st.integers(),
    st.none(),
    st.lists(st.integers(), max_size=2),
)
any_id = mostly(good_ids, bad_ids, odds=12)
thread_ids = mostly(st.sampled_from(THREAD_POOL), good_ids | bad_ids, odds=8)


def _user(draw_id: Any, content: Any) -> dict[str, Any]:
    return {"id": draw_id, "role": "user", "content": content}


user_messages = st.builds(
    _user,
    any_id,
    mostly(
        chat_text | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": chat_text}), max_size=2),
        st.one_of(
            odd_values,
            st.just([{"type": "binary", "mimeType": "image/png", "data": "aGk="}]),
            st.just([{"type": "binary"}]),
        ),
    ),
)
tool_calls = st.fixed_dictionaries(
    {
        "id": any_id,
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {
                "name": st.sampled_from(["glob", "file_read", "client_tool", "x" * 300]),
                "arguments": st.one_of(
                    st.just("{}"), st.builds(lambda n: json.dumps(deep_list(n)), st.integers(100, 600)), st.text()
                ),
            }
        ),
    }
)
assistant_messages = st.fixed_dictionaries(
    {"id": any_id, "role": st.just("assistant")},
    optional={"content": chat_text, "toolCalls": st.lists(tool_calls, max_size=2)},
)
tool_messages = st.fixed_dictionaries(
    {"id": any_id, "role": st.just("tool"), "toolCallId": any_id, "content": mostly(chat_text, odd_values)}
)
other_messages = st.one_of(
    st.fixed_dictionaries({"id": any_id, "role": st.sampled_from(["system", "developer"]), "content": chat_text}),
    st.fixed_dictionaries({"id": any_id, "role": st.sampled_from(["wizard", 5]), "content": chat_text}),
    odd_values,
)
messages = mostly(
    st.lists(user_messages, min_size=1, max_size=2),
    st.one_of(
        st.lists(st.one_of(user_messages, assistant_messages, tool_messages, other_messages), max_size=4),
        st.builds(lambda a, t: [a, t], assistant_messages, tool_messages),  # an answer to an unknown call
        odd_values,
    ),
    odds=3,
)
resume_entries = st.lists(
    st.fixed_dictionaries(
        {"interruptId": any_id, "status": st.sampled_from(["resolved", "cancelled", "maybe"])},
        optional={"payload": mostly(json_values, odd_values)},
    ),
    max_size=2,
)
tools = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["client_tool", "glob", "t"]), "description": chat_text},
        optional={"parameters": mostly(st.just({"type": "object"}), odd_values)},
    ),
    max_size=2,
)
context = st.lists(
    st.fixed_dictionaries({"description": chat_text, "value": mostly(chat_text, odd_values)}), max_size=2
)

_body = st.fixed_dictionaries(
    {"threadId": thread_ids, "runId": mostly(st.uuids().map(str), any_id), "messages": messages},
    optional={
        "state": mostly(json_values, odd_values),
        "forwardedProps": mostly(json_values, odd_values),
        "context": context,
        "resume": resume_entries,
        "tools": tools,
        "protocolVersion": mostly(st.just("1.0"), st.sampled_from(["0.9", 1])),
        "parentRunId": any_id,
        "surprise": json_values,
    },
)
bodies = mostly(
    _body,
    st.one_of(
        st.builds(
            lambda b, key: {k: v for k, v in b.items() if k != key}, _body, st.sampled_from(["threadId", "runId"])
        ),
        odd_values.map(lambda v: v if not isinstance(v, dict) else [v]),  # not an object at all
    ),
    odds=16,
)


def encode(body: Any) -> bytes:
    """json, not orjson: bodies may be nested deeper than orjson writes."""
    return json.dumps(body).encode()


@dataclass
class Figures:
    sent: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: list[bytes] = field(default_factory=list)  # bodies answered >= 500
    unterminated: list[bytes] = field(default_factory=list)  # bodies whose stream had no terminal event
    streams: int = 0
    busy_threads: list[str] = field(default_factory=list)
    thread_ids: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def line(self) -> str:
        return (
            f"{self.sent} bodies: {dict(sorted(self.statuses.items()))}; {self.streams} streams; "
            f">=500: {len(self.server_errors)}; streams without a terminal event: {len(self.unterminated)}; "
            f"threads left busy: {len(self.busy_threads)}"
        )


def fire(client: httpx.Client, url: str, body: Any, figures: Figures) -> None:
    raw = encode(body)
    status, terminal, is_stream = 0, False, False
    try:
        with client.stream("POST", f"{url}/agui/coder", content=raw) as response:
            status = response.status_code
            data = response.read()
        is_stream = response.headers.get("content-type", "").startswith("text/event-stream")
        if is_stream:
            frames, _ = parse_frames(data)
            terminal = bool(frames) and frames[-1].event["type"] in TERMINAL
    except httpx.HTTPError:
        is_stream = status == 200  # a stream that stalled (read timeout) or broke
    with figures.lock:
        figures.sent += 1
        figures.statuses[status] += 1
        if status >= 500 or status == 0:
            figures.server_errors.append(raw)
        if is_stream:
            figures.streams += 1
            if isinstance(body, dict) and isinstance(body.get("threadId"), str):
                figures.thread_ids.add(body["threadId"])
            if not terminal:
                figures.unterminated.append(raw)


def fire_all(url: str, token: str, batch: list[Any], figures: Figures, *, workers: int = 6) -> None:
    """Sends the batch over ``workers`` connections at once (so bodies on one thread race)."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def share(part: list[Any]) -> None:
        # Heartbeats are off in the servers under test, so a read timeout means a stalled stream.
        with httpx.Client(headers=headers, timeout=httpx.Timeout(20.0)) as client:
            for body in part:
                fire(client, url, body, figures)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(share, [batch[i::workers] for i in range(workers)]))


def check_threads_free(url: str, token: str, figures: Figures) -> None:
    """Each pool thread the fuzz touched takes a new message and finishes: none was left busy."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for thread_id in sorted(figures.thread_ids & set(THREAD_POOL)):
        body = {
            "threadId": thread_id,
            "runId": f"after-{uuid.uuid4()}",
            "messages": [{"id": f"m-{uuid.uuid4()}", "role": "user", "content": "are you free?"}],
        }
        try:
            response = httpx.post(f"{url}/agui/coder", content=encode(body), headers=headers, timeout=60)
        except httpx.HTTPError as exc:  # a stream that stalled: the thread is stuck, say which
            figures.busy_threads.append(f"{thread_id}: no answer ({type(exc).__name__})")
            continue
        frames = parse_frames(response.content)[0] if response.status_code == 200 else []
        last = frames[-1].event if frames else {}
        if last.get("type") != "RUN_FINISHED":
            figures.busy_threads.append(f"{thread_id}: {response.status_code} {last or response.text[:200]}")

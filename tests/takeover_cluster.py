"""The drain tests' two-process cluster (tests/cluster.py, bash allowed) and how their clients read a
run, are cut off from it and reattach to it (issue #45)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.cluster import Cluster, started_cluster
from tests.helpers import run_input, user, v1
from tests.procs import ServerProcess
from tests.sse import get_stream, parse_frames

VERSIONS = ["1", "0"]


@pytest.fixture(scope="module")
def _cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two server processes for the module, bash allowed (tests/runhost/conftest.py's ``cluster``
    gives each test them alive, with an empty workspace and a fresh script)."""
    yield from started_cluster(tmp_path_factory, "drain", AGENT_MUTATING_TOOLS="on")


def run_body(version: str, thread_id: str) -> bytes:
    run = run_input(thread_id, "r1", user("go", "u1"))
    return orjson.dumps(v1(run) if version == "1" else run)


def seen_until_killed(cluster: Cluster, server: ServerProcess, version: str, thread_id: str, *, until: Any) -> bytes:
    """Starts the run on ``server``, reads its stream until ``until(seen)`` holds at a frame's end,
    lets the log catch up (EVENT_LOG_MAX_DELAY_SECONDS), and kills the process with SIGKILL. Returns
    what the client was sent."""
    seen = b""
    headers = {**server.headers, "Content-Type": "application/json"}
    with httpx.stream(
        "POST", f"{server.url}/agui/coder", content=run_body(version, thread_id), headers=headers, timeout=30
    ) as response:
        assert response.status_code == 200
        for chunk in response.iter_bytes():
            seen += chunk
            if seen.endswith(b"\n\n") and until(seen):
                break
        time.sleep(1.0)
        server.kill()
    return seen


def reattached(cluster: Cluster, server: ServerProcess, thread_id: str, seen: bytes) -> bytes:
    """The client reattaches to the run on ``server`` from the last event it was sent."""
    frames, _ = parse_frames(seen)
    last_id = frames[-1].id
    assert last_id is not None
    stream = get_stream(
        f"{server.url}/agui/coder/threads/{thread_id}/runs/r1/events",
        token=server.token,
        headers={"Last-Event-ID": str(last_id)},
        timeout=60,
    )
    assert stream.status == 200
    assert all(frame.id is not None and frame.id > last_id for frame in stream.frames)
    return stream.body


def events_of(body: bytes) -> list[dict[str, Any]]:
    return [frame.event for frame in parse_frames(body)[0]]


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def _complete(body: bytes) -> bytes:
    """``body`` up to its last whole frame (a connection cut mid-frame leaves a piece)."""
    end = body.rfind(b"\n\n")
    return body[: end + 2] if end >= 0 else b""


def _ended(body: bytes) -> bool:
    frames = parse_frames(body)[0]
    return bool(frames) and frames[-1].event["type"] in ("RUN_FINISHED", "RUN_ERROR")


def follow_run(
    url: str | Callable[[], str], token: str, version: str, thread_id: str, text: str, *, seconds: float = 240
) -> bytes:
    """A client that sends one message and follows its run to its end, as a browser would through a
    deploy or a crash: it reattaches with Last-Event-ID whenever its stream ends without a terminal
    event (its process drained or died) or the connection fails, and sends a refused message (503)
    again after its Retry-After. ``url``: the server, or a function that picks one for each request
    (a load balancer). A message whose process died before its run was stored (the reattach finds no
    run) is sent again, and what the client was shown of it is dropped. Returns every frame it was
    sent, in order."""
    body = orjson.dumps(
        v1(run_input(thread_id, "r1", user(text, "u1")))
        if version == "1"
        else run_input(thread_id, "r1", user(text, "u1"))
    )
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    seen, sent = b"", False
    deadline = time.monotonic() + seconds
    while not _ended(seen):
        assert time.monotonic() < deadline, f"{thread_id} did not end:\n{seen.decode()[-2000:]}"
        base = url() if callable(url) else url
        frames = parse_frames(seen)[0]
        if sent:
            method, target, content = "GET", f"{base}/agui/coder/threads/{thread_id}/runs/r1/events", None
            extra = {"Last-Event-ID": str(frames[-1].id)} if frames else {}
        else:
            method, target, content, extra = "POST", f"{base}/agui/coder", body, {}
        try:
            with httpx.stream(method, target, content=content, headers={**headers, **extra}, timeout=60) as response:
                if response.status_code == 503:
                    time.sleep(float(response.headers.get("Retry-After", "1")))
                    continue
                if response.status_code == 404 and method == "GET":
                    seen, sent = b"", False  # never stored: send it again
                    continue
                assert response.status_code == 200, (response.status_code, response.read())
                sent = True
                for chunk in response.iter_bytes():
                    seen += chunk
        except httpx.HTTPError:
            time.sleep(0.2)  # the process went away: reattach to another
        seen = _complete(seen)
    return seen

"""Reattach from every position of a framed event log (issue #27): the log stores a frame per flush,
and a reattach with any Last-Event-ID, mid-frame or on a frame's edge, gets exactly the events after
it, on the process that ran the run and on another one (PostgreSQL and Redis)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.fakes.anthropic_api import split_tokens, text_turn
from tests.helpers import run_input, user, v1
from tests.procs import ServerProcess, server_pair
from tests.sse import get_stream, post_run

pytestmark = pytest.mark.services


def _replays_from_every_position(server: ServerProcess, thread_id: str, streamed: list[tuple[int, bytes]]) -> None:
    for after in range(len(streamed) + 1):
        replay = get_stream(
            f"{server.url}/agui/coder/threads/{thread_id}/events",
            token=server.token,
            headers={"Last-Event-ID": str(after)},
        )
        assert replay.status == 200, replay.body
        assert [(f.id, f.raw) for f in replay.frames] == streamed[after:], f"after {after} on {server.url}"


def test_a_framed_log_replays_exactly_from_every_position_on_both_processes(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    # Frames of a few events, so positions fall inside frames and on their edges: the model's
    # tokens come 30 ms apart and the log gathers for 10 ms (a fast reply all read at once is one frame).
    env = {
        "DATABASE_URL": postgres_url,
        "REDIS_URL": redis_url,
        "EVENT_LOG_FLUSH_SECONDS": "0.01",
        "EVENT_LOG_MAX_DELAY_SECONDS": "0.01",
    }
    with server_pair(tmp_path, env) as (fake, a, b):
        fake.script([text_turn(split_tokens("one two three four five six seven eight nine ten eleven")).paced(0.03)])
        stream = post_run(a.url, "coder", v1(run_input("t-framed", "r1", user("count"))), token=a.token)
        assert stream.status == 200 and stream.types[-1] == "RUN_FINISHED"
        streamed = [(f.id or 0, f.raw) for f in stream.frames]
        assert [seq for seq, _ in streamed] == list(range(1, len(streamed) + 1)) and len(streamed) > 15
        with psycopg.connect(postgres_url) as db:
            row = db.execute(
                "SELECT count(*), max(e.last_seq) FROM threads_eventframe e JOIN threads_run r ON r.id = e.run_id "
                "WHERE r.agui_run_id = 'r1'"
            ).fetchone()
        assert row is not None
        frames, last = row
        assert last == len(streamed) and 1 < frames < len(streamed)
        _replays_from_every_position(a, "t-framed", streamed)
        _replays_from_every_position(b, "t-framed", streamed)

"""The kill loop (issue #45, how it is proven): three ``manage.py serve`` processes on PostgreSQL and
Redis, runs of several model turns and bash calls, a random process SIGKILLed every few seconds and
started again (tests/kill_cluster.py). Every run ends RUN_FINISHED with its answer; every bash call
(each appends a line to its run's counter file) ran at most once; every client, reattaching to a random
live process whenever its stream broke, was sent one run the real ``@ag-ui/client`` 1.0.0 and 0.0.59
verifiers accept. ``bench/kill_loop_cluster.py`` runs it with 100 runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kill_cluster import answer, kill_loop
from tests.replayed import verified
from tests.sse import parse_frames

pytestmark = [pytest.mark.services, pytest.mark.clients]

RUNS, STEPS = 6, 8


def test_runs_survive_a_process_killed_every_few_seconds(tmp_path: Path, redis_url: str) -> None:
    result = kill_loop(tmp_path, runs=RUNS, steps=STEPS, every=2.0, clients=RUNS, pace=0.15)
    assert result.kills >= 2, result.kills
    for n, body in enumerate(result.streams):
        (tmp_path / f"stream-{n}.sse").write_bytes(body)  # for a failure's reader
        types = [frame.event["type"] for frame in parse_frames(body)[0]]
        assert types.count("RUN_STARTED") == 1 and types[-1] == "RUN_FINISHED", (n, types[-5:])
        client = verified("10"[n % 2], body, thread_id=f"t-kill-{n}", run_id="r1")
        assert client["error"] is None, (n, client["error"])
        answers = [m for m in client["messages"] if m["role"] == "assistant" and m.get("content")]
        assert answers[-1]["content"].endswith(answer(n)), (n, answers[-1])
        # Each bash call ran at most once (a call cut off by a kill may not have run at all), in order.
        lines = result.counters[n]
        assert len(lines) == len(set(lines)) and lines == sorted(lines, key=int), (n, lines)
        assert set(lines) <= {str(k) for k in range(STEPS)}, (n, lines)
    assert len(result.rows) == RUNS and {row[1] for row in result.rows} == {"succeeded"}, result.rows

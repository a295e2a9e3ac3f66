"""The kill loop of issue #45 at full size: three ``manage.py serve`` processes on PostgreSQL and Redis,
100 runs of several model turns and bash calls, a random process SIGKILLed every few seconds and
started again (tests/kill_cluster.py, which tests/runhost/test_kill_loop.py runs small). It prints how
many runs ended RUN_FINISHED with their answer, how many bash calls ran more than once (the side-effect
counter: each call appends its step to its run's counter file), how many clients' streams the real
``@ag-ui/client`` verifiers accepted, and the kills and takeovers it took.

    REQUIRE_SERVICES=1 .venv/bin/python bench/kill_loop_cluster.py [--runs 100] [--steps 5] [--every 3]

PostgreSQL at 127.0.0.1:5432 and Redis at 127.0.0.1:6379, as the tests use them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.kill_cluster import answer, kill_loop  # noqa: E402
from tests.replayed import verified  # noqa: E402
from tests.sse import parse_frames  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--steps", type=int, default=5, help="model turns with a bash call each, per run")
    parser.add_argument("--every", type=float, default=3.0, help="seconds between kills")
    parser.add_argument("--clients", type=int, default=25, help="runs followed at once")
    parser.add_argument("--pace", type=float, default=0.05, help="seconds between a model reply's events")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="threadline-kill-loop-") as tmp:
        result = kill_loop(
            Path(tmp),
            runs=args.runs,
            steps=args.steps,
            every=args.every,
            clients=args.clients,
            pace=args.pace,
            seed=args.seed,
        )
    finished = answered = accepted = twice = 0
    for n, body in enumerate(result.streams):
        types = [frame.event["type"] for frame in parse_frames(body)[0]]
        finished += types.count("RUN_STARTED") == 1 and types[-1] == "RUN_FINISHED"
        client = verified("10"[n % 2], body, thread_id=f"t-kill-{n}", run_id="r1")
        accepted += client["error"] is None
        texts = [m.get("content") or "" for m in client["messages"] if m["role"] == "assistant"]
        answered += bool(texts) and texts[-1].endswith(answer(n))
        lines = result.counters[n]
        twice += len(lines) - len(set(lines))
        if client["error"] is not None or types[-1] != "RUN_FINISHED":
            last = parse_frames(body)[0][-1].event
            print(f"  t-kill-{n}: ended {last.get('type')} {last.get('code', '')}; verifier: {client['error']}")
    takeovers = sum(row[2] for row in result.rows)
    crashes = sum(row[2] - row[3] for row in result.rows)
    calls = sum(len(lines) for lines in result.counters)
    print(f"{args.runs} runs of {args.steps} bash steps on 3 processes, a SIGKILL every {args.every:g} s")
    print(f"  kills:                      {result.kills} in {result.seconds:.0f} s")
    print(f"  runs RUN_FINISHED:          {finished} of {args.runs}")
    print(f"  with their answer:          {answered} of {args.runs}")
    print(f"  streams the verifiers pass: {accepted} of {args.runs} (1.0.0 and 0.0.59, alternately)")
    print(f"  runs' rows succeeded:       {sum(row[1] == 'succeeded' for row in result.rows)} of {len(result.rows)}")
    print(f"  takeovers:                  {takeovers} ({crashes} after a crash)")
    print(f"  bash calls run:             {calls} of {args.runs * args.steps}; run twice: {twice}")
    ok = finished == answered == accepted == args.runs and twice == 0
    print("  verdict:                    " + ("every run finished once, with its answer" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

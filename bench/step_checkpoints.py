"""What the step checkpoints of issue #45 cost on the streaming bench: the same scripted full stack
(bench/servers.py ``scripted``: Threadline with an in-process scripted model, its event log on) twice,
once as it is and once with each step committed without the run's checkpoint
(BENCH_NO_STEP_CHECKPOINTS, a switch of bench/servers.py's subprocess only), measured in the same run,
round after round, each server in turn (bench/measure.py: the events/s of one long reply, the time to
first byte of short ones, the aggregate events/s of many replies at once).

    .venv/bin/python bench/step_checkpoints.py [--tokens 20000] [--repeat 5] [--concurrent 50x2000]
    DATABASE_URL=postgresql://127.0.0.1:5432/postgres .venv/bin/python bench/step_checkpoints.py

A reply of the streaming bench is one model turn: its run commits two steps (the user's turn and the
model's), each with its checkpoint in the same round trip; the ratio is what a run of many steps pays
per step, spread over fewer events.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys

from measure import Target
from processes import Lab


async def run(args: argparse.Namespace, lab: Lab) -> None:
    targets = {
        "checkpoints on": Target(lab.start("scripted", tag="steps")),
        "checkpoints off": Target(lab.start("scripted", {"BENCH_NO_STEP_CHECKPOINTS": "1"}, tag="nosteps")),
    }
    for target in targets.values():
        await target.wait_ready()
        await target.warm_up(args.ttfb_tokens, 5)
    streams, tokens = (int(n) for n in args.concurrent.lower().split("x"))
    concurrent: dict[str, list[float]] = {name: [] for name in targets}
    for round_no in range(args.repeat):
        for name, target in targets.items():
            await target.measure_stream(args.tokens)
            await target.measure_ttfb(args.ttfb_tokens, args.ttfb_requests, 0.005)
            rate, failed = await target.measure_concurrent(streams, tokens)
            assert failed == 0, f"{failed} of {streams} replies failed on {name}"
            concurrent[name].append(rate)
        print(f"round {round_no + 1}/{args.repeat} done", flush=True)
    database = "PostgreSQL" if lab.database_url else "SQLite"
    print(f"\nStep checkpoints on the streaming bench ({database}, median of {args.repeat} rounds):")
    print(f"  {'':18} {'one reply ev/s':>15} {'TTFB ms':>9} {f'{streams} at once ev/s':>18}")
    figures = {}
    for name, target in targets.items():
        figures[name] = (
            statistics.median(target.rates),
            statistics.median(target.ttfb) * 1e3,
            statistics.median(concurrent[name]),
        )
        rate, ttfb, together = figures[name]
        print(f"  {name:18} {rate:15,.0f} {ttfb:9.2f} {together:18,.0f}")
    on, off = figures["checkpoints on"], figures["checkpoints off"]
    print(
        f"  on / off: one reply {on[0] / off[0]:.3f}x events/s, TTFB {on[1] / off[1]:.3f}x, "
        f"{streams} at once {on[2] / off[2]:.3f}x events/s"
    )
    for target in targets.values():
        target.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=20_000, help="tokens of the long reply")
    parser.add_argument("--ttfb-tokens", type=int, default=10)
    parser.add_argument("--ttfb-requests", type=int, default=30)
    parser.add_argument("--concurrent", default="50x2000", help="STREAMSxTOKENS replies at once")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    lab = Lab("uvicorn", "uvloop", keep=False, database_url=os.environ.get("DATABASE_URL", ""))
    try:
        asyncio.run(run(args, lab))
    finally:
        lab.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

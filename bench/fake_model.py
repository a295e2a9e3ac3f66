"""FakeAnthropic (tests/fakes/anthropic_api/) in a process of its own, scripted over stdin.

Prints its base URL on the first line of stdout, then reads commands, one a line,
and answers each with ``ok``:
  bench N [K]  queue K (default 1) benchmark_turn(N): one text block of N one-token deltas, pre-encoded
  text N K     queue K replies of N one-token deltas (text_turn)
  hold         queue a reply that stops after its first token until ``release`` (a run held in flight)
  release      lets the held replies go on
  quit         stop
Running it apart from the client keeps the fake's threads from taking the
client's CPU (and the GIL) while a stream is measured.
"""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tests.fakes.anthropic_api import FakeAnthropic, Turn, benchmark_turn, text_turn  # noqa: E402


def main() -> None:
    turns: dict[tuple[str, int], object] = {}
    held: list[Turn] = []
    with FakeAnthropic() as fake:
        print(fake.base_url, flush=True)
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] == "quit":
                break
            if words[0] == "bench":
                n = int(words[1])
                key = ("bench", n)
                if key not in turns:
                    turns[key] = benchmark_turn(n)
                fake.add_turn(turns[key], times=int(words[2]) if len(words) > 2 else 1)  # type: ignore[arg-type]
                print("ok", flush=True)
            elif words[0] == "text":
                n, times = int(words[1]), int(words[2])
                key = ("text", n)
                if key not in turns:
                    turns[key] = text_turn(["tok "] * n).prepare()
                fake.add_turn(turns[key], times=times)  # type: ignore[arg-type]
                print("ok", flush=True)
            elif words[0] == "hold":
                held.append(text_turn(["held ", "open"]).pause(after_events=4, timeout=3600))
                fake.add_turn(held[-1])
                print("ok", flush=True)
            elif words[0] == "release":
                for turn in held:
                    turn.resume.set()
                held.clear()
                print("ok", flush=True)
            else:
                print(f"error unknown command {words[0]!r}", flush=True)
        if fake.errors:
            print("fake errors: " + "; ".join(fake.errors), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()

"""Streaming benchmark: Threadline's full AG-UI stack against a bare ASGI app and a plain Django view.

    .venv/bin/python bench/stream.py            # or: make bench
    .venv/bin/python bench/stream.py --quick    # a fast smoke run
    .venv/bin/python bench/stream.py --profile py-spy   # and where the full stack's time goes

Four servers, each in its own subprocess on its own loopback port, all on the same
server software (uvicorn with uvloop and httptools; ``--server daphne`` for daphne):

  bare      baseline 1: a bare ASGI app writing pre-encoded SSE frames
  django    baseline 2: a plain Django async view, StreamingHttpResponse over an async
            generator, served by Django's standard ASGIHandler (bench/django_min.py)
  sdk       the full stack (fresh data dir, migrated SQLite, event log on) with the real
            anthropic SDK talking to tests/fakes/anthropic_api/ FakeAnthropic
  scripted  the full stack with an in-process scripted model (bench/servers.py swaps
            provider_for in the server subprocess only)

Beside them, for memory only: the Django view again with the anthropic SDK imported and a
client made (BENCH_SDK_FLOOR), the least the SDK path's process can weigh, and Threadline as
`make run` starts it (manage.py serve, the SDK path), whose RSS after its first reply is held
to 1.25x that floor.

The baselines send frames of the same shape and size as Threadline's (bench/frames.py),
and every stream yields to the event loop every 64 frames, as a network read would.
For each server the bench measures, in rounds, the events/s of one long reply and the
time to first byte (TTFB) of many short ones (bench/measure.py says exactly how), and
prints them with ratios against the Django view (bench/report.py). The targets (#27 item 4):
one long reply at least 0.84x the Django view's events/s on the SDK path and 0.95x on the
scripted one, TTFB at most 1.5x, and 100 replies at once at least 0.8x its aggregate
events/s; the run ends with each target's verdict.

Then the operators mode (--operators N, bench/operators.py): N replies at a model's pace on one
``manage.py serve`` process while the admin's thread list, /api/threads/ and /agui/info are
timed, against the same requests on the idle server.

The modules: httpclient.py (the timing client), processes.py (starting and stopping
the servers), measure.py, report.py, profiling.py (--profile); servers.py, django_min.py,
frames.py and fake_model.py run in the subprocesses. Nothing here needs the network;
every subprocess and the temporary directory are removed at exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
from pathlib import Path
from typing import Any

from httpclient import CLOCK
from measure import Target
from openstreams import measure_open_streams, open_streams_report
from operators import measure_operators, operators_report
from processes import ALL_SERVERS, FULL_STACK, LABELS, Lab
from profiling import find_py_spy, profile
from report import TARGET_CONCURRENT, concurrent_verdicts, report, speed_summary


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=20_000, help="tokens (text deltas) of the long reply")
    parser.add_argument("--ttfb-tokens", type=int, default=10, help="tokens of the short reply timed for TTFB")
    parser.add_argument("--ttfb-requests", type=int, default=30, help="TTFB requests per round")
    parser.add_argument(
        "--ttfb-gap",
        type=float,
        default=0.005,
        help="idle seconds before each TTFB request, so the previous request's clean-up "
        "(Django's per-request thread) is not what is measured",
    )
    parser.add_argument(
        "--no-settle",
        action="store_true",
        help="do not wait for each Threadline run to be recorded before the next request "
        "(TTFB then includes contention with the previous run's log write)",
    )
    parser.add_argument("--warmup", type=int, default=5, help="warm-up requests per server")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; each measures every server once")
    parser.add_argument("--stat", choices=["median", "best"], default="median", help="how rounds combine (events/s)")
    parser.add_argument("--server", choices=["uvicorn", "daphne"], default="uvicorn")
    parser.add_argument(
        "--loop",
        choices=["uvloop", "asyncio"],
        default="uvloop",
        help="uvicorn's event loop (uvloop is what the targets are measured on)",
    )
    parser.add_argument(
        "--only", default=",".join(ALL_SERVERS), help="comma-separated subset of " + ",".join(ALL_SERVERS)
    )
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (fewer tokens, requests and rounds)")
    parser.add_argument(
        "--profile",
        choices=["py-spy", "cprofile"],
        help="after the table, profile each full-stack server while it streams long replies (see bench/profiling.py)",
    )
    parser.add_argument("--profile-streams", type=int, default=5, help="long replies streamed while profiling")
    parser.add_argument(
        "--profile-concurrent",
        metavar="STREAMSxTOKENS",
        default="",
        help="with --profile: profile this many replies at once (e.g. 100x2000) instead of long replies one by one",
    )
    parser.add_argument(
        "--streams",
        type=int,
        default=10_000,
        help="open-streams mode: this many SSE streams held open at once on one scripted server (0: skip)",
    )
    parser.add_argument("--slow-runs", type=int, default=100, help="open-streams mode: slow runs the streams follow")
    parser.add_argument("--slow-ms", type=int, default=1000, help="open-streams mode: ms between a slow run's tokens")
    parser.add_argument(
        "--growth",
        default="2000,20000,200000",
        help="growth mode: reply sizes (tokens) streamed once each, ascending, for events/s and peak RSS ('': skip)",
    )
    parser.add_argument(
        "--concurrent",
        default="100x2000",
        help="concurrent mode: STREAMSxTOKENS replies at once, aggregate events/s ('': skip)",
    )
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="concurrent mode: print when each round's streams got their first text and their last byte",
    )
    parser.add_argument(
        "--operators",
        type=int,
        default=500,
        help="operators mode: this many replies at a model's pace on one manage.py serve process while the "
        "admin, the API and /agui/info are timed (bench/operators.py; 0: skip)",
    )
    parser.add_argument("--pace-ms", type=int, default=25, help="operators mode: ms between a reply's tokens")
    parser.add_argument("--operators-seconds", type=float, default=20.0, help="operators mode: seconds measured")
    parser.add_argument(
        "--operators-profile", action="store_true", help="operators mode: py-spy samples the server while measured"
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--check", action="store_true", help="exit with status 1 when a target is missed")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, databases)")
    args = parser.parse_args(argv)
    if args.quick:
        args.tokens = min(args.tokens, 5_000)
        args.ttfb_requests = min(args.ttfb_requests, 10)
        args.warmup = min(args.warmup, 3)
        args.repeat = 1
        args.profile_streams = min(args.profile_streams, 2)
        args.streams = min(args.streams, 1000)
        args.growth = "2000,20000"
        args.concurrent = "20x2000"
        args.slow_runs = min(args.slow_runs, 10)
        args.operators = min(args.operators, 100)
        args.operators_seconds = min(args.operators_seconds, 5.0)
    if min(args.tokens, args.ttfb_tokens, args.ttfb_requests, args.repeat, args.profile_streams) < 1:
        parser.error("--tokens, --ttfb-tokens, --ttfb-requests, --repeat and --profile-streams must be at least 1")
    args.only = [n.strip() for n in args.only.split(",") if n.strip() and n.strip() != "none"]
    args.growth = sorted(int(n) for n in args.growth.split(",") if n.strip())
    unknown = set(args.only) - set(ALL_SERVERS)
    if unknown:
        parser.error(f"unknown server(s) in --only: {', '.join(sorted(unknown))}")
    if args.profile == "py-spy" and not find_py_spy():
        parser.error("py-spy not found: make install-test puts it in the venv (or set PY_SPY), or use cprofile")
    return args


async def run(args: argparse.Namespace, lab: Lab) -> int:
    t_start = CLOCK()
    names = [n for n in ALL_SERVERS if n in args.only]
    suffix = "txt" if args.profile == "py-spy" else "pstats"
    profile_out = {name: lab.tmp / f"profile-{name}.{suffix}" for name in names}
    # All servers start at once (each imports its app in parallel), then each is waited for.
    targets = {}
    for name in names:
        # With --profile cprofile the full stack has its profiler switch (servers.py) from the start,
        # so the server profiled is the one measured.
        env = {"BENCH_PROFILE": str(profile_out[name])} if args.profile == "cprofile" and name in FULL_STACK else {}
        targets[name] = Target(lab.start(name, env), settle=not args.no_settle)
    # The memory figure: Threadline as `make run` starts it (manage.py serve, the SDK path), against
    # its floor, the Django view with the SDK imported and a client made; each after its first reply.
    floor = served = None
    if "sdk" in targets and "django" in targets:
        floor = Target(lab.start("django", {"BENCH_SDK_FLOOR": "1"}, tag="sdk-floor"))
        served = Target(lab.start("sdk", tag="serve", serve=True))
    for target in targets.values():
        await target.wait_ready()
    database = "PostgreSQL" if lab.database_url else "SQLite"
    print(f"servers up in {CLOCK() - t_start:.1f}s ({args.server}, full stack on {database}); warming up", flush=True)
    for target in targets.values():
        await target.warm_up(args.ttfb_tokens, args.warmup)
    for memory_only in (floor, served):
        if memory_only is not None:
            await memory_only.wait_ready()
            await memory_only.warm_up(args.ttfb_tokens, 1)
            memory_only.close()
            memory_only.server.stop()

    # Round after round, each server in turn, so that a drift of the machine's speed
    # during the run touches every server alike.
    for round_no in range(args.repeat if targets else 0):
        for target in targets.values():
            await target.measure_stream(args.tokens)
            await target.measure_ttfb(args.ttfb_tokens, args.ttfb_requests, args.ttfb_gap)
        line = ", ".join(
            f"{t.name} {t.rates[-1]:,.0f}/s {statistics.median(t.ttfb[-args.ttfb_requests :]) * 1e3:.2f}ms"
            for t in targets.values()
        )
        print(f"round {round_no + 1}/{args.repeat}: {line}", flush=True)

    data: dict[str, Any] = {}
    if targets:
        memory = (floor.rss_first, served.rss_first) if floor and served else None
        text, data = report(targets, args, memory, database)
        print(text, flush=True)

    if args.profile:
        data["profile"] = {}
        for name in FULL_STACK:
            if name in targets:
                print(f"\nProfile of {LABELS[name]} ({args.profile}) while streaming:", flush=True)
                if args.profile_concurrent:
                    streams, tokens = (int(n) for n in args.profile_concurrent.lower().split("x"))
                    summary = await profile(
                        targets[name], args.profile, tokens, streams, profile_out[name], at_once=True
                    )
                else:
                    summary = await profile(
                        targets[name], args.profile, args.tokens, args.profile_streams, profile_out[name]
                    )
                print(summary, flush=True)
                data["profile"][name] = summary

    data["database"] = database
    # Growth before the concurrent mode: its peak RSS is each server's peak so far.
    if args.growth and targets:
        data["growth"] = await growth(args, targets)
    if args.concurrent and targets:
        data["concurrent"] = await concurrent(args, targets)
    for target in targets.values():
        target.close()  # after growth and concurrent, which use its client and database connection too
    if args.streams:
        data["open_streams"] = await open_streams(args, lab)
    if args.operators:
        print(
            f"\nOperators: {args.operators} replies at {1000 / args.pace_ms:.0f} tokens/s on one manage.py serve "
            f"process, the admin, /api/threads/ and /agui/info timed meanwhile",
            flush=True,
        )
        profile_out = lab.tmp / "profile-operators.txt" if args.operators_profile else None
        result = await measure_operators(
            lab, args.operators, args.pace_ms, args.operators_seconds, profile_out=profile_out
        )
        text, data["operators"] = operators_report(result, database)
        print(text, flush=True)

    summary, met = speed_summary(data)
    if summary:
        print(f"\nThe speed targets of #27 item 4 on {database}:\n{summary}", flush=True)
    data["all_targets_met"] = data.get("all_targets_met", True) and met
    print(f"\ntotal time {CLOCK() - t_start:.1f}s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(data, indent=2))
    return 1 if args.check and not data.get("all_targets_met", True) else 0


async def concurrent(args: argparse.Namespace, targets: dict[str, Target]) -> dict[str, Any]:
    """Aggregate events/s of many replies at once, in rounds (median), against the Django view's."""
    streams, tokens = (int(n) for n in args.concurrent.lower().split("x"))
    print(f"\nConcurrent: {streams} replies of {tokens:,} tokens at once, aggregate events/s", flush=True)
    result: dict[str, Any] = {}
    for name, target in targets.items():
        if name == "bare":
            continue
        rates, errors = [], 0
        for _ in range(args.repeat):
            rate, failed = await target.measure_concurrent(streams, tokens, timeline=args.timeline)
            rates.append(rate)
            errors += failed
        result[name] = {"events_per_s": statistics.median(rates), "runs": rates, "errors": errors}
    django = result.get("django")
    for name, entry in result.items():
        ratio = entry["events_per_s"] / django["events_per_s"] if django else float("nan")
        entry["vs_django"] = ratio
        print(
            f"  {LABELS[name]:42} {entry['events_per_s']:9,.0f}/s {ratio:5.2f}x Django, "
            f"{entry['errors']} errors; rounds: {', '.join(f'{r:,.0f}' for r in entry['runs'])}",
            flush=True,
        )
    lines, _ = concurrent_verdicts(result)
    if lines:
        print(f"Target (#27 item 4): {streams} at once >= {TARGET_CONCURRENT}x the Django view's events/s", flush=True)
        print("\n".join(lines), flush=True)
    return result


async def growth(args: argparse.Namespace, targets: dict[str, Target]) -> dict[str, Any]:
    """Events/s and peak RSS of one reply of each size, smallest first (peak RSS never falls,
    so each figure is the peak up to and including that reply)."""
    sizes = args.growth
    print(f"\nHow cost grows: one reply of each of {', '.join(f'{n:,}' for n in sizes)} tokens", flush=True)
    print(f"  {'server':42} " + " ".join(f"{f'{n:,} tok':>22}" for n in sizes), flush=True)
    result: dict[str, Any] = {}
    for name, target in targets.items():
        if name == "bare":
            continue
        cells, entry = [], {}
        for n in sizes:
            await target.measure_stream(n)
            rate = target.rates.pop()  # not one of the table's rounds
            if target.durable_rates:
                target.durable_rates.pop()
                target.log_lag.pop()
            peak = target.memory()[1]
            entry[n] = {"events_per_s": rate, "peak_rss_mib": peak}
            cells.append(f"{rate:>9,.0f}/s {peak:6.1f} MiB")
        result[name] = entry
        print(f"  {LABELS[name]:42} " + " ".join(f"{c:>22}" for c in cells), flush=True)
    for name in FULL_STACK:
        entry = result.get(name)
        if entry and len(sizes) > 1:
            ratio = entry[sizes[-1]]["peak_rss_mib"] / entry[sizes[0]]["peak_rss_mib"]
            verdict = "MET" if ratio <= 2 else "MISSED"
            print(f"  {LABELS[name]}: peak RSS at {sizes[-1]:,} = {ratio:.2f}x at {sizes[0]:,} (<= 2x: {verdict})")
            entry["rss_ratio"] = ratio
    return result


async def open_streams(args: argparse.Namespace, lab: Lab) -> dict[str, Any]:
    """The open-streams mode (bench/openstreams.py) on a fresh scripted server of its own."""
    print(
        f"\nOpen streams: {args.streams:,} SSE streams on one scripted server ({args.slow_runs} slow runs)", flush=True
    )
    target = Target(lab.start("scripted", tag="open"))
    await target.wait_ready()
    await target.warm_up(args.ttfb_tokens, args.warmup)
    target.close()
    result = await measure_open_streams(target.server, args.streams, args.slow_runs, args.slow_ms)
    text, data = open_streams_report(result)
    print(text, flush=True)
    return data


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through Lab.close(), which stops every subprocess


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    # DATABASE_URL (PostgreSQL): the full stack's servers run on fresh databases of that server.
    lab = Lab(args.server, args.loop, args.keep, database_url=os.environ.get("DATABASE_URL", ""))
    try:
        try:
            import uvloop
        except ImportError:
            return asyncio.run(run(args, lab))
        return uvloop.run(run(args, lab))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    finally:
        lab.close()


if __name__ == "__main__":
    sys.exit(main())

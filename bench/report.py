"""The results table, the verdict on the targets, and the same numbers as a dict (for --json).

The speed targets (issue #27 item 4), each a ratio to the plain Django view measured in
the same run: one long reply streams at least TARGET_RATE[name] times the Django view's
events/s (0.84x on the SDK path, 0.95x scripted), with at most TARGET_TTFB times its TTFB;
100 replies at once stream at least TARGET_CONCURRENT times its aggregate events/s, on
SQLite and on PostgreSQL (``concurrent_verdicts``; bench/stream.py's concurrent mode).
The memory target (item 6): the process ``make run`` starts weighs at most TARGET_MEMORY times
the SDK floor after its first reply.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from measure import Target
from processes import ALL_SERVERS, FULL_STACK, LABELS

TARGET_RATE = {"sdk": 0.84, "scripted": 0.95}
TARGET_TTFB = 1.5
TARGET_CONCURRENT = 0.8
TARGET_MEMORY = 1.25  # RSS of make run's process after its first reply, against the SDK floor
NAN = float("nan")


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def combine(values: list[float], stat: str) -> float:
    """Rates over the rounds: their median, or with ``--stat best`` the highest."""
    if not values:
        return NAN
    return max(values) if stat == "best" else statistics.median(values)


def report(
    targets: dict[str, Target],
    args: argparse.Namespace,
    memory: tuple[float, float] | None = None,
    database: str = "SQLite",
) -> tuple[str, dict[str, Any]]:
    """``memory``: RSS (MiB) after the first reply of (the SDK floor: the Django view with the anthropic
    SDK imported and a client made, the least the SDK path's process can be; Threadline as
    ``make run`` starts it, manage.py serve on the SDK path). ``database``: the full stack's."""
    data: dict[str, Any] = {
        "server": args.server,
        "tokens": args.tokens,
        "ttfb_tokens": args.ttfb_tokens,
        "repeat": args.repeat,
        "stat": args.stat,
        "servers": {},
    }
    django = targets.get("django")
    d_rate = combine(django.rates, args.stat) if django else NAN
    d_ttfb = statistics.median(django.ttfb) if django else NAN
    software = f"uvicorn + {args.loop} + httptools" if args.server == "uvicorn" else "daphne"
    header = (
        f"{'server':42} {'events/s':>9} {'x Django':>8} {'TTFB ms':>8} {'p90 ms':>7} {'x Django':>8} "
        f"{'1st event':>9} {'durable/s':>9} {'log lag s':>9}"
    )
    out = [
        "",
        f"Server software: {software}. Long reply: {args.tokens} tokens; events/s = {args.stat} of "
        f"{args.repeat} run(s). TTFB: {args.ttfb_tokens}-token reply, median of "
        f"{args.repeat}x{args.ttfb_requests} requests after {args.warmup} warm-up.",
        header,
        "-" * len(header),
    ]
    for name in ALL_SERVERS:
        t = targets.get(name)
        if t is None:
            continue
        rate = combine(t.rates, args.stat)
        ttfb = statistics.median(t.ttfb)
        p90 = sorted(t.ttfb)[int(0.9 * (len(t.ttfb) - 1))]
        first = statistics.median(t.first_event)
        durable = combine(t.durable_rates, args.stat) if t.durable_rates else None
        lag = statistics.median(t.log_lag) if t.log_lag else None
        out.append(
            f"{LABELS[name]:42} {rate:9,.0f} {rate / d_rate:8.2f} {ttfb * 1e3:8.3f} {p90 * 1e3:7.3f} "
            f"{ttfb / d_ttfb:8.2f} {first * 1e3:9.3f} "
            f"{f'{durable:,.0f}' if durable else '-':>9} {f'{lag:.2f}' if lag is not None else '-':>9}"
        )
        data["servers"][name] = {
            "label": LABELS[name],
            "events_per_s": rate,
            "events_per_s_runs": t.rates,
            "frames": t.frames,
            "ttfb_ms_median": ttfb * 1e3,
            "ttfb_ms_p90": p90 * 1e3,
            "first_event_ms_median": first * 1e3,
            "rate_vs_django": rate / d_rate,
            "ttfb_vs_django": ttfb / d_ttfb,
            "durable_events_per_s": durable,
            "log_lag_s": lag,
        }
    out += [
        "  (events/s: SSE data frames / (last byte - request sent). TTFB: request sent -> first response byte; "
        "1st event: -> first data frame, ms.",
        "   durable/s: frames / (request sent -> run recorded, event log and run row written); "
        "log lag: last byte -> recorded.)",
        "",
        "Targets (#27 item 4), against the Django view in this run: one long reply's events/s >= "
        + ", ".join(f"{TARGET_RATE[name]}x ({name})" for name in FULL_STACK)
        + f"; TTFB <= {TARGET_TTFB}x.",
    ]
    all_met = True
    for name in FULL_STACK:
        entry = data["servers"].get(name)
        if entry is None or django is None:
            continue  # without the Django view there is nothing to compare with
        rate_ok = entry["rate_vs_django"] >= TARGET_RATE[name]
        ttfb_ok = entry["ttfb_vs_django"] <= TARGET_TTFB
        all_met &= rate_ok and ttfb_ok
        entry["rate_target_met"], entry["ttfb_target_met"] = rate_ok, ttfb_ok
        out.append(
            f"  {LABELS[name]:44} events/s {entry['rate_vs_django']:.2f}x (>= {TARGET_RATE[name]}x): "
            f"{verdict(rate_ok)}; TTFB {entry['ttfb_vs_django']:.2f}x (<= {TARGET_TTFB}x): {verdict(ttfb_ok)}"
        )
    out += ["", "Memory (RSS, MiB): after the first short reply, after the warm-up, peak over the whole run"]
    d_first = django.rss_first if django else NAN
    for name in ALL_SERVERS:
        t = targets.get(name)
        if t is None:
            continue
        _, peak = t.memory()
        out.append(
            f"  {LABELS[name]:42} {t.rss_first:7.1f} {t.rss_warm:7.1f} {peak:7.1f}   "
            f"{t.rss_first / d_first:5.2f}x Django's after the first reply"
        )
        data["servers"][name] |= {"rss_first_mib": t.rss_first, "rss_warm_mib": t.rss_warm, "peak_rss_mib": peak}
    if memory is not None:
        floor, served = memory
        ratio = served / floor
        out += [
            f"  {'the Django view with anthropic imported':42} {floor:7.1f}"
            f"{'':18}{floor / d_first:5.2f}x Django's: the SDK path's floor",
            f"  {'Threadline as make run starts it':42} {served:7.1f}{'':18}{ratio:5.2f}x the SDK floor",
        ]
        ok = ratio <= TARGET_MEMORY
        target = f"  target: make run's process after its first reply <= {TARGET_MEMORY}x the SDK floor"
        if database == "SQLite":
            all_met &= ok
            out.append(f"{target}: {'MET' if ok else 'MISSED'}")
        else:
            # make run serves on SQLite; on PostgreSQL its driver (psycopg, about 8 MiB) is loaded
            # too, which the floor's view, never querying its database, does not load.
            out.append(f"{target} is judged on SQLite, make run's database; here {database}'s driver weighs too")
        data["sdk_floor"] = {"rss_first_mib": floor, "vs_django": floor / d_first}
        data["make_run"] = {"rss_first_mib": served, "vs_sdk_floor": ratio, "database": database, "target_met": ok}
    bare = data["servers"].get("bare")
    if bare and django:
        fastest = max(entry["events_per_s"] for name, entry in data["servers"].items() if name != "bare")
        bare_rate = bare["events_per_s"]
        check = f"the client read baseline 1 at {bare_rate:,.0f} events/s, {bare_rate / d_rate:.1f}x the Django view"
        if bare_rate > fastest:
            out.append(f"  (client check: {check}, so it is not what limits the others)")
        else:
            out.append(
                f"  WARNING, client check: {check}, no faster than the servers it measures: the client or "
                "the machine may be what limits these figures"
            )
        data["client_check_passed"] = bare_rate > fastest
    data["all_targets_met"] = all_met
    return "\n".join(out), data


def concurrent_verdicts(result: dict[str, Any]) -> tuple[list[str], bool]:
    """The concurrent target's verdict for each full-stack server of ``result`` (bench/stream.py's
    concurrent mode: per server, its median aggregate events/s, vs_django and failed streams);
    returns the lines and whether every one was met."""
    lines, all_met = [], True
    if "django" not in result:
        return lines, all_met
    for name in FULL_STACK:
        entry = result.get(name)
        if entry is None:
            continue
        ok = entry["vs_django"] >= TARGET_CONCURRENT and entry["errors"] == 0
        entry["target_met"] = ok
        all_met &= ok
        lines.append(
            f"  {LABELS[name]:44} {entry['vs_django']:.2f}x Django, {entry['errors']} errors "
            f"(>= {TARGET_CONCURRENT}x and 0 errors): {verdict(ok)}"
        )
    return lines, all_met


def speed_summary(data: dict[str, Any]) -> tuple[str, bool]:
    """Every speed target measured in this run (``data`` as bench/stream.py gathers it), one line
    each with its figure and verdict; and whether all were met."""
    lines, all_met = [], True
    servers = data.get("servers", {})
    concurrent = data.get("concurrent", {})
    for name in FULL_STACK:
        entry = servers.get(name)
        if entry is not None and "rate_target_met" in entry:
            lines.append(
                f"  {name:9} one long reply  {entry['rate_vs_django']:5.2f}x events/s (>= {TARGET_RATE[name]}x) "
                f"{verdict(entry['rate_target_met'])}"
            )
            lines.append(
                f"  {name:9} TTFB            {entry['ttfb_vs_django']:5.2f}x (<= {TARGET_TTFB}x) "
                f"{verdict(entry['ttfb_target_met'])}"
            )
            all_met &= entry["rate_target_met"] and entry["ttfb_target_met"]
        entry = concurrent.get(name)
        if entry is not None and "target_met" in entry:
            lines.append(
                f"  {name:9} concurrent      {entry['vs_django']:5.2f}x events/s (>= {TARGET_CONCURRENT}x, "
                f"{entry['errors']} errors) {verdict(entry['target_met'])}"
            )
            all_met &= entry["target_met"]
    return "\n".join(lines), all_met

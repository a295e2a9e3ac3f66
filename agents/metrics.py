"""Run metrics in the Prometheus format: tools, model calls, compactions, runs by outcome.

A MetricsListener hears every run beside the surface's own listener. The
counters live in prometheus_client's default registry, served at /metrics.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client import Counter, Gauge, Histogram

from orchestrator.approvals import Answer
from orchestrator.events import (
    BaseListener,
    Compacted,
    Outcome,
    RunEvent,
    SubAgentActivity,
    SubAgentEvent,
    SubAgentFinished,
    ToolResult,
    Usage,
)
from orchestrator.questions import input_reply
from orchestrator.tools.egressproxy import NetworkUsage
from orchestrator.waits import Checkpoint, WaitKind

TOOL_SECONDS = Histogram(
    "threadline_tool_duration_seconds",
    "Time a tool call took.",
    ["tool", "outcome"],
    buckets=(0.005, 0.02, 0.1, 0.5, 1, 5, 30, 120, 600),
)
# ``agent`` attributes usage to the agent it served; a sub-agent's
# calls count on its parent's agent, whose run started them. ``purpose`` is ``turn`` for the model's
# turns and ``compaction`` for the summaries of older turns (orchestrator/compaction.py).
MODEL_CALLS = Counter(
    "threadline_model_calls_total", "Model calls that returned a reply.", ["agent", "model", "purpose"]
)
MODEL_SECONDS = Histogram(
    "threadline_model_call_duration_seconds",
    "Time a model call took, stream included.",
    ["model"],
    buckets=(0.25, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
MODEL_TOKENS = Counter(
    "threadline_model_tokens_total",
    "Tokens of model calls; kind is input (uncached), cache_read, cache_write or output.",
    ["agent", "model", "kind", "purpose"],
)
COMPACTIONS = Counter("threadline_compactions_total", "Times a session's older turns were summarised.")
COMPACTED_TURNS = Counter("threadline_compacted_turns_total", "Turns that compactions replaced by a summary.")
COMPACTION_SECONDS = Histogram(
    "threadline_compaction_duration_seconds",
    "Time a compaction took (the summarising model call included).",
    buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
APPROVALS = Counter(
    "threadline_approvals_total",
    "Tool calls a person was asked about, by decision: yes, yes_always, no, no_with_reason, timeout "
    "(and cancelled, when the run was cancelled while it waited).",
    ["tool", "decision"],
)
APPROVAL_SECONDS = Histogram(
    "threadline_approval_wait_seconds",
    "Time from asking a person to their answer (or the deadline).",
    buckets=(1, 5, 15, 60, 300, 900, 3600),
)
ELICITATIONS = Counter(
    "threadline_mcp_elicitations_total",
    "Questions MCP servers asked a person mid-call, by server and outcome: accept, decline, cancel "
    "(the person's answer), timeout, superseded (a new message instead), cancelled (the run was).",
    ["server", "outcome"],
)
RUNS = Counter("threadline_runs_total", "Runs that ended, by outcome.", ["outcome"])
# Set by the run host: the runs this process executes now (a waiting run is not one of them).
LIVE_RUNS = Gauge("threadline_live_runs", "Runs this server process is executing now.")
SUBAGENTS = Counter("threadline_subagents_total", "Sub-agent runs that ended, by status.", ["status"])

# The cache-hit ratio is cache_read / (input + cache_read + cache_write) over these counters, e.g.
#   sum(rate(threadline_model_tokens_total{kind="cache_read"}[5m]))
#     / sum(rate(threadline_model_tokens_total{kind!="output"}[5m]))


def approval_decision(answer: Answer) -> str:
    """The seed's five decisions (and ``cancelled``): yes, yes_always, no, no_with_reason, timeout."""
    if answer.timed_out:
        return "timeout"
    if answer.cancelled:
        return "cancelled"
    if answer.superseded:
        return "superseded"
    if answer.approved:
        return "yes_always" if answer.always else "yes"
    return "no_with_reason" if answer.reason.strip() else "no"


def record_approval(tool: str, answer: Answer, waited_seconds: float) -> None:
    """Counts a person's answer (or its absence) to an approval or a question, and the wait."""
    APPROVALS.labels(tool, approval_decision(answer)).inc()
    APPROVAL_SECONDS.observe(waited_seconds)


def elicitation_outcome(answer: Answer) -> str:
    """An elicitation's outcome as counted: the person's action, or why there was none."""
    if answer.timed_out:
        return "timeout"
    if answer.superseded:
        return "superseded"
    reply = input_reply(answer)
    return reply[0] if reply is not None else "cancelled"


def record_elicitation(server: str, answer: Answer) -> None:
    ELICITATIONS.labels(server, elicitation_outcome(answer)).inc()


def record_answers(checkpoint: Checkpoint, answers: dict[str, Answer], *, approval_seconds: float) -> None:
    """The answers a run goes on with (questions and approvals; not client tools): each is counted
    with how long it was waited for (asked ``approval_seconds`` before its deadline)."""
    now = datetime.now(UTC)
    for call in checkpoint.answers_needed():
        answer = answers.get(call.answer_id)
        if call.kind is WaitKind.CLIENT or answer is None:
            continue
        if call.kind is WaitKind.INPUT:
            record_elicitation(str(call.input.get("server", "")), answer)
            continue
        asked = datetime.fromisoformat(call.expires_at) - timedelta(seconds=approval_seconds)
        record_approval(call.name, answer, max(0.0, (now - asked).total_seconds()))


class MetricsListener(BaseListener):
    def __init__(self, agent: str = "") -> None:
        self.agent = agent

    def on_event(self, event: RunEvent) -> None:
        kind = type(event)
        if kind is ToolResult:
            assert isinstance(event, ToolResult)
            outcome = "error" if event.is_error else "ok"
            TOOL_SECONDS.labels(event.name, outcome).observe(event.duration_seconds)
        elif kind is Compacted:
            assert isinstance(event, Compacted)
            COMPACTIONS.inc()
            COMPACTED_TURNS.inc(event.dropped_turns)
            COMPACTION_SECONDS.observe(event.duration_seconds)

    def on_usage(self, usage: Usage) -> None:
        MODEL_CALLS.labels(self.agent, usage.model, usage.purpose).inc()
        MODEL_SECONDS.labels(usage.model).observe(usage.duration_seconds)
        for kind, count in (
            ("input", usage.input_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
            ("output", usage.output_tokens),
        ):
            if count:
                MODEL_TOKENS.labels(self.agent, usage.model, kind, usage.purpose).inc(count)

    def on_subagent(self, event: SubAgentEvent) -> None:
        # A child's tool calls count as tools like any other; its model calls reach on_usage.
        if type(event) is SubAgentActivity:
            self.on_event(event.event)
        elif type(event) is SubAgentFinished:
            SUBAGENTS.labels(event.status.value).inc()

    def on_finished(self, outcome: Outcome) -> None:
        RUNS.labels(outcome.value).inc()


# MCP tool calls by server and tool: ok, error (the server said the call failed: isError),
# failed (down, timed out, a protocol error), as MCP servers' health is their operators' business.
MCP_CALLS = Counter(
    "threadline_mcp_calls_total", "MCP tool calls, by server, tool and outcome.", ["server", "tool", "outcome"]
)
MCP_FAILURES = Counter(
    "threadline_mcp_call_failures_total",
    "MCP tool calls that got no result (server down, timeout, protocol error), by server and tool.",
    ["server", "tool"],
)


def record_mcp_call(server: str, tool: str, outcome: str) -> None:
    """Counts one MCP call; ``outcome`` is ok, error or failed."""
    MCP_CALLS.labels(server, tool, outcome).inc()
    if outcome == "failed":
        MCP_FAILURES.labels(server, tool).inc()


# bash's network use through Threadline's proxy (issue #47): connections by outcome (allowed, or
# refused by a list, an address check or a bound) and bytes by direction. Hosts are not labels (a
# model chooses them: unbounded); each run's page in the admin lists them.
NETWORK_CONNECTIONS = Counter(
    "threadline_bash_network_connections_total",
    "Connections bash's commands asked the network proxy for, by agent and outcome (allowed, refused).",
    ["agent", "outcome"],
)
NETWORK_BYTES = Counter(
    "threadline_bash_network_bytes_total",
    "Bytes bash's commands moved through the network proxy, by agent and direction (sent, received).",
    ["agent", "direction"],
)


def record_network(agent: str, usage: NetworkUsage) -> None:
    for record in usage.connections:
        NETWORK_CONNECTIONS.labels(agent, "allowed" if record.allowed else "refused").inc()
        NETWORK_BYTES.labels(agent, "sent").inc(record.bytes_sent)
        NETWORK_BYTES.labels(agent, "received").inc(record.bytes_received)

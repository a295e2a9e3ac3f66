from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from agents.models import Agent


class Thread(models.Model):
    """An AG-UI conversation: the client's threadId, bound to one agent and one session."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agui_thread_id = models.CharField(max_length=200, unique=True)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="threads")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="threads"
    )
    # Its name in a thread list: the first user message, shortened, until its owner renames it.
    title = models.CharField(max_length=200, blank=True)
    # Left out of its owner's thread list (CopilotKit's useThreads) unless archived ones are asked for.
    archived = models.BooleanField(default=False)
    # The shared-state document of the thread (AG-UI STATE_SNAPSHOT), kept
    # across runs and restarts.
    state = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["agent", "-updated_at"]),
            # The API's thread list for a user who is not staff: their threads, newest first.
            models.Index(fields=["owner", "-updated_at"], name="thread_owner_updated"),
            # CopilotKit's thread list (agui/copilotkit/threads.py): a user's threads of an agent, not
            # archived, newest activity first, the id breaking ties. Without it the agent's index was
            # taken, and a list read every user's threads of that agent: 40 ms with 110,000 threads.
            models.Index(fields=["owner", "agent", "archived", "-updated_at", "-id"], name="thread_owner_list"),
        ]

    def __str__(self) -> str:
        return self.title or self.agui_thread_id


class Session(models.Model):
    """The agent's side of a thread: the conversation the model sees (Anthropic turns)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    thread = models.OneToOneField(Thread, on_delete=models.CASCADE, related_name="session")
    turns = models.JSONField(default=list, blank=True)
    paused_reason = models.CharField(max_length=64, blank=True)
    # Overrides the agent's grounding mode for this conversation (blank: the agent's).
    grounding_override = models.CharField(
        max_length=16, blank=True, choices=[("off", "Off"), ("prompt", "Prompt"), ("enforced", "Enforced")]
    )
    # "Yes, always" answers: the memory keys (agents/permissions.py) of calls that run unasked.
    approved_always = models.JSONField(default=list, blank=True)
    # The read ledger (orchestrator/tools/ledger.py) as the last tool calls left it: a file the agent read
    # in an earlier run of the conversation may be edited in the next, unless it changed since.
    reads = models.JSONField(default=dict, blank=True)
    # Hosts a person let this thread's bash reach (request_network_access answered "yes"): host
    # patterns as AGENT_BASH_ALLOWED_HOSTS writes them (orchestrator/tools/egress.py).
    network_grants = models.JSONField(default=list, blank=True)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_tokens = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"session of {self.thread_id}"


class Message(models.Model):
    """One message of the thread's transcript, in AG-UI shape, as a client builds it."""

    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="messages")
    position = models.PositiveIntegerField()
    message_id = models.CharField(max_length=200)
    role = models.CharField(max_length=16)
    body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["thread", "position"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "position"], name="message_position_unique"),
            models.UniqueConstraint(fields=["thread", "message_id"], name="message_id_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.role} {self.message_id}"


class Run(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"
        PAUSED = "paused", "Paused"
        INTERRUPTED = "interrupted", "Interrupted"
        # Its AG-UI run ended on calls that need answers; ``checkpoint`` is what the
        # agent run goes on from. No process holds it: whichever takes the answer does.
        WAITING = "waiting", "Waiting for an answer"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agui_run_id = models.CharField(max_length=200, db_index=True)
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="runs")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING, db_index=True)
    outcome = models.CharField(max_length=32, blank=True)
    error = models.TextField(blank=True)
    protocol_version = models.CharField(max_length=16, blank=True)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_tokens = models.PositiveBigIntegerField(default=0)
    event_count = models.PositiveIntegerField(default=0)
    # When its event log was removed (manage.py prune_event_logs): a reattach is told so.
    events_pruned_at = models.DateTimeField(null=True, blank=True)
    # The server process running it ("host:pid") and how long its claim holds
    # without renewal (threads/leases.py).
    owner = models.CharField(max_length=300, blank=True)
    # Set by a cancel that reached another process; the owner reads it when it renews its lease.
    cancel_requested = models.BooleanField(default=False)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # How many times another process took the run over after its owner died (threads/takeover.py),
    # and when it last did; RUN_MAX_TAKEOVERS bounds the first, so a run that crashes its process
    # cannot crash them all.
    takeovers = models.PositiveSmallIntegerField(default=0)
    taken_over_at = models.DateTimeField(null=True, blank=True)
    # How many of those takeovers were hand-overs (a process draining on SIGTERM let it go at a step
    # boundary): they do not count towards RUN_MAX_TAKEOVERS, only crashes do.
    handovers = models.PositiveSmallIntegerField(default=0)
    # Each takeover and hand-over, oldest first: {"kind": "crash"|"handover", "at", "from" (the
    # process that stopped), "by" (the one that went on), "step" (the model turns done)}, for the
    # admin's run page and /connect (threads/takeover.py).
    takeover_history = models.JSONField(default=list, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # A waiting run (orchestrator/waits.py): the checkpoint, the client tools it was offered, and the
    # results of the client's own tools as they arrive (the first answer wins). A running run keeps
    # its last step's checkpoint here ("step"), written with what the step recorded, for whichever
    # process takes it over if its own dies (threads/takeover.py).
    checkpoint = models.JSONField(null=True, blank=True)
    client_answers = models.JSONField(default=dict, blank=True)
    # When the sweep looks at it: its earliest deadline, or now once every call has its answer.
    wait_deadline = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            models.Index(fields=["thread", "-started_at"]),
            # The sweep: waiting runs whose deadline has come.
            models.Index(fields=["status", "wait_deadline"], name="run_waiting_deadline"),
        ]

    def __str__(self) -> str:
        return self.agui_run_id


class EventFrame(models.Model):
    """Events ``first_seq`` to ``last_seq`` of a run's AG-UI event log: the events one flush of the
    run's writer wrote, in one compressed body (threads/logframes.py says how). Read through
    threads/selectors.py, which gives the events one by one."""

    # No index of its own: the unique (run, last_seq) index serves every lookup by run, and finds
    # the frames holding the events after a given seq.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="frames", db_index=False)
    first_seq = models.PositiveIntegerField()
    last_seq = models.PositiveIntegerField()
    body = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "last_seq"]
        constraints = [models.UniqueConstraint(fields=["run", "last_seq"], name="event_frame_last_seq_unique")]

    def __str__(self) -> str:
        return f"{self.first_seq}-{self.last_seq}"


class Approval(models.Model):
    """A tool call a person was asked about, and what they decided."""

    class Decision(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        DENIED = "denied", "Denied"
        TIMEOUT = "timeout", "No answer in time"
        CANCELLED = "cancelled", "Cancelled"
        # The user wrote a new message instead of answering.
        SUPERSEDED = "superseded", "Superseded by a new message"

    id = models.CharField(primary_key=True, max_length=100)  # the AG-UI interrupt id
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="approvals")
    tool_call_id = models.CharField(max_length=200)
    tool = models.CharField(max_length=100)
    arguments = models.JSONField(default=dict)
    message = models.TextField()
    decision = models.CharField(max_length=16, choices=Decision.choices, default=Decision.PENDING, db_index=True)
    reason = models.TextField(blank=True)
    always = models.BooleanField(default=False)
    answered_by = models.CharField(max_length=150, blank=True)
    requested_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    answered_at = models.DateTimeField(null=True, blank=True)
    # An MCP server's question mid-call rather than an approval (issue #46): its server, tool, mode
    # (form or url), the schema its answer must match, or the URL and its domain. Its answer is
    # kept in ``reason`` as JSON: {"action": "accept"|"decline"|"cancel", "content": {...}}.
    elicitation = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-requested_at"]
        # The API's approval list, newest first.
        indexes = [models.Index(fields=["-requested_at"], name="approval_requested")]

    def __str__(self) -> str:
        return f"{self.tool} ({self.decision})"

    @property
    def latency_seconds(self) -> float | None:
        if self.answered_at is None:
            return None
        return (self.answered_at - self.requested_at).total_seconds()


class SubAgentTask(models.Model):
    """A child run a run delegated with the ``sub_agent`` tool: the parent's board entry and its record.

    The child's messages are in the thread's transcript (marked with its id as
    ``subagentRunId``); only ``summary`` went back to the parent's model.
    """

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"
        # Stopped by a limit (its iteration cap or its timeout) before it finished.
        STOPPED = "stopped", "Stopped by a limit"
        # The server stopped while it ran.
        INTERRUPTED = "interrupted", "Interrupted"

    id = models.CharField(primary_key=True, max_length=100)  # the AG-UI subagentRunId
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="subagent_tasks")
    # The parent's Run row (its AG-UI run) in which the child was started.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="subagent_tasks")
    parent_task = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    tool_call_id = models.CharField(max_length=200)
    depth = models.PositiveSmallIntegerField(default=1)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING, db_index=True)
    role = models.CharField(max_length=100)
    prompt = models.TextField()
    context = models.TextField(blank=True)
    system_prompt = models.TextField(blank=True)
    allowed_tools = models.JSONField(default=list, blank=True)
    model = models.CharField(max_length=100)
    summary = models.TextField(blank=True)  # what the parent's model was given back
    conclusion = models.CharField(max_length=300, blank=True)  # its own verdict: success, partial, failed, blocked
    error = models.TextField(blank=True)
    # The child's tool calls, in order: {id, name, arguments, isError}.
    tool_calls = models.JSONField(default=list, blank=True)
    iterations = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_tokens = models.PositiveBigIntegerField(default=0)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["thread", "started_at"]
        verbose_name = "sub-agent task"
        indexes = [
            models.Index(fields=["thread", "started_at"]),
            models.Index(fields=["run", "started_at"]),
            # The API's list of every task, newest first.
            models.Index(fields=["-started_at"], name="subagenttask_started"),
        ]

    def __str__(self) -> str:
        return f"{self.role} ({self.status})"


class QueuedMessage(models.Model):
    """A user message sent while a run was in flight on its thread.

    It is stored at once. The run in flight reads it at its next tool boundary (``read``);
    when that run ends first, the message is the first of the next run (``started``). Either
    way ``run`` says which run took it, and the POST that carried it follows that run.
    """

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        READ = "read", "Read into the run in flight"
        STARTED = "started", "Started the next run"
        # Its run could not be opened (its agent was disabled, its runId taken meanwhile): ``error``.
        REFUSED = "refused", "Refused"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="queued_messages")
    message_id = models.CharField(max_length=200)
    # The message as the client sent it (the transcript's shape), and as the model will read it.
    body = models.JSONField()
    content = models.JSONField()
    # The runId of the request that carried it: its stream ends with that id, and a run it
    # starts is known by it.
    agui_run_id = models.CharField(max_length=200)
    protocol_version = models.CharField(max_length=16, blank=True)
    # The browser tools its request declared: a run it starts offers them.
    client_tools = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    # Whether the run in flight has been told (on_message_queued), so it is told once.
    announced = models.BooleanField(default=False)
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="queued_messages")
    queued_at = models.DateTimeField(auto_now_add=True)
    taken_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["thread", "queued_at"]
        constraints = [models.UniqueConstraint(fields=["thread", "message_id"], name="queued_message_id_unique")]
        indexes = [models.Index(fields=["status", "thread"], name="queued_message_status")]

    def __str__(self) -> str:
        return f"{self.message_id} ({self.status})"


class Workspace(models.Model):
    """A directory runs work in, made from the template on first use (agents/workspaces.py). The
    directory is the truth; the row keeps when it was made, for the admin and the API."""

    key = models.CharField(max_length=100, unique=True)  # relative to AGENT_WORKSPACES_ROOT
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.key


class Attachment(models.Model):
    """A file a user uploaded for a message (CopilotKit's useAttachments ``onUpload``). A message
    names it by its URL (agui/attachments.py); the model is sent its data. It goes with the thread
    whose messages name it, and is only ever its owner's. ``thread`` is set when the first message
    naming it is stored; until then the sweep may prune it (threads/services/attachments.py)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="attachments"
    )
    thread = models.ForeignKey(
        Thread, null=True, blank=True, on_delete=models.CASCADE, related_name="attachments", editable=False
    )
    media_type = models.CharField(max_length=100)
    size = models.PositiveIntegerField()
    data = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.media_type}, {self.size} bytes"


class RunTally(models.Model):
    """How many runs of one agent ended on one UTC day with one outcome, counted by how long they
    took (``duration``) or took to their first token (``first_token``), in the duration buckets of
    threads/services/tallies.py. Added to as each run ends, so the dashboard reads a month of these
    rows, not a month of runs."""

    class Measure(models.TextChoices):
        DURATION = "duration", "Run duration"
        FIRST_TOKEN = "first_token", "Time to first token"

    day = models.DateField()
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="run_tallies")
    outcome = models.CharField(max_length=32)
    measure = models.CharField(max_length=16, choices=Measure.choices)
    bucket = models.PositiveSmallIntegerField()
    runs = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-day"]
        # Its day first: the dashboard reads the rows of a range of days.
        constraints = [
            models.UniqueConstraint(fields=["day", "agent", "outcome", "measure", "bucket"], name="run_tally_unique")
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.outcome} {self.measure}[{self.bucket}]: {self.runs}"


class ToolTally(models.Model):
    """The calls of one tool on one UTC day, and how many failed, added to as each run ends."""

    day = models.DateField()
    tool = models.CharField(max_length=200)
    calls = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-day"]
        constraints = [models.UniqueConstraint(fields=["day", "tool"], name="tool_tally_unique")]

    def __str__(self) -> str:
        return f"{self.day} {self.tool}: {self.calls} ({self.failures} failed)"


class ApprovalTally(models.Model):
    """The approvals (and questions) closed on one UTC day with one decision, counted by how long
    they waited for it, in the buckets of threads/services/tallies.py; added to as each is closed."""

    day = models.DateField()
    decision = models.CharField(max_length=16)
    bucket = models.PositiveSmallIntegerField()
    approvals = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-day"]
        constraints = [models.UniqueConstraint(fields=["day", "decision", "bucket"], name="approval_tally_unique")]

    def __str__(self) -> str:
        return f"{self.day} {self.decision}[{self.bucket}]: {self.approvals}"


class NetworkUse(models.Model):
    """One connection a bash command of a run asked Threadline's proxy for (issue #47): where, whether
    it was let through, and how many bytes went each way."""

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="network_uses")
    tool_call_id = models.CharField(max_length=128, blank=True)
    host = models.CharField(max_length=255)
    port = models.PositiveIntegerField()
    allowed = models.BooleanField()
    reason = models.TextField(blank=True)  # why it was refused or cut short
    bytes_sent = models.PositiveBigIntegerField(default=0)
    bytes_received = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["run", "id"], name="networkuse_run")]

    def __str__(self) -> str:
        return f"{self.host}:{self.port} ({'allowed' if self.allowed else 'refused'})"

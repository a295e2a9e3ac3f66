"""bash's network in a run (issue #47): the agent's lists and the thread's grants added to the
operator's settings at each command, the grants request_network_access records, and each command's
connections kept for the run's page in the admin and counted in /metrics."""

from __future__ import annotations

import uuid

from django.db import transaction

from agents.metrics import record_network
from agents.network import agent_policy
from orchestrator.tools.egress import EgressPolicy, HostPattern, parse_host_pattern
from orchestrator.tools.egressproxy import NetworkUsage
from threads.dbthread import on_db_thread
from threads.models import NetworkUse, Session

MAX_RECORDED = 200  # connections kept per command; a command that opens more is counted, not listed


class RunNetwork:
    """``NetworkAccess`` for one run of ``agent`` in a thread (its session ``session_id``)."""

    def __init__(self, *, agent_id: int, agent_name: str, session_id: uuid.UUID, run_pk: uuid.UUID) -> None:
        self.agent_id = agent_id
        self.agent_name = agent_name
        self.session_id = session_id
        self.run_pk = run_pk

    async def policy(self, base: EgressPolicy) -> EgressPolicy:
        return await on_db_thread(self._policy, base=base)

    def _policy(self, base: EgressPolicy) -> EgressPolicy:
        return agent_policy(self.agent_id, base).with_hosts(thread_grants(self.session_id), ())

    async def grant(self, pattern: HostPattern) -> None:
        await on_db_thread(grant_to_thread, session_id=self.session_id, pattern=pattern)

    async def record(self, tool_call_id: str, usage: NetworkUsage) -> None:
        record_network(self.agent_name, usage)
        await on_db_thread(self._record, tool_call_id=tool_call_id, usage=usage)

    def _record(self, tool_call_id: str, usage: NetworkUsage) -> None:
        NetworkUse.objects.bulk_create(
            NetworkUse(
                run_id=self.run_pk,
                tool_call_id=tool_call_id[:128],
                host=record.host[:255],
                port=record.port,
                allowed=record.allowed,
                reason=record.reason,
                bytes_sent=record.bytes_sent,
                bytes_received=record.bytes_received,
            )
            for record in usage.connections[:MAX_RECORDED]
        )


def thread_grants(session_id: uuid.UUID) -> tuple[HostPattern, ...]:
    """The hosts a person let this thread's bash reach (entries that no longer parse are skipped)."""
    grants = Session.objects.filter(pk=session_id).values_list("network_grants", flat=True).first() or []
    patterns: list[HostPattern] = []
    for entry in grants:
        try:
            patterns.append(parse_host_pattern(str(entry)))
        except ValueError:
            continue
    return tuple(patterns)


@transaction.atomic
def grant_to_thread(*, session_id: uuid.UUID, pattern: HostPattern) -> None:
    session = Session.objects.select_for_update(no_key=True).filter(pk=session_id).first()
    if session is not None and str(pattern) not in session.network_grants:
        session.network_grants = [*session.network_grants, str(pattern)]
        session.save(update_fields=["network_grants"])

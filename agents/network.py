"""An agent's own hosts for bash's network proxy (issue #47): its allow and deny lists in the admin,
added to the operator's settings, and the hosts a person let it reach "always"."""

from __future__ import annotations

from django.db import transaction

from agents.models import Agent
from orchestrator.tools.egress import EgressPolicy, HostPattern


def agent_policy(agent_id: int, base: EgressPolicy) -> EgressPolicy:
    """``base`` (the settings') with the agent's own lists added; the agent gone: ``base``."""
    agent = Agent.objects.filter(pk=agent_id).only("bash_allowed_hosts", "bash_denied_hosts").first()
    if agent is None:
        return base
    try:
        allowed, denied = agent.host_lists()
    except ValueError:
        # The admin checks the lists; a row written around it allows nothing more and denies all.
        return _refuse_all(base)
    return base.with_hosts(allowed, denied)


def _refuse_all(base: EgressPolicy) -> EgressPolicy:
    return EgressPolicy(mode="allowlist", denied=base.denied, bounds=base.bounds)


@transaction.atomic
def allow_always(agent_id: int, pattern: HostPattern) -> None:
    """Adds ``pattern`` to the agent's allowed hosts (a "yes, always" to request_network_access)."""
    agent = Agent.objects.select_for_update().filter(pk=agent_id).first()
    if agent is None:
        return
    entries = [line.strip() for line in agent.bash_allowed_hosts.replace(",", "\n").splitlines() if line.strip()]
    if str(pattern) in entries:
        return
    agent.bash_allowed_hosts = "\n".join([*entries, str(pattern)])
    agent.save(update_fields=["bash_allowed_hosts", "updated_at"])

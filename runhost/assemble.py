"""Assembling one run's loop: the agent's model and limits, the tools (the client's too), the run's
workspace, the permission policy, and the stores that keep the session, its sub-agents and the
messages queued for it."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from agents.models import Agent
from agents.runtime import loop_config, subagent_limits, tool_context
from orchestrator.budget import SpendGate
from orchestrator.events import RunListener, SubAgentStarted
from orchestrator.loop import AgentLoop
from orchestrator.providers.base import ModelProvider
from orchestrator.subagents import SubAgentParams
from orchestrator.tools.base import ToolRegistry
from orchestrator.tools.client import add_client_tools
from runhost.network import RunNetwork
from runhost.policy import PolicyApprover
from threads.models import Session, Thread
from threads.queue import DbInbox
from threads.store import DbSessionStore, DbSubAgentStore


def assemble_loop(
    *,
    tools: ToolRegistry,
    agent: Agent,
    thread: Thread,
    session: Session,
    run_pk: uuid.UUID,
    provider: ModelProvider,
    workspace: Path,
    client_tools: list[dict[str, Any]],
    listener: RunListener,
    cancelled: asyncio.Event,
    spend: SpendGate | None = None,
    takeovers: int = 0,
) -> AgentLoop:
    """The loop of run ``run_pk`` of ``thread``, heard by ``listener``; ``takeovers``: how often the
    run had been taken over when this process took it (its steps are committed only while that holds)."""
    working = tool_context(agent_name=agent.name, thread_id=thread.agui_thread_id, workspace=workspace)
    working.cancelled = cancelled
    working.reads.update(session.reads)  # a run that goes on from a checkpoint adds the checkpoint's
    working.network = RunNetwork(agent_id=agent.pk, agent_name=agent.name, session_id=session.pk, run_pk=run_pk)
    add_client_tools(tools, client_tools)

    def subagent_store(started: SubAgentStarted, params: SubAgentParams) -> DbSubAgentStore:
        return DbSubAgentStore(
            thread_pk=thread.pk, session_id=session.pk, run_pk=run_pk, started=started, params=params
        )

    return AgentLoop(
        provider=provider,
        tools=tools,
        tool_context=working,
        config=loop_config(agent, provider, grounding=session.grounding_override),
        store=DbSessionStore(
            session_id=session.pk,
            thread_pk=thread.pk,
            run_pk=run_pk,
            turns=session.turns,
            client_tools=client_tools,
            takeovers=takeovers,
        ),
        listener=listener,
        approver=PolicyApprover(
            agent_name=agent.name,
            thread_id=thread.agui_thread_id,
            session_id=session.pk,
            workspace=working.workspace,
        ),
        subagent_stores=subagent_store,
        subagent_limits=subagent_limits(),
        inbox=DbInbox(thread_pk=thread.pk, session_id=session.pk, run_pk=run_pk),
        spend=spend,
    )

"""Writes of the agents app that the admin and any other surface share: the MCP servers the admin
holds (agents/models.py ``McpServerEntry``). Each checks the row as the ``.mcp.json`` file's entries
are checked (``full_clean``) and writes in one transaction with the agents that name the server.

A stdio server's entry is a command the server runs: only a superuser may add, change or delete one
(issue #46, item 4), whichever surface asks; ``by`` is who asks, and anyone else gets
``PermissionDenied``."""

from __future__ import annotations

from typing import TypedDict, Unpack

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db import transaction

from agents.models import Agent, McpServerEntry


class McpServerFields(TypedDict, total=False):
    name: str
    transport: str
    command: str
    args: list[str]
    env: dict[str, str]
    cwd: str
    paths: list[str]
    network: bool
    workspace: bool
    url: str
    headers: dict[str, str]
    enabled: bool
    description: str


class McpServerInUse(Exception):
    """The server is named by agents; the message names them."""


SUPERUSER_ONLY = "An MCP server's entry is a command the server runs: only a superuser may add, change or delete one."


def may_edit_mcp_servers(user: AbstractBaseUser | AnonymousUser) -> bool:
    """Whether ``user`` may add, change or delete MCP servers: an active superuser."""
    return bool(user.is_active and getattr(user, "is_superuser", False))


def _require_superuser(user: AbstractBaseUser | AnonymousUser) -> None:
    if not may_edit_mcp_servers(user):
        raise PermissionDenied(SUPERUSER_ONLY)


@transaction.atomic
def mcp_server_create(*, by: AbstractBaseUser | AnonymousUser, **fields: Unpack[McpServerFields]) -> McpServerEntry:
    """Creates the server; raises ``ValidationError`` (naming the field) for an entry that cannot work
    or a name the MCP_SERVERS file already has. The pool starts it on the next run."""
    _require_superuser(by)
    server = McpServerEntry()
    for field, value in fields.items():
        setattr(server, field, value)
    server.full_clean()
    server.save()
    return server


@transaction.atomic
def mcp_server_update(
    *, server: McpServerEntry, by: AbstractBaseUser | AnonymousUser, **fields: Unpack[McpServerFields]
) -> McpServerEntry:
    """Changes the server (as ``mcp_server_create`` checks it); a new name is carried to the agents
    that named the old one, so none of them silently loses it or gains every server."""
    _require_superuser(by)
    old_name = McpServerEntry.objects.select_for_update().values_list("name", flat=True).get(pk=server.pk)
    for key, value in fields.items():
        setattr(server, key, value)
    server.full_clean()
    server.save()
    if server.name != old_name:
        for agent in agents_naming(old_name, lock=True):
            agent.mcp_servers = [server.name if name == old_name else name for name in agent.mcp_servers]
            agent.save(update_fields=["mcp_servers", "updated_at"])
    return server


@transaction.atomic
def mcp_server_delete(*, server: McpServerEntry, by: AbstractBaseUser | AnonymousUser) -> None:
    """Deletes the server; raises ``McpServerInUse`` while agents name it (dropping the name from an
    agent that names only it would give that agent every server)."""
    _require_superuser(by)
    naming = agents_naming(server.name, lock=True)
    if naming:
        raise McpServerInUse(in_use_message(server.name, naming))
    server.delete()


def agents_naming(name: str, *, lock: bool = False) -> list[Agent]:
    """The agents whose MCP servers name ``name``. (In Python: SQLite has no JSON ``contains``.)"""
    agents = Agent.objects.select_for_update() if lock else Agent.objects.all()
    return [agent for agent in agents.order_by("name") if name in (agent.mcp_servers or [])]


def in_use_message(name: str, agents: list[Agent]) -> str:
    listed = ", ".join(agent.name for agent in agents)
    return f"The agent(s) {listed} name the MCP server {name!r}; take it off their list first."

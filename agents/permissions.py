"""Permission rules: whether a tool call runs, waits for a person, or is refused.

A rule names a tool (or any tool), a glob over the call's primary argument and a decision. Rules are
tried in order and the first enabled one that matches decides:

- ``allow`` runs the call, ``deny`` refuses it;
- ``ask`` waits for a person *even when* the call was approved "always" earlier in the session or
  auto-approve is on: an ask rule is a gate, the way an operator keeps a person in the loop for,
  say, ``git push*`` whatever else is allowed;
- with no rule matching, the tool's own class decides: the network tools (web_search, web_fetch)
  ask unless a yes-always covers the call (auto-approve, which is about the workspace, does not
  cover them); read-only tools run; the others run when a yes-always covers the call or
  auto-approve is on, and ask otherwise.

What the globs see (each tool's ``targets``, orchestrator/tools/targets.py; ``primary_argument``):

- file tools (file_read, file_write, file_edit, glob, grep): the ``path`` argument, normalised
  (``./src//a.py`` and ``src/x/../a.py`` are ``src/a.py``); glob and grep default to ``.``. Globs
  match as paths: ``*`` stays within a directory, ``**`` crosses them, ``{a,b}`` alternates, ``*``
  matches dot-files too, and a leading ``./`` in the glob is ignored. A path also matches a glob
  that matches it as a directory, so ``secrets/**`` covers a grep of ``secrets``.
- apply_patch: every file the diff names (source and target, without git's ``a/`` ``b/``, never
  ``/dev/null``).
- bash: the command, matched as a whole string (``*`` crosses ``/`` and spaces: ``rm *``,
  ``git status*``). A command that chains, pipes, redirects or substitutes is also cut into its
  pieces at every ``; & | < > ( )``, backtick and newline, quoted or not.
- web_fetch: the URL. A glob without ``://`` is matched against the URL's host only
  (``example.com``, ``*.example.com``, ``{example.com,*.example.com}``; case does not matter;
  ``*.example.com`` does not match ``example.com`` itself); a glob with a scheme against the whole
  URL (``https://example.com/docs/*``).
- web_search: the query.
- other tools (MCP servers' tools among them): the empty string, which only blank, ``*`` or ``**``
  match.

A rule's tool is one tool's name, or a glob over tool names (``mcp__github__*``: every tool of the
MCP server ``github``; ``mcp__*``: every MCP tool). An MCP tool is read-only when its server's
annotations say ``readOnlyHint: true``; with no rule matching it runs, and any other asks.

Several targets (a patch's files, a command and its pieces): a ``deny`` or ``ask`` rule matches when
its glob matches ANY of them, an ``allow`` rule only when it matches ALL of them. So a patch that
touches one denied file is denied, a patch is allowed only when every file it touches is, and
``git status*`` does not allow ``git status; rm -rf ~`` while ``rm *`` does deny
``cd build && rm -rf .``. Cutting a command at quoted characters too only ever makes deny and ask
match more and allow match less. Rules on bash remain a guard-rail, not a sandbox: ``sh -c '…'``,
``xargs`` or an interpreter can hide a command from any glob.

A blank glob, ``*`` and ``**`` match anything, whatever the tool.

A file with several names (hard links) is judged by each of its names in the workspace when a file
tool opens it: a deny rule covering any of them refuses the call (orchestrator/tools/workspace.py,
``CallGuard``), so ``ln secrets/key notes/key`` does not pass ``deny secrets/**``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Case, IntegerField, Q, QuerySet, Value, When

from agents.confinement import server_workspace
from agents.mcp.names import tool_name_matches
from agents.models import PermissionRule
from orchestrator.tools.base import Tool
from orchestrator.tools.catalog import KNOWN_TOOLS
from orchestrator.tools.pathguard import PathGuard
from orchestrator.tools.protected import ProtectedPath
from orchestrator.tools.targets import NO_TARGETS, PathTarget, Targets, normalise_path
from orchestrator.tools.workspace import Workspace

Decision = PermissionRule.Decision
Scope = PermissionRule.Scope

_ANYTHING = frozenset({"", "*", "**"})
_PATHS = PathTarget()


@dataclass(slots=True, frozen=True)
class Verdict:
    """What the policy says about one call: the decision, the rule that made it (None when no rule
    matched) and a sentence saying why, for the approval record and the operator."""

    decision: PermissionRule.Decision
    rule_id: int | None
    reason: str


def evaluate(
    rules: Iterable[PermissionRule],
    *,
    tool: Tool,
    arguments: Mapping[str, Any],
    remembered: bool,
    auto_approve: bool,
    workspace: Workspace | None = None,
    ask_a_person: bool = True,
) -> Verdict:
    """The verdict on calling ``tool`` with ``arguments``.

    ``rules`` are the rules in scope, in evaluation order (``rules_for``); disabled ones are skipped.
    ``remembered``: a yes-always of this session covers the call (see ``memory_key``).
    ``auto_approve``: the run approves what would otherwise ask. Neither overrides a matching rule.
    ``workspace`` (default: the server's) resolves the call's paths: a rule sees each path both as
    given and with its links resolved, and a path that reaches the server's own files is denied
    above every rule.
    ``ask_a_person``: False where nobody watches the chat (AGUI_HUMAN_IN_THE_LOOP=off): what would ask
    is denied instead, and the reason says so.
    """
    verdict = _evaluate(
        rules, tool=tool, arguments=arguments, remembered=remembered, auto_approve=auto_approve, workspace=workspace
    )
    if verdict.decision == Decision.ASK and not ask_a_person:
        return Verdict(Decision.DENY, verdict.rule_id, nobody_to_ask(verdict.reason))
    return verdict


def nobody_to_ask(reason: str) -> str:
    """Why a call that would ask was denied: nobody is asked on this server."""
    return (
        "it would need a person's approval, and this server asks nobody (human in the loop is off), "
        f"so it is denied: {reason}"
    )


def _evaluate(
    rules: Iterable[PermissionRule],
    *,
    tool: Tool,
    arguments: Mapping[str, Any],
    remembered: bool,
    auto_approve: bool,
    workspace: Workspace | None,
) -> Verdict:
    targets = tool.targets.of(arguments)
    if tool.targets.paths:
        try:
            targets = _with_links_resolved(targets, workspace or server_workspace())
        except ProtectedPath:
            return Verdict(
                Decision.DENY,
                None,
                "built-in: the path reaches the server's own files (data dir, database, secrets or virtual "
                "environment), which no tool may read or change whatever the rules say",
            )
    for rule in rules:
        if rule.enabled and _rule_matches(rule, tool.name, tool.targets, targets):
            return Verdict(Decision(rule.decision), rule.pk, _rule_reason(rule, remembered, auto_approve))
    if tool.network:
        if remembered:
            return Verdict(
                Decision.ALLOW, None, f"no rule matched; a yes-always of this session covers this {tool.name} call"
            )
        return Verdict(Decision.ASK, None, f"no rule matched; {tool.name} reaches the network, so it asks")
    if tool.read_only:
        return Verdict(Decision.ALLOW, None, f"no rule matched; {tool.name} only reads, so it runs")
    if remembered:
        return Verdict(
            Decision.ALLOW, None, f"no rule matched; a yes-always of this session covers this {tool.name} call"
        )
    if auto_approve:
        return Verdict(Decision.ALLOW, None, f"no rule matched; {tool.name} is not read-only, but auto-approve is on")
    return Verdict(Decision.ASK, None, f"no rule matched; {tool.name} is not read-only, so it asks")


def _with_links_resolved(targets: list[str], workspace: Workspace) -> list[str]:
    resolved = list(targets)
    for target in targets:
        if target in ("", "."):
            continue
        canonical = workspace.canonical(target)
        if canonical is not None and canonical not in resolved:
            resolved.append(canonical)
    return resolved


class ScopedRules:
    """The path side of the rules of one agent in one thread (``PathRules``): each call of a file
    tool reads them when it starts and drops every path a deny rule covers, after links are
    resolved: grep's and glob's results, and a file reached through a link (issue #11, item 3)."""

    def __init__(self, agent_name: str, thread_agui_id: str) -> None:
        self.agent_name = agent_name
        self.thread_agui_id = thread_agui_id

    async def guard(self, tool_name: str) -> PathGuard:
        return RuleGuard(await arules_for(self.agent_name, self.thread_agui_id), tool_name)


class RuleGuard:
    """Whether the first rule that matches one path of ``tool_name`` denies it."""

    def __init__(self, rules: Iterable[PermissionRule], tool_name: str) -> None:
        self.rules = [
            rule for rule in rules if rule.enabled and (not rule.tool or tool_name_matches(rule.tool, tool_name))
        ]
        self.tool_name = tool_name
        self.may_deny = any(rule.decision == Decision.DENY for rule in self.rules)

    def denies(self, relative: str) -> bool:
        target = [normalise_path(relative)]
        for rule in self.rules:
            if _rule_matches(rule, self.tool_name, _PATHS, target):
                return rule.decision == Decision.DENY
        return False


def primary_argument(tool_name: str, arguments: Mapping[str, Any]) -> list[str]:
    """What a rule's glob is matched against for a call of the tool called ``tool_name`` (see the
    module's docstring); never empty."""
    return _targets(tool_name).of(arguments)


def _targets(tool_name: str) -> Targets:
    tool = KNOWN_TOOLS.get(tool_name)
    return tool.targets if tool is not None else NO_TARGETS


def rules_for(agent_name: str, thread_agui_id: str) -> list[PermissionRule]:
    """The enabled rules that apply to a run of this agent in this thread, in evaluation order."""
    return list(_rules_query(agent_name, thread_agui_id))


async def arules_for(agent_name: str, thread_agui_id: str) -> list[PermissionRule]:
    """``rules_for`` for async callers."""
    return [rule async for rule in _rules_query(agent_name, thread_agui_id)]


def _rules_query(agent_name: str, thread_agui_id: str) -> QuerySet[PermissionRule]:
    in_scope = Q(scope=Scope.GLOBAL) | Q(scope=Scope.AGENT, agent__name=agent_name)
    if thread_agui_id:
        in_scope |= Q(scope=Scope.THREAD, thread_agui_id=thread_agui_id)
    # Global, agent and thread rules form one list ordered by position; at equal positions the
    # more specific rule is tried first, so a thread can override its agent, and an agent the rest.
    specificity = Case(
        When(scope=Scope.THREAD, then=Value(0)),
        When(scope=Scope.AGENT, then=Value(1)),
        default=Value(2),
        output_field=IntegerField(),
    )
    return (
        PermissionRule.objects.filter(in_scope, enabled=True)
        .select_related("agent")
        .order_by("position", specificity, "id")
    )


def memory_key(tool_name: str, arguments: Mapping[str, Any]) -> str:
    """The key a yes-always is remembered under: the tool's name and a pattern of its primary argument.
    Two calls share a key exactly when a yes-always for one covers the other, so a lookup is an
    equality test of keys.

    - file tools: the exact normalised path (``file_edit:src/app.py``);
    - apply_patch: every file the patch names, sorted (``apply_patch:a.py,src/b.py``);
    - bash: ``git status -s`` and ``git status`` share ``bash:git status*`` (programs with subcommands
      only); any other command, and every command that chains, pipes, redirects or substitutes, is
      remembered exactly;
    - web_fetch: the URL's host (``web_fetch:docs.python.org``); web_search and todo_write: the
      tool alone; a tool of unknown arguments: the exact arguments.
    """
    return _targets(tool_name).remembered_as(tool_name, arguments)


def _rule_matches(rule: PermissionRule, tool_name: str, seen: Targets, targets: list[str]) -> bool:
    if rule.tool and not tool_name_matches(rule.tool, tool_name):
        return False
    if rule.match in _ANYTHING:
        return True
    covers = all if rule.decision == Decision.ALLOW else any
    return covers(seen.matches(rule.match, target) for target in targets)


def _rule_reason(rule: PermissionRule, remembered: bool, auto_approve: bool) -> str:
    where = {Scope.GLOBAL: "", Scope.AGENT: f" (agent {rule.agent})", Scope.THREAD: f" (thread {rule.thread_agui_id})"}
    reason = (
        f"rule #{rule.pk}{where[Scope(rule.scope)]}: {rule.decision} {rule.tool or 'any tool'} `{rule.match or '*'}`"
    )
    if rule.decision == Decision.ASK and (remembered or auto_approve):
        overridden = "a yes-always of this session" if remembered else "auto-approve"
        reason += f"; an ask rule asks whatever {overridden} says"
    return reason

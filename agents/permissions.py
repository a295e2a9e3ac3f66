"""Permission rules: whether a tool call runs, waits for a person, or is refused (DESIGN.md §4).

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

What the globs see (``primary_argument``):

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
- other tools: the empty string, which only blank, ``*`` or ``**`` match.

Several targets (a patch's files, a command and its pieces): a ``deny`` or ``ask`` rule matches when
its glob matches ANY of them, an ``allow`` rule only when it matches ALL of them. So a patch that
touches one denied file is denied, a patch is allowed only when every file it touches is, and
``git status*`` does not allow ``git status; rm -rf ~`` while ``rm *`` does deny
``cd build && rm -rf .``. Cutting a command at quoted characters too only ever makes deny and ask
match more and allow match less. Rules on bash remain a guard-rail, not a sandbox: ``sh -c '…'``,
``xargs`` or an interpreter can hide a command from any glob.

A blank glob, ``*`` and ``**`` match anything, whatever the tool.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Case, IntegerField, Q, QuerySet, Value, When
from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchSet
from wcmatch import fnmatch as wcfnmatch
from wcmatch import glob as wcglob

from agents.confinement import server_workspace
from agents.models import PermissionRule
from agents.tools.ask import ASK_USER
from agents.tools.base import Tool
from agents.tools.grounding import GROUNDING_REPORT
from agents.tools.mutating import MUTATING_TOOLS
from agents.tools.readonly import READ_ONLY_TOOLS
from agents.tools.subagent import SUB_AGENT
from agents.tools.web import WEB_TOOLS, fetch_target, url_host
from agents.tools.workspace import PathGuard, ProtectedPath, Workspace

Decision = PermissionRule.Decision
Scope = PermissionRule.Scope

# The tools a rule may name. A tool added to the loop is added here, or rules cannot name it.
KNOWN_TOOLS: dict[str, Tool] = {
    tool.name: tool for tool in (*READ_ONLY_TOOLS, *WEB_TOOLS, ASK_USER, GROUNDING_REPORT, SUB_AGENT, *MUTATING_TOOLS)
}

_FILE_TOOLS = frozenset({"file_read", "file_write", "file_edit", "glob", "grep"})
_DIRECTORY_TOOLS = frozenset({"glob", "grep"})  # their path is a directory to search, "." by default
_PATH_TOOLS = _FILE_TOOLS | {"apply_patch"}
_ANYTHING = frozenset({"", "*", "**"})
# FORCEUNIX: a rule means the same on every platform the server runs on.
_PATH_FLAGS = wcglob.GLOBSTAR | wcglob.BRACE | wcglob.DOTGLOB | wcglob.FORCEUNIX
_COMMAND_FLAGS = wcfnmatch.BRACE | wcfnmatch.DOTMATCH | wcfnmatch.FORCEUNIX
_HOST_FLAGS = _COMMAND_FLAGS | wcfnmatch.IGNORECASE
_COMMAND_BREAKS = re.compile(r"[;&|<>()`\n]")
_DEV_NULL = "/dev/null"


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
) -> Verdict:
    """The verdict on calling ``tool`` with ``arguments``.

    ``rules`` are the rules in scope, in evaluation order (``rules_for``); disabled ones are skipped.
    ``remembered``: a yes-always of this session covers the call (see ``memory_key``).
    ``auto_approve``: the run approves what would otherwise ask. Neither overrides a matching rule.
    ``workspace`` (default: the server's) resolves the call's paths: a rule sees each path both as
    given and with its links resolved, and a path that reaches the server's own files is denied
    above every rule.
    """
    targets = primary_argument(tool.name, arguments)
    if tool.name in _PATH_TOOLS:
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
        if rule.enabled and _rule_matches(rule, tool.name, targets):
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
        self.rules = [rule for rule in rules if rule.enabled and (not rule.tool or rule.tool == tool_name)]
        self.tool_name = tool_name

    def denies(self, relative: str) -> bool:
        target = [normalise_path(relative)]
        for rule in self.rules:
            if _rule_matches(rule, self.tool_name, target):
                return rule.decision == Decision.DENY
        return False


def primary_argument(tool_name: str, arguments: Mapping[str, Any]) -> list[str]:
    """What a rule's glob is matched against for this call (see the module's docstring); never empty.
    An argument of the wrong type counts as empty: the tool itself refuses such a call."""
    if tool_name in _FILE_TOOLS:
        default = "." if tool_name in _DIRECTORY_TOOLS else ""
        return [normalise_path(_text(arguments, "path") or default)]
    if tool_name == "apply_patch":
        return _patch_targets(_text(arguments, "patch")) or [""]
    if tool_name == "bash":
        return _command_targets(_text(arguments, "command"))
    if tool_name == "web_fetch":
        return [fetch_target(dict(arguments))]
    if tool_name == "web_search":
        return [_text(arguments, "query").strip()]
    return [""]


def normalise_path(path: str) -> str:
    """A workspace path as rules see it: no ``./``, no doubled or trailing ``/``, ``..`` folded."""
    return posixpath.normpath(path) if path else ""


def glob_error(pattern: str) -> str | None:
    """Why ``pattern`` cannot be a rule's glob, or None when it can."""
    if "\x00" in pattern:
        return "The glob contains a NUL character."
    try:
        wcglob.compile(pattern, flags=_PATH_FLAGS)
        wcfnmatch.compile(pattern, flags=_COMMAND_FLAGS)
    except Exception as exc:  # wcmatch raises its PatternLimitException, which it does not export
        return f"The glob does not compile: {exc}."
    return None


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


# Programs whose second word names what they do (``git push``, ``npm test``): a yes-always for one of
# their commands covers the same subcommand with any arguments. Any other command is remembered
# exactly, so approving ``rm -rf build`` always never approves ``rm -rf /``.
_SUBCOMMAND_PROGRAMS = frozenset(
    {"git", "npm", "pnpm", "yarn", "cargo", "go", "uv", "pip", "poetry", "docker", "kubectl", "make"}
)
_SUBCOMMAND = re.compile(r"[a-z][a-z0-9:_-]*")


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
    if tool_name in _FILE_TOOLS:
        return f"{tool_name}:{primary_argument(tool_name, arguments)[0]}"
    if tool_name == "apply_patch":
        return f"apply_patch:{','.join(sorted(set(primary_argument(tool_name, arguments))))}"
    if tool_name == "bash":
        return f"bash:{_command_pattern(_text(arguments, 'command').strip())}"
    if tool_name == "web_fetch":
        return f"web_fetch:{url_host(fetch_target(dict(arguments)))}"
    if tool_name in ("todo_write", "web_search"):
        return tool_name
    return f"{tool_name}:{json.dumps(arguments, sort_keys=True, default=str)}"


def _command_pattern(command: str) -> str:
    words = command.split()
    if _COMMAND_BREAKS.search(command) or len(words) < 2 or words[0] not in _SUBCOMMAND_PROGRAMS:
        return command
    return f"{words[0]} {words[1]}*" if _SUBCOMMAND.fullmatch(words[1]) else command


def _command_targets(command: str) -> list[str]:
    whole = command.strip()
    if not _COMMAND_BREAKS.search(whole):
        return [whole]
    pieces = [piece.strip() for piece in _COMMAND_BREAKS.split(whole)]
    return [whole, *(piece for piece in pieces if piece)]


def _text(arguments: Mapping[str, Any], name: str) -> str:
    value = arguments.get(name)
    return value if isinstance(value, str) else ""


def _rule_matches(rule: PermissionRule, tool_name: str, targets: list[str]) -> bool:
    if rule.tool and rule.tool != tool_name:
        return False
    if rule.match in _ANYTHING:
        return True
    covers = all if rule.decision == Decision.ALLOW else any
    return covers(_glob_matches(rule.match, tool_name, target) for target in targets)


def _glob_matches(pattern: str, tool_name: str, target: str) -> bool:
    if tool_name == "web_fetch":
        # A glob with a scheme is over the whole URL; any other only over the host, so that
        # ``*.example.com`` cannot match ``https://evil.net/?next=docs.example.com``.
        if "://" in pattern:
            return bool(wcfnmatch.fnmatch(target, pattern, flags=_COMMAND_FLAGS))
        host = url_host(target)
        return bool(host) and bool(wcfnmatch.fnmatch(host, pattern, flags=_HOST_FLAGS))
    if tool_name not in _PATH_TOOLS:
        return bool(wcfnmatch.fnmatch(target, pattern, flags=_COMMAND_FLAGS))
    while pattern.startswith("./"):
        pattern = pattern[2:]
    candidates = [target] if target in ("", ".") else [target, target + "/"]
    return any(wcglob.globmatch(candidate, pattern, flags=_PATH_FLAGS) for candidate in candidates)


def _rule_reason(rule: PermissionRule, remembered: bool, auto_approve: bool) -> str:
    where = {Scope.GLOBAL: "", Scope.AGENT: f" (agent {rule.agent})", Scope.THREAD: f" (thread {rule.thread_agui_id})"}
    reason = (
        f"rule #{rule.pk}{where[Scope(rule.scope)]}: {rule.decision} {rule.tool or 'any tool'} `{rule.match or '*'}`"
    )
    if rule.decision == Decision.ASK and (remembered or auto_approve):
        overridden = "a yes-always of this session" if remembered else "auto-approve"
        reason += f"; an ask rule asks whatever {overridden} says"
    return reason


def _patch_targets(patch: str) -> list[str]:
    try:
        sections = [(patched.source_file, patched.target_file) for patched in PatchSet(patch)]
    except UnidiffParseError:
        # The tool refuses a patch it cannot parse; its header lines still say what it meant to touch.
        sections = _header_sections(patch)
    targets: list[str] = []
    for source, target in sections:
        for name in _section_paths(source, target):
            if (path := normalise_path(name)) not in targets:
                targets.append(path)
    return targets


def _header_sections(patch: str) -> list[tuple[str, str]]:
    sections: list[tuple[str, str]] = []
    for line in patch.splitlines():
        name = line[4:].split("\t")[0].strip()
        if line.startswith("--- "):
            sections.append((name, _DEV_NULL))
        elif line.startswith("+++ "):
            sections.append((_DEV_NULL, name))
    return sections


def _section_paths(source: str, target: str) -> list[str]:
    """The files a section names, as apply_patch reads them: git's a/ and b/ prefixes dropped when
    every side that names a file carries its prefix, /dev/null skipped."""
    names = [_unquote(source) if source != _DEV_NULL else None, _unquote(target) if target != _DEV_NULL else None]
    old, new = names
    if (old is None or old.startswith("a/")) and (new is None or new.startswith("b/")):
        names = [name[2:] if name is not None else None for name in names]
    return [name for name in dict.fromkeys(names) if name]


def _unquote(name: str) -> str:
    return name[1:-1] if len(name) >= 2 and name[0] == name[-1] == '"' else name

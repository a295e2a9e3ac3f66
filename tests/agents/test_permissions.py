"""Permission rules: ordered, first match wins, an ask rule is a gate, no match falls back to the tool's class."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError

from agents.models import Agent, PermissionRule
from agents.permissions import (
    Decision,
    Verdict,
    arules_for,
    evaluate,
    memory_key,
    primary_argument,
    rules_for,
)
from orchestrator.tools.base import Tool, ToolOutput
from orchestrator.tools.mutating import APPLY_PATCH, BASH, FILE_EDIT, FILE_WRITE, TODO_WRITE
from orchestrator.tools.readonly import FILE_READ, GLOB, GREP
from orchestrator.tools.targets import CommandTargets, PathTarget
from orchestrator.tools.workspace import Workspace


@pytest.fixture
def coder(db: None) -> Agent:
    return Agent.objects.create(name="coder-rules")


@pytest.fixture
def reviewer(db: None) -> Agent:
    return Agent.objects.create(name="reviewer")


def rule(position: int, decision: str, tool: str = "", match: str = "", **fields: Any) -> PermissionRule:
    """A rule written as the admin writes it: validated, then saved."""
    made = PermissionRule(position=position, decision=decision, tool=tool, match=match, **fields)
    made.full_clean()
    made.save()
    return made


def verdict(
    tool: Tool,
    *,
    remembered: bool = False,
    auto_approve: bool = False,
    rules: list[PermissionRule] | None = None,
    **arguments: Any,
) -> Verdict:
    in_scope = rules_for("coder-rules", "t-1") if rules is None else rules
    return evaluate(in_scope, tool=tool, arguments=arguments, remembered=remembered, auto_approve=auto_approve)


# Order and first match


def test_the_first_matching_rule_decides(db):
    allow = rule(10, "allow", "bash", "git *")
    deny = rule(20, "deny", "bash")
    assert verdict(BASH, command="git status") == Verdict(
        Decision.ALLOW, allow.pk, f"rule #{allow.pk}: allow bash `git *`"
    )
    assert verdict(BASH, command="ls").rule_id == deny.pk
    assert verdict(BASH, command="ls").decision == Decision.DENY


def test_rules_are_tried_by_position_not_by_age(db):
    rule(20, "allow", "file_write")
    deny = rule(10, "deny", "file_write", "src/**")
    assert verdict(FILE_WRITE, path="src/app.py").rule_id == deny.pk


def test_a_rule_for_another_tool_does_not_match(db):
    rule(10, "deny", "file_write", "**")
    assert verdict(FILE_READ, path="src/app.py") == Verdict(
        Decision.ALLOW, None, "no rule matched; file_read only reads, so it runs"
    )


def test_a_rule_without_a_tool_matches_every_tool(db):
    deny = rule(10, "deny", "", "secrets/**")
    for tool in (FILE_READ, FILE_WRITE, FILE_EDIT, GREP):
        assert verdict(tool, path="secrets/key.pem").rule_id == deny.pk


def test_disabled_rules_are_skipped(db):
    disabled = rule(10, "deny", "file_read", enabled=False)
    assert verdict(FILE_READ, path="a.py").decision == Decision.ALLOW
    # Even when a caller hands one in.
    assert verdict(FILE_READ, rules=[disabled], path="a.py").decision == Decision.ALLOW


def test_a_deny_rule_refuses_a_read_only_tool(db):
    deny = rule(10, "deny", "file_read", ".env*")
    assert verdict(FILE_READ, path=".env.local").rule_id == deny.pk
    assert verdict(FILE_READ, path=".env.local").decision == Decision.DENY


def test_an_allow_rule_runs_a_mutating_tool_without_asking(db):
    allow = rule(10, "allow", "file_edit", "src/**")
    assert verdict(FILE_EDIT, path="src/app.py") == Verdict(
        Decision.ALLOW, allow.pk, f"rule #{allow.pk}: allow file_edit `src/**`"
    )


# The ask gate


def test_an_ask_rule_asks_even_when_the_call_was_approved_always(db):
    gate = rule(10, "ask", "bash", "git push*")
    got = verdict(BASH, remembered=True, command="git push origin main")
    assert (got.decision, got.rule_id) == (Decision.ASK, gate.pk)
    assert "an ask rule asks whatever a yes-always of this session says" in got.reason


def test_an_ask_rule_asks_even_with_auto_approve(db):
    gate = rule(10, "ask", "", "*")
    got = verdict(FILE_READ, auto_approve=True, path="README.md")
    assert (got.decision, got.rule_id) == (Decision.ASK, gate.pk)
    assert got.reason.endswith("whatever auto-approve says")


# No rule: the tool's class decides


def test_with_no_rule_a_read_only_tool_runs(db):
    for tool, arguments in ((FILE_READ, {"path": "a.py"}), (GLOB, {"pattern": "**/*.py"}), (GREP, {"pattern": "x"})):
        assert verdict(tool, **arguments).decision == Decision.ALLOW


def test_with_no_rule_a_mutating_tool_asks(db):
    got = verdict(BASH, command="make")
    assert got == Verdict(Decision.ASK, None, "no rule matched; bash is not read-only, so it asks")
    assert verdict(TODO_WRITE, todos=[]).decision == Decision.ASK


def test_with_no_rule_a_remembered_mutating_call_runs(db):
    got = verdict(FILE_WRITE, remembered=True, path="a.py")
    assert got == Verdict(
        Decision.ALLOW, None, "no rule matched; a yes-always of this session covers this file_write call"
    )


def test_with_no_rule_auto_approve_runs_a_mutating_call(db):
    got = verdict(FILE_WRITE, auto_approve=True, path="a.py")
    assert got == Verdict(Decision.ALLOW, None, "no rule matched; file_write is not read-only, but auto-approve is on")


# Globs over paths


@pytest.mark.parametrize(
    ("match", "path", "matches"),
    [
        ("src/**", "src/app.py", True),
        ("src/**", "src/deep/er/app.py", True),
        ("**/*.py", "app.py", True),
        ("**/*.py", "src/deep/app.py", True),
        ("*.py", "app.py", True),
        ("*.py", "src/app.py", False),  # * does not cross /
        ("src/*.py", "src/deep/app.py", False),
        ("*.{py,md}", "README.md", True),
        ("*.{py,md}", "setup.cfg", False),
        ("src/{a,b}/**", "src/b/x.py", True),
        ("src/app.py", "./src/app.py", True),  # a leading ./ in the path
        ("./src/app.py", "src/app.py", True),  # and in the glob
        ("src/app.py", "src//app.py", True),
        ("secrets/**", "src/../secrets/key.pem", True),  # .. is folded before matching
        ("secrets/*", "secrets/.env", True),  # * matches dot-files
        ("secrets/**", "secrets", True),  # a directory matches a glob of its contents
        ("src", "src/app.py", False),
        ("*", "deep/er/app.py", True),  # *, ** and blank match anything
        ("**", "deep/er/app.py", True),
    ],
)
def test_path_globs(db, match, path, matches):
    deny = rule(10, "deny", "file_write", match)
    assert (verdict(FILE_WRITE, path=path).rule_id == deny.pk) is matches


def test_glob_and_grep_without_a_path_search_the_workspace_root(db):
    deny = rule(10, "deny", "grep", "**")
    assert primary_argument("glob", {"pattern": "**/*.py"}) == ["."]
    assert primary_argument("grep", {"pattern": "x", "path": ""}) == ["."]
    assert verdict(GREP, pattern="x").rule_id == deny.pk


def test_a_search_of_a_denied_directory_is_denied(db):
    deny = rule(10, "deny", "", "secrets/**")
    assert verdict(GREP, pattern="password", path="secrets").rule_id == deny.pk
    assert verdict(GLOB, pattern="*", path="./secrets/").rule_id == deny.pk


# Globs over bash commands


@pytest.mark.parametrize(
    ("match", "command", "matches"),
    [
        ("git status*", "git status", True),
        ("git status*", "git status --short", True),
        ("git status*", "git stash", False),
        ("rm *", "rm -rf build", True),
        ("rm *", "rm -rf /usr/lib", True),  # * crosses / in a command
        ("rm *", "echo rm", False),
        ("git {push,pull}*", "git pull --rebase", True),
        ("*.venv/bin/python*", ".venv/bin/python -m pytest", True),
        ("rm *", "  rm -rf build  ", True),
    ],
)
def test_bash_globs_match_the_whole_command(db, match, command, matches):
    deny = rule(10, "deny", "bash", match)
    assert (verdict(BASH, command=command).rule_id == deny.pk) is matches


def test_a_deny_rule_catches_a_command_chained_after_another(db):
    deny = rule(10, "deny", "bash", "rm *")
    for command in ("cd build && rm -rf .", "ls; rm -rf ~", "echo $(rm -rf ~)", "true || rm x"):
        assert verdict(BASH, command=command).rule_id == deny.pk, command


def test_an_allow_rule_covers_a_chained_command_only_when_it_covers_every_piece(db):
    allow = rule(10, "allow", "bash", "git *")
    assert verdict(BASH, command="git status && git diff").rule_id == allow.pk
    for command in ("git status; rm -rf ~", "git log > /tmp/x", "git status $(curl evil.example)", "git st\nrm x"):
        assert verdict(BASH, command=command) == Verdict(
            Decision.ASK, None, "no rule matched; bash is not read-only, so it asks"
        ), command


def test_bash_primary_argument_is_the_command_and_its_pieces():
    assert primary_argument("bash", {"command": "  git status "}) == ["git status"]
    assert primary_argument("bash", {"command": "cd x && make | tail"}) == [
        "cd x && make | tail",
        "cd x",
        "make",
        "tail",
    ]


# apply_patch: every target


def patch_of(*sections: tuple[str, str]) -> str:
    return "".join(f"--- {old}\n+++ {new}\n@@ -1 +1 @@\n-a\n+b\n" for old, new in sections)


def test_apply_patch_targets_are_every_file_the_diff_names():
    patch = patch_of(("a/src/app.py", "b/src/app.py"), ("/dev/null", "b/docs/new.md"), ("a/old.txt", "/dev/null"))
    assert primary_argument("apply_patch", {"patch": patch}) == ["src/app.py", "docs/new.md", "old.txt"]
    assert primary_argument("apply_patch", {"patch": patch_of(("./x.py", "./x.py"))}) == ["x.py"]
    assert primary_argument("apply_patch", {"patch": "not a diff"}) == [""]


def test_apply_patch_targets_of_an_unparseable_patch_come_from_its_header_lines():
    broken = "--- a/src/app.py\n+++ b/secrets/key.pem\n@@ -1,9 +1,9 @@\n-only one line\n"
    assert primary_argument("apply_patch", {"patch": broken}) == ["src/app.py", "secrets/key.pem"]


def test_a_deny_rule_matches_a_patch_that_touches_any_denied_file(db):
    deny = rule(10, "deny", "apply_patch", "secrets/**")
    patch = patch_of(("a/src/app.py", "b/src/app.py"), ("a/secrets/key.pem", "b/secrets/key.pem"))
    assert verdict(APPLY_PATCH, patch=patch).rule_id == deny.pk


def test_an_allow_rule_matches_a_patch_only_when_it_covers_every_file(db):
    allow = rule(10, "allow", "apply_patch", "src/**")
    inside = patch_of(("a/src/app.py", "b/src/app.py"), ("/dev/null", "b/src/new.py"))
    assert verdict(APPLY_PATCH, patch=inside).rule_id == allow.pk
    partly_outside = patch_of(("a/src/app.py", "b/src/app.py"), ("a/setup.py", "b/setup.py"))
    assert verdict(APPLY_PATCH, patch=partly_outside).decision == Decision.ASK


def test_tools_without_a_primary_argument_match_only_anything_globs(db):
    rule(10, "deny", "", "src/**")
    allow = rule(20, "allow", "todo_write", "*")
    assert primary_argument("todo_write", {"todos": []}) == [""]
    assert primary_argument("sub_agent", {"task": "x"}) == [""]
    assert verdict(TODO_WRITE, todos=[]).rule_id == allow.pk


# Validation


def test_an_invalid_glob_is_rejected(db):
    with pytest.raises(ValidationError) as caught:
        rule(10, "deny", "bash", "{1..100000}")
    assert "does not compile" in str(caught.value.message_dict["match"])


def test_an_unknown_tool_is_rejected(db):
    with pytest.raises(ValidationError) as caught:
        rule(10, "deny", "bahs", "*")
    assert "No tool is called 'bahs'" in caught.value.message_dict["tool"][0]


@pytest.mark.parametrize(
    ("scope", "with_agent", "thread_agui_id", "wrong"),
    [
        ("agent", False, "", "agent"),
        ("thread", False, "", "thread_agui_id"),
        ("global", False, "t-1", "thread_agui_id"),
        ("global", True, "", "agent"),
        ("thread", True, "t-1", "agent"),
    ],
)
def test_a_scope_needs_its_target_and_only_its_target(coder, scope, with_agent, thread_agui_id, wrong):
    agent = coder if with_agent else None
    with pytest.raises(ValidationError) as caught:
        rule(10, "deny", scope=scope, agent=agent, thread_agui_id=thread_agui_id)
    assert list(caught.value.message_dict) == [wrong]


def test_the_database_refuses_a_scope_without_its_target(db):
    with pytest.raises(IntegrityError):
        PermissionRule.objects.create(position=1, decision="deny", scope="agent")


# Scope and the selector


def test_rules_for_merges_the_scopes_that_apply_by_position(coder, reviewer):
    glob_ = rule(10, "allow", "bash", "git *")
    own = rule(5, "deny", "bash", "git push*", scope="agent", agent=coder)
    rule(1, "deny", "bash", scope="agent", agent=reviewer)
    thread = rule(20, "ask", "bash", scope="thread", thread_agui_id="t-1")
    rule(1, "deny", "bash", scope="thread", thread_agui_id="t-2")
    assert rules_for("coder-rules", "t-1") == [own, glob_, thread]
    assert rules_for("coder-rules", "") == [own, glob_]
    assert verdict(BASH, command="git push").reason == f"rule #{own.pk} (agent coder-rules): deny bash `git push*`"


def test_at_equal_positions_the_more_specific_scope_comes_first(coder):
    glob_ = rule(10, "allow", "bash")
    agent = rule(10, "ask", "bash", scope="agent", agent=coder)
    thread = rule(10, "deny", "bash", scope="thread", thread_agui_id="t-1")
    assert rules_for("coder-rules", "t-1") == [thread, agent, glob_]


def test_rules_for_leaves_out_disabled_rules(db):
    rule(10, "deny", "bash", enabled=False)
    assert rules_for("coder-rules", "t-1") == []


def test_rules_for_is_one_query_however_many_rules(coder, django_assert_num_queries):
    for position in range(5):
        rule(position, "ask", "file_write", f"dir{position}/**", scope="agent", agent=coder)
        rule(position, "ask", "file_write", f"t{position}/**", scope="thread", thread_agui_id="t-1")
    with django_assert_num_queries(1):
        rules = rules_for("coder-rules", "t-1")
        # The reasons name each rule's agent without a query of their own.
        verdicts = [
            evaluate(
                [r], tool=FILE_WRITE, arguments={"path": f"{r.match[:-3]}/x"}, remembered=False, auto_approve=False
            )
            for r in rules
        ]
    assert [v.reason for v in verdicts[:2]] == [
        f"rule #{rules[0].pk} (thread t-1): ask file_write `t0/**`",
        f"rule #{rules[1].pk} (agent coder-rules): ask file_write `dir0/**`",
    ]


@pytest.mark.django_db(transaction=True)
async def test_arules_for_is_rules_for_for_async_callers():
    made = await PermissionRule.objects.acreate(position=1, decision="deny", tool="bash")
    assert await arules_for("coder-rules", "t-1") == [made]


# What a yes-always remembers


@pytest.mark.parametrize(
    ("tool", "arguments", "key"),
    [
        ("file_edit", {"path": "./src//app.py"}, "file_edit:src/app.py"),
        ("file_write", {"path": "src/app.py"}, "file_write:src/app.py"),
        ("bash", {"command": "git status"}, "bash:git status*"),
        ("bash", {"command": "git status --short"}, "bash:git status*"),
        ("bash", {"command": "npm run build"}, "bash:npm run*"),
        ("bash", {"command": "git -C sub status"}, "bash:git -C sub status"),
        ("bash", {"command": "rm -rf build"}, "bash:rm -rf build"),
        ("bash", {"command": "git status && rm -rf ~"}, "bash:git status && rm -rf ~"),
        ("todo_write", {"todos": [{"id": "1"}]}, "todo_write"),
        ("sub_agent", {"task": "b", "context": "a"}, 'sub_agent:{"context": "a", "task": "b"}'),
    ],
)
def test_memory_key(tool, arguments, key):
    assert memory_key(tool, arguments) == key


def test_memory_key_of_a_patch_names_its_files_sorted():
    patch = patch_of(("a/src/b.py", "b/src/b.py"), ("a/a.py", "b/a.py"))
    assert memory_key("apply_patch", {"patch": patch}) == "apply_patch:a.py,src/b.py"


def test_a_yes_always_for_one_command_does_not_cover_another_program():
    assert memory_key("bash", {"command": "rm -rf build"}) != memory_key("bash", {"command": "rm -rf /"})
    assert memory_key("bash", {"command": "git status"}) != memory_key("bash", {"command": "git push"})


# A tool's targets, not its name, decide what the globs see


def test_a_new_tool_is_matched_by_the_targets_it_declares_not_by_its_name(tmp_path):
    async def run(arguments: dict[str, Any], context: Any) -> ToolOutput:
        return ToolOutput("")

    runner = Tool("task_run", "", {"type": "object"}, run, read_only=False, targets=CommandTargets())
    viewer = Tool("file_view", "", {"type": "object"}, run, targets=PathTarget())
    deny_rm = PermissionRule(position=1, decision="deny", tool="task_run", match="rm *")
    deny_secrets = PermissionRule(position=1, decision="deny", match="secrets/**")
    workspace = Workspace(tmp_path)

    def decide(tool: Tool, rules: list[PermissionRule], **arguments: Any) -> str:
        found = evaluate(
            rules, tool=tool, arguments=arguments, remembered=False, auto_approve=False, workspace=workspace
        )
        return str(found.decision)

    assert decide(runner, [deny_rm], command="make && rm -rf build") == "deny"  # cut at its breaks, as bash
    assert decide(runner, [deny_rm], command="make") == "ask"
    assert decide(viewer, [deny_secrets], path="./secrets//key.pem") == "deny"  # normalised, as file_read
    assert decide(viewer, [deny_secrets], path="src/app.py") == "allow"
    assert memory_key("todo_write", {"todos": [1]}) == memory_key("todo_write", {"todos": [2]}) == "todo_write"

"""Workspaces (issue #24): each user's files stay theirs, each thread can have its own, a workspace
starts from a template, has a size limit, is shown with its thread and is pruned when idle.

Two people share one server here, each with their own API token, and their agents try every tool
on each other's files: by name, by grep over / and .., by find /, through /proc, through links."""

from __future__ import annotations

import asyncio
import subprocess

import httpx
import orjson
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import override_settings
from rest_framework.authtoken.models import Token

from agents.workspaces import place_of
from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import run_input, user, v1
from threads.models import Thread
from threads.models import Workspace as WorkspaceRow
from threads.services.workspaces import thread_delete

SECRET = "alice-private-4f1c"
# The secret as a pattern that does not match its own text: a grep over / reads its own command
# line in /proc. /usr and /sys hold nothing of the server's and take minutes to read.
SEARCH_ALL = (
    "grep -rIs 'alice-privat[e]-4f1c' / --exclude-dir=usr --exclude-dir=sys --exclude-dir=proc; "
    "grep -rIs 'alice-privat[e]-4f1c' ..; "
    "find / -path /usr -prune -o -path /sys -prune -o -path /proc -prune -o -name notes.txt -print 2>/dev/null"
)


def _person(name: str) -> str:
    return Token.objects.create(user=User.objects.create_user(name)).key


def _run(server, fake_api, key: str, thread: str, run: str, turns, text: str = "go") -> bytes:
    fake_api.script([*turns, text_turn(["Done."])])
    response = httpx.post(
        f"{server.url}/agui/coder",
        content=orjson.dumps(v1(run_input(thread, run, user(text, f"u-{run}")))),
        headers={"Authorization": f"Token {key}", "Content-Type": "application/json"},
        timeout=60,
    )
    server.drain()
    assert response.status_code == 200 and b"RUN_FINISHED" in response.content, response.content[-500:]
    return response.content


def _tool_results(fake_api, count: int) -> list[str]:
    """The tool results the model was sent in the last ``count`` requests."""
    results: list[str] = []
    for request in fake_api.requests[-count:]:
        last = request.body["messages"][-1]
        if last["role"] == "user" and isinstance(last["content"], list):
            for block in last["content"]:
                if block.get("type") == "tool_result":
                    content = block["content"]
                    results.append(content if isinstance(content, str) else orjson.dumps(content).decode())
    return results


@pytest.fixture
def mutating_on():
    with override_settings(AGENT_MUTATING_TOOLS="on"):
        yield


def test_two_users_cannot_reach_each_others_files_by_any_tool(server, fake_api, workspace, mutating_on):
    alice, bob = _person("alice"), _person("bob")
    _run(server, fake_api, alice, "t-alice", "r1", [tool_turn("file_write", {"path": "notes.txt", "content": SECRET})])
    alice_place = place_of(owner_id=User.objects.get(username="alice").pk, thread_pk=None)
    assert (alice_place.path / "notes.txt").read_text() == SECRET

    probes = [
        tool_turn("file_read", {"path": "notes.txt"}),
        tool_turn("file_read", {"path": f"../{alice_place.path.name}/notes.txt"}),
        tool_turn("grep", {"pattern": SECRET, "path": ".."}),
        tool_turn("glob", {"pattern": "../**/notes.txt"}),
        tool_turn("bash", {"command": SEARCH_ALL}),
        tool_turn(
            "bash", {"command": f"cat {alice_place.path}/notes.txt; cat /proc/*/root{alice_place.path}/notes.txt"}
        ),
        tool_turn("bash", {"command": f"ln -s {alice_place.path} peek; cat peek/notes.txt; ls -la {workspace}"}),
        tool_turn("file_read", {"path": "peek/notes.txt"}),
        tool_turn("file_write", {"path": "notes.txt", "content": "bob's own"}),
    ]
    _run(server, fake_api, bob, "t-bob", "r1", probes)
    results = _tool_results(fake_api, len(probes) + 1)
    assert len(results) == len(probes)
    assert not any(SECRET in result for result in results), results
    # Bob's note of the same name is his own; Alice's is unchanged, and her next run reads hers.
    bob_place = place_of(owner_id=User.objects.get(username="bob").pk, thread_pk=None)
    assert (bob_place.path / "notes.txt").read_text() == "bob's own"
    assert (alice_place.path / "notes.txt").read_text() == SECRET
    _run(server, fake_api, alice, "t-alice", "r2", [tool_turn("file_read", {"path": "notes.txt"})])
    assert SECRET in _tool_results(fake_api, 2)[0]


def test_the_shared_tokens_threads_reach_no_users_workspace(server, fake_api, workspace, mutating_on):
    alice = _person("alice")
    _run(server, fake_api, alice, "t-alice", "r1", [tool_turn("file_write", {"path": "notes.txt", "content": SECRET})])
    probe = tool_turn("bash", {"command": SEARCH_ALL})
    _run(server, fake_api, server.token, "t-shared", "r1", [probe, tool_turn("grep", {"pattern": SECRET})])
    searched, grepped = _tool_results(fake_api, 3)
    assert SECRET not in searched and grepped == f"no matches for {SECRET}"
    assert not (workspace / "notes.txt").exists()


def test_one_user_through_the_official_clients_works_in_their_own_directory(server, fake_api, workspace, mutating_on):
    olive = _person("olive")
    for version in ("1", "0"):
        fake_api.script([tool_turn("bash", {"command": f"echo {version} >> who.txt; pwd"}), text_turn(["ok"])])
        (result,) = run_client(
            version,
            f"{server.url}/agui/coder",
            "",
            [{"threadId": f"t-{version}", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "hi"}]}],
            headers={"Authorization": f"Token {olive}"},
        )
        server.drain()
        assert result["error"] is None, result["error"]
    place = place_of(owner_id=User.objects.get(username="olive").pk, thread_pk=None)
    assert (place.path / "who.txt").read_text() == "1\n0\n"  # both threads of one owner share it
    assert place.path.is_relative_to(workspace.parent / "workspaces")


def test_in_thread_mode_each_thread_has_its_own_directory(server, fake_api, workspace, mutating_on):
    olive = _person("olive")
    with override_settings(AGENT_WORKSPACE_MODE="thread"):
        for thread in ("t-a", "t-b"):
            write = tool_turn("file_write", {"path": "same.txt", "content": thread})
            _run(server, fake_api, olive, thread, "r1", [write, tool_turn("file_read", {"path": "same.txt"})])
            assert thread in _tool_results(fake_api, 3)[-1]
        places = {t.agui_thread_id: place_of(owner_id=None, thread_pk=t.pk) for t in Thread.objects.all()}
        assert {(place.path / "same.txt").read_text() for place in places.values()} == {"t-a", "t-b"}
        # Deleting a thread takes its directory with it; the other's stays.
        doomed = Thread.objects.get(agui_thread_id="t-a")
        thread_delete(thread=doomed)
        assert not places["t-a"].path.exists() and places["t-b"].path.exists()
        assert not WorkspaceRow.objects.filter(key=places["t-a"].key).exists()


def test_the_rest_thread_shows_its_workspace(server, fake_api, workspace, mutating_on):
    olive = _person("olive")
    _run(server, fake_api, olive, "t-olive", "r1", [tool_turn("file_write", {"path": "a.txt", "content": "x" * 1000})])
    body = httpx.get(f"{server.url}/api/threads/t-olive/", headers={"Authorization": f"Token {olive}"}).json()
    shown = body["workspace"]
    assert shown["path"] == f"users/{User.objects.get(username='olive').pk}"
    assert shown["bytes"] >= 1000 and shown["createdAt"]


def test_at_its_size_limit_a_workspace_refuses_growth_but_not_reads(server, fake_api, workspace, mutating_on):
    olive = _person("olive")
    with override_settings(AGENT_WORKSPACE_MAX_BYTES=5000):
        big = tool_turn("file_write", {"path": "big.txt", "content": "y" * 4000})
        after = [
            tool_turn("file_write", {"path": "more.txt", "content": "z" * 4000}),
            tool_turn("bash", {"command": "head -c 8000 /dev/zero > more.bin"}),
            tool_turn("file_read", {"path": "big.txt", "limit": 1}),
        ]
        _run(server, fake_api, olive, "t-olive", "r1", [big, *after])
        results = _tool_results(fake_api, 5)
        assert "limit of 5,000" in results[1] and "size limit" in results[2]
        assert "yyyy" in results[3]
        place = place_of(owner_id=User.objects.get(username="olive").pk, thread_pk=None)
        assert not (place.path / "more.txt").exists()
        assert (place.path / "more.bin").stat().st_size <= 1000  # the room the workspace had left
        # Once the file is removed, writes work again.
        (place.path / "big.txt").unlink()
        write = tool_turn("file_write", {"path": "more.txt", "content": "z" * 4000})
        _run(server, fake_api, olive, "t-olive", "r2", [write])
        assert (place.path / "more.txt").read_text() == "z" * 4000


def test_a_directory_template_is_copied_and_its_outward_link_stays_a_refused_link(tmp_path, db):
    template = tmp_path / "template"
    template.mkdir()
    (template / "README.md").write_text("from the template\n")
    secret = tmp_path / "outside.txt"
    secret.write_text("outside the workspace\n")
    (template / "escape").symlink_to(secret)
    with override_settings(AGENT_WORKSPACE_TEMPLATE=str(template), AGENT_WORKSPACES_ROOT=tmp_path / "root"):
        from agents.runtime import tool_context
        from agents.workspaces import prepare
        from orchestrator.tools.base import ToolRegistry
        from orchestrator.tools.catalog import KNOWN_TOOLS

        place = place_of(owner_id=7, thread_pk=None)
        assert prepare(place) is True and prepare(place) is False
        assert (place.path / "README.md").read_text() == "from the template\n"
        assert (place.path / "escape").is_symlink()
        context = tool_context(workspace=place.path)
        read = asyncio.run(ToolRegistry.of([KNOWN_TOOLS["file_read"]]).call("file_read", {"path": "escape"}, context))
        assert read.is_error and "outside the workspace" not in read.content.replace("resolves outside", "")
        bash = asyncio.run(ToolRegistry.of([KNOWN_TOOLS["bash"]]).call("bash", {"command": "cat escape"}, context))
        assert "outside the workspace" not in bash.content


def test_a_git_template_is_cloned_on_a_branch_per_thread(tmp_path, db):
    origin = tmp_path / "origin"
    origin.mkdir()
    git = ["git", "-C", str(origin), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (origin / "app.py").write_text("print('hi')\n")
    subprocess.run([*git, "add", "app.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
    with override_settings(
        AGENT_WORKSPACE_TEMPLATE=str(origin), AGENT_WORKSPACES_ROOT=tmp_path / "root", AGENT_WORKSPACE_MODE="thread"
    ):
        from agents.workspaces import prepare

        place = place_of(owner_id=None, thread_pk="0" * 32, agui_thread_id="t-review me")
        assert prepare(place)
        branch = subprocess.run(
            ["git", "-c", "safe.directory=*", "-C", str(place.path), "branch", "--show-current"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert branch == "threadline/t-reviewme"
        assert (place.path / "app.py").read_text() == "print('hi')\n"


def test_prune_removes_idle_workspaces_after_a_dry_run(server, fake_api, workspace, mutating_on, capsys):
    olive, sam = _person("olive"), _person("sam")
    _run(server, fake_api, olive, "t-olive", "r1", [tool_turn("file_write", {"path": "a.txt", "content": "a"})])
    _run(server, fake_api, sam, "t-sam", "r1", [tool_turn("file_write", {"path": "b.txt", "content": "b"})])
    from datetime import timedelta

    from django.utils import timezone

    Thread.objects.filter(agui_thread_id="t-olive").update(updated_at=timezone.now() - timedelta(days=40))
    olive_place = place_of(owner_id=User.objects.get(username="olive").pk, thread_pk=None)
    sam_place = place_of(owner_id=User.objects.get(username="sam").pk, thread_pk=None)

    call_command("prune_workspaces", "--idle-days", "30")
    assert olive_place.key in capsys.readouterr().out and olive_place.path.exists()  # a dry run by default
    call_command("prune_workspaces", "--idle-days", "30", "--delete")
    assert not olive_place.path.exists() and sam_place.path.exists()


def test_workspace_directory_names_come_from_ids_only(tmp_path):
    with override_settings(AGENT_WORKSPACES_ROOT=tmp_path, AGENT_WORKSPACE_MODE="thread"):
        place = place_of(owner_id=3, thread_pk="12345678-1234-5678-1234-567812345678", agui_thread_id="../../etc")
        assert place.path == tmp_path / "threads" / "12345678123456781234567812345678"
        assert place.branch == "threadline/etc"
    with override_settings(AGENT_WORKSPACES_ROOT=tmp_path, AGENT_WORKSPACE_MODE="owner"):
        assert place_of(owner_id=3, thread_pk=None).path == tmp_path / "users" / "3"
    with override_settings(AGENT_WORKSPACE_MODE="shared"):
        assert place_of(owner_id=3, thread_pk=None).shared


def test_an_ask_rule_is_matched_in_the_runs_own_workspace(server, fake_api, workspace):
    # The rules resolve a call's links in the run's workspace, not in AGENT_WORKSPACE: a link in the
    # user's own workspace to a path an ask rule covers still asks.
    from agents.models import PermissionRule

    olive = _person("olive")
    place = place_of(owner_id=User.objects.get(username="olive").pk, thread_pk=None)
    (place.path / "secret").mkdir(parents=True)
    (place.path / "secret" / "plan.txt").write_text("the plan\n")
    (place.path / "peek").symlink_to("secret")
    PermissionRule.objects.create(position=1, decision="ask", tool="file_read", match="secret/**")
    fake_api.script([tool_turn("file_read", {"path": "peek/plan.txt"}), text_turn(["Read."])])
    response = httpx.post(
        f"{server.url}/agui/coder",
        content=orjson.dumps(v1(run_input("t-olive", "r1", user("read it", "u1")))),
        headers={"Authorization": f"Token {olive}", "Content-Type": "application/json"},
        timeout=60,
    )
    server.drain()
    assert b'"interrupt"' in response.content and b"the plan" not in response.content

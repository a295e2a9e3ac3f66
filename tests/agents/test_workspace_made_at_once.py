"""A user's (or a thread's) new workspace made by several runs at once, in threads or processes: the
first one put in place stands, and the others' are thrown away. Each maker builds it under a name
of its own and renames it into place; a rename onto an empty directory replaces it, so with an empty
template every maker but the last replaced the one before, one a run may already have been working
in (a command in it then wrote into a directory gone from the tree)."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from django.test import override_settings

from agents.workspaces import Place, place_of, prepare

MAKERS = 8


def make_at_once(place: Place) -> tuple[list[bool], set[int]]:
    """``prepare(place)`` by MAKERS threads at once: what each returned, and the directories (by
    inode) each found there once it returned, the one its run would work in."""
    start = threading.Barrier(MAKERS)
    made: list[bool] = []
    seen: set[int] = set()

    def make() -> None:
        start.wait()
        made.append(prepare(place))
        seen.add(place.path.stat().st_ino)

    makers = [threading.Thread(target=make) for _ in range(MAKERS)]
    for maker in makers:
        maker.start()
    for maker in makers:
        maker.join()
    return made, seen


def test_of_the_runs_that_make_a_workspace_at_once_one_makes_it_and_it_stands(tmp_path: Path):
    with override_settings(AGENT_WORKSPACES_ROOT=tmp_path, AGENT_WORKSPACE_MODE="owner", AGENT_WORKSPACE_TEMPLATE=""):
        for owner_id in range(1, 21):  # the makers overlap in most rounds, not in every one
            place = place_of(owner_id=owner_id, thread_pk=None)
            made, seen = make_at_once(place)
            assert made.count(True) == 1, f"user {owner_id}: {made.count(True)} makers put their workspace in place"
            assert seen == {place.path.stat().st_ino}
            # No maker's half is left behind (the losers' are removed).
            assert {path.name for path in (tmp_path / "users").iterdir()} == {str(n) for n in range(1, owner_id + 1)}


def test_of_the_runs_that_clone_the_default_workspace_at_once_one_clones_it_and_none_warns(tmp_path: Path, caplog):
    # The default workspace, empty, becomes a clone of the server's checkout at the first run: runs
    # starting together each clone it, and the first clone put in place stands.
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "README").write_text("the server's checkout\n")
    git = ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for command in (["init", "--quiet"], ["add", "README"], ["commit", "--quiet", "-m", "first"]):
        subprocess.run([*git, *command], check=True, capture_output=True)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with override_settings(BASE_DIR=checkout, AGENT_WORKSPACE=workspace, AGENT_WORKSPACE_IS_DEFAULT=True):
        made, seen = make_at_once(place_of(owner_id=None, thread_pk=None))
    assert made.count(True) == 1
    assert seen == {workspace.stat().st_ino} and (workspace / "README").is_file()
    assert not [record for record in caplog.records if record.levelname == "WARNING"], caplog.text
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".making")] == []

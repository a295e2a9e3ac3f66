"""file_write, file_edit, apply_patch and todo_write: they change only the workspace, and only
files the agent has seen as they are; a patch applies whole or not at all."""

from __future__ import annotations

import asyncio
import difflib
import os
from pathlib import Path

import pytest

from orchestrator.tools.base import ToolContext, ToolOutput, ToolRegistry, Workspace
from orchestrator.tools.mutating import MUTATING_TOOLS
from orchestrator.tools.readonly import READ_ONLY_TOOLS

MOD = "import os\n\ndef f():\n    return 42\n"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text(MOD)
    (root / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET\n")
    os.symlink(outside / "secret.txt", root / "link_to_secret.txt")
    os.symlink(outside, root / "link_dir")
    os.symlink(outside / "not_yet.txt", root / "dangling")
    return root


class Agent:
    """One run's tools over a workspace; the read ledger lives as long as the agent."""

    def __init__(self, root: Path) -> None:
        self.registry = ToolRegistry.of((*READ_ONLY_TOOLS, *MUTATING_TOOLS))
        self.context = ToolContext(Workspace(root))

    def __call__(self, name: str, **arguments: object) -> ToolOutput:
        return asyncio.run(self.registry.call(name, dict(arguments), self.context))

    def read(self, path: str) -> None:
        assert not self("file_read", path=path).is_error


@pytest.fixture
def agent(ws: Path) -> Agent:
    return Agent(ws)


def snapshot(tmp_path: Path) -> dict[str, bytes | str]:
    """Every file and link under tmp_path (workspace and outside), links not followed."""
    found: dict[str, bytes | str] = {}
    for directory, dirs, files in os.walk(tmp_path):
        for name in dirs + files:
            path = Path(directory) / name
            key = path.relative_to(tmp_path).as_posix()
            if path.is_symlink():
                found[key] = "-> " + os.readlink(path)
            elif path.is_file():
                found[key] = path.read_bytes()
            else:
                found[key] = "dir"
    return found


ESCAPES = [
    "../outside/secret.txt",
    "../outside/new.txt",
    "/tmp/threadline-escape.txt",
    "pkg/../../outside/new.txt",
    "link_to_secret.txt",
    "link_dir/secret.txt",
    "link_dir/new.txt",
    "dangling",
]


# file_write


def test_file_write_creates_a_file_and_its_parent_directories(agent, ws):
    out = agent("file_write", path="src/deep/new.py", content="x = 1\n")
    assert not out.is_error, out.content
    assert (ws / "src/deep/new.py").read_text() == "x = 1\n"
    assert out.touched == (("src/deep/new.py", "write"),)
    assert "created" in out.content


def test_file_write_overwrites_a_file_it_never_read(agent, ws):
    out = agent("file_write", path="notes.txt", content="new\n")
    assert not out.is_error and "overwrote" in out.content
    assert (ws / "notes.txt").read_text() == "new\n"


def test_file_write_keeps_the_permission_bits_of_the_file_it_overwrites(agent, ws):
    script = ws / "run.sh"
    script.write_text("echo old\n")
    script.chmod(0o755)
    assert not agent("file_write", path="run.sh", content="echo new\n").is_error
    assert script.stat().st_mode & 0o777 == 0o755


@pytest.mark.parametrize("path", ESCAPES)
def test_file_write_refuses_every_way_out(agent, tmp_path, path):
    before = snapshot(tmp_path)
    out = agent("file_write", path=path, content="pwned\n")
    assert out.is_error
    assert snapshot(tmp_path) == before
    assert not Path("/tmp/threadline-escape.txt").exists()


def test_file_write_refuses_directories_and_files_in_the_way(agent, tmp_path):
    before = snapshot(tmp_path)
    assert "directory" in agent("file_write", path="pkg", content="x").content
    assert "is a file" in agent("file_write", path="notes.txt/inner.txt", content="x").content
    assert agent("file_write", path=".", content="x").is_error
    assert agent("file_write", path="a.txt").is_error  # no content
    assert snapshot(tmp_path) == before


def test_file_write_refuses_to_overwrite_a_file_changed_since_it_was_read(agent, ws):
    agent.read("notes.txt")
    (ws / "notes.txt").write_text("someone else's work\n")
    out = agent("file_write", path="notes.txt", content="mine\n")
    assert out.is_error and "changed on disk" in out.content
    assert (ws / "notes.txt").read_text() == "someone else's work\n"


# file_edit


def test_file_edit_replaces_the_one_occurrence(agent, ws):
    agent.read("pkg/mod.py")
    out = agent("file_edit", path="pkg/mod.py", old_string="return 42", new_string="return 43")
    assert not out.is_error, out.content
    assert (ws / "pkg/mod.py").read_text() == MOD.replace("42", "43")
    assert out.touched == (("pkg/mod.py", "edit"),)
    assert "line 4" in out.content


def test_file_edit_reports_a_string_that_is_not_there(agent, ws):
    agent.read("pkg/mod.py")
    out = agent("file_edit", path="pkg/mod.py", old_string="return 41", new_string="return 43")
    assert out.is_error and "not found" in out.content
    assert (ws / "pkg/mod.py").read_text() == MOD


def test_file_edit_refuses_an_ambiguous_string_unless_told_to_replace_all(agent, ws):
    (ws / "many.txt").write_text("x = 1\nx = 1\nx = 1\n")
    agent.read("many.txt")
    out = agent("file_edit", path="many.txt", old_string="x = 1", new_string="x = 2")
    assert out.is_error and "3 times" in out.content and "replace_all" in out.content
    assert (ws / "many.txt").read_text() == "x = 1\nx = 1\nx = 1\n"
    out = agent("file_edit", path="many.txt", old_string="x = 1", new_string="x = 2", replace_all=True)
    assert not out.is_error and "3 occurrences" in out.content
    assert (ws / "many.txt").read_text() == "x = 2\nx = 2\nx = 2\n"


def test_file_edit_refuses_a_file_it_never_read(agent, ws):
    out = agent("file_edit", path="notes.txt", old_string="beta", new_string="BETA")
    assert out.is_error and "file_read" in out.content
    assert (ws / "notes.txt").read_text() == "alpha\nbeta\ngamma\n"


def test_file_edit_refuses_a_file_changed_on_disk_since_it_was_read(agent, ws):
    agent.read("notes.txt")
    (ws / "notes.txt").write_text("alpha\nbeta\ngamma\ndelta\n")
    out = agent("file_edit", path="notes.txt", old_string="beta", new_string="BETA")
    assert out.is_error and "changed on disk" in out.content and "read it again" in out.content
    assert (ws / "notes.txt").read_text() == "alpha\nbeta\ngamma\ndelta\n"
    agent.read("notes.txt")  # seeing the new content makes the edit possible again
    assert not agent("file_edit", path="notes.txt", old_string="beta", new_string="BETA").is_error
    assert (ws / "notes.txt").read_text() == "alpha\nBETA\ngamma\ndelta\n"


def test_file_edit_may_follow_its_own_writes_without_reading_again(agent, ws):
    assert not agent("file_write", path="new.txt", content="one two\n").is_error
    assert not agent("file_edit", path="new.txt", old_string="one", new_string="1").is_error
    assert not agent("file_edit", path="new.txt", old_string="two", new_string="2").is_error
    assert (ws / "new.txt").read_text() == "1 2\n"


def test_file_edit_keeps_windows_line_endings(agent, ws):
    (ws / "dos.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    agent.read("dos.txt")
    out = agent("file_edit", path="dos.txt", old_string="one\ntwo", new_string="one\n2")
    assert not out.is_error, out.content
    assert (ws / "dos.txt").read_bytes() == b"one\r\n2\r\nthree\r\n"


def test_file_edit_checks_its_arguments(agent):
    agent.read("notes.txt")
    assert "old_string" in agent("file_edit", path="notes.txt", old_string="", new_string="x").content
    assert "same" in agent("file_edit", path="notes.txt", old_string="beta", new_string="beta").content
    assert (
        "replace_all" in agent("file_edit", path="notes.txt", old_string="a", new_string="b", replace_all="yes").content
    )


@pytest.mark.parametrize("path", ESCAPES)
def test_file_edit_refuses_every_way_out(agent, tmp_path, path):
    agent("file_read", path=path)  # refused too, so nothing outside enters the ledger
    before = snapshot(tmp_path)
    out = agent("file_edit", path=path, old_string="TOP SECRET", new_string="pwned")
    assert out.is_error
    assert snapshot(tmp_path) == before


# apply_patch


def diff(path: str, old: str, new: str, *, prefixes: bool = True) -> str:
    source = "/dev/null" if old is None else (f"a/{path}" if prefixes else path)
    target = "/dev/null" if new is None else (f"b/{path}" if prefixes else path)
    lines = difflib.unified_diff((old or "").splitlines(True), (new or "").splitlines(True), source, target)
    return "".join(lines)


def test_apply_patch_modifies_a_file_given_a_git_style_patch(agent, ws):
    agent.read("pkg/mod.py")
    out = agent("apply_patch", patch=diff("pkg/mod.py", MOD, MOD.replace("42", "43")))
    assert not out.is_error, out.content
    assert (ws / "pkg/mod.py").read_text() == MOD.replace("42", "43")
    assert out.content == "modified pkg/mod.py (+1 -1)"
    assert out.touched == (("pkg/mod.py", "patch"),)


def test_apply_patch_takes_patches_without_prefixes(agent, ws):
    agent.read("notes.txt")
    patch = "--- notes.txt\n+++ notes.txt\n@@ -1,3 +1,3 @@\n alpha\n-beta\n+BETA\n gamma\n"
    out = agent("apply_patch", patch=patch)
    assert not out.is_error, out.content
    assert (ws / "notes.txt").read_text() == "alpha\nBETA\ngamma\n"


def test_apply_patch_creates_a_file_from_dev_null(agent, ws):
    out = agent("apply_patch", patch=diff("src/new.py", None, "print('hi')\n"))
    assert not out.is_error, out.content
    assert (ws / "src/new.py").read_text() == "print('hi')\n"
    assert out.content == "created src/new.py (+1 -0)"


def test_apply_patch_deletes_a_file_to_dev_null(agent, ws):
    agent.read("notes.txt")
    out = agent("apply_patch", patch=diff("notes.txt", "alpha\nbeta\ngamma\n", None))
    assert not out.is_error, out.content
    assert not (ws / "notes.txt").exists()
    assert out.content == "deleted notes.txt (+0 -3)"


GIT_DIFF = """\
diff --git a/new.txt b/new.txt
new file mode 100644
index 0000000..ce01362
--- /dev/null
+++ b/new.txt
@@ -0,0 +1 @@
+hello
diff --git a/notes.txt b/notes.txt
index 85c3040..e50310a 100644
--- a/notes.txt
+++ b/notes.txt
@@ -1,3 +1,3 @@
 alpha
-beta
+BETA
 gamma
diff --git a/old.txt b/old.txt
deleted file mode 100644
index b023018..0000000
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
diff --git a/empty.txt b/empty.txt
new file mode 100644
index 0000000..e69de29
"""


def test_apply_patch_takes_what_git_diff_prints(agent, ws):
    (ws / "old.txt").write_text("bye\n")
    agent.read("old.txt")
    agent.read("notes.txt")
    out = agent("apply_patch", patch=GIT_DIFF)
    assert not out.is_error, out.content
    assert out.content.splitlines() == [
        "created new.txt (+1 -0)",
        "modified notes.txt (+1 -1)",
        "deleted old.txt (+0 -1)",
        "created empty.txt (+0 -0)",
    ]
    assert (ws / "new.txt").read_text() == "hello\n"
    assert (ws / "notes.txt").read_text() == "alpha\nBETA\ngamma\n"
    assert not (ws / "old.txt").exists()
    assert (ws / "empty.txt").read_bytes() == b""


def test_apply_patch_refuses_a_delete_that_leaves_lines_behind(agent, ws):
    agent.read("notes.txt")
    patch = "--- a/notes.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-alpha\n-beta\n"
    out = agent("apply_patch", patch=patch)
    assert out.is_error and "every line" in out.content
    assert (ws / "notes.txt").exists()


def test_apply_patch_changes_several_files_at_once(agent, ws):
    agent.read("pkg/mod.py")
    agent.read("notes.txt")
    patch = (
        diff("pkg/mod.py", MOD, MOD.replace("import os\n", "import os\nimport sys\n"))
        + diff("notes.txt", "alpha\nbeta\ngamma\n", None)
        + diff("docs/readme.md", None, "# Readme\n")
    )
    out = agent("apply_patch", patch=patch)
    assert not out.is_error, out.content
    assert out.content.splitlines() == [
        "modified pkg/mod.py (+1 -0)",
        "deleted notes.txt (+0 -3)",
        "created docs/readme.md (+1 -0)",
    ]
    assert (ws / "pkg/mod.py").read_text().startswith("import os\nimport sys\n")
    assert not (ws / "notes.txt").exists()
    assert (ws / "docs/readme.md").read_text() == "# Readme\n"
    # what the patch wrote is what the agent has seen: it may edit on without reading again
    assert not agent("file_edit", path="docs/readme.md", old_string="Readme", new_string="Read me").is_error


def test_a_patch_that_does_not_apply_changes_nothing_in_any_of_its_files(agent, ws, tmp_path):
    agent.read("pkg/mod.py")
    agent.read("notes.txt")
    before = snapshot(tmp_path)
    patch = (
        diff("pkg/mod.py", MOD, MOD.replace("42", "43"))  # applies
        + diff("brand/new.txt", None, "new\n")  # applies
        + "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,3 +1,3 @@\n alpha\n-BETA\n+beta\n gamma\n"  # does not
    )
    out = agent("apply_patch", patch=patch)
    assert out.is_error
    assert "notes.txt" in out.content and "hunk 1" in out.content and "Nothing was changed" in out.content
    assert snapshot(tmp_path) == before


def test_apply_patch_finds_a_hunk_whose_line_numbers_are_off(agent, ws):
    (ws / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    agent.read("long.txt")
    patch = "--- a/long.txt\n+++ b/long.txt\n@@ -40,3 +40,3 @@\n line 49\n-line 50\n+LINE 50\n line 51\n"
    out = agent("apply_patch", patch=patch)
    assert not out.is_error, out.content
    assert "LINE 50\n" in (ws / "long.txt").read_text()


def test_apply_patch_applies_several_hunks_and_keeps_a_missing_final_newline(agent, ws):
    old = "".join(f"{i}\n" for i in range(1, 31)) + "end"
    new = old.replace("3\n", "three\n", 1).replace("end", "END")
    (ws / "nums.txt").write_text(old)
    agent.read("nums.txt")
    # difflib leaves the lines without newline as they are; diff and git add the marker after them
    patch = diff("nums.txt", old + "\n", new + "\n")
    patch = patch.replace("-end\n", "-end\n\\ No newline at end of file\n")
    patch = patch.replace("+END\n", "+END\n\\ No newline at end of file\n")
    out = agent("apply_patch", patch=patch)
    assert not out.is_error, out.content
    assert (ws / "nums.txt").read_text() == new


def test_apply_patch_refuses_files_not_read_or_changed_since(agent, ws, tmp_path):
    before = snapshot(tmp_path)
    patch = diff("notes.txt", "alpha\nbeta\ngamma\n", "alpha\nBETA\ngamma\n")
    out = agent("apply_patch", patch=patch)
    assert out.is_error and "file_read" in out.content
    agent.read("notes.txt")
    (ws / "notes.txt").write_text("alpha\nbeta\ngamma\n\n")
    before = snapshot(tmp_path)
    out = agent("apply_patch", patch=patch)
    assert out.is_error and "changed on disk" in out.content
    assert snapshot(tmp_path) == before


def test_apply_patch_refuses_to_create_a_file_that_exists(agent, ws, tmp_path):
    before = snapshot(tmp_path)
    out = agent("apply_patch", patch=diff("notes.txt", None, "x\n"))
    assert out.is_error and "already exists" in out.content
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "patch",
    [
        diff("../outside/secret.txt", "TOP SECRET\n", "pwned\n"),
        diff("../outside/new.txt", None, "pwned\n"),
        diff("/tmp/threadline-escape.txt", None, "pwned\n", prefixes=False),
        diff("link_to_secret.txt", "TOP SECRET\n", "pwned\n"),
        diff("link_dir/secret.txt", "TOP SECRET\n", "pwned\n", prefixes=False),
        diff("link_dir/new.txt", None, "pwned\n"),
        diff("dangling", None, "pwned\n"),
        diff("notes.txt", None, "x\n").replace("notes.txt", "pkg/../../outside/new.txt"),
        # a legitimate first file does not carry an escaping second one through
        diff("ok.txt", None, "fine\n") + diff("../outside/new.txt", None, "pwned\n"),
    ],
)
def test_apply_patch_refuses_every_way_out(agent, tmp_path, patch):
    before = snapshot(tmp_path)
    out = agent("apply_patch", patch=patch)
    assert out.is_error
    assert snapshot(tmp_path) == before
    assert not Path("/tmp/threadline-escape.txt").exists()


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ("just some text\n", "no file sections"),
        ("--- a/notes.txt\n+++ b/notes.txt\n@@ -1,3 +1,3 @@\n alpha\n-beta\n", "unified diff"),
        ("--- a/notes.txt\n+++ b/other.txt\n@@ -1 +1 @@\n-alpha\n+ALPHA\n", "renames"),
    ],
)
def test_apply_patch_explains_a_patch_it_cannot_use(agent, tmp_path, patch, message):
    agent.read("notes.txt")
    before = snapshot(tmp_path)
    out = agent("apply_patch", patch=patch)
    assert out.is_error and message in out.content
    assert snapshot(tmp_path) == before


# todo_write


def test_todo_write_replaces_the_runs_list_and_tells_the_caller(ws):
    published: list[list[dict[str, str]]] = []
    agent = Agent(ws)
    agent.context.on_todos = published.append
    todos = [
        {"content": "Read the code", "status": "completed"},
        {"id": "t2", "content": "Write the tests", "status": "in_progress"},
        {"content": "Run them", "status": "pending"},
    ]
    out = agent("todo_write", todos=todos)
    assert not out.is_error, out.content
    assert out.touched == ()
    assert agent.context.todos == [
        {"id": "1", "content": "Read the code", "status": "completed"},
        {"id": "t2", "content": "Write the tests", "status": "in_progress"},
        {"id": "3", "content": "Run them", "status": "pending"},
    ]
    assert published == [agent.context.todos]
    assert "1/3 completed" in out.content
    assert not agent("todo_write", todos=[]).is_error
    assert agent.context.todos == [] and published[-1] == []


@pytest.mark.parametrize(
    ("todos", "message"),
    [
        ("do things", "must be a list"),
        ([{"content": "x", "status": "done"}], "one of pending, in_progress, completed"),
        ([{"content": "x"}], "status"),
        ([{"content": "", "status": "pending"}], "content"),
        (["x"], "must be an object"),
        ([{"content": "x", "status": "pending", "priority": "high"}], "unknown fields"),
        (
            [{"id": "a", "content": "x", "status": "pending"}, {"id": "a", "content": "y", "status": "pending"}],
            "unique",
        ),
    ],
)
def test_todo_write_refuses_a_bad_list_and_keeps_the_old_one(ws, todos, message):
    agent = Agent(ws)
    assert not agent("todo_write", todos=[{"content": "keep me", "status": "pending"}]).is_error
    out = agent("todo_write", todos=todos)
    assert out.is_error and message in out.content
    assert agent.context.todos == [{"id": "1", "content": "keep me", "status": "pending"}]


def test_every_mutating_tool_says_it_is_not_read_only():
    assert {tool.name for tool in MUTATING_TOOLS} == {"file_write", "file_edit", "apply_patch", "bash", "todo_write"}
    assert not any(tool.read_only for tool in MUTATING_TOOLS)

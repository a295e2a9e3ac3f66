"""Where a run works (issue #24): its owner's directory, its thread's, or the one shared directory.

``AGENT_WORKSPACE_MODE`` decides:
- ``owner`` (default): a thread owned by a user works in ``<root>/users/<user id>``, shared by all
  of that user's threads; a thread without an owner (the shared ``AGUI_TOKEN``) in
  ``AGENT_WORKSPACE``;
- ``thread``: every thread in ``<root>/threads/<thread uuid>``;
- ``shared``: everybody in ``AGENT_WORKSPACE``.
Directory names come from database ids, never from anything a user typed.

A workspace is made on first use, on a worker thread, from ``AGENT_WORKSPACE_TEMPLATE``: nothing, a
directory that is copied (its links copied as links, never followed, so a link pointing outside
stays a link the tools refuse and the sandbox cannot see through), or a git repository that is
cloned (in ``thread`` mode on a branch named after the thread). It is made under a temporary name
and renamed into place, so a process that dies half-way leaves no half-made workspace; of several
threads or processes making the same one at once, the first to put it in place wins.

When the server runs as root, bash runs as the sandbox user (orchestrator/tools/sandbox.py), so a
workspace is handed to that user: made by the server, its files are chowned to it, skipping the
data dir should it lie inside. A workspace that holds the server's checkout or virtual environment
(or lies inside one) is never handed over: start-up refuses it, and so does ``hand_over``."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from agents.confinement import bash_choice, server_code
from agents.gitsource import is_git_url

log = logging.getLogger(__name__)

GIT_TIMEOUT_SECONDS = 600


class WorkspaceError(Exception):
    """A workspace could not be made (its template could not be copied or cloned)."""


@dataclass(slots=True, frozen=True)
class Place:
    """Where one thread's runs work."""

    key: str  # relative to AGENT_WORKSPACES_ROOT ("users/17", "threads/<hex>"); "" for AGENT_WORKSPACE
    path: Path
    branch: str = ""  # the branch a git template is checked out on ("" for its default)

    @property
    def shared(self) -> bool:
        return self.key == ""


def place_of(*, owner_id: int | None, thread_pk: uuid.UUID | str | None, agui_thread_id: str = "") -> Place:
    """Where the thread with these ids works, under the settings in force."""
    mode = settings.AGENT_WORKSPACE_MODE
    root = Path(settings.AGENT_WORKSPACES_ROOT)
    if mode == "thread" and thread_pk is not None:
        hex_id = uuid.UUID(str(thread_pk)).hex
        return Place(f"threads/{hex_id}", root / "threads" / hex_id, branch=_branch_name(agui_thread_id, hex_id))
    if mode == "owner" and owner_id is not None:
        return Place(f"users/{int(owner_id)}", root / "users" / str(int(owner_id)))
    return Place("", Path(settings.AGENT_WORKSPACE))


def _branch_name(agui_thread_id: str, hex_id: str) -> str:
    """``threadline/<thread id>`` when the client's id makes a valid ref name, else the uuid's."""
    safe = "".join(c for c in agui_thread_id if c.isascii() and (c.isalnum() or c in "-_."))[:100].strip(".")
    name = f"threadline/{safe or hex_id}"
    if ".." in name or name.endswith((".lock", "/")):
        name = f"threadline/{hex_id}"
    return name


def sandbox_uid() -> int | None:
    """The uid bash's commands run as when it is not the server's own (the server is root)."""
    sandbox = bash_choice().sandbox
    return None if sandbox is None else sandbox.run_as


def prepare(place: Place) -> bool:
    """Makes the workspace of ``place`` when it does not exist yet (True when this call made it);
    blocking: call it from a worker thread. Raises WorkspaceError when its template fails."""
    if place.shared:
        made = _clone_checkout_once(place.path)
        hand_over(place.path)
        return made
    if place.path.is_dir():
        return False
    place.path.parent.mkdir(parents=True, exist_ok=True)
    making = place.path.parent / f".making-{place.path.name}-{uuid.uuid4().hex[:8]}"
    try:
        _fill(making, place)
        hand_over(making)
        if not _put_in_place(making, place.path):
            return False  # another thread or process made it first: theirs stands
    finally:
        if making.exists():
            shutil.rmtree(making, ignore_errors=True)
    log.info("made the workspace %s", place.key)
    return True


def _put_in_place(making: Path, path: Path) -> bool:
    """Renames the workspace made at ``making`` to ``path``, unless one is there already (False).
    Makers hold a lock on the directory that holds them for it: a rename onto an empty directory
    replaces it, so each of eight runs making an empty workspace at once replaced the one put there
    before, one a run may already have been working in."""
    with _makers_lock(path):
        if path.is_dir():
            return False
        making.rename(path)
        return True


@contextlib.contextmanager
def _makers_lock(path: Path) -> Iterator[None]:
    """Held by whoever puts a workspace in place at ``path``, across threads and processes."""
    holder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)  # each open is its own: threads exclude each other too
        yield
    finally:
        os.close(holder)  # and the lock with it


def _clone_checkout_once(path: Path) -> bool:
    """The default ``AGENT_WORKSPACE``, while still empty, becomes a clone of the server's checkout
    (when that is a git repository): the agent explores real code without ever working in the
    server's own files (issue #23, item 2). True when this call cloned it."""
    checkout = Path(settings.BASE_DIR)
    if not settings.AGENT_WORKSPACE_IS_DEFAULT or not (checkout / ".git").exists() or any(path.iterdir()):
        return False
    making = path.parent / f".making-{path.name}-{uuid.uuid4().hex[:8]}"
    try:
        _clone(str(checkout), making, "")
        with _makers_lock(path):
            # Onto the empty directory, unless another run's clone was put there first: a rename
            # replaces an empty directory, one a run may be working in already.
            if any(path.iterdir()):
                return False
            making.rename(path)
    except (WorkspaceError, OSError) as exc:
        log.warning("the default workspace %s stays empty: %s", path, exc)
        return False
    finally:
        if making.exists():
            shutil.rmtree(making, ignore_errors=True)
    log.info("the default workspace %s starts as a clone of the server's checkout", path)
    return True


def _fill(making: Path, place: Place) -> None:
    template = settings.AGENT_WORKSPACE_TEMPLATE
    if not template:
        making.mkdir(mode=0o755)
        return
    if is_git_template(template):
        _clone(template, making, place.branch)
    else:
        try:
            shutil.copytree(template, making, symlinks=True)
        except (OSError, shutil.Error) as exc:
            raise WorkspaceError(f"the template {template} could not be copied: {exc}") from exc


def is_git_template(template: str) -> bool:
    """A URL (``scheme://`` or ``user@host:path``) or a directory holding a git repository."""
    return is_git_url(template) or (Path(template) / ".git").exists()


def _clone(template: str, making: Path, branch: str) -> None:
    # Objects are copied, never hard-linked: the workspace is handed to the sandbox user, and a
    # chown through a hard link would change the template's own files.
    env = {"PATH": os.environ.get("PATH", os.defpath), "GIT_TERMINAL_PROMPT": "0", "HOME": str(making.parent)}
    commands = [["git", "clone", "--quiet", "--no-hardlinks", "--", template, str(making)]]
    if branch:
        commands.append(["git", "-C", str(making), "checkout", "--quiet", "-b", branch])
    for argv in commands:
        try:
            done = subprocess.run(argv, capture_output=True, timeout=GIT_TIMEOUT_SECONDS, check=False, env=env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise WorkspaceError(f"git could not clone the template {template}: {exc}") from exc
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace").strip().splitlines()
            raise WorkspaceError(f"git could not clone the template {template}: {why[-1] if why else done.returncode}")


def hand_over(path: Path) -> None:
    """Gives the workspace at ``path`` to the sandbox user when bash runs as one (the server is
    root), so its commands can change the files there; the data dir, should it lie inside, keeps its
    owner. Does nothing when the workspace is that user's already. Raises WorkspaceError, changing
    nothing, when the workspace holds the server's code or lies inside it (issue #49, item 5)."""
    uid = sandbox_uid()
    if uid is None:
        return
    try:
        if path.stat().st_uid == uid:
            return
    except OSError:
        return
    # Start-up refuses such a workspace (project/settings.py); this holds wherever a path comes from.
    root = path.resolve()
    for code in server_code():
        if code.is_relative_to(root) or root.is_relative_to(code):
            raise WorkspaceError(
                f"the workspace {root} holds or lies inside the server's code {code}: it is not handed to the "
                "sandbox user; give the agent a directory of its own"
            )
    try:
        keep: os.stat_result | None = os.stat(settings.DATA_DIR)
    except OSError:
        keep = None
    log.info("handing the workspace %s to uid %d, the user bash runs as", path, uid)
    # Through each directory's descriptor: in the shared workspace another run's commands may work
    # while this walk goes on, and swap a directory it listed for a link to root's files. fwalk
    # enters only the directory it listed (lstat, open, fstat), and each chown is by descriptor.
    # From the resolved root: a workspace configured through a link is still walked (fwalk enters
    # no link, its first directory included).
    for _directory, subdirs, files, here in os.fwalk(root, follow_symlinks=False):
        if keep is not None:
            subdirs[:] = [name for name in subdirs if not _is(keep, name, here)]
        try:
            os.fchown(here, uid, uid)
        except OSError:
            continue  # gone meanwhile
        for name in files:
            try:
                # A file with another name elsewhere keeps its owner: a chown would reach that name too.
                if os.stat(name, dir_fd=here, follow_symlinks=False).st_nlink == 1:
                    os.chown(name, uid, uid, dir_fd=here, follow_symlinks=False)
            except OSError:
                continue


def _is(kept: os.stat_result, name: str, directory: int) -> bool:
    try:
        return os.path.samestat(kept, os.stat(name, dir_fd=directory, follow_symlinks=False))
    except OSError:
        return False

"""How long a new workspace takes to make from a 10,000-file template (issue #24).

Makes a template of N small files in nested directories, then times, in the same run:
- the baseline: ``cp -a`` of the template (what copying it costs on this disk at all);
- ``agents.workspaces.prepare`` with the template as a directory (copied, then handed to the
  sandbox user when the server runs as root);
- the same with the template as a git repository (``git clone --no-hardlinks``).

Each is the median of ``--rounds`` rounds, printed in seconds and as a ratio of the baseline. A run's
``RUN_STARTED`` never waits for this: the workspace is made on a worker thread after it.

    .venv/bin/python bench/workspace_template.py [--files 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def make_template(root: Path, files: int) -> None:
    for index in range(files):
        folder = root / f"pkg{index // 500:03d}" / f"mod{index // 50 % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"file{index}.py").write_text(f"# file {index}\nVALUE = {index}\n" * 4)


def timed(action: object, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        action()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="threadline-bench-ws-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ["THREADLINE_DATA_DIR"] = str(scratch / "data")
    os.environ["AGENT_WORKSPACE"] = str(scratch / "shared")
    (scratch / "shared").mkdir()
    try:
        template = scratch / "template"
        make_template(template, args.files)
        git = ["git", "-C", str(template), "-c", "user.name=b", "-c", "user.email=b@example.com"]
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", "template"], check=True)
        git_template = scratch / "git-template"
        subprocess.run(["git", "clone", "-q", "--bare", str(template), str(git_template)], check=True)
        shutil.rmtree(template / ".git")

        import django

        django.setup()
        from django.test import override_settings

        from agents.workspaces import place_of, prepare

        counter = iter(range(1_000_000))

        def copy_baseline() -> None:
            subprocess.run(["cp", "-a", str(template), str(scratch / f"cp-{next(counter)}")], check=True)

        def make_from(source: Path) -> None:
            with override_settings(AGENT_WORKSPACE_TEMPLATE=str(source), AGENT_WORKSPACES_ROOT=scratch / "root"):
                assert prepare(place_of(owner_id=next(counter) + 1, thread_pk=None))

        baseline = timed(copy_baseline, args.rounds)
        directory = timed(lambda: make_from(template), args.rounds)
        cloned = timed(lambda: make_from(git_template), args.rounds)
        print(f"workspace from a {args.files:,}-file template (median of {args.rounds}; root: {os.geteuid() == 0})")
        print(f"  cp -a (baseline)      {baseline:7.3f} s   1.00x")
        print(f"  directory template    {directory:7.3f} s   {directory / baseline:.2f}x")
        print(f"  git template (clone)  {cloned:7.3f} s   {cloned / baseline:.2f}x")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

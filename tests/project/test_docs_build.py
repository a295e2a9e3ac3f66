"""The documentation site builds with warnings as errors, and without the network."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# mkdocs's own command line, in a process where every connection and name lookup fails: a theme
# option or plugin that fetches fonts or scripts breaks the build instead of passing on a machine
# that happens to be online.
_OFFLINE_MKDOCS = """
import socket, sys

def refuse(*args, **kwargs):
    raise OSError("the docs build must not use the network")

socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse

from mkdocs.__main__ import cli
sys.argv[0] = "mkdocs"
cli()
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    site = tmp_path_factory.mktemp("docs") / "site"
    build = ["build", "--strict", "--config-file", "mkdocs.yml", "--site-dir", str(site)]
    done = subprocess.run(
        [sys.executable, "-c", _OFFLINE_MKDOCS, *build],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, site


def test_the_docs_build_with_warnings_as_errors_and_no_network(built):
    done, site = built
    assert done.returncode == 0, done.stdout + done.stderr
    pages = {path.stem for path in (ROOT / "docs").glob("*.md")}
    assert pages and pages <= {path.stem for path in site.glob("*.html")}


def test_the_built_pages_load_nothing_from_another_site(built):
    done, site = built
    assert done.returncode == 0, done.stdout + done.stderr
    # Links to other sites are fine; a stylesheet, script, font or image from one is not.
    fetched = re.compile(r"""<(?:script|img|link)\b[^>]*\b(?:src|href)=["']?(?:https?:)?//""", re.IGNORECASE)
    offending = {
        f"{page.name}: {match.group(0)}"
        for page in site.rglob("*.html")
        for match in fetched.finditer(page.read_text())
        if 'rel="canonical"' not in match.group(0)
    }
    assert offending == set()

"""The server raises its open-file limit at start-up, so thousands of streams fit, and the default
connection cap is what that limit leaves (issue #27)."""

from __future__ import annotations

import logging
import os
import resource
import subprocess
import sys
from collections.abc import Iterator

import pytest

from project.fdlimit import raise_open_file_limit
from tests.procs import ROOT


@pytest.fixture
def low_soft_limit() -> Iterator[int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 512:
        pytest.skip(f"the hard limit ({hard}) leaves nothing to raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
    yield hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_it_raises_the_soft_limit_to_the_hard_limit_and_says_so(low_soft_limit, caplog):
    caplog.set_level(logging.INFO, logger="project.fdlimit")
    raised = raise_open_file_limit()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft == raised > 512
    if hard != resource.RLIM_INFINITY:
        assert soft == hard
    assert "open file limit raised from 512" in caplog.text


def test_a_limit_already_at_the_hard_limit_is_left_and_logged(caplog):
    caplog.set_level(logging.INFO, logger="project.fdlimit")
    raise_open_file_limit()
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert raise_open_file_limit() == before[0]
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == before
    assert "open file limit:" in caplog.text


def _under_hard_limit(hard: int, code: str, env: dict[str, str] | None = None) -> str:
    """What ``code`` prints in a Python process started with this hard open-file limit."""

    def lower_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 1024), hard))

    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lower_limit,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize(("hard", "connections"), [(4096, 3840), (10256, 10000), (200, 1)])
def test_the_connections_it_allows_are_the_hard_limit_less_what_the_process_needs_besides(hard, connections):
    current = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if current != resource.RLIM_INFINITY and hard > current:
        pytest.skip(f"the hard limit ({current}) can only be lowered")
    code = "from project.fdlimit import connections_the_file_limit_allows as f; print(f())"
    assert _under_hard_limit(hard, code) == str(connections)


def test_the_default_connection_cap_follows_the_hard_limit_and_the_environment_overrides_it(tmp_path):
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.SERVER_MAX_CONNECTIONS, settings.SERVER_MAX_CONNECTIONS_PER_CLIENT)"
    )
    env = {"THREADLINE_DATA_DIR": str(tmp_path)}
    assert _under_hard_limit(4096, code, env) == "3840 960"
    assert _under_hard_limit(4096, code, {**env, "SERVER_MAX_CONNECTIONS": "100"}) == "100 25"

"""bash sees an allowlist of the server's environment, not the server's environment less a
deny-list (issue #49, item 9): the probe's GITHUB_PAT and DOCS_BEARER reached bash because their
names said nothing of a secret. PATH, HOME, the locale, TERM and TZ reach it, and what the operator
names in AGENT_BASH_ENV_ALLOW; nothing else does, in the sandbox or without it."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
from django.test import override_settings

from agents.runtime import tool_context
from agents.workspaces import hand_over
from orchestrator.tools.base import ToolRegistry
from orchestrator.tools.mutating import BASH

SECRETS = {
    "GITHUB_PAT": "ghp-pat-leak-1",
    "DOCS_BEARER": "bearer-leak-2",
    "OPENAI_KEY_FILE_CONTENTS": "sk-leak-3",
    "DEPLOY_HOOK": "https://hooks.example.com/leak-4",
    "SENTRY_DSN": "https://leak-5@sentry.example.com/1",
    "THREADLINE_PROBE": "leak-6",
}
ALLOWED = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "LC_TIME": "C", "TERM": "xterm-256color", "TZ": "Europe/Paris"}


@pytest.fixture(params=["on", "off"])
def workspace(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    if request.param == "on" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is missing")
    root = tmp_path / "ws"
    root.mkdir()
    for name, value in {**SECRETS, **ALLOWED, "PROJECT_MIRROR": "https://mirror.example.com"}.items():
        monkeypatch.setenv(name, value)
    with override_settings(AGENT_WORKSPACE=root, AGENT_BASH_SANDBOX=request.param):
        hand_over(root)
        yield root


def env_of_bash() -> dict[str, str]:
    out = asyncio.run(ToolRegistry.of([BASH]).call("bash", {"command": "env -0"}, tool_context())).content
    body = out.rsplit("\n[exit code", 1)[0]
    return dict(entry.split("=", 1) for entry in body.split("\0") if "=" in entry)


def test_no_variable_outside_the_allowlist_reaches_bash(workspace):
    env = env_of_bash()
    for name, value in SECRETS.items():
        assert name not in env and value not in env.values(), env
    assert "PROJECT_MIRROR" not in env
    # Only the allowlist, and what the tool sets itself (no pager, no git prompt, the sandbox's home).
    fixed = {"PAGER", "GIT_PAGER", "GIT_TERMINAL_PROMPT", "GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0"}
    shell = {"PWD", "SHLVL", "_", "OLDPWD"}
    assert set(env) - fixed - shell <= {"PATH", "HOME", "LANG", "LANGUAGE", "TERM", "TZ"} | {
        name for name in env if name.startswith("LC_")
    }, sorted(env)


def test_the_path_the_locale_term_and_tz_reach_bash(workspace):
    env = env_of_bash()
    assert env["PATH"] == os.environ["PATH"]
    for name, value in ALLOWED.items():
        assert env[name] == value, name


def test_what_the_operator_names_reaches_bash_and_nothing_more(workspace):
    with override_settings(AGENT_BASH_ENV_ALLOW=("PROJECT_MIRROR", "NOT_SET_ANYWHERE")):
        env = env_of_bash()
    assert env["PROJECT_MIRROR"] == "https://mirror.example.com"
    assert "NOT_SET_ANYWHERE" not in env
    for name in SECRETS:
        assert name not in env

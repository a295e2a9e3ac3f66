"""Settings come from the environment, each strictly parsed: a bad value stops start-up naming it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from project import env
from tests.procs import ROOT


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PORT", "eighty"),
        ("PORT", "70000"),
        ("HOST", "not a host!"),
        ("DJANGO_DEBUG", "maybe"),
        ("AGUI_MAX_BODY_BYTES", "-1"),
        ("AGUI_ALLOWED_ORIGINS", "https://ok.example.com,*"),
        ("AGUI_ALLOWED_ORIGINS", "https://app.example.com/path"),
        ("ANTHROPIC_BASE_URL", "ftp://example.com"),
        ("REDIS_URL", "http://localhost"),
        ("AGENT_WORKSPACE", "/definitely/not/here"),
        ("EVENT_LOG_FLUSH_SECONDS", "soon"),
        ("FORWARDED_ALLOW_IPS", "10.0.0.0/33"),
        ("EVENT_LOG_RETENTION_DAYS", "1e9"),
        ("AGUI_PATH", "agui"),
        ("AGUI_PATH", "/agui/"),
        ("AGUI_PATH", "/admin"),
        ("COPILOTKIT_PATH", "copilotkit"),
        ("COPILOTKIT_PATH", "/api"),
        ("COPILOTKIT_PATH", "/agui"),
        ("ATTACHMENT_TYPES", "image/*"),
        ("ATTACHMENTS_MAX_COUNT", "-1"),
        ("AGUI_PORT", "8000"),
        ("AGUI_PORT", "ag"),
        ("AGUI_HUMAN_IN_THE_LOOP", "sometimes"),
        ("AGUI_FRONTEND_TOOLS", "maybe"),
        ("TLS_CERT_FILE", "/definitely/not/here.pem"),
        ("AGENT_BASH_SANDBOX", "maybe"),
        ("AGENT_BASH_NETWORK", "yes please"),
        ("AGENT_BASH_ENV_ALLOW", "GOOD_NAME,bad-name"),
        ("AGENT_BASH_ENV_ALLOW", "ONE,,TWO"),
        ("AGENT_BASH_ENV_ALLOW", "LANG,AGUI_TOKEN"),
        ("AGUI_MAX_BODY_BYTES_PER_USER", "1048576"),  # below one whole body (AGUI_MAX_BODY_BYTES)
        ("AGUI_MAX_BODY_BYTES_PER_USER", "lots"),
        ("AGENT_BASH_CGROUP", "maybe"),
        ("MCP_SANDBOX", "maybe"),
        ("MCP_ENV_ALLOWLIST", "GITHUB_TOKEN,bad-name"),
        ("MCP_ENV_ALLOWLIST", "GITHUB_TOKEN,DJANGO_SECRET_KEY"),
        ("BUDGET_USER_DAILY_USD", "lots"),
        ("BUDGET_USER_MONTHLY_USD", "-5"),
        ("BUDGET_AGENT_DAILY_USD", "nan"),
        ("BUDGET_AGENT_MONTHLY_USD", "inf"),
        ("RUN_MAX_TAKEOVERS", "-1"),
        ("RUN_MAX_TAKEOVERS", "three"),
    ],
)
def test_a_bad_value_stops_start_up_naming_the_variable(tmp_path, name, value):
    environ = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    environ.update({"THREADLINE_DATA_DIR": str(tmp_path), name: value})
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert name in result.stderr


def test_a_public_bind_needs_a_secret_key(tmp_path):
    environ = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DJANGO_SECRET_KEY")}
    environ.update({"THREADLINE_DATA_DIR": str(tmp_path), "HOST": "0.0.0.0"})
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0 and "DJANGO_SECRET_KEY" in result.stderr


def test_the_generated_token_is_kept_private_and_stable(tmp_path):
    environ = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "AGUI_TOKEN")}
    environ["THREADLINE_DATA_DIR"] = str(tmp_path)
    code = "from django.conf import settings; print(settings.AGUI_TOKEN)"
    tokens = [
        subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", code],
            cwd=ROOT,
            env=environ,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
        for _ in range(2)
    ]
    assert tokens[0] and tokens[0] == tokens[1]
    assert (tmp_path / "agui-token").stat().st_mode & 0o777 == 0o600


def test_helpers_accept_good_values():
    assert env.env_int("X", 1, env={"X": " 42 "}) == 42
    assert env.env_bool("X", env={"X": "Off"}) is False
    assert env.env_origins("X", env={"X": "https://a.example.com, http://localhost:3000"}) == [
        "https://a.example.com",
        "http://localhost:3000",
    ]
    assert env.env_host("X", "127.0.0.1", env={"X": "::1"}) == "::1"
    with pytest.raises(ImproperlyConfigured, match="X"):
        env.env_float("X", 1.0, minimum=0, env={"X": "nan"})


def test_forwarded_allow_ips_is_read_as_uvicorn_reads_it_in_canonical_spelling():
    assert env.env_forwarded_allow_ips("X", env={}) == ["127.0.0.1", "::1"]  # loopback when unset
    assert env.env_forwarded_allow_ips("X", env={"X": " 10.0.3.0/24 , 0:0:0:0:0:0:0:1 "}) == ["10.0.3.0/24", "::1"]
    assert env.env_forwarded_allow_ips("X", env={"X": "*"}) == ["*"]
    assert env.env_forwarded_allow_ips("X", env={"X": ""}) == []  # set empty: no proxy is trusted

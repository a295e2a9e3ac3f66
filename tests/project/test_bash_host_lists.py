"""AGENT_BASH_ALLOWED_HOSTS and AGENT_BASH_DENIED_HOSTS are read strictly (issue #47): an entry the
proxy could not match as meant stops start-up naming the variable and the entry."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from orchestrator.tools.egress import HostPattern
from project.env import env_host_patterns


def test_names_wildcards_addresses_and_ports_are_read():
    value = "Example.COM, *.example.org, example.net:8443, 203.0.113.7, [2001:db8::1]:443, bücher.example"
    patterns = env_host_patterns("AGENT_BASH_ALLOWED_HOSTS", {"AGENT_BASH_ALLOWED_HOSTS": value})
    assert patterns == (
        HostPattern("example.com"),
        HostPattern("example.org", wildcard=True),
        HostPattern("example.net", port=8443),
        HostPattern("203.0.113.7"),
        HostPattern("2001:db8::1", port=443),
        HostPattern("xn--bcher-kva.example"),
    )


def test_a_wildcard_matches_the_names_below_it_only():
    pattern = HostPattern("example.org", wildcard=True)
    assert pattern.matches("files.example.org", 443)
    assert not pattern.matches("example.org", 443)
    assert not pattern.matches("badexample.org", 443)


@pytest.mark.parametrize(
    "entry",
    [
        "https://example.com",
        "example.com/path",
        "*",
        "*.com",
        "ex*ample.com",
        "example.com:0",
        "example.com:http",
        "user@example.com",
        "exa mple.com",
        "-bad-.example",
        "[2001:db8::1]x",
    ],
)
def test_an_entry_that_is_not_a_host_stops_start_up(entry):
    with pytest.raises(ImproperlyConfigured, match="AGENT_BASH_DENIED_HOSTS"):
        env_host_patterns("AGENT_BASH_DENIED_HOSTS", {"AGENT_BASH_DENIED_HOSTS": f"example.net, {entry}"})

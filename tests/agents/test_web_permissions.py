"""The web tools are in the network class: they ask by default, a rule can allow a domain with a glob,
and a whole run through the real clients fetches a page once a rule allows its host."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from agents.models import PermissionRule
from agents.permissions import Decision, evaluate, memory_key, primary_argument
from orchestrator.tools.web import WEB_FETCH, WEB_SEARCH
from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.fakes.web_site import BRAVE_TOKEN, FakeWeb
from tests.sse import EVENT


def _rule(decision: str, tool: str = "web_fetch", match: str = "") -> PermissionRule:
    made = PermissionRule(position=10, decision=decision, tool=tool, match=match)
    made.full_clean()
    made.save()
    return made


def _decide(rules: list[PermissionRule], url: str, *, remembered: bool = False, auto: bool = False) -> Any:
    return evaluate(rules, tool=WEB_FETCH, arguments={"url": url}, remembered=remembered, auto_approve=auto)


def test_a_web_call_asks_when_no_rule_matches_even_with_auto_approve():
    for tool, arguments in ((WEB_FETCH, {"url": "https://example.com/"}), (WEB_SEARCH, {"query": "x"})):
        got = evaluate([], tool=tool, arguments=arguments, remembered=False, auto_approve=True)
        assert got.decision == Decision.ASK and "reaches the network" in got.reason


def test_a_yes_always_covers_later_fetches_of_the_same_host():
    assert memory_key("web_fetch", {"url": "https://Docs.Python.org/3/library/"}) == "web_fetch:docs.python.org"
    assert memory_key("web_search", {"query": "anything"}) == "web_search"
    assert _decide([], "https://docs.python.org/3/", remembered=True).decision == Decision.ALLOW


@pytest.mark.parametrize(
    ("match", "url", "allowed"),
    [
        ("*.example.com", "https://docs.example.com/guide", True),
        ("*.example.com", "https://DOCS.Example.COM/guide", True),
        ("*.example.com", "https://example.com/", False),
        ("*.example.com", "https://example.com.evil.net/", False),
        ("*.example.com", "https://evil.net/?next=docs.example.com", False),
        ("{example.com,*.example.com}", "https://example.com/", True),
        ("example.com", "http://example.com:8080/x", True),
        ("https://example.com/docs/*", "https://example.com/docs/intro", True),
        ("https://example.com/docs/*", "https://example.com/admin", False),
    ],
)
def test_a_rule_allows_a_domain_with_a_glob(db, match, url, allowed):
    got = _decide([_rule("allow", match=match)], url)
    assert (got.decision == Decision.ALLOW) is allowed, got
    assert got.decision == (Decision.ALLOW if allowed else Decision.ASK)


def test_a_deny_rule_on_a_domain_refuses_it(db):
    assert _decide([_rule("deny", match="*.internal.corp")], "https://wiki.internal.corp/").decision == Decision.DENY


def test_the_rule_sees_the_url_and_a_rule_may_name_the_web_tools(db):
    assert primary_argument("web_fetch", {"url": " https://a.b/c "}) == ["https://a.b/c"]
    assert primary_argument("web_search", {"query": "django"}) == ["django"]
    _rule("allow", tool="web_search")  # full_clean accepts the name


# Through the real clients


@pytest.fixture
def web() -> Iterator[FakeWeb]:
    with FakeWeb() as fake, override_settings(WEB_ALLOWED_PRIVATE_HOSTS=frozenset({"127.0.0.1"})):
        yield fake


def _tool_names(request: Any) -> list[str]:
    return [tool["name"] for tool in request.body["tools"]]


@pytest.mark.clients
@pytest.mark.parametrize("version", ["1", "0"])
def test_a_fetch_with_no_rule_asks_the_user_first(server, fake_api, web, version):
    fake_api.script([tool_turn("web_fetch", {"url": web.url("/page")}, id="toolu_fetch"), text_turn(["ok"])])
    run = {
        "threadId": f"t-web-ask-{version}",
        "runId": "r1",
        "messages": [{"id": "u1", "role": "user", "content": "read"}],
    }
    (result,) = run_client(version, f"{server.url}/agui/coder", "test-token", [run])
    assert result["error"] is None, result["error"]
    for event in result["received"]:
        EVENT.validate_python(event)
    (interrupt,) = result["received"][-1]["outcome"]["interrupts"]
    assert interrupt["reason"] == "confirmation" and interrupt["toolCallId"] == "toolu_fetch"
    assert web.url("/page") in interrupt["message"]
    assert web.requests == []  # nothing fetched before an answer
    assert "web_fetch" in _tool_names(fake_api.requests[0])
    assert "web_search" not in _tool_names(fake_api.requests[0])  # no Brave key: not offered


@pytest.mark.clients
@pytest.mark.parametrize("version", ["1", "0"])
def test_a_rule_allowing_the_host_lets_the_page_reach_the_model(server, fake_api, web, version):
    _rule("allow", match="127.0.0.1")
    fake_api.script([tool_turn("web_fetch", {"url": web.url("/page")}, id="toolu_fetch"), text_turn(["Read it."])])
    run = {
        "threadId": f"t-web-ok-{version}",
        "runId": "r1",
        "messages": [{"id": "u1", "role": "user", "content": "read"}],
    }
    (result,) = run_client(version, f"{server.url}/agui/coder", "test-token", [run])
    server.drain()
    assert result["error"] is None, result["error"]
    tool_result = next(e for e in result["received"] if e["type"] == "TOOL_CALL_RESULT")
    assert "Hello from the fake web" in tool_result["content"]
    sent = fake_api.requests[1].body["messages"][-1]["content"][0]
    assert sent["type"] == "tool_result" and "Hello from the fake web" in sent["content"]


@pytest.mark.clients
def test_web_search_is_offered_with_a_key_and_reaches_the_api(server, fake_api, web):
    _rule("allow", tool="web_search")
    fake_api.script([tool_turn("web_search", {"query": "django"}, id="toolu_search"), text_turn(["Found."])])
    run = {"threadId": "t-web-search", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "search"}]}
    with override_settings(BRAVE_API_KEY=BRAVE_TOKEN, BRAVE_SEARCH_URL=web.url("/res/v1/web/search")):
        (result,) = run_client("1", f"{server.url}/agui/coder", "test-token", [run])
        server.drain()
    assert result["error"] is None, result["error"]
    assert "web_search" in _tool_names(fake_api.requests[0])
    assert web.searches and web.searches[0]["q"] == "django"
    tool_result = next(e for e in result["received"] if e["type"] == "TOOL_CALL_RESULT")
    assert "https://www.djangoproject.com/" in tool_result["content"]
    assert BRAVE_TOKEN not in str(result["received"])

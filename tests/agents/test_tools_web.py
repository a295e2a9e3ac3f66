"""web_fetch and web_search against a loopback fake of the web: pages as text, bad answers, a slow
server, an oversized page, redirects within limits, and no way into loopback unless allowed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.tools.base import ToolContext, ToolOutput, ToolRegistry, Workspace
from orchestrator.tools.netguard import WebConfig
from orchestrator.tools.web import WEB_TOOLS
from tests.fakes.web_site import BRAVE_TOKEN, FakeWeb


@pytest.fixture
def web() -> Iterator[FakeWeb]:
    with FakeWeb() as fake:
        yield fake


def _config(web: FakeWeb, **overrides: object) -> WebConfig:
    values: dict[str, object] = {
        "brave_api_key": BRAVE_TOKEN,
        "brave_search_url": web.url("/res/v1/web/search"),
        "timeout_seconds": 5.0,
        "allowed_private_hosts": frozenset({"127.0.0.1"}),
    }
    values.update(overrides)
    return WebConfig(**values)  # type: ignore[arg-type]


def call(tmp_path: Path, config: WebConfig, name: str, **arguments: object) -> ToolOutput:
    context = ToolContext(Workspace(tmp_path), web=config)
    return asyncio.run(ToolRegistry.of(WEB_TOOLS).call(name, arguments, context))


def test_it_returns_a_page_as_text_without_scripts_or_styles(tmp_path, web):
    out = call(tmp_path, _config(web), "web_fetch", url=web.url("/page"))
    assert not out.is_error, out.content
    assert "Status: 200" in out.content and "Content-Type: text/html" in out.content
    assert "# The Fake Page" in out.content
    assert "Hello from the fake web\nFirst paragraph.\nSecond paragraph." in out.content
    assert "do not show" not in out.content and "color:red" not in out.content


def test_plain_text_is_returned_as_it_is(tmp_path, web):
    out = call(tmp_path, _config(web), "web_fetch", url=web.url("/plain"))
    assert not out.is_error and out.content.endswith("just text\n")


@pytest.mark.parametrize(("path", "status"), [("/missing", "404"), ("/broken", "500")])
def test_a_bad_status_is_an_error_the_model_reads_with_the_body(tmp_path, web, path, status):
    out = call(tmp_path, _config(web), "web_fetch", url=web.url(path))
    assert out.is_error
    assert f"HTTP {status}" in out.content
    assert ("No such page here." if status == "404" else "internal trouble") in out.content


def test_a_slow_server_is_given_up_on_at_the_time_limit(tmp_path, web):
    out = call(tmp_path, _config(web, timeout_seconds=0.3), "web_fetch", url=web.url("/slow"))
    assert out.is_error
    assert "no complete answer within 0.3 s" in out.content or "Timeout" in out.content


def test_an_oversized_page_is_read_only_up_to_the_cap(tmp_path, web):
    out = call(tmp_path, _config(web, max_bytes=10_000), "web_fetch", url=web.url("/big"))
    assert not out.is_error
    assert "larger than 10000 bytes; only its first 10000 bytes were read" in out.content
    body = out.content.split("\n\n", 1)[1]
    assert len(body.encode()) <= 10_000


def test_a_non_text_page_is_not_returned(tmp_path, web):
    out = call(tmp_path, _config(web), "web_fetch", url=web.url("/image"))
    assert out.is_error and "image/png is not text" in out.content and "PNG" not in out.content


def test_a_redirect_on_the_same_site_is_followed(tmp_path, web):
    out = call(tmp_path, _config(web), "web_fetch", url=web.url("/hop"))
    assert not out.is_error
    assert f"URL: {web.url('/page')}" in out.content and "Hello from the fake web" in out.content


def test_a_redirect_to_another_site_is_not_followed_but_named(tmp_path, web):
    out = call(tmp_path, _config(web), "web_fetch", url=web.url("/elsewhere"))
    assert out.is_error
    assert "redirects (301) to another site: http://example.org/landing" in out.content


def test_a_redirect_to_a_file_url_is_not_followed(tmp_path, web):
    out = call(tmp_path, _config(web), "web_fetch", url=web.url("/to-file"))
    assert out.is_error and "/etc/passwd, which is not http(s); not followed" in out.content
    assert "root:" not in out.content


def test_redirects_stop_at_the_limit(tmp_path, web):
    out = call(tmp_path, _config(web, max_redirects=3), "web_fetch", url=web.url("/loop"))
    assert out.is_error and "more than 3 redirects" in out.content
    assert web.requests.count("/loop") == 4


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "gopher://x", "javascript:alert(1)"])
def test_it_refuses_schemes_other_than_http_and_https(tmp_path, web, url):
    out = call(tmp_path, _config(web), "web_fetch", url=url)
    assert out.is_error and "only http and https URLs can be fetched" in out.content


def test_loopback_is_refused_unless_the_host_is_allowed(tmp_path, web):
    out = call(tmp_path, _config(web, allowed_private_hosts=frozenset()), "web_fetch", url=web.url("/page"))
    assert out.is_error and "loopback, private or reserved" in out.content
    assert web.requests == []  # refused before any request left
    port = web.base_url.rsplit(":", 1)[1]
    out = call(
        tmp_path, _config(web, allowed_private_hosts=frozenset()), "web_fetch", url=f"http://localhost:{port}/page"
    )
    assert out.is_error and "loopback, private or reserved" in out.content
    for url in ("http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/", "http://[::1]/"):
        out = call(tmp_path, _config(web, allowed_private_hosts=frozenset()), "web_fetch", url=url)
        assert out.is_error and "loopback, private or reserved" in out.content, url


def test_a_search_returns_titles_urls_and_snippets(tmp_path, web):
    out = call(tmp_path, _config(web), "web_search", query="django async", count=2)
    assert not out.is_error, out.content
    assert "1. Django\n   https://www.djangoproject.com/\n   The web framework" in out.content
    assert "2. Channels" in out.content
    assert web.searches == [{"q": "django async", "count": "2", "token": BRAVE_TOKEN}]


def test_a_search_refused_by_the_api_is_an_error_without_the_key(tmp_path, web):
    out = call(tmp_path, _config(web, brave_api_key="wrong-key"), "web_search", query="x")
    assert out.is_error and "HTTP 401" in out.content and "wrong-key" not in out.content


def test_a_search_without_a_key_says_it_is_not_configured(tmp_path, web):
    out = call(tmp_path, _config(web, brave_api_key=""), "web_search", query="x")
    assert out.is_error and "BRAVE_API_KEY" in out.content
    assert web.searches == []

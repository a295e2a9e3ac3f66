"""GET /: a page saying what this server is, where its doors are, and whether a model key is set."""

from __future__ import annotations

from django.test import override_settings


def test_it_describes_the_server_and_its_agents(client, coder):
    page = client.get("/")
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
    text = page.content.decode()
    assert "Threadline" in text and "AG-UI" in text
    assert "http://testserver/agui/coder" in text
    for link in ('href="/admin/"', 'href="/api/docs/"', 'href="/metrics"', 'href="/agui/info"'):
        assert link in text
    assert "cd examples/copilotkit" in text and "make example" in text
    assert "No model key is set" in text


@override_settings(ANTHROPIC_API_KEY="sk-ant-very-secret-key")
def test_it_says_a_model_key_is_set_without_showing_it(client, coder):
    text = client.get("/").content.decode()
    assert "A model key is set" in text
    assert "sk-ant-very-secret-key" not in text and "very-secret" not in text


def test_only_the_root_is_the_home_page(client, coder):
    assert client.get("/no-such-page").status_code == 404
    assert client.post("/").status_code == 405

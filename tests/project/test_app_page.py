"""GET /app/: the CopilotKit page Threadline serves itself, behind Django's login (issue #44 item 6).

A build of the page is stood in for by a folder of the same shape (vite's index.html and assets/);
tests/project/test_app_page_browser.py drives the real build in Chromium."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings

INDEX = '<!doctype html><html><head><script type="module" src="/app/assets/index-abc.js"></script></head></html>'


@pytest.fixture
def built(tmp_path: Path):
    (tmp_path / "assets").mkdir()
    (tmp_path / "index.html").write_text(INDEX)
    (tmp_path / "assets" / "index-abc.js").write_text("console.log('page')")
    (tmp_path / "secret.txt").write_text("not an asset")
    with override_settings(APP_PAGE_DIR=tmp_path):
        yield tmp_path


@pytest.fixture
def alice(client, db):
    person = User.objects.create_user("alice<b>", password="a long password")
    client.force_login(person)
    return person


def test_a_signed_out_visitor_is_sent_to_sign_in_and_back(client, db, built):
    page = client.get("/app/?thread=t-1")
    assert page.status_code == 302
    assert page["Location"] == "/accounts/login/?next=/app/%3Fthread%3Dt-1"


def test_the_sign_in_page_says_where_a_login_comes_from(client, db):
    page = client.get("/accounts/login/?next=/app/")
    assert page.status_code == 200 and "manage.py createsuperuser" in page.content.decode()


def test_signing_in_lands_on_the_page(client, db, built):
    User.objects.create_user("bob", password="a long password")
    signed = client.post(
        "/accounts/login/", {"username": "bob", "password": "a long password", "next": "/app/?thread=t-1"}
    )
    assert signed.status_code == 302 and signed["Location"] == "/app/?thread=t-1"
    assert client.get(signed["Location"]).status_code == 200


def test_the_page_carries_the_user_the_runtime_url_and_a_csrf_token_the_routes_take(alice, built):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    page = client.get("/app/")
    assert page.status_code == 200 and page["Content-Type"] == "text/html; charset=utf-8"
    html = page.content.decode()
    token = re.search(r'<meta name="csrf-token" content="(\w+)">', html).group(1)
    rename = {"path": "/copilotkit/threads/t-none", "data": b'{"name": "x"}', "content_type": "application/json"}
    assert client.patch(**rename, headers={"X-CSRFToken": token}).status_code == 404
    assert client.patch(**rename).status_code == 403
    assert '<meta name="threadline-user" content="alice&lt;b&gt;">' in html
    assert '<meta name="copilotkit-url" content="/copilotkit">' in html
    assert '<meta name="logout-url" content="/accounts/logout/">' in html
    assert 'src="/app/assets/index-abc.js"' in html
    assert page["Cache-Control"] == "private, no-store"


def test_its_assets_are_served_to_anyone_and_cached_for_good(client, db, built):
    asset = client.get("/app/assets/index-abc.js")
    assert asset.status_code == 200 and asset.content == b"console.log('page')"
    assert asset["Cache-Control"] == "public, max-age=31536000, immutable"
    assert asset["Content-Type"].startswith("text/javascript")


@pytest.mark.parametrize("path", ["../secret.txt", "..%2Fsecret.txt", "nothing.js", "../index.html"])
def test_nothing_outside_its_assets_is_served(client, db, built, path):
    assert client.get(f"/app/assets/{path}").status_code == 404


def test_a_page_not_built_says_how_to_build_it(client, alice, tmp_path):
    with override_settings(APP_PAGE_DIR=tmp_path / "nothing"):
        page = client.get("/app/")
    assert page.status_code == 503
    text = page.content.decode()
    assert "not built" in text and "Node.js 20" in text and "make run" in text


def test_the_page_is_read_only(client, alice, built):
    assert client.post("/app/").status_code == 405

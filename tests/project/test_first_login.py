"""``make run`` gives a new user a first login (``manage.py firstlogin``): the page at /app/ and the
admin need a Django user, and the README's two commands are all a new user runs."""

from __future__ import annotations

import stat
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db


def _first_login(data_dir: Path) -> str:
    with override_settings(DATA_DIR=data_dir):
        out = StringIO()
        call_command("firstlogin", stdout=out)
        return out.getvalue()


def test_a_database_without_users_gets_an_admin_whose_password_is_printed_and_kept(tmp_path: Path) -> None:
    printed = _first_login(tmp_path)
    kept = tmp_path / "first-login"
    username, password = kept.read_text().split()
    assert username == "admin" and password in printed
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    user = authenticate(username="admin", password=password)
    assert user is not None and user.is_superuser and user.is_staff
    client = Client()
    signed_in = client.post("/accounts/login/", {"username": "admin", "password": password, "next": "/admin/"})
    assert signed_in.status_code == 302 and signed_in["Location"] == "/admin/"
    assert client.get("/admin/").status_code == 200


def test_it_runs_once_and_never_touches_a_database_that_has_users(tmp_path: Path) -> None:
    _first_login(tmp_path)
    kept = (tmp_path / "first-login").read_text()
    assert _first_login(tmp_path) == ""
    assert (tmp_path / "first-login").read_text() == kept
    assert get_user_model().objects.count() == 1


def test_an_operators_own_user_means_no_admin_is_made(tmp_path: Path) -> None:
    get_user_model().objects.create_user("ops", password="x" * 20)
    assert _first_login(tmp_path) == ""
    assert not (tmp_path / "first-login").exists()
    assert not get_user_model().objects.filter(username="admin").exists()

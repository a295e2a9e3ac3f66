"""``manage.py firstlogin``: on a database with no user yet, a first login to sign in with.

``make run`` runs it after migrating, so a new user's page at /app/ and the admin can be signed in
to with nothing but that command: the account ``admin`` (a superuser) with a generated password,
printed once and kept in the data dir (mode 0600) for later. A database that has a user already is
left as it is; so is one whose ``admin`` was renamed, given another password or deleted since.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

USERNAME = "admin"
FILE = "first-login"


class Command(BaseCommand):
    help = "Create a first superuser, 'admin' with a generated password kept in the data dir, if no user exists."

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        path = settings.DATA_DIR / FILE
        with transaction.atomic():
            if users.objects.exists():
                return
            password = secrets.token_urlsafe(18)
            users.objects.create_superuser(USERNAME, password=password)
            path.unlink(missing_ok=True)  # a file of an earlier database
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(f"{USERNAME}\n{password}\n")
        self.stdout.write(
            f"First login for the chat page and the admin: {USERNAME} / {password}\n"
            f"  (kept in {path}; change the password in the admin, and delete the file)"
        )

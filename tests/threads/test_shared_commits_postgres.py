"""On PostgreSQL, writes that share a commit (threads/dbthread.py on_db_thread_shared) keep their
failures to themselves: a duplicate key fails one write, and the others of its commit are kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.procs import postgres_env, script_report

pytestmark = pytest.mark.services

SCRIPT = """
import asyncio, json, threading
import django
django.setup()
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from threads.dbthread import on_db_thread, on_db_thread_shared

def write(*, name):
    with transaction.atomic():
        Group.objects.create(name=name)
    return name

async def main():
    await on_db_thread(write, name="taken")
    busy, release = threading.Event(), threading.Event()
    def hold():
        busy.set()
        release.wait(10)
    holding = asyncio.create_task(on_db_thread_shared(hold))
    await asyncio.to_thread(busy.wait, 10)
    writes = [asyncio.create_task(on_db_thread_shared(write, name=name)) for name in ("a", "taken", "b")]
    await asyncio.sleep(0.05)
    release.set()
    await holding
    outcomes = await asyncio.gather(*writes, return_exceptions=True)
    names = await on_db_thread(lambda: sorted(Group.objects.values_list("name", flat=True)))
    return [o if isinstance(o, str) else type(o).__name__ for o in outcomes], names

outcomes, names = asyncio.run(main())
print(json.dumps({"outcomes": outcomes, "names": names}))
"""


def test_a_duplicate_in_a_shared_commit_fails_alone_on_postgresql(postgres_url, tmp_path: Path):
    report = script_report(SCRIPT, postgres_env(postgres_url, tmp_path))
    assert report["outcomes"] == ["a", "IntegrityError", "b"]
    assert report["names"] == ["a", "b", "taken"]

"""Uploads never used are pruned (issue #44): a file POSTed to /copilotkit/attachments that no message
names within ATTACHMENT_UNUSED_SECONDS is deleted by the running server's sweep; one a stored
message names is tied to that thread and kept, however old, until the thread is deleted."""

from __future__ import annotations

import time

import httpx
import orjson
import pytest
from django.test import override_settings

from tests.fakes.anthropic_api import text_turn
from tests.helpers import run_input, user, v1
from threads.models import Attachment, Thread

pytestmark = pytest.mark.clients

TOKEN = {"Authorization": "Bearer test-token"}
PNG = b"\x89PNG\r\n\x1a\n" + b"\1" * 8


def _upload(server, data=PNG):
    uploaded = httpx.post(
        f"{server.url}/copilotkit/attachments",
        content=data,
        headers={**TOKEN, "Content-Type": "image/png"},
        timeout=30,
    )
    assert uploaded.status_code == 201, uploaded.text
    return uploaded.json()


def _send(server, thread_id, source):
    part = {"type": "image", "source": {key: source[key] for key in ("type", "value", "mimeType")}}
    body = v1(run_input(thread_id, "r1", user([{"type": "text", "text": "look"}, part], f"u-{thread_id}")))
    ran = httpx.post(
        f"{server.url}/copilotkit/agent/coder/run",
        content=orjson.dumps(body),
        headers={**TOKEN, "Content-Type": "application/json"},
        timeout=30,
    )
    server.drain()
    assert ran.status_code == 200 and b"RUN_FINISHED" in ran.content, ran.text


def _status(server, source):
    return httpx.get(source["value"], headers=TOKEN, timeout=30).status_code


@override_settings(ATTACHMENT_UNUSED_SECONDS=1)
def test_the_sweep_deletes_an_upload_no_message_named_and_keeps_one_a_message_named(server, fake_api):
    fake_api.script([text_turn(["Seen."])])
    used, unused = _upload(server), _upload(server)
    _send(server, "t-used", used)
    assert Attachment.objects.get(pk=used["metadata"]["id"]).thread == Thread.objects.get(agui_thread_id="t-used")

    deadline = time.monotonic() + 15
    while _status(server, unused) == 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _status(server, unused) == 404
    assert _status(server, used) == 200
    assert list(Attachment.objects.values_list("pk", flat=True)) == [Thread.objects.get().attachments.get().pk]


@override_settings(ATTACHMENT_UNUSED_SECONDS=3600)
def test_an_upload_younger_than_the_setting_is_kept_until_a_message_names_it(server, fake_api):
    fake_api.script([text_turn(["Seen."])])
    waiting = _upload(server)
    time.sleep(2.5)  # the sweep (every WAIT_SWEEP_SECONDS) has looked more than once
    assert _status(server, waiting) == 200
    _send(server, "t-later", waiting)
    assert Thread.objects.get(agui_thread_id="t-later").attachments.get().pk.hex == waiting["metadata"]["id"]

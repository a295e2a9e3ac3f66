"""An attachment named by a ``url`` that is not the sender's own upload (issue #44 item 5): fetched
once under web_fetch's guard and stored as the sender's upload, so the model reads it and a reload
shows Threadline's copy; or refused with a 4xx that says why, with nothing stored and nothing sent to
the model: a private address (loopback here, unless WEB_ALLOWED_PRIVATE_HOSTS names it), a redirect
to another site, an error status, a type the model does not read, a file over the size limit.

The fake web (tests/fakes/web_site.py) is on loopback: the tests that fetch from it allow 127.0.0.1
as the operator would allow a private host."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import orjson
import pytest
from django.test import override_settings

from tests.fakes.anthropic_api import text_turn
from tests.fakes.web_site import FakeWeb
from tests.helpers import run_input, user, v1
from tests.sse import parse_frames
from threads.models import Attachment, Message, Thread

pytestmark = pytest.mark.clients

AUTH = {"Authorization": "Bearer test-token", "Content-Type": "application/json"}
IMAGE = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64  # what the fake web's /image answers


@pytest.fixture
def web() -> Iterator[FakeWeb]:
    with FakeWeb() as site:
        yield site


def _run(server, thread_id, url, kind="image"):
    part = {"type": kind, "source": {"type": "url", "value": url, "mimeType": "image/png"}}
    body = v1(run_input(thread_id, "r1", user([{"type": "text", "text": "look"}, part], f"u-{thread_id}")))
    return httpx.post(f"{server.url}/copilotkit/agent/coder/run", content=orjson.dumps(body), headers=AUTH, timeout=30)


@override_settings(WEB_ALLOWED_PRIVATE_HOSTS=frozenset({"127.0.0.1"}))
def test_an_image_at_an_address_is_fetched_stored_and_shown_again_from_threadline(server, fake_api, web):
    fake_api.script([text_turn(["A fetched picture."])])
    ran = _run(server, "t-url", web.url("/image"))
    server.drain()
    assert ran.status_code == 200 and b"RUN_FINISHED" in ran.content, ran.text
    assert web.requests == ["/image"]
    sent = fake_api.requests[0].body["messages"][0]["content"]
    data = base64.b64encode(IMAGE).decode()
    assert {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}} in sent
    # The message names Threadline's copy, which goes with the thread.
    copy = Attachment.objects.get()
    assert bytes(copy.data) == IMAGE and copy.thread == Thread.objects.get(agui_thread_id="t-url")
    stored = Message.objects.get(message_id="u-t-url").body["content"][1]["source"]
    assert stored == {
        "type": "url",
        "value": f"{server.url}/copilotkit/attachments/{copy.pk.hex}",
        "mimeType": "image/png",
    }
    frames, _ = parse_frames(
        httpx.post(
            f"{server.url}/copilotkit/agent/coder/connect",
            content=orjson.dumps(v1(run_input("t-url", "c1"))),
            headers=AUTH,
            timeout=30,
        ).content
    )
    snapshot = next(f.event for f in frames if f.event["type"] == "MESSAGES_SNAPSHOT")
    assert snapshot["messages"][0]["content"][1]["source"] == stored
    assert httpx.get(stored["value"], headers=AUTH).content == IMAGE
    assert web.requests == ["/image"]  # fetched once


def test_a_private_address_is_refused_and_never_requested(server, fake_api, web):
    refused = _run(server, "t-private", web.url("/image"))
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "attachment_url_refused" and error["field"] == "content[1]"
    assert "127.0.0.1" in error["message"]
    assert web.requests == []
    assert not Thread.objects.exists() and not Attachment.objects.exists() and not fake_api.requests


@override_settings(WEB_ALLOWED_PRIVATE_HOSTS=frozenset({"127.0.0.1"}), ATTACHMENT_MAX_BYTES=1024)
@pytest.mark.parametrize(
    ("path", "kind", "status", "code"),
    [
        ("/page", "image", 415, "unsupported_attachment"),  # text/html
        ("/image", "document", 415, "unsupported_attachment"),  # an image as a document part
        ("/missing", "image", 400, "attachment_url_refused"),  # 404 there
        ("/elsewhere", "image", 400, "attachment_url_refused"),  # a redirect to another site
        ("/big", "image", 413, "attachment_too_large"),  # 5 MiB of text, over 1 KiB
    ],
)
def test_a_file_that_does_not_fit_is_refused_and_nothing_is_stored(server, fake_api, web, path, kind, status, code):
    refused = _run(server, "t-bad", web.url(path), kind)
    assert refused.status_code == status, refused.text
    assert refused.json()["error"]["code"] == code
    assert not Thread.objects.exists() and not Attachment.objects.exists() and not fake_api.requests

"""Attachments (issue #44 item 5): AG-UI 1.0 image and document parts, inline as CopilotKit's
useAttachments sends them, reach the model and come back with the thread; one too large, too many,
of a type the model does not read, or pointing at a private address is refused with a 4xx that says
so, and nothing is stored (tests/agui/test_attachment_urls.py fetches a public one)."""

from __future__ import annotations

import base64

import httpx
import orjson
import pytest
from django.test import override_settings

from tests.fakes.anthropic_api import text_turn
from tests.helpers import run_input, user, v1
from tests.sse import parse_frames
from threads.models import Message, Thread

pytestmark = pytest.mark.clients

AUTH = {"Authorization": "Bearer test-token", "Content-Type": "application/json"}
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 8).decode()  # 16 bytes
PDF = base64.b64encode(b"%PDF-1.4 a small document").decode()


def _image(data=PNG, mime="image/png", kind="data"):
    return {"type": "image", "source": {"type": kind, "value": data, "mimeType": mime}}


def _document(data=PDF, mime="application/pdf"):
    return {"type": "document", "source": {"type": "data", "value": data, "mimeType": mime}}


def _post(server, path, body):
    return httpx.post(f"{server.url}/copilotkit{path}", content=orjson.dumps(body), headers=AUTH, timeout=30)


@override_settings(ATTACHMENT_MAX_BYTES=25)  # the PDF is exactly this large
def test_an_image_and_a_document_reach_the_model_and_come_back_with_the_thread(server, fake_api):
    fake_api.script([text_turn(["A picture and a PDF."])])
    content = [{"type": "text", "text": "what are these?"}, _image(), _document()]
    ran = _post(server, "/agent/coder/run", v1(run_input("t-att", "r1", user(content, "u1"))))
    server.drain()
    assert ran.status_code == 200 and b"RUN_FINISHED" in ran.content
    sent = fake_api.requests[0].body["messages"][0]["content"]
    assert {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}} in sent
    assert {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}} in sent
    # A reloaded page gets the message with its attachments again.
    frames, _ = parse_frames(_post(server, "/agent/coder/connect", v1(run_input("t-att", "c1"))).content)
    snapshot = next(f.event for f in frames if f.event["type"] == "MESSAGES_SNAPSHOT")
    assert snapshot["messages"][0]["content"] == content


@override_settings(ATTACHMENT_MAX_BYTES=25, ATTACHMENTS_MAX_COUNT=2)
@pytest.mark.parametrize(
    ("parts", "status", "code"),
    [
        ([_image(base64.b64encode(b"x" * 26).decode())], 413, "attachment_too_large"),
        ([_image(), _image(), _document()], 413, "too_many_attachments"),
        ([_image(mime="image/svg+xml")], 415, "unsupported_attachment"),
        ([_document(mime="application/zip")], 415, "unsupported_attachment"),
        ([_image(mime="application/pdf")], 415, "unsupported_attachment"),
        ([_image("http://127.0.0.1:9/cat.png", kind="url")], 400, "attachment_url_refused"),
        ([_image("not base64!")], 400, "invalid_attachment"),
    ],
)
def test_a_refused_attachment_says_why_and_stores_nothing(server, fake_api, parts, status, code):
    content = [{"type": "text", "text": "look"}, *parts]
    refused = _post(server, "/agent/coder/run", v1(run_input("t-bad", "r1", user(content, "u1"))))
    assert refused.status_code == status, refused.text
    assert refused.json()["error"]["code"] == code
    assert not Thread.objects.exists() and not Message.objects.exists() and not fake_api.requests


def _person(name):
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    key = Token.objects.create(user=User.objects.create_user(name)).key
    return {"Authorization": f"Token {key}"}


def _upload(server, headers, data, media_type):
    return httpx.post(
        f"{server.url}/copilotkit/attachments",
        content=data,
        headers={**headers, "Content-Type": media_type},
        timeout=30,
    )


@override_settings(ATTACHMENT_MAX_BYTES=25)
def test_an_uploaded_file_reaches_the_model_by_its_address_and_goes_with_its_thread(server, fake_api):
    from threads.models import Attachment

    olive, sam = _person("olive"), _person("sam")
    picture = b"\x89PNG\r\n\x1a\n" + b"\1" * 8
    uploaded = _upload(server, olive, picture, "image/png")
    assert uploaded.status_code == 201, uploaded.text
    source = uploaded.json()
    assert source["type"] == "url" and source["mimeType"] == "image/png"
    # Its owner reads it back; nobody else finds it.
    assert httpx.get(source["value"], headers=olive).content == picture
    assert httpx.get(source["value"], headers=sam).status_code == 404
    part = {"type": "image", "source": {k: source[k] for k in ("type", "value", "mimeType")}}
    # Another user cannot send it to their model: nothing is stored.
    body = v1(run_input("t-sam", "r1", user([{"type": "text", "text": "whose?"}, part], "u-sam")))
    taken = httpx.post(
        f"{server.url}/copilotkit/agent/coder/run",
        content=orjson.dumps(body),
        headers={**sam, "Content-Type": "application/json"},
        timeout=30,
    )
    assert taken.status_code == 400 and taken.json()["error"]["code"] == "unknown_attachment"
    assert not Thread.objects.exists()

    fake_api.script([text_turn(["A tiny picture."])])
    body = v1(run_input("t-up", "r1", user([{"type": "text", "text": "what is it?"}, part], "u1")))
    ran = httpx.post(
        f"{server.url}/copilotkit/agent/coder/run",
        content=orjson.dumps(body),
        headers={**olive, "Content-Type": "application/json"},
        timeout=30,
    )
    server.drain()
    assert ran.status_code == 200 and b"RUN_FINISHED" in ran.content
    sent = fake_api.requests[0].body["messages"][0]["content"]
    data = base64.b64encode(picture).decode()
    assert {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}} in sent
    # The stored message keeps the address, not the bytes; deleting the thread removes the file.
    assert Message.objects.get(message_id="u1").body["content"][1] == part
    deleted = httpx.request(
        "DELETE", f"{server.url}/copilotkit/threads/t-up", headers={**olive, "Content-Type": "application/json"}
    )
    assert deleted.status_code == 200 and not Attachment.objects.exists()


@override_settings(ATTACHMENT_MAX_BYTES=25)
def test_an_upload_of_the_wrong_type_or_size_is_refused_and_not_kept(server):
    from threads.models import Attachment

    for data, media_type, status in (
        (b"<svg/>", "image/svg+xml", 415),
        (b"x" * 26, "text/plain", 413),
        (b"", "text/plain", 400),
    ):
        refused = _upload(server, {"Authorization": "Bearer test-token"}, data, media_type)
        assert refused.status_code == status, (media_type, refused.text)
    assert not Attachment.objects.exists()
    assert _upload(server, {}, b"x", "text/plain").status_code == 401

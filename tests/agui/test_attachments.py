"""Attachments (issue #44 item 5): AG-UI 1.0 image and document parts, inline as CopilotKit's
useAttachments sends them, reach the model and come back with the thread; one too large, too many,
of a type the model does not read, or pointing at an address instead of carrying its data is
refused with a 4xx that says so, and nothing is stored."""

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
        ([_image("https://example.com/cat.png", kind="url")], 415, "attachment_source_refused"),
        ([_image("not base64!")], 400, "invalid_attachment"),
    ],
)
def test_a_refused_attachment_says_why_and_stores_nothing(server, fake_api, parts, status, code):
    content = [{"type": "text", "text": "look"}, *parts]
    refused = _post(server, "/agent/coder/run", v1(run_input("t-bad", "r1", user(content, "u1"))))
    assert refused.status_code == status, refused.text
    assert refused.json()["error"]["code"] == code
    assert not Thread.objects.exists() and not Message.objects.exists() and not fake_api.requests

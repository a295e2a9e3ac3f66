"""The OpenAPI schema: generated without warnings, served at /api/schema/ with an offline docs page,
and held to by the API itself (schemathesis: no 5xx, no response that breaks the schema)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import call_command
from django.utils import timezone
from hypothesis import HealthCheck, settings
from rest_framework.test import APIClient

from agents.models import PermissionRule
from tests import api_world as world


def test_the_schema_generates_without_warnings_and_validates(tmp_path):
    # --fail-on-warn turns any of drf-spectacular's warnings (an untyped field, an unresolved path parameter,
    # an enum name collision) into a failure; --validate checks the result against the OpenAPI 3 spec.
    call_command("spectacular", "--fail-on-warn", "--validate", "--file", str(tmp_path / "schema.yaml"))
    text = (tmp_path / "schema.yaml").read_text()
    assert "openapi: 3.0.3" in text and "tokenAuth" in text


def test_the_schema_and_its_docs_are_served_without_a_token(db):
    schema = APIClient().get("/api/schema/", {"format": "json"})
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/api/threads/" in paths and "/api/approvals/{approval_id}/answer" in paths
    assert APIClient().get("/api/docs/").status_code == 200


def test_the_docs_page_loads_everything_from_this_server(db):
    page = APIClient().get("/api/docs/").content.decode()
    assets = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", page)
    assert any("swagger-ui" in asset for asset in assets), page
    for asset in assets:
        assert not re.match(r"^(https?:)?//", asset), f"the docs page loads {asset} from elsewhere"
        if asset.startswith("/static/"):
            response = APIClient().get(asset)
            response.close()
            assert response.status_code == 200, asset
    assert "/api/schema/" in page


# Loaded once, when the module is collected: the schema needs no database, only the app.
# (schemathesis.pytest.from_fixture would load it per test, but it relies on a pytest internal,
# Node._nodeid, that pytest 9.2 no longer has.)
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", WSGIHandler())
schema.config.generation.update(max_examples=30, deterministic=True)


@pytest.fixture
def seeded(transactional_db):
    """Rows under every kind of path, owned by the person whose token the cases carry.

    Committed (transactional_db): Django's WSGI handler closes the connection after each
    request, which would end the transaction a plain ``db`` fixture keeps open."""
    people = world.People.create()
    thread = world.thread("t-olive", owner=people.owner, state={"todos": [{"id": "1", "content": "test"}]})
    world.message(thread, 0, "hello")
    run = world.run(thread)
    world.events(run, 5)
    world.approval(run, "ap-olive")
    task = world.subagent_task(run, "sa-olive")
    world.subagent_task(run, "sa-child", parent_task=task, depth=2, status="succeeded", finished_at=timezone.now())
    PermissionRule.objects.create(position=1, decision="allow", tool="file_read")
    rule = PermissionRule.objects.create(position=2, decision="ask", scope="thread", thread_agui_id="t-olive")
    token = people.owner.api._credentials["HTTP_AUTHORIZATION"]
    return SimpleNamespace(headers={"Authorization": token}, run=str(run.pk), rule=rule.pk)


@schema.parametrize()
@settings(suppress_health_check=list(HealthCheck), deadline=None, database=None)
def test_the_api_keeps_to_its_schema(case, seeded):
    # Schemathesis also sends some cases without the token (the ignored_auth check).
    case.call_and_validate(headers=seeded.headers)


def test_the_seeded_objects_read_as_the_schema_says(seeded):
    """Generated ids rarely hit a row: each read of a real one is checked against the schema here."""
    reads = {
        "/api/threads/": {},
        "/api/threads/{thread_id}/": {"thread_id": "t-olive"},
        "/api/threads/{thread_id}/state/": {"thread_id": "t-olive"},
        "/api/threads/{thread_id}/runs/": {"thread_id": "t-olive"},
        "/api/threads/{thread_id}/subagent-tasks/": {"thread_id": "t-olive"},
        "/api/runs/{run_id}/": {"run_id": seeded.run},
        "/api/runs/{run_id}/events/": {"run_id": seeded.run},
        "/api/approvals/": {},
        "/api/approvals/{approval_id}/": {"approval_id": "ap-olive"},
        "/api/subagent-tasks/": {},
        "/api/subagent-tasks/{task_id}/": {"task_id": "sa-child"},
        "/api/agents/": {},
        "/api/agents/{name}/": {"name": "coder"},
        "/api/permission-rules/": {},
        "/api/permission-rules/{rule_id}/": {"rule_id": seeded.rule},
    }
    for path, parameters in reads.items():
        response = schema[path]["GET"].Case(path_parameters=parameters).call_and_validate(headers=seeded.headers)
        assert response.status_code == 200, path
        assert "results" not in response.json() or response.json()["count"] >= 1, path
    answer = schema["/api/approvals/{approval_id}/answer"]["POST"]
    first = answer.Case(path_parameters={"approval_id": "ap-olive"}, body={"approved": False, "reason": "not now"})
    assert first.call_and_validate(headers=seeded.headers).json()["decision"] == "denied"
    again = answer.Case(path_parameters={"approval_id": "ap-olive"}, body={"approved": True})
    assert again.call_and_validate(headers=seeded.headers).status_code == 409

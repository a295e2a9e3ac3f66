"""REST: agents and the permission rules, read only.

An agent's system prompt is left out: it is configuration for the model, not
something a dashboard needs, and it may hold what its author did not mean to
publish. Every authenticated user sees the agents and the rules that apply to
all threads; a rule scoped to one thread only its owner (and staff) sees.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from agents.models import Agent, PermissionRule
from agents.runtime import agent_tool_names
from threads.api_errors import error_responses
from threads.api_query import ApiView, ListView, text_filter
from threads.selectors import agent_get_by_name, agent_list, permission_rule_get_visible, permission_rule_list


class LimitsOutput(serializers.Serializer[Agent]):
    maxIterations = serializers.IntegerField(source="max_iterations", help_text="Model calls per run.")
    maxRunSeconds = serializers.IntegerField(source="max_run_seconds", help_text="Wall-clock cap of a run; 0: none.")
    tokenBudget = serializers.IntegerField(source="token_budget", help_text="Tokens per run; 0: no budget.")
    maxTokens = serializers.IntegerField(source="max_tokens", help_text="Output tokens per model call.")
    thinkingBudget = serializers.IntegerField(source="thinking_budget", help_text="0: thinking off.")


class AgentOutput(serializers.Serializer[Agent]):
    name = serializers.CharField(help_text="Its address, here and at /agui/<name>.")
    description = serializers.CharField()
    model = serializers.SerializerMethodField(
        help_text="The model it calls: its own, or ANTHROPIC_MODEL if it names none (without an API key "
        "the server's offline demo model answers instead; /agui/info says which)."
    )
    groundingMode = serializers.ChoiceField(source="grounding_mode", choices=Agent.Grounding.choices)
    limits = LimitsOutput(source="*")
    enabled = serializers.BooleanField()
    createdAt = serializers.DateTimeField(source="created_at")
    updatedAt = serializers.DateTimeField(source="updated_at")

    def get_model(self, agent: Agent) -> str:
        return agent.model or str(settings.ANTHROPIC_MODEL)


class AgentDetailOutput(AgentOutput):
    tools = serializers.SerializerMethodField(
        help_text="The tools its runs are offered now: the built-in ones the settings switch on and the tools "
        "of its MCP servers that are up (mcp__<server>__<tool>); the client's own tools are added per run."
    )

    def get_tools(self, agent: Agent) -> list[str]:
        return agent_tool_names(agent)


@extend_schema(responses={200: AgentOutput(many=True), **error_responses(400, 404)})
class AgentList(ListView[Agent]):
    """GET /api/agents/: every agent, by name."""

    serializer_class = AgentOutput

    def get_queryset(self) -> QuerySet[Agent]:
        return agent_list()


@extend_schema(
    parameters=[OpenApiParameter("name", str, OpenApiParameter.PATH, description="The agent's name.")],
    responses={200: AgentDetailOutput, **error_responses(404)},
)
class AgentDetail(ApiView):
    """GET /api/agents/<name>/: one agent."""

    def get(self, request: Request, name: str) -> Response:
        agent = agent_get_by_name(name=name)
        if agent is None:
            raise NotFound("no such agent")
        return Response(AgentDetailOutput(agent).data)


class PermissionRuleOutput(serializers.Serializer[PermissionRule]):
    id = serializers.IntegerField()
    position = serializers.IntegerField(help_text="Rules are tried from the lowest position up.")
    tool = serializers.CharField(help_text="Blank: any tool.")
    match = serializers.CharField(help_text="A glob over the call's primary argument; blank matches anything.")
    decision = serializers.ChoiceField(choices=PermissionRule.Decision.choices)
    enabled = serializers.BooleanField()
    scope = serializers.ChoiceField(choices=PermissionRule.Scope.choices)
    agent = serializers.CharField(source="agent.name", allow_null=True, default=None, help_text="For scope agent.")
    threadId = serializers.SerializerMethodField(help_text="For scope thread: the AG-UI thread id.")
    description = serializers.CharField()
    createdAt = serializers.DateTimeField(source="created_at")
    updatedAt = serializers.DateTimeField(source="updated_at")

    def get_threadId(self, rule: PermissionRule) -> str | None:
        return rule.thread_agui_id or None


class PermissionRuleFilter(serializers.Serializer[dict[str, Any]]):
    scope = serializers.ChoiceField(choices=PermissionRule.Scope.choices, required=False)
    agent = text_filter(max_length=64, help_text="Rules scoped to this agent (its name).")


@extend_schema(
    parameters=[PermissionRuleFilter], responses={200: PermissionRuleOutput(many=True), **error_responses(400, 404)}
)
class PermissionRuleList(ListView[PermissionRule]):
    """GET /api/permission-rules/?scope=&agent=: the rules in the order they are tried."""

    serializer_class = PermissionRuleOutput
    query_filter = PermissionRuleFilter

    def get_queryset(self) -> QuerySet[PermissionRule]:
        return permission_rule_list(user=self.request.user, **self.query())


@extend_schema(
    parameters=[OpenApiParameter("rule_id", int, OpenApiParameter.PATH, description="The rule's id.")],
    responses={200: PermissionRuleOutput, **error_responses(404)},
)
class PermissionRuleDetail(ApiView):
    """GET /api/permission-rules/<id>/: one rule."""

    def get(self, request: Request, rule_id: int) -> Response:
        rule = permission_rule_get_visible(user=request.user, rule_id=rule_id)
        if rule is None:
            raise NotFound("no such permission rule")
        return Response(PermissionRuleOutput(rule).data)

"""REST: what was spent, per user and per UTC day (issue #48).

Spend is what model calls cost at list prices (orchestrator/pricing.py), every call of a run (its
sub-agents' and compactions' too), as runs recorded it (agents/spending.py). Staff see every user's,
the shared AGUI_TOKEN's as the user null; a user sees their own.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import serializers

from agents.models import DailySpend
from threads.api_errors import error_responses
from threads.api_query import ListView, text_filter
from threads.selectors import spend_per_user_day


class SpendOutput(serializers.Serializer[dict[str, Any]]):
    day = serializers.DateField(help_text="The UTC day.")
    userId = serializers.IntegerField(source="user_id", allow_null=True, help_text="null: the shared AGUI_TOKEN.")
    username = serializers.CharField(source="user__username", allow_null=True)
    costUsd = serializers.FloatField(source="cost_usd", help_text="US dollars at list prices.")
    calls = serializers.IntegerField(help_text="Model calls.")
    inputTokens = serializers.IntegerField(source="input_tokens")
    outputTokens = serializers.IntegerField(source="output_tokens")
    cacheReadTokens = serializers.IntegerField(source="cache_read_tokens")
    cacheWriteTokens = serializers.IntegerField(source="cache_write_tokens")


class SpendFilter(serializers.Serializer[dict[str, Any]]):
    since = serializers.DateField(required=False, help_text="From this UTC day (YYYY-MM-DD).")
    until = serializers.DateField(required=False, help_text="To this UTC day, included.")
    agent = text_filter(max_length=64, help_text="One agent's spend only (its name).")
    user = text_filter(max_length=150, help_text="Staff: one user's spend only (their username).")


@extend_schema(parameters=[SpendFilter], responses={200: SpendOutput(many=True), **error_responses(400, 404)})
class SpendList(ListView[DailySpend]):
    """GET /api/spend/?since=&until=&agent=&user=: spend per user and UTC day, newest first."""

    serializer_class = SpendOutput  # type: ignore[assignment]
    query_filter = SpendFilter

    def get_queryset(self) -> QuerySet[DailySpend]:
        query = self.query()
        return spend_per_user_day(
            user=self.request.user,
            since=query.get("since"),
            until=query.get("until"),
            agent=query.get("agent", ""),
            username=query.get("user", ""),
        )

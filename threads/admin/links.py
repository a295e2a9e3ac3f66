"""The admin's own pages a row links to."""

from __future__ import annotations

import uuid

from django.urls import reverse


def runs_url(thread_pk: uuid.UUID) -> str:
    return f"{reverse('admin:threads_run_changelist')}?thread__id__exact={thread_pk}"


def board_url(thread_pk: uuid.UUID) -> str:
    return reverse("admin:threads_thread_subagents", args=[thread_pk])


def timeline_url(run_pk: uuid.UUID) -> str:
    return reverse("admin:threads_run_timeline", args=[run_pk])

"""Who may write through the REST API: staff read everything, and write only with the permission.

The selectors decide who *sees* an object (its thread's owner, and staff); seeing is not enough to
change it. A write to an object is allowed to its thread's owner, or to a staff user holding the
model's change permission: what the admin asks of the same write (its approve and deny actions need
``threads.change_approval``). A staff account without permissions answered another user's approval
through the API and the run executed the call (issue #23, item 4).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Model
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from threads.models import Approval, Run, Thread


def owner_id_of(obj: Model) -> int | None:
    """The id of the user who owns the thread ``obj`` belongs to (None: a thread of the shared token)."""
    if isinstance(obj, Thread):
        return obj.owner_id
    if isinstance(obj, Run):
        return obj.thread.owner_id
    if isinstance(obj, Approval):
        return obj.run.thread.owner_id
    raise TypeError(f"no owner is known for a {type(obj).__name__}")


def may_change(user: Any, obj: Model) -> bool:
    """Whether ``user`` may change ``obj`` through the API (see the module's docstring)."""
    if user.pk is not None and owner_id_of(obj) == user.pk:
        return True
    meta = obj._meta
    return bool(user.is_active and user.is_staff and user.has_perm(f"{meta.app_label}.change_{meta.model_name}"))


class OwnerOrChangePermission(BasePermission):
    """Every REST view's object check (a default permission class, settings.REST_FRAMEWORK): reads
    pass, and a write needs ``may_change``. A view that writes calls ``check_object_permissions``."""

    message = (
        "you may read this, but changing it needs its thread's owner or a staff account with the change "
        "permission on it (as the admin requires)"
    )

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        return request.method in SAFE_METHODS or may_change(request.user, obj)

"""manage.py prune_workspaces --idle-days N [--delete]: removes workspaces whose threads have all been
idle N days (threads/services/workspaces.py). Without --delete it only prints what it would remove."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from threads.services.workspaces import workspaces_prune
from threads.workspace_reads import workspaces_idle


class Command(BaseCommand):
    help = "Remove the workspaces whose threads have all been idle for --idle-days (a dry run unless --delete)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--idle-days", type=float, required=True, help="Idle for at least this many days.")
        parser.add_argument("--delete", action="store_true", help="Remove them; without it, only list them.")

    def handle(self, *args: Any, idle_days: float, delete: bool, **options: Any) -> None:
        if idle_days <= 0:
            self.stderr.write("--idle-days must be above 0")
            raise SystemExit(2)
        found = workspaces_prune(idle_days=idle_days) if delete else workspaces_idle(idle_days=idle_days)
        verb = "removed" if delete else "would remove"
        for workspace in found:
            when = workspace.last_active.isoformat() if workspace.last_active else "no thread left"
            self.stdout.write(f"{verb} {workspace.key} ({workspace.path}; last active: {when})")
        if not delete:
            self.stdout.write(
                f"{len(found)} workspace(s) idle for {idle_days:g} days; run with --delete to remove them"
            )

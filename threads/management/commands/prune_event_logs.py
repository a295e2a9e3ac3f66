"""manage.py prune_event_logs [--days N] [--dry-run]: removes the event logs of runs that ended more
than N days ago (EVENT_LOG_RETENTION_DAYS by default). The runs, the threads' messages and the
approvals stay; a reattach to such a run is told its log was removed (threads/services/eventlogs.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from threads.services.eventlogs import event_logs_prune, runs_with_old_logs

# A century: timezone.now() less more than about 700,000 days is before year 1.
MAX_DAYS = 36_500


class Command(BaseCommand):
    help = "Remove the event logs of runs that ended more than --days (EVENT_LOG_RETENTION_DAYS) days ago."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--days", type=float, help="Keep the logs of runs that ended within this many days (default: the setting)."
        )
        parser.add_argument("--dry-run", action="store_true", help="Only say what would be removed.")

    def handle(self, *args: Any, days: float | None, dry_run: bool, **options: Any) -> None:
        if days is None:
            days = settings.EVENT_LOG_RETENTION_DAYS
            if not days:
                raise CommandError("EVENT_LOG_RETENTION_DAYS is off (0): set it, or give --days")
        if not (0 < days <= MAX_DAYS):  # NaN fails too
            raise CommandError(f"--days must be above 0 and at most {MAX_DAYS:,}")
        ended_before = timezone.now() - timedelta(days=days)
        if dry_run:
            runs = runs_with_old_logs(ended_before=ended_before)
            for run in runs:
                self.stdout.write(f"would remove the log of run {run.pk} (ended {run.finished_at:%Y-%m-%d %H:%M})")
            self.stdout.write(f"{len(runs)} run(s) ended more than {days:g} days ago; run without --dry-run to remove")
            return
        pruned = event_logs_prune(ended_before=ended_before)
        self.stdout.write(
            f"removed the event logs of {pruned.runs} run(s) that ended more than {days:g} days ago "
            f"({pruned.frames} frame(s)); their runs, messages and approvals remain"
        )

"""Runs that ended on an interrupt and were continued by an answer are finished (succeeded, outcome
interrupt), as run_segment_open now records them; rows from before stayed "waiting"."""

from typing import Any

from django.db import migrations


def finish_answered(apps: Any, schema_editor: Any) -> None:
    Run = apps.get_model("threads", "Run")
    Run.objects.filter(status="waiting", children__isnull=False).update(status="succeeded")


class Migration(migrations.Migration):
    dependencies = [("threads", "0009_subagent_task_name")]

    operations = [migrations.RunPython(finish_answered, migrations.RunPython.noop)]

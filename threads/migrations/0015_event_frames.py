"""The event log stores frames of events, not a row per event (issue #27): the rows of every
existing log are moved into frames of up to FRAME_EVENTS events, then the row table goes."""

import django.db.models.deletion
from django.db import migrations, models

from threads import logframes

# Events per migrated frame: what the writer flushes at most at once (EVENT_LOG_BATCH's default).
FRAME_EVENTS = 2000


def _frames_of(run_id, rows):
    """Frames for a run's (seq, type, payload, created_at) rows in seq order: a gap in the seqs
    (a batch that was never written) starts a new frame, since a frame's seqs are contiguous."""
    frame = []
    for row in rows:
        if frame and (row[0] != frame[-1][0] + 1 or len(frame) == FRAME_EVENTS):
            yield frame
            frame = []
        frame.append(row)
    if frame:
        yield frame


def rows_to_frames(apps, schema_editor):
    RunEvent = apps.get_model("threads", "RunEvent")
    EventFrame = apps.get_model("threads", "EventFrame")
    # A migrated frame keeps the time its first event was logged (the model is this migration's own).
    EventFrame._meta.get_field("created_at").auto_now_add = False
    run_ids = RunEvent.objects.order_by().values_list("run_id", flat=True).distinct()
    for run_id in list(run_ids):
        rows = RunEvent.objects.filter(run_id=run_id).order_by("seq")
        created = []
        for frame in _frames_of(run_id, rows.values_list("seq", "type", "payload", "created_at").iterator(2000)):
            body = logframes.encode([(type_, payload) for _, type_, payload, _ in frame])
            first, last, when = frame[0][0], frame[-1][0], frame[0][3]
            created.append(EventFrame(run_id=run_id, first_seq=first, last_seq=last, body=body, created_at=when))
            if len(created) >= 100:
                EventFrame.objects.bulk_create(created)
                created = []
        EventFrame.objects.bulk_create(created)
        RunEvent.objects.filter(run_id=run_id).delete()


def frames_to_rows(apps, schema_editor):
    RunEvent = apps.get_model("threads", "RunEvent")
    EventFrame = apps.get_model("threads", "EventFrame")
    RunEvent._meta.get_field("created_at").auto_now_add = False
    frames = EventFrame.objects.order_by("run_id", "last_seq").values_list("run_id", "first_seq", "body", "created_at")
    rows = []
    for run_id, first, body, created_at in frames.iterator(chunk_size=100):
        for seq, type_, payload, _ in logframes.events_of(first, body):
            rows.append(RunEvent(run_id=run_id, seq=seq, type=type_, payload=payload, created_at=created_at))
        if len(rows) >= FRAME_EVENTS:
            RunEvent.objects.bulk_create(rows)
            rows = []
    RunEvent.objects.bulk_create(rows)
    EventFrame.objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("threads", "0014_workspaces"),
    ]

    operations = [
        migrations.CreateModel(
            name="EventFrame",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("first_seq", models.PositiveIntegerField()),
                ("last_seq", models.PositiveIntegerField()),
                ("body", models.BinaryField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "run",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="frames",
                        to="threads.run",
                    ),
                ),
            ],
            options={
                "ordering": ["run", "last_seq"],
                "constraints": [
                    models.UniqueConstraint(fields=("run", "last_seq"), name="event_frame_last_seq_unique")
                ],
            },
        ),
        migrations.AddField(
            model_name="run",
            name="events_pruned_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(rows_to_frames, frames_to_rows),
        migrations.DeleteModel(
            name="RunEvent",
        ),
    ]

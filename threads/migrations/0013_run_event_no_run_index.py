import django.db.models.deletion
from django.db import migrations, models

# The unique (run, seq) index serves every lookup of a run's events, so the index on run
# alone only cost each logged event a second index write. It is dropped by name, the same
# on SQLite and PostgreSQL, rather than by AlterField, which on SQLite copies the whole
# table to drop one index.
INDEX = "threads_runevent_run_id_7372f8dd"


class Migration(migrations.Migration):
    dependencies = [
        ("threads", "0012_queued_messages"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="runevent",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="events",
                        to="threads.run",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{INDEX}"',
                    reverse_sql=f'CREATE INDEX "{INDEX}" ON "threads_runevent" ("run_id")',
                ),
            ],
        ),
    ]

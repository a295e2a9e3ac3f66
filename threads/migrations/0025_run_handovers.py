from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("threads", "0024_attachment_thread"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="handovers",
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="run",
            name="takeover_history",
            field=models.JSONField(blank=True, default=list),
        ),
    ]

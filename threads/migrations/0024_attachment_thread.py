import re

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def claim_named_uploads(apps, schema_editor):
    """Uploads that stored messages name already are tied to their thread, so the sweep, which
    prunes uploads no message names, never takes them."""
    Attachment = apps.get_model("threads", "Attachment")
    Message = apps.get_model("threads", "Message")
    if not Attachment.objects.exists():
        return
    address = re.compile(re.escape(settings.COPILOTKIT_PATH) + r"/attachments/([0-9a-f]{32})")
    for thread_id, body in Message.objects.filter(role="user").values_list("thread_id", "body").iterator():
        content = body.get("content") if isinstance(body, dict) else None
        for part in content if isinstance(content, list) else ():
            source = part.get("source") if isinstance(part, dict) else None
            value = source.get("value") if isinstance(source, dict) and source.get("type") == "url" else None
            if isinstance(value, str) and (found := address.search(value)):
                Attachment.objects.filter(pk=found.group(1), thread=None).update(thread_id=thread_id)


class Migration(migrations.Migration):
    dependencies = [
        ("threads", "0023_network_access"),
    ]

    operations = [
        migrations.AddField(
            model_name="attachment",
            name="thread",
            field=models.ForeignKey(
                blank=True,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="attachments",
                to="threads.thread",
            ),
        ),
        migrations.RunPython(claim_named_uploads, migrations.RunPython.noop),
    ]

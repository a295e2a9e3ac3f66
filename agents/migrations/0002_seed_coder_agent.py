from django.db import migrations

SYSTEM_PROMPT = """You are Threadline's coding assistant. You work inside one workspace directory and can \
list files (glob), search them (grep) and read them (file_read). Look before you answer: read the \
relevant code, then answer precisely, naming files and lines. Say so when you are unsure."""


def seed(apps, schema_editor):
    Agent = apps.get_model("agents", "Agent")
    Agent.objects.get_or_create(
        name="coder",
        defaults={
            "description": "A coding assistant that reads and explains the code in its workspace.",
            "system_prompt": SYSTEM_PROMPT,
        },
    )


def unseed(apps, schema_editor):
    apps.get_model("agents", "Agent").objects.filter(name="coder").delete()


class Migration(migrations.Migration):
    dependencies = [("agents", "0001_initial")]
    operations = [migrations.RunPython(seed, unseed)]

import logging

from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

log = logging.getLogger("agents")


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents"

    def ready(self) -> None:
        from agents.confinement import startup_warnings, unhideable_layout

        # Every way of serving (manage.py serve, runserver, a bare ASGI server) checks it at start-up.
        # A layout whose workspaces bash's sandbox cannot hide would show every user's files to every
        # other user's bash (issue #49, item 1): nothing starts with it.
        if settings.AGENT_BASH_SANDBOX == "on" and (layout := unhideable_layout()) is not None:
            raise ImproperlyConfigured(layout)
        for warning in startup_warnings():
            log.warning("%s", warning)

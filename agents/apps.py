import logging

from django.apps import AppConfig

log = logging.getLogger("agents")


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents"

    def ready(self) -> None:
        # Every way of serving (manage.py serve, runserver, a bare ASGI server) says it at start-up.
        from agents.confinement import startup_warnings

        for warning in startup_warnings():
            log.warning("%s", warning)

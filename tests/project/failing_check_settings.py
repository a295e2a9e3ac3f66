"""Threadline's settings with a URLconf whose 404 handler cannot be imported: an error that only the
URL system checks find (urls.E008), for tests/project/test_lean_process.py. The module is its own
URLconf."""

from project.settings import *  # noqa: F403

ROOT_URLCONF = "tests.project.failing_check_settings"
urlpatterns: list[object] = []
handler404 = "tests.project.no_such_module.not_found"

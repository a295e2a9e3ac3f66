from tests.admin_browser import browser  # noqa: F401  (a fixture of the admin's browser tests)

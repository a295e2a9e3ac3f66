"""Settings, read from the environment and validated at start-up.

Each variable is described once, in docs/configuration.md's table (tests/project/test_configuration_table.py
keeps the two in step); a comment here says only why a setting is read or bounded as it is."""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import sys
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from agents.gitsource import is_git_url
from project.env import (
    env_bool,
    env_choice,
    env_file,
    env_float,
    env_forwarded_allow_ips,
    env_host,
    env_int,
    env_media_types,
    env_origins,
    env_route_prefix,
    env_str,
    env_url,
)
from project.fdlimit import MAX_CONNECTIONS, connections_the_file_limit_allows
from project.layout import check_workspace_layout

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("THREADLINE_DATA_DIR", str(BASE_DIR / "data"))).resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DJANGO_DEBUG", False)
HOST = env_host("HOST", "127.0.0.1")
PORT = env_int("PORT", 8000, minimum=1, maximum=65535)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _secret_file(name: str, nbytes: int) -> str:
    """A secret generated once and kept in the data dir (mode 0600), stable across restarts."""
    path = DATA_DIR / name
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        value = secrets.token_urlsafe(nbytes)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(value + "\n")
        return value


SECRET_KEY = env_str("DJANGO_SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG and not _is_loopback(HOST):
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is required when the server binds to a non-loopback HOST without DJANGO_DEBUG"
        )
    SECRET_KEY = _secret_file("django-secret-key", 48)

ALLOWED_HOSTS = [h for h in env_str("DJANGO_ALLOWED_HOSTS", "").split(",") if h.strip()] or (
    ["127.0.0.1", "localhost", "[::1]", "testserver"] + ([] if _is_loopback(HOST) else [HOST])
)

AGUI_TOKEN = env_str("AGUI_TOKEN")
AGUI_TOKEN_GENERATED = not AGUI_TOKEN
if AGUI_TOKEN_GENERATED:
    AGUI_TOKEN = _secret_file("agui-token", 32)
AGUI_ALLOWED_ORIGINS = env_origins("AGUI_ALLOWED_ORIGINS")
AGUI_PATH = env_route_prefix("AGUI_PATH", "/agui")
if AGUI_PATH.split("/")[1] in ("admin", "api", "app", "accounts", "metrics", "static"):
    raise ImproperlyConfigured(f"AGUI_PATH={AGUI_PATH!r} collides with the server's own routes")
# CopilotKit's runtime routes (agui/copilotkit/): a browser's CopilotKitProvider points its runtimeUrl here.
COPILOTKIT_PATH = env_route_prefix("COPILOTKIT_PATH", "/copilotkit")
if COPILOTKIT_PATH.split("/")[1] in ("admin", "api", "app", "accounts", "metrics", "static"):
    raise ImproperlyConfigured(f"COPILOTKIT_PATH={COPILOTKIT_PATH!r} collides with the server's own routes")
if (COPILOTKIT_PATH + "/").startswith(AGUI_PATH + "/") or (AGUI_PATH + "/").startswith(COPILOTKIT_PATH + "/"):
    raise ImproperlyConfigured(f"COPILOTKIT_PATH={COPILOTKIT_PATH!r} and AGUI_PATH={AGUI_PATH!r} overlap")
# The CopilotKit page served at /app/ (project/app_page.py): examples/copilotkit's `npx vite build --mode app`.
APP_PAGE_DIR = Path(env_str("APP_PAGE_DIR", str(BASE_DIR / "examples" / "copilotkit" / "dist-app"))).resolve()
AGUI_PORT = env_int("AGUI_PORT", 0, minimum=0, maximum=65535)
if AGUI_PORT and AGUI_PORT == PORT:
    raise ImproperlyConfigured(f"AGUI_PORT={AGUI_PORT} is PORT too; give the AG-UI listener a port of its own")
# Attachments of a user message (AG-UI 1.0 image and document parts, CopilotKit's useAttachments):
# each at most ATTACHMENT_MAX_BYTES decoded, at most ATTACHMENTS_MAX_COUNT a message, of the types the
# model reads (agui/attachments.py). The body cap (AGUI_MAX_BODY_BYTES) bounds them all together.
ATTACHMENT_MAX_BYTES = env_int("ATTACHMENT_MAX_BYTES", 5 * 1024 * 1024, minimum=1)
ATTACHMENTS_MAX_COUNT = env_int("ATTACHMENTS_MAX_COUNT", 10, minimum=0, maximum=1000)
# An upload (POST /copilotkit/attachments) that no message names within this time is deleted by the sweep.
ATTACHMENT_UNUSED_SECONDS = env_float("ATTACHMENT_UNUSED_SECONDS", 24 * 3600.0, minimum=1.0)
ATTACHMENT_TYPES = env_media_types(
    "ATTACHMENT_TYPES", "image/png,image/jpeg,image/gif,image/webp,application/pdf,text/plain"
)
AGUI_HUMAN_IN_THE_LOOP = env_bool("AGUI_HUMAN_IN_THE_LOOP", True)
AGUI_FRONTEND_TOOLS = env_bool("AGUI_FRONTEND_TOOLS", True)
TLS_CERT_FILE = env_file("TLS_CERT_FILE")
TLS_KEY_FILE = env_file("TLS_KEY_FILE")
if bool(TLS_CERT_FILE) != bool(TLS_KEY_FILE):
    missing = "TLS_KEY_FILE" if TLS_CERT_FILE else "TLS_CERT_FILE"
    raise ImproperlyConfigured(f"{missing} is not set: TLS needs TLS_CERT_FILE and TLS_KEY_FILE both, or neither")
AGUI_MAX_BODY_BYTES = env_int("AGUI_MAX_BODY_BYTES", 8 * 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = AGUI_MAX_BODY_BYTES
# What one sender's request bodies in flight may hold together (agui/inflight.py, issue #49 item 3):
# at least one whole body.
AGUI_MAX_BODY_BYTES_PER_USER = env_int("AGUI_MAX_BODY_BYTES_PER_USER", 4 * AGUI_MAX_BODY_BYTES)
if AGUI_MAX_BODY_BYTES_PER_USER < AGUI_MAX_BODY_BYTES:
    raise ImproperlyConfigured(
        f"AGUI_MAX_BODY_BYTES_PER_USER={AGUI_MAX_BODY_BYTES_PER_USER} is below AGUI_MAX_BODY_BYTES="
        f"{AGUI_MAX_BODY_BYTES}: a sender could never send a body of the size the server takes"
    )
# Slow and idle clients (``manage.py serve``; project/server.py): an idle keep-alive connection
# is closed after SERVER_KEEP_ALIVE_SECONDS; a request must arrive whole (headers and body)
# within SERVER_REQUEST_TIMEOUT_SECONDS of its first byte; past SERVER_MAX_CONNECTIONS
# connections a request gets 503 (project/admission.py). Each open SSE stream is one connection.
SERVER_KEEP_ALIVE_SECONDS = env_float("SERVER_KEEP_ALIVE_SECONDS", 5.0, minimum=0.1, maximum=3600.0)
SERVER_REQUEST_TIMEOUT_SECONDS = env_float("SERVER_REQUEST_TIMEOUT_SECONDS", 60.0, minimum=0.1, maximum=3600.0)
# Each connection is an open file: by default the cap is what the open-file limit leaves, so a
# default deployment holds as many streams as the machine lets it (a fixed 2,000 refused a
# reconnect storm the process could have served: issue #27).
SERVER_MAX_CONNECTIONS = env_int(
    "SERVER_MAX_CONNECTIONS", connections_the_file_limit_allows(), minimum=1, maximum=MAX_CONNECTIONS
)
SERVER_MAX_CONNECTIONS_FROM_FILE_LIMIT = not os.environ.get("SERVER_MAX_CONNECTIONS", "").strip()
# One client (one IPv4 address, one IPv6 /64) may hold this many of them; past it its new connections
# are refused at once and do not count against the cap of everyone else. Behind a trusted proxy
# (FORWARDED_ALLOW_IPS) the client is the one the proxy names. 0: no per-client cap.
SERVER_MAX_CONNECTIONS_PER_CLIENT = env_int(
    "SERVER_MAX_CONNECTIONS_PER_CLIENT", max(1, SERVER_MAX_CONNECTIONS // 4), minimum=0
)
if SERVER_MAX_CONNECTIONS_PER_CLIENT > SERVER_MAX_CONNECTIONS:
    raise ImproperlyConfigured(
        f"SERVER_MAX_CONNECTIONS_PER_CLIENT={SERVER_MAX_CONNECTIONS_PER_CLIENT} is above "
        f"SERVER_MAX_CONNECTIONS={SERVER_MAX_CONNECTIONS}; a client's cap must fit in everyone's"
    )
# The proxies (a CopilotKit runtime, a reverse proxy, a load balancer) whose X-Forwarded-For or
# Forwarded header names the client, uvicorn's convention: loopback by default, "*" for every peer,
# empty for none. The per-client cap counts the client they name (project/forwarded.py).
FORWARDED_ALLOW_IPS = env_forwarded_allow_ips("FORWARDED_ALLOW_IPS")
# A running run's owner renews its lease every third of this; when it lapses (or at once when the owner
# was a process of this host that no longer exists) the sweep of another process takes the run over.
RUN_LEASE_SECONDS = env_float("RUN_LEASE_SECONDS", 6.0, minimum=1.0)
# How many times a run may be taken over from a dead process before it ends with RUN_ERROR; 0: never
# (a dead process's runs are marked interrupted, as before issue #45).
RUN_MAX_TAKEOVERS = env_int("RUN_MAX_TAKEOVERS", 3, minimum=0, maximum=100)
# On SIGTERM a process drains (runhost/drain.py): new runs get 503, and its running runs get this long
# to reach a step boundary, where each is handed over to another process (with RUN_MAX_TAKEOVERS 0:
# to finish); those still in a step then are stopped in it and handed over. SHUTDOWN_GRACE_SECONDS is
# its older name, still read.
SERVER_DRAIN_SECONDS = env_float(
    "SERVER_DRAIN_SECONDS", env_float("SHUTDOWN_GRACE_SECONDS", 10.0, minimum=0.0), minimum=0.0
)
AGUI_HEARTBEAT_SECONDS = env_float("AGUI_HEARTBEAT_SECONDS", 15.0, minimum=0.05)
# How long the durable event log may lag behind the stream, and how many events
# it gathers before writing (one INSERT per batch, never one per event).
EVENT_LOG_FLUSH_SECONDS = env_float("EVENT_LOG_FLUSH_SECONDS", 0.05, minimum=0.001)
EVENT_LOG_BATCH = env_int("EVENT_LOG_BATCH", 2000, minimum=1)
# How long a run streaming slowly (a model's pace) may gather events into one frame of its log
# before writing it: a frame per EVENT_LOG_FLUSH_SECONDS held two events, and cost the database
# more than the client was sent. A follower on another process sees its events this much later.
EVENT_LOG_MAX_DELAY_SECONDS = env_float("EVENT_LOG_MAX_DELAY_SECONDS", 0.5, minimum=0.001)
# How long the runs' chunks of their logs wait for others' to share one transaction with them
# (threads/eventlog.py _GroupCommit); an event a client waits on to be shown never waits.
EVENT_LOG_GROUP_SECONDS = env_float("EVENT_LOG_GROUP_SECONDS", 0.05, minimum=0.0, maximum=1.0)
# Days a finished run's event log is kept; 0 keeps it for ever. `manage.py prune_event_logs`
# removes the older ones (the run, its messages and approvals stay).
EVENT_LOG_RETENTION_DAYS = env_float("EVENT_LOG_RETENTION_DAYS", 0.0, minimum=0.0, maximum=36_500.0)  # a century

ANTHROPIC_API_KEY = env_str("ANTHROPIC_API_KEY")
ANTHROPIC_BASE_URL = env_url("ANTHROPIC_BASE_URL", schemes=("http", "https"))
ANTHROPIC_MODEL = env_str("ANTHROPIC_MODEL", "claude-sonnet-5-5")
ANTHROPIC_MAX_RETRIES = env_int("ANTHROPIC_MAX_RETRIES", 2, minimum=0, maximum=10)
ANTHROPIC_TIMEOUT_SECONDS = env_float("ANTHROPIC_TIMEOUT_SECONDS", 600.0, minimum=1.0)
MODEL_STREAM_RETRIES = env_int("MODEL_STREAM_RETRIES", 2, minimum=0, maximum=10)
MODEL_RETRY_BACKOFF_SECONDS = env_float("MODEL_RETRY_BACKOFF_SECONDS", 1.0, minimum=0.0)
DEMO_MODEL_DELAY_SECONDS = env_float("DEMO_MODEL_DELAY_SECONDS", 0.02, minimum=0.0)

# Where runs work (agents/workspaces.py, issue #24). Never the server's own checkout by default: the
# tools may not change the server's code (issue #23). Both default under the user's data home
# ($XDG_DATA_HOME/threadline), neither inside the data dir nor inside each other.
_THREADLINE_HOME = Path(env_str("XDG_DATA_HOME", str(Path.home() / ".local" / "share"))) / "threadline"
AGENT_WORKSPACE_IS_DEFAULT = not env_str("AGENT_WORKSPACE")
AGENT_WORKSPACE = Path(env_str("AGENT_WORKSPACE", str(_THREADLINE_HOME / "workspace"))).resolve()
if AGENT_WORKSPACE_IS_DEFAULT:
    AGENT_WORKSPACE.mkdir(parents=True, exist_ok=True)
if not AGENT_WORKSPACE.is_dir():
    raise ImproperlyConfigured(f"AGENT_WORKSPACE={str(AGENT_WORKSPACE)!r} is not a directory")
# owner: a user's threads share the user's own directory (threads of the shared AGUI_TOKEN work in
# AGENT_WORKSPACE); thread: every thread has its own; shared: everybody works in AGENT_WORKSPACE.
AGENT_WORKSPACE_MODE = env_choice("AGENT_WORKSPACE_MODE", "owner", ("owner", "thread", "shared"))
AGENT_WORKSPACES_ROOT = Path(env_str("AGENT_WORKSPACES_ROOT", str(_THREADLINE_HOME / "workspaces"))).resolve()
# Neither workspace setting inside the other, the data dir, or the server's own code (project/layout.py).
check_workspace_layout(
    data_dir=DATA_DIR, workspace=AGENT_WORKSPACE, workspaces_root=AGENT_WORKSPACES_ROOT, checkout=BASE_DIR
)
AGENT_WORKSPACE_TEMPLATE = env_str("AGENT_WORKSPACE_TEMPLATE")
if (
    AGENT_WORKSPACE_TEMPLATE
    and not is_git_url(AGENT_WORKSPACE_TEMPLATE)
    and not Path(AGENT_WORKSPACE_TEMPLATE).is_dir()
):
    raise ImproperlyConfigured(
        f"AGENT_WORKSPACE_TEMPLATE={AGENT_WORKSPACE_TEMPLATE!r} is neither a directory nor a git URL"
    )
AGENT_WORKSPACE_MAX_BYTES = env_int("AGENT_WORKSPACE_MAX_BYTES", 1 << 30, minimum=1)
AGENT_MAX_ITERATIONS = env_int("AGENT_MAX_ITERATIONS", 50, minimum=1)
# The tools: which are offered, bash's sandbox and its network, MCP servers, the web tools
# (project/tool_settings.py).
from project.tool_settings import *  # noqa: E402, F403

# Compaction: older turns are summarised before a prompt passes COMPACTION_AT_SHARE of the context
# budget: COMPACTION_WINDOW_TOKENS (160,000 by default: a 200k window less room
# for the reply and tool output), or the model's window if that is smaller (0: the model's window).
COMPACTION_AT_SHARE = env_float("COMPACTION_AT_SHARE", 0.75, minimum=0.1)
COMPACTION_WINDOW_TOKENS = env_int("COMPACTION_WINDOW_TOKENS", 160_000, minimum=0)

# Spend caps in US dollars at list prices (orchestrator/pricing.py), per UTC day and month: per user (the
# shared AGUI_TOKEN is one user) and per agent. Unset: no cap. The admin overrides them per user and agent.
BUDGET_USER_DAILY_USD = env_float("BUDGET_USER_DAILY_USD", 0.0, minimum=0.0) or None
BUDGET_USER_MONTHLY_USD = env_float("BUDGET_USER_MONTHLY_USD", 0.0, minimum=0.0) or None
BUDGET_AGENT_DAILY_USD = env_float("BUDGET_AGENT_DAILY_USD", 0.0, minimum=0.0) or None
BUDGET_AGENT_MONTHLY_USD = env_float("BUDGET_AGENT_MONTHLY_USD", 0.0, minimum=0.0) or None

REDIS_URL = env_url("REDIS_URL", schemes=("redis", "rediss", "unix"))

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "corsheaders",
    "channels",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "agents",
    "threads",
    "agui",
    "project",  # manage.py serve
]

# daphne serves `manage.py runserver` (its app must come before staticfiles). As an
# installed app it imports Twisted, OpenSSL and autobahn, about 40 MiB, into every
# process, the uvicorn server's included: only that command gets it (issue #14).
if sys.argv[1:2] == ["runserver"]:
    INSTALLED_APPS.insert(0, "daphne")

MIDDLEWARE = [
    "corsheaders.middleware.CorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
# The AG-UI routes are served by a handler of their own with only what they
# need (agui/asgi.py): the standard stack costs over a millisecond per request
# and nothing on that path uses sessions, CSRF or messages.
AGUI_MIDDLEWARE = ["corsheaders.middleware.CorsMiddleware"]

CORS_ALLOWED_ORIGINS = AGUI_ALLOWED_ORIGINS
CORS_URLS_REGEX = rf"^({re.escape(AGUI_PATH)}|{re.escape(COPILOTKIT_PATH)})(/.*)?$"
CORS_ALLOW_HEADERS = ["authorization", "content-type", "last-event-id", "accept"]
CORS_EXPOSE_HEADERS = ["content-type"]

ROOT_URLCONF = "project.urls"
LOGIN_REDIRECT_URL = "/"
ASGI_APPLICATION = "project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{DATA_DIR / 'threadline.sqlite3'}"), conn_max_age=0
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the admin read while a run writes its event log. It is copied back into the database
    # every 4,000 pages (16 MiB) rather than SQLite's 1,000: the index pages a hundred streaming runs
    # rewrite at every commit are then copied back once where they were copied four times, about a
    # tenth of the log's CPU per event. After a burst, the WAL file is cut back to 64 MiB.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "init_command": (
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000; "
                "PRAGMA wal_autocheckpoint=4000; PRAGMA journal_size_limit=67108864;"
            ),
            "transaction_mode": "IMMEDIATE",
        }
    )
# On PostgreSQL each process keeps its connections in a pool (psycopg_pool, through Django's own
# support). Each admin or API request runs on a thread of its own, and without a pool it opened a
# connection (a server process forked for it) and closed it again: 10 ms of the admin's list and of
# the API's. Django's persistent connections do not fit ASGI, where a connection left on a
# finished request's thread is never used again. A connection is checked before it is lent (one
# round trip), so one that the server dropped (a restart, an idle timeout) is replaced rather than
# failing a request. The database thread (threads/dbthread.py) keeps one of them for good.
DATABASE_POOL_SIZE = env_int("DATABASE_POOL_SIZE", 20, minimum=0, maximum=10_000)
if DATABASE_POOL_SIZE == 1:
    raise ImproperlyConfigured(
        "DATABASE_POOL_SIZE must be 0 (no pool) or at least 2: the database thread keeps one connection"
    )
DATABASE_POOL_TIMEOUT_SECONDS = env_float("DATABASE_POOL_TIMEOUT_SECONDS", 30.0, minimum=0.1, maximum=3600.0)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and DATABASE_POOL_SIZE:
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 2,
        "max_size": DATABASE_POOL_SIZE,
        "timeout": DATABASE_POOL_TIMEOUT_SECONDS,
    }

if REDIS_URL:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
# Static files (the admin's, the API docs' Swagger UI) are served by WhiteNoise
# from the apps' own folders: no collectstatic step, and nothing from a CDN, so
# the docs page works offline.
WHITENOISE_USE_FINDERS = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.TokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "threads.api_permissions.OwnerOrChangePermission",
    ],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_PAGINATION_CLASS": "threads.api_pagination.Pagination",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "threads.api_errors.json_errors",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Threadline REST API",
    "DESCRIPTION": (
        "Read-only inspection of threads, runs, events, approvals, sub-agent tasks, agents and permission rules; "
        "answering a pending approval is the one write. Send `Authorization: Token <key>` "
        "(`manage.py drf_create_token <user>`). Staff see everything, other users their own threads; an approval is "
        "answered by its thread's owner or by staff with the change permission on approvals."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its docs page describe the API, not its data: readable without a token.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "RunStatus": "threads.models.Run.Status",
        "SubAgentTaskStatus": "threads.models.SubAgentTask.Status",
        "ApprovalDecision": "threads.models.Approval.Decision",
        "PermissionRuleDecision": "agents.models.PermissionRule.Decision",
        "PermissionRuleScope": "agents.models.PermissionRule.Scope",
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO").upper()},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
    },
}

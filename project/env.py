"""Strict parsing of the environment: a value that is not understood stops start-up.

Every helper raises ``ImproperlyConfigured`` naming the variable, so a typo in a
deployment fails loudly instead of silently falling back to a default.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from orchestrator.tools.egress import HostHeaders, HostPattern, parse_host_headers, parse_host_patterns

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _raw(name: str, env: Mapping[str, str] | None) -> str | None:
    value = (os.environ if env is None else env).get(name)
    return None if value is None else value.strip()


def env_str(name: str, default: str = "", env: Mapping[str, str] | None = None) -> str:
    value = _raw(name, env)
    return default if value is None or value == "" else value


def env_bool(name: str, default: bool = False, env: Mapping[str, str] | None = None) -> bool:
    value = _raw(name, env)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_int(
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    value = _raw(name, env)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum of {minimum}")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name}={number} is above the maximum of {maximum}")
    return number


def env_float(
    name: str,
    default: float,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    env: Mapping[str, str] | None = None,
) -> float:
    value = _raw(name, env)
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number") from None
    if number != number or (minimum is not None and number < minimum):
        raise ImproperlyConfigured(f"{name}={value!r} must be a number of at least {minimum}")
    if number == float("inf") or (maximum is not None and number > maximum):
        raise ImproperlyConfigured(f"{name}={value!r} must be a number of at most {maximum}")
    return number


def env_host(name: str, default: str, env: Mapping[str, str] | None = None) -> str:
    """An IP address or a plain host name to bind to."""
    value = env_str(name, default, env)
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    labels = value.split(".")
    if all(label and len(label) < 64 and label.replace("-", "").isalnum() for label in labels):
        return value
    raise ImproperlyConfigured(f"{name}={value!r} is neither an IP address nor a host name")


def env_url(name: str, default: str = "", *, schemes: tuple[str, ...], env: Mapping[str, str] | None = None) -> str:
    value = env_str(name, default, env)
    if not value:
        return value
    parts = urlsplit(value)
    if parts.scheme not in schemes or not (parts.netloc or parts.path):
        raise ImproperlyConfigured(f"{name} must be a URL with one of the schemes {', '.join(schemes)}")
    return value


def env_route_prefix(name: str, default: str, env: Mapping[str, str] | None = None) -> str:
    """A URL path prefix like ``/agui`` or ``/x/agui``: a leading slash, no trailing one, plain segments."""
    value = env_str(name, default, env)
    segments = value.split("/")
    if (
        not value.startswith("/")
        or len(segments) < 2
        or not all(s and all(c.isalnum() or c in "-_." for c in s) and s not in (".", "..") for s in segments[1:])
    ):
        raise ImproperlyConfigured(f"{name}={value!r} must be a path prefix like /agui (no trailing slash)")
    return value


def env_file(name: str, env: Mapping[str, str] | None = None) -> str:
    """The path of a readable file, or "" when the variable is unset."""
    value = env_str(name, "", env)
    if value and not (os.path.isfile(value) and os.access(value, os.R_OK)):
        raise ImproperlyConfigured(f"{name}={value!r} is not a readable file")
    return value


def env_origins(name: str, env: Mapping[str, str] | None = None) -> list[str]:
    """A comma-separated list of exact origins (scheme://host[:port]), no paths, no wildcards."""
    value = env_str(name, "", env)
    origins: list[str] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        parts = urlsplit(item)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("",) or "*" in item:
            raise ImproperlyConfigured(f"{name}: {item!r} is not an exact origin like https://app.example.com")
        origins.append(f"{parts.scheme}://{parts.netloc}")
    return origins


def env_names(
    name: str, *, refused: tuple[str, ...] = (), reaches: str = "bash", env: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """A comma-separated list of environment variable names (letters, digits and ``_``, not starting
    with a digit), none of them in ``refused`` (which never reach ``reaches``); blank: none."""
    value = env_str(name, "", env)
    if not value.strip():
        return ()
    names: list[str] = []
    for item in (part.strip() for part in value.split(",")):
        if not _VARIABLE_NAME.fullmatch(item):
            raise ImproperlyConfigured(f"{name}: {item!r} is not an environment variable name (A-Z, a-z, 0-9, _)")
        if item in refused:
            raise ImproperlyConfigured(
                f"{name}: {item} is one of Threadline's own credentials and never reaches {reaches}"
            )
        names.append(item)
    return tuple(dict.fromkeys(names))


_MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*")


def env_media_types(name: str, default: str, env: Mapping[str, str] | None = None) -> frozenset[str]:
    """A comma-separated list of media types (``image/png``), exact, no wildcards; lower-cased."""
    value = env_str(name, default, env)
    types = [item.strip().lower() for item in value.split(",") if item.strip()]
    for item in types:
        if not _MEDIA_TYPE.fullmatch(item):
            raise ImproperlyConfigured(f"{name}: {item!r} is not a media type like image/png (no wildcards)")
    return frozenset(types)


def env_forwarded_allow_ips(
    name: str, default: str = "127.0.0.1,::1", env: Mapping[str, str] | None = None
) -> list[str]:
    """The proxies whose forwarding headers are believed (project/forwarded.py), in uvicorn's
    ``FORWARDED_ALLOW_IPS`` convention: ``["*"]`` for every peer, or IP addresses and networks in
    their canonical spelling, ``[]`` when the variable is set empty. uvicorn takes a value it cannot
    read as an address for a host name, which no peer ever matches; here it stops start-up."""
    value = _raw(name, env)
    if value is None:
        value = default
    items = [item.strip() for item in value.split(",")]
    if items == [""]:
        return []
    if "*" in items:
        if items != ["*"]:
            raise ImproperlyConfigured(f"{name}={value!r}: '*' trusts every peer and goes alone")
        return ["*"]
    trusted: list[str] = []
    for item in items:
        try:
            trusted.append(str(ipaddress.ip_network(item) if "/" in item else ipaddress.ip_address(item)))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}={value!r}: {item!r} is not an IP address or network (like 10.0.0.0/8); give the "
                "addresses of the proxies in front of Threadline, separated by commas, or '*' for every peer"
            ) from None
    return trusted


def env_choice(name: str, default: str, choices: tuple[str, ...], env: Mapping[str, str] | None = None) -> str:
    """One of ``choices`` (case-insensitive)."""
    value = env_str(name, default, env).lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} must be one of: {', '.join(choices)}")
    return value


def env_host_patterns(name: str, env: Mapping[str, str] | None = None) -> tuple[HostPattern, ...]:
    """Comma-separated hosts for bash's network proxy: ``name``, ``*.name`` or an IP address, each
    with an optional ``:port`` (orchestrator/tools/egress.py); anything else stops start-up."""
    try:
        return parse_host_patterns(env_str(name, "", env))
    except ValueError as exc:
        raise ImproperlyConfigured(
            f"{name}: {exc}; write hosts such as 'example.com', '*.example.org' or 'example.net:8443', "
            "separated by commas"
        ) from None


def env_host_headers(name: str, env: Mapping[str, str] | None = None) -> tuple[HostHeaders, ...]:
    """Headers bash's proxy adds per host (orchestrator/tools/egress.py, ``parse_host_headers``);
    anything it cannot read stops start-up, naming what is wrong but never a value."""
    try:
        return parse_host_headers(env_str(name, "", env))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None
